"""One rank's collective instances: what cross-rank matching needs (metrics.md §4), no more."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracecomm.engine.classify import coll_type_of
from tracecomm.ingest.frames import null_column

WORLD = "world"

INSTANCE_SCHEMA: dict[str, pl.DataType] = {
    "pg": pl.String(),
    "seq": pl.Int64(),
    "coll_type": pl.String(),
    "ordinal": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "nelems": pl.Int64(),
    "pg_ranks": pl.String(),
    "step": pl.Int64(),
    "direction": pl.String(),  # "send" / "recv" for point-to-point kernels, else null
    "peer": pl.Int64(),  # the other rank of a send / recv (Dst Rank / Src Rank)
    "p2p_ordinal": pl.Int64(),  # among this rank's sends to (recvs from) that peer, in order
    "bytes": pl.Int64(),  # nccl-tests' S (metrics.md §7), when the trace carries sizes
    "group_size": pl.Int64(),
    # GPU idle right before the kernel (metrics.md §6 arrivals): from the end of the rank's
    # previous device work to the kernel's start, within its step; 0 when work runs at its start
    "idle_before_ns": pl.Int64(),
    # start of the run of back-to-back compute kernels that leads into the kernel (its own
    # start when none does): the work that had to finish before it, for the replay (§6)
    "work_since_ns": pl.Int64(),
    # when the compute it was launched after had ended: ProcessGroupNCCL makes its stream wait
    # for the work already queued on the calling stream, so a kernel launched after a compute
    # kernel cannot start before that kernel ends (null without launch times); for the replay,
    # what an early kernel's start hides when it queues behind another kernel (§6)
    "ready_ns": pl.Int64(),
    # where the run of compute leading into ready_ns began: a kernel that queued behind another
    # on its stream had its own work lead into that, not into its start (the replay, §6)
    "ready_since_ns": pl.Int64(),
    "stream": pl.Int64(),
    # all-to-all(v) volumes (metrics.md §7a): elements received (Out msg nelems), and rows
    # (tokens) received from / sent to all members when the trace records split sizes
    "recv_nelems": pl.Int64(),
    "recv_rows": pl.Int64(),
    "sent_rows": pl.Int64(),
    # why the split sizes were left out (do not parse, do not add up); null when fine or absent
    "split_problem": pl.String(),
}

# compute kernels this close count as one run (launch gaps); a longer gap is a wait
_RUN_GAP_NS = 20_000

# c10 scalar type -> bytes per element (kineto-traces.md §12)
DTYPE_BYTES = {
    "Float": 4,
    "Int": 4,
    "BFloat16": 2,
    "Half": 2,
    "Double": 8,
    "Long": 8,
    "Byte": 1,
    "Char": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
}


def collective_instances(linked: pl.DataFrame, work: pl.DataFrame | None = None) -> pl.DataFrame:
    """Comm kernels keyed for matching: process group (``Process Group Name``, else its rank
    list, else "world"), ``Seq`` when the trace has it, and the ordinal among the group's ops of
    the same type in launch order. ``work``: every device event of the rank (start_ns, end_ns,
    step, cls, stream), for the idle time and the compute run before each kernel; without it
    that idle time is 0 and no compute leads into any kernel."""
    comm = linked.filter(pl.col("cls") == "comm")
    if comm.height == 0:
        return pl.DataFrame(schema=INSTANCE_SCHEMA)
    ready = ready_after_launch(comm, work)
    since, ready_since = work_since(comm, work, ready)
    idle = idle_before(comm, work)
    launch_order = pl.coalesce("launch_ns", "start_ns")
    name = pl.col("collective_name").str.to_lowercase()
    direction = (
        pl.when(name == "send").then(pl.lit("send")).when(name == "recv").then(pl.lit("recv"))
    )
    peer = (
        pl.when(name == "send")
        .then(pl.col("dst_rank"))
        .when(name == "recv")
        .then(pl.col("src_rank"))
    )
    keyed = (
        comm.lazy()
        .with_columns(
            pl.Series("idle_before_ns", idle),
            pl.Series("work_since_ns", since),
            pl.Series("ready_ns", ready, dtype=pl.Int64),
            pl.Series("ready_since_ns", ready_since, dtype=pl.Int64),
            pl.coalesce("pg_name", "pg_ranks", pl.lit(WORLD)).alias("pg"),
            pl.coalesce("in_msg_nelems", "in_msg_size").alias("nelems"),
            direction.alias("direction"),
            peer.alias("peer"),
            message_bytes().alias("bytes"),
            pl.coalesce("out_msg_nelems", "out_msg_size").alias("recv_nelems"),
        )
        .collect(engine="in-memory")
    )
    return (
        with_split_rows(keyed)
        .lazy()
        .sort(launch_order, "start_ns")
        .with_columns(
            pl.int_range(pl.len()).over("pg", "coll_type").alias("ordinal"),
            pl.int_range(pl.len()).over("pg", "direction", "peer").alias("p2p_ordinal"),
        )
        .select(list(INSTANCE_SCHEMA))
        .cast(INSTANCE_SCHEMA)  # type: ignore[arg-type]
        .collect(engine="in-memory")
        .pipe(_ranks_listed_once)
    )


def _ranks_listed_once(instances: pl.DataFrame) -> pl.DataFrame:
    """A group's rank list on its first instance only (cross-rank matching reads the first it
    finds). The list spells out every member: kept on each instance, what a rank hands over
    grew with the world size (1,024 ranks: 5 KB an instance, 1 MB a rank, 1 GB in the
    parent). Built anew in Python, not masked by a query: a masked string column still
    carries (and pickles) the buffers of the values it hid; no query either (a rank's
    queries are counted, tests/run/test_query_count.py)."""
    seen: set[str] = set()
    listed = []
    for ranks in instances["pg_ranks"].to_list():
        listed.append(ranks if ranks is not None and ranks not in seen else None)
        if ranks is not None:
            seen.add(ranks)
    column = instances.get_column_index("pg_ranks")
    return instances.replace_column(column, pl.Series("pg_ranks", listed, dtype=pl.String))


_MAX_ROWS = 2**40  # rows per peer past any real exchange: a crafted number, not a split


def with_split_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """``sent_rows`` / ``recv_rows`` (Σ In / Out split size) and ``split_problem``.

    PyTorch writes the splits as text ("[3, 5, …]", "[]" when the split is even; long lists
    abbreviated). They are used only when both parse, every entry is a whole number ≥ 0,
    each list has one entry per group member, and the element counts divide into rows of
    one width; otherwise they are left out with the reason (a note, never an error)."""
    sent_text, recv_text = (
        pl.col(c).str.strip_chars() for c in ("in_split_size", "out_split_size")
    )
    no_split = pl.any_horizontal(
        *(t.is_null() | t.is_in(["", "[]"]) for t in (sent_text, recv_text))
    )
    if (
        all(frame[c].null_count() == frame.height for c in ("in_split_size", "out_split_size"))
        or frame.select(no_split.all()).item()
    ):
        # no split anywhere (no all-to-all, or even ones): the answer without the parse
        return frame.hstack(
            [
                null_column("sent_rows", pl.Int64, frame.height),
                null_column("recv_rows", pl.Int64, frame.height),
                null_column("split_problem", pl.String, frame.height),
            ]
        )
    parsed = frame.with_columns(
        _parsed_split(sent_text).alias("_sent"),
        _parsed_split(recv_text).alias("_recv"),
        no_split.alias("_no_split"),
    ).with_columns(
        pl.col("_sent").list.sum().alias("_sent_sum"),
        pl.col("_recv").list.sum().alias("_recv_sum"),
    )
    sent, recv = pl.col("_sent_sum"), pl.col("_recv_sum")
    bad = pl.any_horizontal(
        *(
            pl.col(c)
            .list.eval(pl.element().is_null() | ~pl.element().is_between(0, _MAX_ROWS))
            .list.any()
            for c in ("_sent", "_recv")
        )
    )
    members = pl.col("group_size")
    wrong_length = members.is_not_null() & pl.any_horizontal(
        *(pl.col(c).list.len() != members for c in ("_sent", "_recv"))
    )
    in_n = pl.coalesce("in_msg_nelems", "in_msg_size")
    out_n = pl.coalesce("out_msg_nelems", "out_msg_size")
    # one row width w: in = sent·w and out = recv·w (both zero is a valid empty exchange)
    width_in = pl.when(sent > 0).then(in_n // sent.clip(1))
    width_out = pl.when(recv > 0).then(out_n // recv.clip(1))
    uneven = (
        in_n.is_not_null()
        & out_n.is_not_null()
        & (
            ((sent > 0) & (in_n % sent.clip(1) != 0))
            | ((recv > 0) & (out_n % recv.clip(1) != 0))
            | ((sent == 0) & (in_n != 0))
            | ((recv == 0) & (out_n != 0))
            | (width_in.is_not_null() & width_out.is_not_null() & (width_in != width_out))
        )
    )
    problem = (
        pl.when(pl.col("_no_split"))
        .then(pl.lit(None, pl.String))
        .when(bad)
        .then(pl.lit("split sizes that do not parse (abbreviated, or not whole numbers ≥ 0)"))
        .when(wrong_length)
        .then(pl.lit("split sizes with another number of entries than the group has members"))
        .when(uneven)
        .then(pl.lit("split sizes that do not add up to the message's element counts"))
    )
    ok = ~pl.col("_no_split") & problem.is_null()
    return parsed.with_columns(
        pl.when(ok).then(sent).alias("sent_rows"),
        pl.when(ok).then(recv).alias("recv_rows"),
        problem.alias("split_problem"),
    ).drop("_sent", "_recv", "_no_split", "_sent_sum", "_recv_sum")


def split_note(instances: pl.DataFrame) -> str | None:
    """The all-to-alls whose split sizes were left out, and why (metrics.md §7a)."""
    if instances.height == 0 or "split_problem" not in instances.columns:
        return None
    problems = instances.filter(pl.col("split_problem").is_not_null())
    if problems.height == 0:
        return None
    counts = (
        problems.group_by("split_problem")
        .len()
        .sort("len", "split_problem", descending=[True, False])
    )
    why = "; ".join(f"{n} with {p}" for p, n in counts.rows())
    return (
        f"{problems.height} collectives' split sizes were left out of the token counts ({why}); "
        "their times count as usual"
    )


def _parsed_split(text: pl.Expr) -> pl.Expr:
    """ "[3, 5, 0]" -> [3, 5, 0]; an entry that is not a whole number -> null."""
    inner = text.str.strip_prefix("[").str.strip_suffix("]")
    return inner.str.split(",").list.eval(
        pl.element().str.strip_chars().cast(pl.Int64, strict=False)
    )


def idle_before(kernels: pl.DataFrame, work: pl.DataFrame | None) -> np.ndarray:
    """Per kernel: how long the GPU sat idle right before it started, not reaching back before
    the first device event of its step. A wait that happens before a kernel instead of inside
    it (the CPU held the launch until a peer was ready) shows as such a gap; metrics.md §6
    decides, across ranks, whether it was one. A lone communication kernel of another stream
    inside that gap (a receive for the next micro-batch landing while the rank waits for this
    one) does not end it: only work, or this kernel's own stream, does."""
    starts = kernels["start_ns"].to_numpy().astype(np.int64)
    if work is None or work.height == 0:
        return np.zeros(len(starts), dtype=np.int64)
    wanted = [c for c in ("start_ns", "end_ns", "cls", "stream") if c in work.columns]
    first = (  # each step's first device event
        work.lazy()
        .select("step", "start_ns")
        .filter(pl.col("step").is_not_null())
        .group_by("step")
        .agg(pl.col("start_ns").min().alias("step_start"))
    )
    ordered, step_start_of = pl.collect_all(
        [
            work.lazy().select(wanted).sort("start_ns"),  # sorted: the columns it reads alone
            kernels.lazy()
            .select("step", "start_ns")
            .join(first, on="step", how="left", maintain_order="left")
            .select(pl.coalesce("step_start", "start_ns")),
        ],
        engine="in-memory",
    )
    runs = _runs(ordered)
    run = np.searchsorted(runs.starts, starts, side="right") - 1
    begins_run = (run > 0) & (runs.starts[np.maximum(run, 0)] == starts)
    stream = (
        kernels["stream"].fill_null(-1).to_numpy().astype(np.int64)
        if "stream" in kernels.columns
        else np.full(len(starts), -1, dtype=np.int64)
    )
    before = np.where(begins_run, run - 1, -1)
    for _ in range(_LOOK_BACK):  # a few islands at most, each a vectorized step back
        safe = np.maximum(before, 0)
        foreign = (
            (before > 0)
            & runs.comm_only[safe]
            & (runs.stream_lo[safe] != stream)
            & (runs.stream_hi[safe] != stream)
        )
        if not foreign.any():
            break
        before = np.where(foreign, before - 1, before)
    gap = np.where(before >= 0, starts - runs.ends[np.maximum(before, 0)], 0)
    step_start = step_start_of.to_series().to_numpy().astype(np.int64)
    return np.maximum(0, np.minimum(gap, starts - step_start))


_LOOK_BACK = 8


@dataclass(frozen=True)
class _Runs:
    """Maximal runs of overlapping device work: bounds, whether only communication kernels ran
    in them, and the lowest / highest stream they ran on."""

    starts: np.ndarray
    ends: np.ndarray
    comm_only: np.ndarray
    stream_lo: np.ndarray
    stream_hi: np.ndarray


def _runs(ordered: pl.DataFrame) -> _Runs:
    begins = ordered["start_ns"].to_numpy().astype(np.int64)
    finishes = ordered["end_ns"].to_numpy().astype(np.int64)
    reach = np.maximum.accumulate(finishes)
    heads = np.flatnonzero(np.r_[True, begins[1:] > reach[:-1]])
    is_comm = (
        (ordered["cls"] == "comm").to_numpy()
        if "cls" in ordered.columns
        else np.zeros(len(begins), dtype=bool)
    )
    stream = (
        ordered["stream"].fill_null(-1).to_numpy().astype(np.int64)
        if "stream" in ordered.columns
        else np.full(len(begins), -1, dtype=np.int64)
    )
    return _Runs(
        begins[heads],
        np.maximum.reduceat(finishes, heads),
        np.logical_and.reduceat(is_comm, heads),
        np.minimum.reduceat(stream, heads),
        np.maximum.reduceat(stream, heads),
    )


def work_since(
    kernels: pl.DataFrame, work: pl.DataFrame | None, *more: np.ndarray
) -> list[np.ndarray]:
    """Per kernel: where the run of compute kernels that ends at (or runs through) its start
    began — consecutive compute kernels less than _RUN_GAP_NS apart are one run — and its
    start when no compute leads into it; then the same at each of ``more`` (one time per
    kernel: ``ready_since_ns`` is it at ``ready_ns``), from one pass over the compute."""
    times = [kernels["start_ns"].to_numpy().astype(np.int64), *(m.astype(np.int64) for m in more)]
    if work is None or "cls" not in work.columns:
        return times
    compute = (
        work.lazy()
        .select("cls", "start_ns", "end_ns")
        .filter(pl.col("cls") == "compute")
        .sort("start_ns")
        .collect(engine="in-memory")
    )
    if compute.height == 0:
        return times
    run_starts, run_ends = _busy_runs(
        compute["start_ns"].to_numpy().astype(np.int64),
        compute["end_ns"].to_numpy().astype(np.int64) + _RUN_GAP_NS,
    )
    out = []
    for at in times:
        run = np.searchsorted(run_starts, at, side="right") - 1
        safe = np.maximum(run, 0)
        leads = (run >= 0) & (run_ends[safe] >= at)
        out.append(np.where(leads, np.minimum(run_starts[safe], at), at))
    return out


def ready_after_launch(kernels: pl.DataFrame, work: pl.DataFrame | None) -> np.ndarray:
    """Per kernel: the latest end among the compute kernels launched before it (by launch
    time, on any stream), never after its own start; its start when nothing is known (no
    launch time on it or on the compute)."""
    starts = kernels["start_ns"].to_numpy().astype(np.int64)
    if work is None or "launch_ns" not in work.columns or "launch_ns" not in kernels.columns:
        return starts
    compute = (
        work.lazy()  # one plan: the filter copies only the two columns it keeps
        .filter((pl.col("cls") == "compute") & pl.col("launch_ns").is_not_null())
        .select("launch_ns", "end_ns")
        .sort("launch_ns", "end_ns")
        .collect(engine="in-memory")
    )
    if compute.height == 0:
        return starts
    known = kernels["launch_ns"].is_not_null().to_numpy()
    launched = kernels["launch_ns"].fill_null(0).to_numpy().astype(np.int64)
    reach = np.maximum.accumulate(compute["end_ns"].to_numpy().astype(np.int64))
    order = compute["launch_ns"].to_numpy().astype(np.int64)
    before = np.searchsorted(order, launched, side="left") - 1
    known &= before >= 0
    ready = np.where(known, reach[np.maximum(before, 0)], starts)
    return np.minimum(ready, starts)


def _busy_runs(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maximal runs of overlapping or touching intervals (sorted by start): their starts, ends."""
    reach = np.maximum.accumulate(ends)
    new_run = np.r_[True, starts[1:] > reach[:-1]]
    heads = np.flatnonzero(new_run)
    return starts[heads], np.maximum.reduceat(ends, heads)


# gloo's "Input type" names (C++ type names) -> the c10 names of DTYPE_BYTES
_GLOO_DTYPES = {
    "float": "Float",
    "double": "Double",
    "c10::BFloat16": "BFloat16",
    "c10::Half": "Half",
    "int": "Int",
    "long int": "Long",
    "unsigned char": "Byte",
    "signed char": "Char",
    "bool": "Bool",
    "c10::Float8_e4m3fn": "Float8_e4m3fn",
    "c10::Float8_e5m2": "Float8_e5m2",
}


def gloo_instances(
    ranges: pl.DataFrame, steps: pl.DataFrame, world_size: int | None
) -> pl.DataFrame:
    """A CPU timeline's collective instances: gloo's ranges (``colltypes.GLOO_OPS``, their
    shapes recorded), one per collective, keyed by type and order in the world group (gloo
    traces name no process group). The message is the first input tensor: nccl-tests' S is
    that times the group for AllGather (each rank gives its part). Send / recv name no peer
    and barriers carry no message: left out."""
    ops = ranges.filter(
        pl.col("name").str.starts_with("gloo:")
        & ~pl.col("name").is_in(["gloo:send", "gloo:recv", "gloo:barrier"])
    )
    if ops.height == 0:
        return pl.DataFrame(schema=INSTANCE_SCHEMA)
    first_shape = pl.col("input_dims").str.extract(r"^\[\[([\d,\s]*)\]", 1)
    nelems = (
        first_shape.str.split(",")
        .list.eval(pl.element().str.strip_chars().cast(pl.Int64, strict=False).product())
        .list.first()
    )
    dtype = (
        pl.col("input_types")
        .str.extract(r'^\["([^"]*)"', 1)
        .replace_strict(_GLOO_DTYPES, default=None, return_dtype=pl.String)
    )
    group = pl.lit(world_size, dtype=pl.Int64)
    size = pl.col("dtype").replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
    starts = steps.select(
        pl.col("start_ns").alias("step_start"), pl.col("end_ns").alias("step_end"), "step"
    ).sort("step_start")
    typed = (
        ops.with_columns(coll_type_of(pl.col("name")).alias("coll_type"), dtype.alias("dtype"))
        .with_columns(nelems.alias("nelems"))
        .sort("start_ns")
        .join_asof(starts, left_on="start_ns", right_on="step_start", strategy="backward")
    )
    return (
        typed.with_columns(
            pl.lit(WORLD).alias("pg"),
            pl.int_range(pl.len()).over("coll_type").alias("ordinal"),
            pl.when(pl.col("start_ns") < pl.col("step_end")).then(pl.col("step")).alias("step"),
            (
                pl.col("nelems")
                * size
                * pl.when(pl.col("coll_type") == "AllGather").then(group).otherwise(1)
            ).alias("bytes"),
            group.alias("group_size"),
            pl.lit(0, dtype=pl.Int64).alias("idle_before_ns"),
            pl.col("start_ns").alias("work_since_ns"),
        )
        .with_columns(
            *(
                pl.lit(None, dtype=INSTANCE_SCHEMA[c]).alias(c)
                for c in INSTANCE_SCHEMA
                if c not in typed.columns
                and c
                not in ("pg", "ordinal", "bytes", "group_size", "idle_before_ns", "work_since_ns")
            )
        )
        .select(list(INSTANCE_SCHEMA))
        .cast(INSTANCE_SCHEMA)  # type: ignore[arg-type]
        .pipe(_ranks_listed_once)
    )


def message_bytes() -> pl.Expr:
    """nccl-tests' S from the kernel's element counts: the output for AllGather, the input for
    ReduceScatter, the larger of the two for AllToAll, else the input (metrics.md §7)."""
    size = pl.col("dtype").replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
    elems_in = pl.coalesce("in_msg_nelems", "in_msg_size")
    elems_out = pl.coalesce("out_msg_nelems", "out_msg_size")
    elems = (
        pl.when(pl.col("coll_type") == "AllGather")
        .then(elems_out)
        .when(pl.col("coll_type") == "AllToAll")
        .then(pl.max_horizontal(elems_in, elems_out))
        .otherwise(elems_in)
    )
    return elems * size
