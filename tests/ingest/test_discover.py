from pathlib import Path

import pytest

from tracecomm.errors import UsageError
from tracecomm.ingest.discover import RankClaim, assign_ranks, find_traces, rank_from_filename


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank3.json", 3),
        ("rank-3.json.gz", 3),
        ("rank_3_trace.json", 3),
        ("worker3.pt.trace.json", 3),
        ("sampled_rank-1.json.gz", 1),
        ("rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", 0),
        ("profile_trace_rank_12.json.gz", 12),
        ("host_1234.1700000000.pt.trace.json", None),
        ("frank3.json", None),
        ("run/rank7/trace.json", 7),
    ],
)
def test_rank_from_filename(name: str, rank: int | None) -> None:
    assert rank_from_filename(Path(name)) == rank


def test_find_traces_recurses_sorts_naturally_and_skips_hidden(tmp_path: Path) -> None:
    for rel in [
        "rank10.json",
        "rank2.json.gz",
        "sub/worker1.pt.trace.json",
        ".cache/rank9.json",
        "notes.txt",
        "rank3.JSON.GZ",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    found = [p.relative_to(tmp_path).as_posix() for p in find_traces([tmp_path])]
    assert found == ["rank2.json.gz", "rank3.JSON.GZ", "rank10.json", "sub/worker1.pt.trace.json"]


def test_find_traces_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file or folder"):
        find_traces([tmp_path / "nope"])


def test_assign_ranks_prefers_distributed_info_then_name_then_order() -> None:
    got = assign_ranks(
        [
            RankClaim("a/rank5.json", 1),  # the file's own claim wins over its name
            RankClaim("b/rank0.json", None),
            RankClaim("c/anon.json", None),
        ]
    )
    assert got.ranks == {1: "a/rank5.json", 0: "b/rank0.json", 2: "c/anon.json"}
    assert got.source == {1: "distributedInfo", 0: "file name", 2: "file order"}
    assert len(got.warnings) == 1 and "c/anon.json" in got.warnings[0]


def test_assign_ranks_reports_both_files_of_a_duplicate() -> None:
    got = assign_ranks([RankClaim("x.json", 0), RankClaim("y.json", 0), RankClaim("z.json", 1)])
    assert got.duplicates == {0: ("x.json", "y.json")}
    assert got.ranks == {1: "z.json"}
