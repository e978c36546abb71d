"""Classes (comm / compute / memory / sync) and collective types of device events.

Definitions: metrics.md §1; name families: kineto-traces.md §11.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import polars as pl

from tracecomm.colltypes import COLL_TYPES
from tracecomm.ingest.events import META_SCHEMA
from tracecomm.ingest.model import RankEvents

# NCCL / RCCL / HCCL / oneCCL name families, plus the custom all-reduce kernels of inference
# engines (vLLM, SGLang, TensorRT-LLM) that do the same job outside NCCL.
COMM_NAME_PATTERN = (
    r"(?i:nccl|rccl|hccl|oneccl|cross_device_reduce|oneShotAllReduce|twoShotAllReduce)"
)
_CUSTOM_ALLREDUCE = r"(?i)cross_device_reduce|oneShotAllReduce|twoShotAllReduce"
_KERNEL_COLL_TOKEN = r"(?i)(?:nccl|rccl)[A-Za-z]*?Kernel_([A-Za-z]+)"

# Prefixes of a normalized collective name (lower case, no '_', no 'nccl:'/'gloo:') in the
# order they must be tried: 'allreduce' before 'reduce', 'allreducebarrier' before both.
_TYPE_BY_PREFIX = (
    ("allreducebarrier", "Other"),
    ("barrier", "Other"),
    ("allreduce", "AllReduce"),
    ("allgather", "AllGather"),
    ("reducescatter", "ReduceScatter"),
    ("alltoall", "AllToAll"),
    ("broadcast", "Broadcast"),
    ("sendrecv", "SendRecv"),
    ("send", "SendRecv"),
    ("recv", "SendRecv"),
    ("reduce", "Reduce"),
)


_TYPE_PREFIX = "^(?:" + "|".join(f"({re.escape(p)})" for p, _ in _TYPE_BY_PREFIX) + ")"
_NAMESPACE_PATTERN = r"^(?:(?:nccl|gloo|rccl|hccl):|c10d::)"  # stripped before the prefix test


def coll_type_of(name: pl.Expr) -> pl.Expr:
    """Collective type from a c10d op / annotation / kernel-stem name; null stays null.

    One anchored alternation finds the prefix: its alternatives are tried in the table's
    order (the regex engine's leftmost-first rule), as a chain of ``starts_with`` would be,
    at a fraction of the chain's cost (it was most of the time classification took)."""
    norm = (
        name.str.to_lowercase()
        .str.replace(_NAMESPACE_PATTERN, "")
        .str.replace_all("_", "")
        .str.strip_chars()
    )
    prefix = norm.str.extract(_TYPE_PREFIX, 0)
    coll = prefix.replace_strict(
        {p: c for p, c in _TYPE_BY_PREFIX}, default=pl.lit("Other"), return_dtype=pl.String
    )
    return pl.when(name.is_null()).then(pl.lit(None, dtype=pl.String)).otherwise(coll)


_NAMESPACE = re.compile(_NAMESPACE_PATTERN)
_ASCII_SPACE = " \t\n\x0b\x0c\r"  # what Rust's trim() strips from an ASCII string
_KERNEL_TOKEN = re.compile(_KERNEL_COLL_TOKEN)
_CUSTOM = re.compile(_CUSTOM_ALLREDUCE)


def coll_types(names: pl.Series) -> pl.Series:
    """``coll_type_of`` over a column: each distinct name typed once."""
    return _typed(names, _coll_type_py, coll_type_of)


def kernel_types(names: pl.Series) -> pl.Series:
    """The type a kernel's name suggests (``by_name``), each distinct name typed once."""
    return _typed(names, _kernel_type_py, _kernel_type)


def _typed(
    names: pl.Series, in_python: Callable[[str], str | None], exact: Callable[[pl.Expr], pl.Expr]
) -> pl.Series:
    """A few distinct names among thousands of kernels: typed in Python where the name is ASCII
    (its rules read the same in Python's ``re`` as in polars' Rust regex), by the polars
    expression otherwise (Unicode case and white space differ between the two)."""
    distinct = [n for n in names.unique().to_list() if n is not None]
    typed = {n: in_python(n) for n in distinct if n.isascii()}
    others = [n for n in distinct if not n.isascii()]
    if others:
        frame = pl.DataFrame({"n": others}, schema={"n": pl.String})
        exact_types = frame.select(exact(pl.col("n")).alias("t"))["t"].to_list()
        typed.update(zip(others, exact_types, strict=True))
    return names.replace_strict(typed, default=None, return_dtype=pl.String)


def _coll_type_py(name: str) -> str:
    norm = _NAMESPACE.sub("", name.lower(), count=1).replace("_", "").strip(_ASCII_SPACE)
    return next((coll for prefix, coll in _TYPE_BY_PREFIX if norm.startswith(prefix)), "Other")


def _kernel_type_py(name: str) -> str | None:
    if _CUSTOM.search(name):
        return "AllReduce"
    token = _KERNEL_TOKEN.search(name)
    if token is None:
        return None
    stem = token.group(1)
    return "Other" if stem.lower() == "generic" else _coll_type_py(stem)


def _kernel_type(name: pl.Expr) -> pl.Expr:
    kernel_stem = name.str.extract(_KERNEL_COLL_TOKEN)
    return (
        pl.when(name.str.contains(_CUSTOM_ALLREDUCE))
        .then(pl.lit("AllReduce"))
        .otherwise(
            pl.when(kernel_stem.str.to_lowercase() == "generic")
            .then(pl.lit("Other"))
            .otherwise(coll_type_of(kernel_stem))
        )
    )


def check_pattern(pattern: str) -> str | None:
    """Why a user regex cannot be used (polars' Rust syntax: no look-around), or None."""
    try:
        pl.select(pl.lit("").str.contains(pattern))
    except pl.exceptions.PolarsError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return " ".join(lines)[:300]
    return None


def rule_problem(rule: str) -> str | None:
    """Why a ``REGEX[=TYPE]`` rule cannot be used (a bad regex, an unknown TYPE), or None."""
    pattern, kind = split_rule(rule)
    _, sep, suffix = rule.rpartition("=")
    if kind is None and sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", suffix.strip()):
        return (
            f"unknown collective type {suffix.strip()!r} (one of {', '.join(COLL_TYPES)}); "
            "a regex that ends in '=word' is written with '\\=' instead of '='"
        )
    return check_pattern(pattern)


def split_rule(rule: str) -> tuple[str, str | None]:
    """``REGEX=TYPE`` -> (REGEX, TYPE) when TYPE names a collective type (any case), else the
    whole text is the regex (a regex may contain '=')."""
    pattern, sep, suffix = rule.rpartition("=")
    known = {t.lower(): t for t in COLL_TYPES}
    if sep and suffix.strip().lower() in known:
        return pattern, known[suffix.strip().lower()]
    return rule, None


def with_user_ranges(
    rank: RankEvents, comm_rules: Sequence[str], compute_patterns: Sequence[str]
) -> pl.DataFrame:
    """The device frame plus the GPU-side ranges (NVTX / ``gpu_user_annotation``) that a user
    rule names: work that is no kernel of its own, such as a range around a custom collective."""
    patterns = [split_rule(r)[0] for r in comm_rules] + list(compute_patterns)
    ranges = rank.gpu_ranges
    if not patterns or ranges.height == 0:
        return rank.device
    wanted = ranges.filter(pl.col("name").str.contains("|".join(f"(?:{p})" for p in patterns)))
    if wanted.height == 0:
        return rank.device
    rows = wanted.with_columns(pl.lit("kernel").alias("kind"))
    return pl.concat([rank.device, rows], how="diagonal_relaxed")


def classify(
    rank: RankEvents,
    comm_patterns: Sequence[str] = (),
    compute_patterns: Sequence[str] = (),
) -> pl.DataFrame:
    """The device frame with ``cls`` and, for comm kernels, ``coll_type``."""
    return classify_with_comm(rank, comm_patterns, compute_patterns)[0]


def classify_with_comm(
    rank: RankEvents,
    comm_patterns: Sequence[str] = (),
    compute_patterns: Sequence[str] = (),
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(device frame with ``cls``, ``coll_type`` and a ``_row`` key; the comm rows alone with
    their collective metadata, by ``_row``).

    ``comm_patterns``: user rules ``REGEX[=TYPE]`` (names that are communication, of TYPE);
    ``compute_patterns``: names that are compute even if they look like a collective. Row order
    is kept. Types are resolved on the comm rows alone: a few thousand kernels, not the
    hundreds of thousands of compute ones."""
    work = with_user_ranges(rank, comm_patterns, compute_patterns)
    device = work.with_row_index("_row").with_columns(_cls(comm_patterns, compute_patterns))
    is_comm = pl.col("cls") == "comm"
    comm = _with_metadata(device.filter(is_comm), rank.device_meta)
    comm = _fill_metadata_from_cpu_op(comm, rank.comm_ops)
    comm = _annotation_type(comm, rank.comm_annotations)
    comm = comm.with_columns(
        pl.coalesce(_user_type(comm_patterns), _coll_type(comm)).alias("coll_type"),
        pl.coalesce("collective_name", "cpu_collective_name").alias("collective_name"),
    ).drop("annotation_type", "cpu_collective_name")
    # the type as one new column beside the device frame's own (a join of the whole frame
    # would copy every column of every kernel: hundreds of MB in a 2 GB trace)
    coll_type = device.select("_row").join(
        comm.select("_row", "coll_type"), on="_row", how="left", maintain_order="left"
    )["coll_type"]
    return device.with_columns(coll_type), comm


def _with_metadata(comm: pl.DataFrame, meta: pl.DataFrame) -> pl.DataFrame:
    """The comm rows' collective metadata columns (null where the trace has none)."""
    if "dev_row" in meta.columns and "dev_row" in comm.columns:
        return comm.join(meta, on="dev_row", how="left", maintain_order="left")
    return comm.with_columns(
        pl.lit(None, dtype=dtype).alias(name) for name, dtype in META_SCHEMA.items()
    )


def _cls(comm_rules: Sequence[str], compute_patterns: Sequence[str]) -> pl.Expr:
    """User comm rules first, then user compute patterns, then the built-in comm names."""
    user_comm = _any_of([split_rule(r)[0] for r in comm_rules])
    user_compute = _any_of(list(compute_patterns))
    name = pl.col("name")
    return (
        pl.when(pl.col("kind") == "sync")
        .then(pl.lit("sync"))
        .when(pl.col("kind").is_in(["memcpy", "memset"]))
        .then(pl.lit("memory"))
        .when(name.str.contains(user_comm) if user_comm else pl.lit(False))
        .then(pl.lit("comm"))
        .when(name.str.contains(user_compute) if user_compute else pl.lit(False))
        .then(pl.lit("compute"))
        .when(name.str.contains(COMM_NAME_PATTERN))
        .then(pl.lit("comm"))
        .otherwise(pl.lit("compute"))
        .alias("cls")
    )


def _any_of(patterns: list[str]) -> str | None:
    return "|".join(f"(?:{p})" for p in patterns) if patterns else None


def _user_type(comm_rules: Sequence[str]) -> pl.Expr:
    """The TYPE of the first ``REGEX=TYPE`` rule whose regex matches the name."""
    expr: pl.Expr = pl.lit(None, dtype=pl.String)
    for pattern, coll in reversed([split_rule(r) for r in comm_rules]):
        if coll is not None:
            expr = pl.when(pl.col("name").str.contains(pattern)).then(pl.lit(coll)).otherwise(expr)
    return expr


def _coll_type(comm: pl.DataFrame) -> pl.Expr:
    """kineto-traces.md §11: the kernel's own metadata, the enclosing nccl:* GPU annotation,
    the linked CPU op, and only then the kernel name (a hint: NCCL runs grouped work anywhere)."""
    return pl.coalesce(
        pl.lit(coll_types(comm["collective_name"])),
        pl.col("annotation_type"),
        pl.lit(coll_types(comm["cpu_collective_name"])),
        pl.lit(kernel_types(comm["name"])),
        pl.lit("Other"),
    )


def _fill_metadata_from_cpu_op(device: pl.DataFrame, comm_ops: pl.DataFrame) -> pl.DataFrame:
    """Older traces keep collective metadata on record_param_comms only: join by External id.

    The CPU op's collective name is kept apart (``cpu_collective_name``): it ranks below the
    GPU annotation when choosing the type."""
    if comm_ops.height == 0:
        return device.with_columns(pl.lit(None, dtype=pl.String).alias("cpu_collective_name"))
    meta_cols = [c for c in comm_ops.columns if c not in ("external_id", "start_ns")]
    cpu = (
        comm_ops.filter(pl.col("external_id").is_not_null())
        .unique("external_id", keep="first")
        .select("external_id", *(pl.col(c).alias(f"cpu_{c}") for c in meta_cols))
    )
    joined = device.join(cpu, on="external_id", how="left", maintain_order="left")
    filled = [c for c in meta_cols if c != "collective_name"]
    return joined.with_columns(pl.coalesce(c, f"cpu_{c}").alias(c) for c in filled).drop(
        f"cpu_{c}" for c in filled
    )


def _annotation_type(device: pl.DataFrame, annotations: pl.DataFrame) -> pl.DataFrame:
    """Type from the enclosing ``nccl:*`` GPU annotation on the same stream.

    Kineto widens these annotations by 1 ns on each side, hence the tolerance.
    """
    if annotations.height == 0:
        return device.with_columns(pl.lit(None, dtype=pl.String).alias("annotation_type"))
    ann = annotations.select(
        "device",
        "stream",
        pl.col("start_ns").alias("ann_start"),
        pl.col("end_ns").alias("ann_end"),
        pl.lit(coll_types(annotations["name"])).alias("ann_type"),
    ).sort("ann_start")
    keyed = device.with_row_index("_ann_row").sort("start_ns")
    matched = keyed.join_asof(
        ann,
        left_on="start_ns",
        right_on="ann_start",
        by=["device", "stream"],
        strategy="backward",
        check_sortedness=False,
    )
    inside = pl.col("end_ns") <= pl.col("ann_end") + 1
    return (
        matched.with_columns(pl.when(inside).then(pl.col("ann_type")).alias("annotation_type"))
        .drop("ann_start", "ann_end", "ann_type")
        .sort("_ann_row")
        .drop("_ann_row")
    )
