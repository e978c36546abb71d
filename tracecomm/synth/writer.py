"""Render a RunSpec as libkineto-style Chrome trace files, one per rank.

Events are built as text with f-strings (orjson only escapes names): the benchmarks write
hundreds of MB, and the layout copies libkineto's output_json.cpp so parsers meet the same
whitespace, key order and number forms they meet in real files.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

import orjson

from tracecomm.synth.expected import step_window, union
from tracecomm.synth.layout import Launch, Plan, plan_rank
from tracecomm.synth.names import (
    COLLECTIVES,
    COMM_PROFILE,
    KernelProfile,
    has_metadata,
    profile_for,
)
from tracecomm.synth.ops import ROW_ELEMS
from tracecomm.synth.schedule import ProcessGroup, RankSpec, RunSpec, Step
from tracecomm.synth.timefmt import Clock

_NUM_SMS = 132
_GPUS_PER_HOST = 8
_FLUSH_EVENTS = 4_096
_RUNTIME = {
    "compute": ("cudaLaunchKernel", 211),
    "comm": ("cudaLaunchKernelExC", 430),
    "memcpy": ("cudaMemcpyAsync", 41),
    "memset": ("cudaMemsetAsync", 51),
}
_GRAPH_LAUNCH = ("cudaGraphLaunch", 311)
# Older NCCL (the annotated collectives' era) launched with the plain call.
_LEGACY_COMM_LAUNCH = ("cudaLaunchKernel", 211)
SHAPE_DTYPE = "c10::BFloat16"  # the Input type of every recorded tensor (record_shapes)
_CATS = {"compute": "kernel", "comm": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
# Bytes per ns (= GB/s) used to derive plausible byte counts from durations.
_BANDWIDTH = {"memcpy": 24, "memset": 1_200}


class _Sync(NamedTuple):
    """A cuda_sync record: never busy time, placed where it would corrupt figures if counted."""

    name: str
    stream: int
    start: int
    end: int
    ext: int
    wait_on: int | None


def file_name(rank: int, gzipped: bool) -> str:
    return f"rank{rank}.pt.trace.json" + (".gz" if gzipped else "")


def write_run(spec: RunSpec, out_dir: Path) -> list[Path]:
    """Write one trace file per rank into out_dir; returns the paths in rank order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in sorted(spec.ranks, key=lambda r: r.rank):
        path = out_dir / file_name(rank.rank, spec.gzip)
        with path.open("wb") as raw:
            _write_chunks(raw, render_rank(spec, rank), spec.gzip)
        paths.append(path)
    return paths


def _write_chunks(raw: BinaryIO, chunks: Iterator[str], gzipped: bool) -> None:
    if not gzipped:
        for chunk in chunks:
            raw.write(chunk.encode())
        return
    # No file name and mtime 0 in the gzip header: the same spec must give the same bytes.
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
        for chunk in chunks:
            gz.write(chunk.encode())


def render_rank(spec: RunSpec, rank: RankSpec) -> Iterator[str]:
    """The text of one rank's file, in chunks."""
    return _RankWriter(spec, rank).render()


def _jstr(text: str) -> str:
    return orjson.dumps(text).decode()


class _RankWriter:
    """Renders one rank; holds the ids and layout shared by its event emitters."""

    def __init__(self, run: RunSpec, rank: RankSpec) -> None:
        self.run = run
        self.spec = rank
        self.clock = Clock(rank.time_format)
        self.plan: Plan = plan_rank(rank, self.clock, {g.name: g.ranks for g in run.groups})
        self.device = rank.rank % _GPUS_PER_HOST
        self.pid = 3_100_000 + 131 * rank.rank
        self.tids = {"main": self.pid, "autograd": self.pid + 7_211}
        self.syncs = self._place_syncs()
        self.trace_start, self.trace_end = self._bounds()
        self.clock.set_first(self.trace_start)
        self._names: dict[str, str] = {}
        self._kernel_tails: dict[str, str] = {}
        self._shapes = any(launch.op.shapes for launch in self.plan.launches)
        # CUDA 12 CUPTI: every kernel says which graph replayed it (0: none)
        self._graphs = any(op.graph for op in rank.all_ops())
        self._world = ProcessGroup("world", "default_pg", tuple(range(run.world_size)))
        self._groups = {g.name: g for g in run.groups}

    # ---- layout ---------------------------------------------------------------------------

    def _place_syncs(self) -> list[_Sync]:
        """cuda_sync records, placed in idle gaps."""
        busy = union([(op.start_ns, op.end_ns) for op in self.spec.all_ops() if op.recorded])
        out: list[_Sync] = []
        for step in self.spec.steps:
            window = step_window(step)
            if window is None:
                continue
            ext = self.plan.step_ext[step.number]
            compute, comm = _step_streams(step)
            gap = _largest_gap(busy, window)
            if gap is not None:
                # Inside the window: a parser that counts syncs as busy gets idle wrong.
                margin = (gap[1] - gap[0]) // 10
                start, end = self.clock.ceil(gap[0] + margin), self.clock.floor(gap[1] - margin)
                if end > start:
                    out.append(_Sync("Event Sync", compute, start, end, ext, None))
            before = _free_before(busy, window[0])
            # Just before the window: a parser that counts syncs widens the step window.
            length = self.clock.floor(min(4_000, before // 2))
            if length > 0:
                out.append(
                    _Sync("Stream Wait Event", comm, window[0] - length, window[0], ext, compute)
                )
        return out

    def _bounds(self) -> tuple[int, int]:
        times = [t for s in self.spec.steps for t in (s.cpu_start_ns, s.cpu_end_ns)]
        for launch in self.plan.launches:
            times.extend((launch.spans[0].start, launch.spans[0].end))
        for op in self.spec.all_ops():
            times.extend((op.start_ns, op.end_ns))
        times.extend(t for sync in self.syncs for t in (sync.start, sync.end))
        times.extend(t for call in self.spec.cpu_calls for t in (call.start_ns, call.end_ns))
        if not times:
            times = [1_700_000_000_000_000_000]
        margin = 41_000
        return self.clock.floor(min(times) - margin), self.clock.ceil(max(times) + margin)

    # ---- rendering --------------------------------------------------------------------------

    def render(self) -> Iterator[str]:
        yield self._header()
        buf: list[str] = []
        first = True
        for event in self._events():
            buf.append(event)
            if len(buf) >= _FLUSH_EVENTS:
                yield ("" if first else ",") + ",".join(buf)
                first, buf = False, []
        if buf:
            yield ("" if first else ",") + ",".join(buf)
        yield self._closing()

    def _events(self) -> Iterator[str]:
        yield from self._cpu_events()
        yield from self._activities()
        yield from self._sync_events()
        yield from self._metadata_events()
        yield from self._window_events()

    def _header(self) -> str:
        props = ",".join(_device_props(i, self.run.device_name) for i in range(_GPUS_PER_HOST))
        world = self.run.world_size
        pg_config = [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "pg_size": world,
                "ranks": list(range(world)),
            }
        ]
        pg_config.extend(
            {
                "pg_name": g.name,
                "pg_desc": g.desc,
                "backend_config": "cuda:nccl",
                "pg_size": len(g.ranks),
                "ranks": list(g.ranks),
            }
            for g in self.run.groups_of(self.spec.rank)
        )
        dist = {
            "backend": "nccl",
            "rank": self.spec.rank,
            "world_size": world,
            "pg_count": len(pg_config),
            "pg_config": pg_config,
            "nccl_version": "2.21.5",
        }
        seed = f"{self.spec.host}/{self.spec.rank}/{self.trace_start}".encode()
        trace_id = hashlib.sha256(seed).hexdigest()[:32].upper()
        return (
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [' + props + "\n  ],\n"
            f'  "record_shapes": {int(self._shapes)},\n  "profile_memory": 1,\n  "with_stack": 1,\n'
            f'  "trace_id": "{trace_id}",\n  "host_name": {_jstr(self.spec.host)},\n'
            f'  "distributedInfo": {json.dumps(dist)},\n  "traceEvents": ['
        )

    def _closing(self) -> str:
        name = file_name(self.spec.rank, False)
        text = f'\n  ],\n  "traceName": "{name}",\n  "displayTimeUnit": "ms"'
        if self.clock.relative:
            text += f',\n  "baseTimeNanoseconds": {self.clock.base_ns}'
        return text + "\n}\n"

    def _name(self, name: str) -> str:
        cached = self._names.get(name)
        if cached is None:
            cached = self._names[name] = _jstr(name)
        return cached

    def _x(
        self, cat: str, name: str, pid: int | str, tid: int | str, start: int, end: int, args: str
    ) -> str:
        ts, dur = self.clock.ts(start), self.clock.dur(end - start)
        return (
            f'\n  {{\n    "ph": "X", "cat": "{cat}", "name": {self._name(name)}, '
            f'"pid": {pid}, "tid": {tid},'
            f'\n    "ts": {ts}, "dur": {dur},\n    "args": {{\n      {args}\n    }}\n  }}'
        )

    def _flow(self, ph: str, corr: int, pid: int, tid: int, t: int) -> str:
        tail = ', "bp": "e"' if ph == "f" else ""
        return (
            f'\n  {{\n    "ph": "{ph}", "id": {corr}, "pid": {pid}, "tid": {tid}, '
            f'"ts": {self.clock.ts(t)},'
            f'\n    "cat": "ac2g", "name": "ac2g"{tail}\n  }}'
        )

    # ---- CPU side ---------------------------------------------------------------------------

    def _cpu_events(self) -> Iterator[str]:
        main = self.tids["main"]
        yield self._python("train.py(212): <module>", 1, 0, *self._main_extent())
        for i, step in enumerate(self.spec.steps):
            ext = self.plan.step_ext[step.number]
            args = _op_ids(ext)
            yield self._x(
                "user_annotation",
                f"ProfilerStep#{step.number}",
                self.pid,
                main,
                step.cpu_start_ns,
                step.cpu_end_ns,
                args,
            )
            yield self._python(
                "train.py(168): train_step", 2 + i, 1, step.cpu_start_ns, step.cpu_end_ns
            )
            yield self._memory(step.cpu_start_ns, 4_194_304 * (1 + i % 3))
        for launch in self.plan.launches:
            yield from self._launch_cpu(launch)
        for call in self.spec.cpu_calls:
            tid = self.tids[call.thread]
            args = (
                '"cbid": 165' if call.cat == "cuda_runtime" else '"Trace name": "PyTorch Profiler"'
            )
            yield self._x(call.cat, call.name, self.pid, tid, call.start_ns, call.end_ns, args)

    def _main_extent(self) -> tuple[int, int]:
        times = [t for s in self.spec.steps for t in (s.cpu_start_ns, s.cpu_end_ns)]
        for launch in self.plan.launches:
            if launch.op.launch_thread == "main":
                times.extend((launch.spans[0].start, launch.spans[0].end))
        if not times:
            return self.trace_start, self.trace_start + self.clock.unit
        return min(times), max(times)

    def _python(self, name: str, pyid: int, parent: int, start: int, end: int) -> str:
        args = f'"Python parent id": {parent}, "Python id": {pyid}, "Python thread": 0'
        return self._x("python_function", name, self.pid, self.tids["main"], start, end, args)

    def _memory(self, t: int, nbytes: int) -> str:
        return (
            f'\n  {{\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",'
            f'\n    "pid": {self.pid}, "tid": {self.tids["main"]},\n    "ts": {self.clock.ts(t)},'
            f'\n    "args": {{\n      "Total Reserved": 2147483648, '
            f'"Total Allocated": {1_073_741_824 + nbytes}, "Bytes": {nbytes}, '
            f'"Addr": {139_872_000_000_000 + nbytes}, "Device Type": 1, "Device Id": {self.device}'
            "\n    }\n  }"
        )

    def _launch_cpu(self, launch: Launch) -> Iterator[str]:
        tid = self.tids[launch.op.launch_thread]
        for span in launch.spans:
            args = _op_ids(span.ext)
            if span.metadata:
                within = self._group(launch).ranks.index(self.spec.rank)
                args += ", " + self._coll_args(launch) + f', "Rank": {within}'
            if launch.op.shapes and span.cat == "cpu_op":
                args += f', "Input Dims": {json.dumps([list(d) for d in launch.op.shapes])}'
                args += f', "Input type": {json.dumps([SHAPE_DTYPE] * len(launch.op.shapes))}'
                if launch.op.concrete:
                    args += f', "Concrete Inputs": {json.dumps(list(launch.op.concrete))}'
            yield self._x(span.cat, span.name, self.pid, tid, span.start, span.end, args)

    def _group(self, launch: Launch) -> ProcessGroup:
        """The op's process group; the world stands for the default group "0"."""
        return self._groups[launch.op.pg] if launch.op.pg else self._world

    def _coll_args(self, launch: Launch) -> str:
        op = launch.op
        info = COLLECTIVES[op.coll or "Other"]
        group = self._group(launch)
        name = group.name if op.pg else "0"
        members = group.ranks
        n = len(members)
        in_n, out_n = _message_sizes(op.coll or "Other", op.nelems, n)
        if op.in_splits:
            in_n, out_n = sum(op.in_splits) * ROW_ELEMS, sum(op.out_splits) * ROW_ELEMS
        ranks = ", ".join(str(r) for r in members)
        peers = ""
        if op.p2p and op.peer_args:
            me = self.spec.rank
            src, dst = (me, op.peer) if op.p2p == "send" else (op.peer, me)
            peers = f'"Src Rank": {src}, "Dst Rank": {dst}, '
        return (
            f'"Collective name": "{op.p2p or info.collective_name}", "In msg nelems": {in_n}, '
            f'"Out msg nelems": {out_n}, "Group size": {n}, "dtype": "{info.dtype}", '
            f'"In split size": "{_splits(op.in_splits)}", '
            f'"Out split size": "{_splits(op.out_splits)}", '
            f'"Process Group Name": {_jstr(name)}, '
            f'"Process Group Description": {_jstr(group.desc)}, '
            f'"Process Group Ranks": "[{ranks}]", {peers}"Seq": {launch.seq}'
        )

    # ---- GPU side ---------------------------------------------------------------------------

    def _activities(self) -> Iterator[str]:
        for launch in self.plan.launches:
            op = launch.op
            for device in (launch, *self.plan.replayed.get(launch.ordinal, ())):
                if device.op.recorded:
                    yield self._device_event(device)
                    corr = device.device_corr or device.corr
                    yield self._flow("f", corr, self.device, device.op.stream, device.op.start_ns)
            name, cbid = (
                _GRAPH_LAUNCH
                if op.graph
                else _LEGACY_COMM_LAUNCH
                if op.annotated
                else _RUNTIME[op.kind]
            )
            tid = self.tids[op.launch_thread]
            args = f'"External id": {launch.ext},      "cbid": {cbid}, "correlation": {launch.corr}'
            yield self._x(
                "cuda_runtime",
                name,
                self.pid,
                tid,
                op.launch_ns,
                op.launch_ns + launch.rt_dur,
                args,
            )
            yield self._flow("s", launch.corr, self.pid, tid, op.launch_ns)
        for launch in self.plan.unlinked:
            yield self._device_event(launch)

    def _device_event(self, launch: Launch) -> str:
        op = launch.op
        ext = f'"External id": {launch.device_ext or launch.ext},      ' if op.launched else ""
        where = (
            f'"device": {self.device}, "context": 1,      "stream": {op.stream}, '
            f'"correlation": {launch.device_corr or launch.corr}'
        )
        if op.graph:
            # CUPTI packs the graph id into the upper 32 bits of the node id
            where += f', "graph id": {op.graph}, "graph node id": {(op.graph << 32) | op.node}'
        elif self._graphs and op.kind in ("compute", "comm"):
            where += ', "graph id": 0, "graph node id": 0'
        if op.kind in ("memcpy", "memset"):
            nbytes = op.dur_ns * _BANDWIDTH[op.kind]
            bandwidth = nbytes / op.dur_ns
            args = f'{ext}{where},      "bytes": {nbytes}, "memory bandwidth (GB/s)": {bandwidth!r}'
        else:
            args = f'{ext}"queued": 0, {where},      {self._kernel_tail(launch)}'
            if op.kind == "comm" and has_metadata(op):
                args += ", " + self._coll_args(launch)
        return self._x(
            _CATS[op.kind], launch.name, self.device, op.stream, op.start_ns, op.end_ns, args
        )

    def _kernel_tail(self, launch: Launch) -> str:
        cached = self._kernel_tails.get(launch.name)
        if cached is None:
            profile = COMM_PROFILE if launch.op.kind == "comm" else profile_for(launch.name)
            cached = self._kernel_tails[launch.name] = _launch_config(profile)
        return cached

    def _sync_events(self) -> Iterator[str]:
        corr = self.plan.next_corr
        for sync in self.syncs:
            extra = ""
            if sync.wait_on is not None:
                # The event it waits on was recorded by a call outside the profiled set.
                extra = (
                    f', "wait_on_stream": {sync.wait_on}, '
                    f'"wait_on_cuda_event_record_corr_id": {corr - 1}'
                )
            args = (
                f'"External id": {sync.ext},\n      "cuda_sync_kind": "{sync.name}",\n      '
                f'"stream": {sync.stream}, '
                f'"correlation": {corr},\n      "device": {self.device}, "context": 1{extra}'
            )
            yield self._x(
                "cuda_sync", sync.name, self.device, sync.stream, sync.start, sync.end, args
            )
            corr += 2

    # ---- metadata and window markers -------------------------------------------------------

    def _metadata_events(self) -> Iterator[str]:
        yield from self._process_meta(self.pid, "CPU", self.pid)
        for device in range(_GPUS_PER_HOST):
            yield from self._process_meta(device, f"GPU {device}", 16_777_216 + device)
        threads = {"main": "python3", "autograd": "pt_autograd_0"}
        for key, label in threads.items():
            tid = self.tids[key]
            yield self._meta("thread_name", self.pid, tid, f'"name": "thread {tid} ({label})"')
            yield self._meta("thread_sort_index", self.pid, tid, f'"sort_index": {tid}')
        streams = {op.stream for op in self.spec.all_ops() if op.recorded} | {
            s.stream for s in self.syncs
        }
        for stream in sorted(streams):
            yield self._meta("thread_name", self.device, stream, f'"name": "stream {stream} "')
            yield self._meta("thread_sort_index", self.device, stream, f'"sort_index": {stream}')

    def _process_meta(self, pid: int, label: str, sort_index: int) -> Iterator[str]:
        yield self._meta("process_name", pid, 0, '"name": "python3"')
        yield self._meta("process_labels", pid, 0, f'"labels": "{label}"')
        yield self._meta("process_sort_index", pid, 0, f'"sort_index": {sort_index}')

    def _meta(self, name: str, pid: int | str, tid: int, args: str) -> str:
        return (
            f'\n  {{\n    "name": "{name}", "ph": "M", "ts": {self.clock.ts(self.trace_start)}, '
            f'"pid": {pid}, "tid": {tid},'
            f'\n    "args": {{\n      {args}\n    }}\n  }}'
        )

    def _window_events(self) -> Iterator[str]:
        start, end = self.trace_start, self.trace_end
        yield self._x(
            "Trace",
            "PyTorch Profiler (0)",
            '"Spans"',
            '"PyTorch Profiler"',
            start,
            end,
            '"Op count": 0',
        )
        yield self._meta("process_sort_index", '"Spans"', 0, '"sort_index": 536870912')
        yield (
            '\n  {\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",'
            '\n    "pid": "Traces", "tid": "Trace PyTorch Profiler", '
            f'"ts": {self.clock.ts(start)}\n  }}'
        )
        yield (
            '\n  {\n    "name": "Record Window End", "ph": "i", "s": "g",'
            f'\n    "pid": "", "tid": "", "ts": {self.clock.ts(end)}\n  }}'
        )


def _op_ids(ext: int) -> str:
    return f'"External id": {ext},"Record function id": {ext}, "Ev Idx": {ext - 1}'


def _splits(sizes: tuple[int, ...]) -> str:
    """Split sizes as c10d writes them: a Python list as text."""
    return "[" + ", ".join(str(x) for x in sizes) + "]"


def _message_sizes(coll: str, nelems: int, n: int) -> tuple[int, int]:
    """(In, Out) element counts as c10d records them, from the per-rank input count."""
    if coll == "AllGather":
        return nelems, nelems * n
    if coll == "ReduceScatter":
        return nelems, nelems // n
    return nelems, nelems


def _launch_config(profile: KernelProfile) -> str:
    blocks = profile.grid[0] * profile.grid[1] * profile.grid[2]
    threads = profile.block[0] * profile.block[1] * profile.block[2]
    per_sm = blocks / _NUM_SMS
    warps = per_sm * threads / 32
    occupancy = min(100, int(100 * warps / 64))
    return (
        f'"registers per thread": {profile.registers},      '
        f'"shared memory": {profile.shared_mem},      '
        f'"blocks per SM": {per_sm:.6f},      "warps per SM": {warps:.6f},      '
        f'"grid": [{profile.grid[0]}, {profile.grid[1]}, {profile.grid[2]}],      '
        f'"block": [{profile.block[0]}, {profile.block[1]}, {profile.block[2]}],      '
        f'"est. achieved occupancy %": {occupancy}'
    )


def _device_props(device: int, name: str) -> str:
    return (
        f'\n    {{\n      "id": {device}, "name": {_jstr(name)}, "totalGlobalMem": 84929347584,'
        '\n      "computeMajor": 9, "computeMinor": 0,'
        '\n      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,'
        '\n      "regsPerBlock": 65536, "warpSize": 32,'
        f'\n      "sharedMemPerBlock": 49152, "numSms": {_NUM_SMS}'
        '\n    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, '
        '"sharedMemPerMultiprocessor": 233472'
        "\n    }"
    )


def _step_streams(step: Step) -> tuple[int, int]:
    """(compute stream, comm stream) to hang a step's sync records on."""
    recorded = [op for op in step.ops if op.recorded]
    default = recorded[0].stream if recorded else 7
    compute = next((op.stream for op in recorded if op.kind == "compute"), default)
    comm = next((op.stream for op in recorded if op.kind == "comm"), compute)
    return compute, comm


def _largest_gap(busy: list[tuple[int, int]], window: tuple[int, int]) -> tuple[int, int] | None:
    """Largest stretch inside window that no device event covers."""
    starts = [b[0] for b in busy]
    i = max(0, bisect_right(starts, window[0]) - 1)
    best: tuple[int, int] | None = None
    cursor = window[0]
    while i < len(busy) and busy[i][0] < window[1]:
        if busy[i][0] > cursor and (best is None or busy[i][0] - cursor > best[1] - best[0]):
            best = (cursor, busy[i][0])
        cursor = max(cursor, busy[i][1])
        i += 1
    return best


def _free_before(busy: list[tuple[int, int]], t: int) -> int:
    """How long no device event covers the time just before t."""
    i = bisect_right([b[0] for b in busy], t - 1) - 1
    if i < 0:
        return 50_000
    return max(0, t - busy[i][1])
