"""all-to-all(v) split sizes (metrics.md §7a): read when they hold, a note when they do not."""

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.conftest import analyze_json, kernel, launch, step, trace_doc, write_trace
from tracecomm.engine.collectives import with_split_rows


def _rows(sent: str | None, recv: str | None, in_n: int | None, out_n: int | None) -> dict:
    frame = pl.DataFrame(
        {
            "in_split_size": [sent],
            "out_split_size": [recv],
            "group_size": [3],
            "in_msg_nelems": [in_n],
            "out_msg_nelems": [out_n],
            "in_msg_size": [None],
            "out_msg_size": [None],
        },
        schema={
            "in_split_size": pl.String,
            "out_split_size": pl.String,
            "group_size": pl.Int64,
            "in_msg_nelems": pl.Int64,
            "out_msg_nelems": pl.Int64,
            "in_msg_size": pl.Int64,
            "out_msg_size": pl.Int64,
        },
    )
    out = with_split_rows(frame).select("sent_rows", "recv_rows", "split_problem")
    return out.row(0, named=True)


@pytest.mark.parametrize(
    ("sent", "recv", "in_n", "out_n", "want"),
    [
        ("[1, 2, 3]", "[2, 2, 2]", 60, 60, (6, 6, None)),
        ("[2,2,2]", "[1,1,1]", 60, 30, (6, 3, None)),  # one row width: 10
        ("[0, 0, 0]", "[0, 0, 0]", 0, 0, (0, 0, None)),
        ("[]", "[]", 60, 60, (None, None, None)),  # an even split: no splits, no problem
        (None, None, 60, 60, (None, None, None)),
        ("[1, ...]", "[1, 2, 3]", 60, 60, (None, None, "parse")),  # abbreviated
        ("[1.5, 1, 1]", "[1, 1, 1]", 60, 60, (None, None, "parse")),
        ("[1, -1, 2]", "[1, 1, 1]", 20, 30, (None, None, "parse")),
        ("[99999999999999, 1, 1]", "[1, 1, 1]", 60, 60, (None, None, "parse")),
        ("[1, 2]", "[1, 2]", 30, 30, (None, None, "members")),
        ("[2, 2, 2]", "[1, 1, 1]", 60, 60, (None, None, "add up")),  # widths 10 and 20
        ("[1, 1, 1]", "[1, 1, 1]", 61, 60, (None, None, "add up")),
    ],
)
def test_split_sizes_are_rows_when_they_hold(
    sent: str | None, recv: str | None, in_n: int, out_n: int, want: tuple[Any, Any, Any]
) -> None:
    got = _rows(sent, recv, in_n, out_n)
    assert (got["sent_rows"], got["recv_rows"]) == want[:2]
    if want[2] is None:
        assert got["split_problem"] is None
    else:
        assert want[2] in got["split_problem"]


def test_a_run_without_splits_gets_the_columns_the_parse_would_give() -> None:
    """No split text anywhere (no all-to-all), or only even splits ("[]"), skips the parse:
    the same columns, types and nulls as the parse gives those rows beside one that it
    reads."""

    def frame(texts: list[str | None]) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "in_split_size": pl.Series(texts, dtype=pl.String),
                "out_split_size": pl.Series(texts, dtype=pl.String),
                "group_size": [2] * len(texts),
                "in_msg_nelems": [4] * len(texts),
                "out_msg_nelems": [4] * len(texts),
                "in_msg_size": pl.Series([None] * len(texts), dtype=pl.Int64),
                "out_msg_size": pl.Series([None] * len(texts), dtype=pl.Int64),
            }
        )

    added = ["sent_rows", "recv_rows", "split_problem"]
    parsed = with_split_rows(frame(["[2, 2]", None, "[]", " [] "]))  # the first one parses
    assert parsed.row(0, named=True)["sent_rows"] == 4
    nothing: list[str | None] = [None, None, None]
    for texts in (nothing, [None, "[]", " [] "]):
        skipped = with_split_rows(frame(texts))
        assert skipped.columns == parsed.columns == [*frame(texts).columns, *added]
        assert skipped.schema == parsed.schema
        assert skipped.select(added).equals(parsed.select(added).slice(1))


def _a2a(ts: float, corr: int, sent: Any, recv: Any) -> dict:
    return kernel(
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        ts,
        40,
        corr,
        stream=20,
        **{
            "Collective name": "all_to_allv",
            "Group size": 2,
            "In msg nelems": 40,
            "Out msg nelems": 40,
            "dtype": "BFloat16",
            "In split size": sent,
            "Out split size": recv,
        },
    )


@pytest.mark.parametrize(
    "bad", ["[1, ...]", "[[1], [2]]", {"a": 1}, 7, "[" + "1," * 5000 + "x]", "[-3, 7]"]
)
def test_split_sizes_that_do_not_hold_are_a_note_never_an_error(tmp_path: Path, bad: Any) -> None:
    events = [
        step(1, 990, 400),
        launch(995, 1),
        launch(996, 2),
        launch(997, 3),
        kernel("sm90_gemm", 1000, 100, 1),
        _a2a(1100, 2, bad, "[2, 2]"),
        _a2a(1200, 3, "[2, 2]", "[2, 2]"),  # a good one beside it: 4 rows of 10
    ]
    write_trace(tmp_path / "run" / "rank0.json", trace_doc(events, world=1))
    doc = analyze_json(tmp_path / "run")
    notes = [n["text"] for n in doc["notes"]]
    assert any(n.startswith("1 collectives' split sizes were left out") for n in notes), notes
    by_type = {t["coll_type"]: t for t in doc["by_type"]}
    assert by_type["AllToAll"]["kernels"] == 2
    assert doc["all_to_all"]["comm_ns"] == 80_000
