"""Classes (comm / compute / memory / sync) and collective types of device events.

Definitions: metrics.md §1; name families: kineto-traces.md §11.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import polars as pl

from tracecomm.colltypes import COLL_TYPES
from tracecomm.ingest.events import META_SCHEMA
from tracecomm.ingest.frames import innermost_enclosing, null_column
from tracecomm.ingest.model import RankEvents

# Communication libraries by kernel name (metrics.md §1a), each with how its kernels are typed:
# (library, name regex, (token regex, type) tried in order, the type when no token matches).
# NCCL's family (RCCL, HCCL, oneCCL) is typed by its kernel-name stem instead (_KERNEL_TOKEN).
# Each regex reads the same in Python's ``re`` and polars' Rust regex (no look-around).
_TOKENS_BY_OP = (
    (r"(?i)all_?to_?all|dispatch|combine", "AllToAll"),
    (r"(?i)reduce_?scatter", "ReduceScatter"),
    (r"(?i)all_?gather|fcollect", "AllGather"),
    (r"(?i)all_?reduce|cross_device_reduce|reduce", "AllReduce"),
    (r"(?i)broadcast", "Broadcast"),
    (r"(?i)barrier|quiet|fence|sync", "Other"),
    (r"(?i)put|get|signal|send|recv", "SendRecv"),
)
COMM_LIBRARIES: tuple[tuple[str, str, tuple[tuple[str, str], ...], str], ...] = (
    # DeepEP (and DeepSeek's internal spelling): dispatch / combine, their notify and layout
    # kernels, normal and low-latency; all of them are the expert-parallel all-to-all's work
    ("DeepEP", r"deep_ep::|dpsk::ep::", ((r"(?i)barrier", "Other"),), "AllToAll"),
    ("NVSHMEM", r"(?i)\bnvshmem", _TOKENS_BY_OP, "Other"),
    ("PyTorch symmetric memory", r"c10d::symmetric_memory::", _TOKENS_BY_OP, "Other"),
    # custom all-reduce kernels of inference engines (vLLM, SGLang, TensorRT-LLM, MSCCL++)
    (
        "custom all-reduce",
        r"(?i)cross_device_reduce|one_?shot_?all_?reduce|two_?shot_?all_?reduce"
        r"|allreduce_fusion_kernel|quickreduce::|mscclpp|customAllReduce|lamportAllReduce",
        _TOKENS_BY_OP,
        "AllReduce",
    ),
)
_NCCL_FAMILY = r"(?i:nccl|rccl|hccl|oneccl)"
COMM_NAME_PATTERN = "|".join(
    f"(?:{p})" for p in (_NCCL_FAMILY, *(lib[1] for lib in COMM_LIBRARIES))
)
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
_LIBRARIES = tuple(
    (library, re.compile(p), tuple((re.compile(t), c) for t, c in tokens), default)
    for library, p, tokens, default in COMM_LIBRARIES
)


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


def library_of(name: str) -> str | None:
    """The communication library (beyond NCCL's family) a kernel name belongs to, if any."""
    return next((library for library, pattern, *_ in _LIBRARIES if pattern.search(name)), None)


def _kernel_type_py(name: str) -> str | None:
    for _, pattern, tokens, default in _LIBRARIES:
        if pattern.search(name):
            return next((c for t, c in tokens if t.search(name)), default)
    token = _KERNEL_TOKEN.search(name)
    if token is None:
        return None
    stem = token.group(1)
    return "Other" if stem.lower() == "generic" else _coll_type_py(stem)


def _kernel_type(name: pl.Expr) -> pl.Expr:
    kernel_stem = name.str.extract(_KERNEL_COLL_TOKEN)
    typed: pl.Expr = (
        pl.when(kernel_stem.str.to_lowercase() == "generic")
        .then(pl.lit("Other"))
        .otherwise(coll_type_of(kernel_stem))
    )
    for _, pattern, tokens, default in reversed(COMM_LIBRARIES):
        by_token: pl.Expr = pl.lit(default)
        for token, coll in reversed(tokens):
            by_token = pl.when(name.str.contains(token)).then(pl.lit(coll)).otherwise(by_token)
        typed = pl.when(name.str.contains(pattern)).then(by_token).otherwise(typed)
    return typed


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
    device = (
        work.lazy()
        .with_row_index("_row")
        .with_columns(_cls(comm_patterns, compute_patterns, _builtin_comm_names(work)))
        .collect(engine="in-memory")
    )
    is_comm = pl.col("cls") == "comm"
    comm = _with_metadata(device.filter(is_comm), rank.device_meta)
    comm = _fill_metadata_from_cpu_op(comm, rank.comm_ops)
    comm = _annotation_type(comm, rank.comm_annotations)
    comm = _launch_context_type(comm, rank)
    comm = (
        comm.lazy()
        .with_columns(
            pl.coalesce(_user_type(comm_patterns), _coll_type(comm)).alias("coll_type"),
            pl.coalesce("collective_name", "cpu_collective_name").alias("collective_name"),
        )
        .drop("annotation_type", "cpu_collective_name", "launch_type")
        .collect(engine="in-memory")
    )
    # the type as one new column beside the device frame's own (a join of the whole frame
    # would copy every column of every kernel: hundreds of MB in a 2 GB trace)
    coll_type = (
        device.lazy()
        .select("_row")
        .join(comm.lazy().select("_row", "coll_type"), on="_row", how="left", maintain_order="left")
        .collect(engine="in-memory")["coll_type"]
    )
    return device.with_columns(coll_type), comm


def _with_metadata(comm: pl.DataFrame, meta: pl.DataFrame) -> pl.DataFrame:
    """The comm rows' collective metadata columns (null where the trace has none)."""
    if "dev_row" in meta.columns and "dev_row" in comm.columns:
        return comm.join(meta, on="dev_row", how="left", maintain_order="left")
    return comm.with_columns(
        pl.lit(None, dtype=dtype).alias(name) for name, dtype in META_SCHEMA.items()
    )


def _builtin_comm_names(work: pl.DataFrame) -> pl.Series:
    """The distinct names the built-in communication pattern matches: a few hundred names
    among a rank's hundred thousand kernels, each tested once."""
    name = pl.col("name")
    return (
        work.lazy()
        .select(name.drop_nulls().unique())
        .filter(name.str.contains(COMM_NAME_PATTERN))
        .collect(engine="in-memory")
        .to_series()
    )


def _cls(
    comm_rules: Sequence[str], compute_patterns: Sequence[str], builtin_comm: pl.Series
) -> pl.Expr:
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
        .when(name.is_in(builtin_comm.implode()))
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
    the linked CPU op, and only then the kernel name (a hint: NCCL runs grouped work anywhere).

    A generic kernel (one whose name says SendRecv or no type: NCCL runs an all-to-all as
    grouped sends and receives) takes the collective its launch sat in, when that is one of
    the named collectives (metrics.md §1); p2p launches say SendRecv and stay so."""
    by_name = pl.lit(kernel_types(comm["name"]))
    generic = by_name.is_null() | by_name.is_in(list(_GENERIC_TYPES))
    return pl.coalesce(
        pl.lit(coll_types(comm["collective_name"])),
        pl.col("annotation_type"),
        pl.lit(coll_types(comm["cpu_collective_name"])),
        pl.when(generic).then(pl.col("launch_type")),
        by_name,
        pl.lit("Other"),
    )


# Kernel-name types that say nothing about the collective a launch belongs to.
_GENERIC_TYPES = ("SendRecv", "Other")
# What a launch context may lend a generic kernel: a named collective, never SendRecv / Other.
_CONTEXT_TYPES = tuple(t for t in COLL_TYPES if t not in _GENERIC_TYPES)
_CONTEXT_NAME = r"^(?:nccl:|gloo:|c10d::)"


def _launch_context_type(comm: pl.DataFrame, rank: RankEvents) -> pl.DataFrame:
    """``launch_type``: the named collective whose CPU call launched the kernel.

    Older Kineto links a collective's kernel to no CPU op (its External id is its own
    correlation id) and writes no collective args; the ``nccl:<op>`` annotation ProcessGroupNCCL
    opens around the launch still says what it was. The launch is found by correlation; the
    innermost collective annotation open on its thread at that time names the op, else the op
    the launch itself names (``c10d::alltoall_base_``)."""
    launches = rank.launches
    if comm.height == 0 or launches.height == 0 or "correlation" not in comm.columns:
        return comm.with_columns(pl.lit(None, dtype=pl.String).alias("launch_type"))
    launch = (
        launches.lazy()
        .filter(pl.col("correlation").is_in(comm["correlation"].drop_nulls().implode()))
        .unique("correlation", keep="first")
        .select(
            "correlation",
            pl.col("tid").alias("_l_tid"),
            pl.col("start_ns").alias("_l_at"),
            pl.col("op").alias("_l_op") if "op" in launches.columns else pl.lit(None, pl.String),
        )
    )
    keyed = (
        comm.lazy()
        .with_row_index("_ctx_row")
        .join(launch, on="correlation", how="left", maintain_order="left")
        .collect(engine="in-memory")
    )
    context = _enclosing_collective(keyed, rank.cpu)
    op_type = pl.when(pl.col("_l_op").str.contains(_CONTEXT_NAME)).then(
        pl.lit(coll_types(keyed["_l_op"]))
    )
    lent = pl.coalesce(pl.lit(context), op_type)
    return keyed.with_columns(
        pl.when(lent.is_in(list(_CONTEXT_TYPES))).then(lent).alias("launch_type")
    ).drop("_ctx_row", "_l_tid", "_l_at", "_l_op")


def _enclosing_collective(keyed: pl.DataFrame, cpu: pl.DataFrame) -> pl.Series:
    """Per row of ``keyed`` (launch thread ``_l_tid``, time ``_l_at``): the type of the
    innermost collective annotation (``nccl:*`` / ``gloo:*`` naming a collective or a
    send / recv) open on that thread at the launch; null where none is. Annotations of no
    collective (``nccl:coalesced``, NCCL's ``ncclGroupStart`` / ``ncclGroupEnd`` ranges read as
    ``nccl:GroupEnd``) are looked through: the call they belong to may enclose them."""
    none = null_column("ctx", pl.String, keyed.height)
    if cpu.height == 0 or "kind" not in cpu.columns:
        return none
    ann = (
        cpu.lazy()
        .filter((pl.col("kind") == "annotation") & pl.col("name").str.contains(r"^(?:nccl|gloo):"))
        .collect(engine="in-memory")
    )
    ranges, points = pl.collect_all(
        [
            ann.lazy()
            .select(
                "tid",
                pl.col("start_ns").alias("start"),
                pl.col("end_ns").alias("end"),
                pl.lit(coll_types(ann["name"])).alias("value"),
            )
            .filter(pl.col("value").is_in([*_CONTEXT_TYPES, "SendRecv"])),
            keyed.lazy()
            .select(
                pl.col("_ctx_row").alias("key"),
                pl.col("_l_tid").alias("tid"),
                pl.col("_l_at").alias("at"),
            )
            .drop_nulls(),
        ],
        engine="in-memory",
    )
    found = innermost_enclosing(points, ranges)
    return (
        keyed.lazy()
        .select(pl.col("_ctx_row").alias("key"))
        .join(found.lazy(), on="key", how="left", maintain_order="left")
        .collect(engine="in-memory")
        .get_column("value")
        .alias("ctx")
    )


def _fill_metadata_from_cpu_op(device: pl.DataFrame, comm_ops: pl.DataFrame) -> pl.DataFrame:
    """Older traces keep collective metadata on record_param_comms only: join by External id.

    The CPU op's collective name is kept apart (``cpu_collective_name``): it ranks below the
    GPU annotation when choosing the type."""
    if comm_ops.height == 0:
        return device.with_columns(pl.lit(None, dtype=pl.String).alias("cpu_collective_name"))
    meta_cols = [c for c in comm_ops.columns if c not in ("external_id", "start_ns")]
    cpu = (
        comm_ops.lazy()
        .filter(pl.col("external_id").is_not_null())
        .unique("external_id", keep="first")
        .select("external_id", *(pl.col(c).alias(f"cpu_{c}") for c in meta_cols))
    )
    filled = [c for c in meta_cols if c != "collective_name"]
    return (  # one query
        device.lazy()
        .join(cpu, on="external_id", how="left", maintain_order="left")
        .with_columns(pl.coalesce(c, f"cpu_{c}").alias(c) for c in filled)
        .drop(f"cpu_{c}" for c in filled)
        .collect(engine="in-memory")
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


def comm_stream_note(device: pl.DataFrame) -> str | None:
    """Kernels counted as compute on a stream that mostly carries communication: a library
    tracecomm does not know may run its collectives under other names (metrics.md §1a).

    Said, not guessed: a --comm-pattern rule makes them communication."""
    if "cls" not in device.columns:
        return None
    # no copy of the kernels (most of a 2 GB trace's device frame); the streams first: most
    # runs have none that mixes, and the join of the kernels was most of the cost (1.9 ms)
    kernels = device.lazy().filter(
        pl.col("kind") == "kernel", pl.col("device").is_not_null(), pl.col("stream").is_not_null()
    )  # a null key joins nothing: such a kernel is no stream's
    comm_streams = (
        kernels.group_by("device", "stream")
        .agg(
            (pl.col("cls") == "comm").sum().alias("comm"),
            (pl.col("cls") == "compute").sum().alias("compute"),
            pl.len().alias("all"),
        )
        .filter(pl.col("comm") * 2 >= pl.col("all"), pl.col("comm") > 0, pl.col("compute") > 0)
        .select("device", "stream")
        .collect(engine="in-memory")
    )
    if comm_streams.height == 0:
        return None
    others = (
        kernels.filter(pl.col("cls") == "compute")
        .join(comm_streams.lazy(), on=["device", "stream"])
        .select("name", "stream", "start_ns", "end_ns")
        .collect(engine="in-memory")
    )
    by_name = (
        others.lazy()
        .group_by("name")
        .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns"), pl.len().alias("n"))
        .sort("ns", "name", descending=[True, False])
        .collect(engine="in-memory")
    )
    streams = sorted(others["stream"].unique().to_list())
    total_ms = float(by_name["ns"].sum()) / 1e6
    top = ", ".join(f"{_short(n)} ×{k}" for n, k in by_name.select("name", "n").head(3).rows())
    return (
        f"{others.height} kernels ({total_ms:,.3f} ms) on stream{'s' * (len(streams) > 1)} "
        f"{', '.join(map(str, streams))}, which carr{'y' if len(streams) > 1 else 'ies'} "
        f"communication, are counted as compute: {top}; if one is a collective of a library "
        "tracecomm does not know, --comm-pattern 'REGEX=TYPE' makes it communication"
    )


def _short(name: str) -> str:
    """A kernel name without its template and argument lists, for a note."""
    stem = re.sub(r"^void ", "", name).split("<", 1)[0].split("(", 1)[0]
    return stem[:80]


def comm_libraries(device: pl.DataFrame) -> tuple[str, ...]:
    """The communication libraries whose kernels the rank ran: "NCCL" for NCCL's family,
    then the others by name (metrics.md §1a)."""
    names = (
        device.lazy()
        .filter(pl.col("cls") == "comm")
        .select(pl.col("name").drop_nulls().unique())
        .collect(engine="in-memory")["name"]
        .to_list()
    )
    found = {library_of(n) or ("NCCL" if re.search(_NCCL_FAMILY, n) else "other") for n in names}
    return tuple(sorted(found, key=lambda lib: (lib != "NCCL", lib)))


# What a run's all-to-all is for (metrics.md §7a), from names the trace carries: kernels of an
# expert-parallel library or MoE kernels; torchrec's / FBGEMM's embedding ops and annotations.
_EXPERT_NAMES = (
    r"(?i)deep_ep::|dpsk::ep::|\bmoe|moe_|expert|grouped_gemm|token_dispatch|permute_tokens"
    r"|topk"
)
_EMBEDDING_NAMES = (
    r"(?i)alltoall_(?:fwd|bwd)|all2all_|embedding_bag|split_embedding|fbgemm|torchrec|kjt"
)


def all_to_all_use(device: pl.DataFrame, cpu: pl.DataFrame) -> str | None:
    """ "expert" (MoE token dispatch / combine) or "embedding" (DLRM-style embedding exchange)
    when the rank runs all-to-alls and its kernel or annotation names say which; else None."""
    if "coll_type" not in device.columns or not (device["coll_type"] == "AllToAll").any():
        return None
    name = pl.col("name")
    sources = [device.lazy().select(name.drop_nulls().unique())]
    if cpu.height and "kind" in cpu.columns:
        annotations = cpu.lazy().filter(pl.col("kind") == "annotation")
        sources.append(annotations.select(name.drop_nulls().unique()))
    expert, embedding = (  # one query: the distinct names of both, tested for each
        pl.concat(sources)
        .unique()
        .select(
            name.str.contains(_EXPERT_NAMES).any().alias("expert"),
            name.str.contains(_EMBEDDING_NAMES).any().alias("embedding"),
        )
        .collect(engine="in-memory")
        .row(0)
    )
    expert, embedding = bool(expert), bool(embedding)
    if expert == embedding:
        return None  # neither, or both: the trace does not say
    return "expert" if expert else "embedding"
