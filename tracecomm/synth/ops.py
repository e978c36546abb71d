"""The generator's one device event (``Op``) and the names of its kinds: a module of its own so
that kernel naming (``synth.names``) can refer to it without importing the schedule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

OpKind = Literal["compute", "comm", "memcpy", "memset"]
CollType = Literal[
    "AllGather",
    "ReduceScatter",
    "AllReduce",
    "Broadcast",
    "Reduce",
    "AllToAll",
    "SendRecv",
    "Other",
]
Naming = Literal["dev", "legacy"]
TimeFormat = Literal["relative", "epoch_us"]
LaunchThread = Literal["main", "autograd"]

OP_KINDS: frozenset[str] = frozenset(get_args(OpKind))
COLL_TYPES: frozenset[str] = frozenset(get_args(CollType))
NAMINGS: frozenset[str] = frozenset(get_args(Naming))
TIME_FORMATS: frozenset[str] = frozenset(get_args(TimeFormat))
LAUNCH_THREADS: frozenset[str] = frozenset(get_args(LaunchThread))
GRAPH_LINKS = frozenset({"correlation", "node"})
# Elements per row (token) of an all-to-all's split sizes: the hidden size of the rows it moves.
ROW_ELEMS = 7_168


@dataclass(frozen=True, slots=True)
class Op:
    """One device event (kernel, memcpy or memset) and the CPU call that launched it."""

    kind: OpKind
    stream: int
    start_ns: int
    dur_ns: int
    launch_ns: int
    name: str = ""
    coll: CollType | None = None
    launched: bool = True
    recorded: bool = True
    metadata: bool = True
    nelems: int = 0
    launch_thread: str = "main"
    # Process group name of a collective ("" = the default world group "0") and its Seq
    # (0 = let the writer number the rank's collectives consecutively, as for one group).
    pg: str = ""
    seq: int = 0
    # Point-to-point ops ("send" / "recv", coll SendRecv): the peer's global rank, and whether
    # the trace says it (Src / Dst Rank; converted traces may only give a two-member group).
    p2p: str = ""
    peer: int = -1
    peer_args: bool = True
    # record_shapes: the launching cpu_op's Input Dims and Concrete Inputs (empty: not written)
    shapes: tuple[tuple[int, ...], ...] = ()
    concrete: tuple[str, ...] = ()
    # CUDA graphs: ``graph`` (> 0) is the id of the graph that replays this op as its node
    # ``node``; the ops of one replay share their launch_ns and thread, and one cudaGraphLaunch
    # launches them all. ``captured``: a launch made while a stream captures a graph (between
    # cudaStreamBeginCapture and cudaStreamEndCapture): it runs nothing, so never recorded.
    graph: int = 0
    node: int = 0
    captured: bool = False
    # A collective without collective metadata that older Kineto still wrapped in its c10d op,
    # a record_param_comms without collective args and the ``nccl:<coll>`` annotation (only with
    # metadata=False; the launch context then names the collective, so the kernel takes op.coll).
    annotated: bool = False
    # all_to_all(v): rows sent to (in) / received from (out) each member of the group, in group
    # order; written as "In split size" / "Out split size" (needs metadata; nelems must then be
    # sum(in_splits) * ROW_ELEMS).
    in_splits: tuple[int, ...] = ()
    out_splits: tuple[int, ...] = ()
    # A user_annotation enclosing the launch's CPU ops (torchrec's "## alltoall_fwd_single ##").
    outer: str = ""

    def __post_init__(self) -> None:
        # Runs once per op of 100 MB benchmark specs: test first, format a message only on error.
        problem = _op_problem(self)
        if problem:
            raise ValueError(f"{self.kind} op starting at {self.start_ns} ns: {problem}")

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


def _op_problem(op: Op) -> str:
    """What is wrong with one op on its own, or "" when nothing is."""
    if op.kind not in OP_KINDS:
        return f"unknown kind {op.kind!r}"
    if op.dur_ns <= 0:
        return f"dur_ns must be > 0, got {op.dur_ns}"
    if op.start_ns < 0 or op.stream < 0 or op.nelems < 0 or op.seq < 0:
        return "start_ns, stream, nelems and seq must be >= 0"
    if (op.pg or op.seq) and op.kind != "comm":
        return "only comm ops belong to a process group or carry a Seq"
    if not (op.launched or op.recorded):
        return "neither launched nor recorded: nothing would be written"
    if op.launched and op.launch_ns > op.start_ns:
        return f"launch_ns {op.launch_ns} is after start_ns"
    if op.launch_thread not in LAUNCH_THREADS:
        return f"unknown launch_thread {op.launch_thread!r}"
    if (op.p2p or op.peer != -1) and not (
        op.p2p in ("send", "recv") and op.coll == "SendRecv" and op.peer >= 0
    ):
        return "p2p must be 'send' or 'recv' on a SendRecv op with a peer rank >= 0"
    if (op.kind == "comm") != (op.coll is not None) or (op.coll and op.coll not in COLL_TYPES):
        return f"coll {op.coll!r}: comm ops need a collective type, other kinds must have None"
    if op.graph < 0 or op.node < 0 or (op.node and not op.graph):
        return "graph and node must be >= 0, and a node needs a graph"
    if op.graph and (not op.launched or op.captured or (op.kind == "comm" and op.metadata)):
        return (
            "a replayed op is launched by its graph, is not captured, and (a comm op) carries "
            "no collective metadata: no record_param_comms encloses a graph launch"
        )
    if op.captured and (op.recorded or not op.launched):
        return "a captured launch runs nothing: launched, never recorded"
    return _comm_extras_problem(op)


def _comm_extras_problem(op: Op) -> str:
    """What is wrong with the annotation and split-size fields of an op, or ""."""
    if op.annotated and (op.kind != "comm" or op.metadata or op.p2p or op.graph):
        return "annotated is for a comm op without metadata, not point-to-point nor replayed"
    if op.outer and not op.launched:
        return "an outer annotation encloses a launch: the op must be launched"
    if not (op.in_splits or op.out_splits):
        return ""
    if op.kind != "comm" or not op.metadata or op.p2p or op.graph:
        return "split sizes belong to a comm op with metadata (not point-to-point, not replayed)"
    if len(op.in_splits) != len(op.out_splits) or min(op.in_splits + op.out_splits) < 0:
        return "in_splits and out_splits need one size >= 0 per group member"
    if op.nelems != sum(op.in_splits) * ROW_ELEMS:
        return f"nelems must be sum(in_splits) * {ROW_ELEMS} = {sum(op.in_splits) * ROW_ELEMS}"
    return ""
