"""Parse throughput of tracecomm against HTA (each installed release) and ``gzip -dc``, on a
real trace replicated to N ranks (``--real PATH``) or on a generated run.

    python bench/parse_throughput.py [--real TRACE] [--mb-per-rank 200] [--ranks 8]
                                     [--out bench/out] [--repeat 1] [--skip-hta] [--markdown]
                                     [--hta-ranks N] [--hta-mem-limit-gb 16]
                                     [--hta-python PY [--hta-python PY ...]]

Each ``--hta-python`` names an interpreter with one HTA installed: HTA 0.6.1 (PyPI
``traceinsight``) and 0.5.0 (PyPI ``holistictraceanalysis``) both install the ``hta`` module, so
they live in separate virtual environments, and every HTA row runs with its own interpreter.
Without the option, this interpreter's HTA (if any) is measured.

``--real TRACE`` takes a real trace (``.json`` or ``.json.gz``) and writes it once per rank with
only its ``distributedInfo.rank`` changed (the bytes otherwise as recorded); without it, an
FSDP-style run is generated (once) with the ground-truth generator. Either way gzipped copies
(gzip -6) are made, then every tool is measured in a fresh subprocess, so peak RSS belongs to
that tool:

- floors: ``cat`` of the .json files and ``gzip -dc`` of the .gz files to /dev/null, and each
  inflater tracecomm can use (zlib, zlib-ng, isal: ``ingest/inflate.py``) over the .gz files in
  one process.
- tracecomm, one process: ``load_rank`` + ``breakdown`` over every rank file in turn (.json and
  .json.gz).
- HTA, one process, per HTA release: ``hta.common.trace.parse_trace_file`` over every rank file
  in turn. That is the per-rank function HTA's own process pool maps
  (``Trace.parse_multiple_ranks``).
- End to end, with each tool's own process pool: ``tracecomm analyze RUN --format json`` and,
  per HTA release, ``TraceAnalysis(trace_dir=RUN).get_comm_comp_overlap()``.

MB are 10^6 bytes of uncompressed JSON. Speed is reported as ratios against the baselines of the
same run (each HTA, gzip -dc), never as absolute pass/fail thresholds. tracecomm's JSON must be
the same for .json, .json.gz and each inflater (``TRACECOMM_GZIP``): the bench exits 1 if not.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
MB = 1e6
SEED = 0
GZIP_LEVEL = 6
_WORKER = "_worker"


# ---- data ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    run_dir: Path
    gz_dir: Path
    plain: list[Path]
    gz: list[Path]

    @property
    def plain_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.plain)

    def plain_mb(self, n: int | None = None) -> float:
        return sum(p.stat().st_size for p in self.plain[:n]) / MB


def _source_digest(package_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py")):
        digest.update(str(path.relative_to(package_dir)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _synth_digest() -> str:
    """Hash of the generator's source: a changed generator means regenerating the run."""
    import tracecomm.synth

    return _source_digest(Path(tracecomm.synth.__file__).parent)


def _tracecomm_digest() -> str:
    """Hash of the measured code, taken before and after: edits during a run are reported."""
    import tracecomm

    return _source_digest(Path(tracecomm.__file__).parent)


def compile_bytecode(log: Callable[[str], None]) -> None:
    """Byte-compile the measured package as ``pip install`` does (``_bytecode``: where
    PYTHONDONTWRITEBYTECODE is set, as in this workplace, none is ever written otherwise)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _bytecode import compile_tracecomm

    log(f"byte-compiled {compile_tracecomm()}")


def _run_name(mb_per_rank: float, ranks: int) -> str:
    name = f"run-{mb_per_rank:g}mb"
    return name if ranks == 8 else f"{name}-{ranks}ranks"


def prepare_data(out: Path, mb_per_rank: float, ranks: int, log: Callable[[str], None]) -> Dataset:
    """The run and its gzipped copies; reused when the marker says same parameters, same files."""
    from tracecomm.synth import fsdp_run_of_size, write_run

    name = _run_name(mb_per_rank, ranks)
    run_dir, gz_dir = out / name, out / f"{name}-gz"
    marker = out / f"{name}.params.json"
    params: dict[str, Any] = {
        "mb_per_rank": mb_per_rank,
        "ranks": ranks,
        "seed": SEED,
        "synth_digest": _synth_digest(),
        "gzip_level": GZIP_LEVEL,
    }
    if marker.exists():
        recorded = json.loads(marker.read_text())
        files: dict[str, int] = recorded.get("files", {})
        if recorded.get("params") == params and files and _files_match(out, files):
            plain = sorted((out / p for p in files if p.startswith(f"{name}/")), key=_rank_key)
            gz = sorted((out / p for p in files if p.startswith(f"{name}-gz/")), key=_rank_key)
            log(f"reusing {run_dir} and {gz_dir} (same parameters)")
            return Dataset(run_dir, gz_dir, plain, gz)
    for folder in (run_dir, gz_dir):
        if folder.exists():
            shutil.rmtree(folder)
    marker.unlink(missing_ok=True)
    log(f"generating {ranks} ranks x ~{mb_per_rank:g} MB into {run_dir} ...")
    t0 = time.perf_counter()
    spec = fsdp_run_of_size(mb_per_rank, world_size=ranks, seed=SEED, gzip=False)
    plain = write_run(spec, run_dir)
    log(f"  written in {time.perf_counter() - t0:.1f} s; gzipping (level {GZIP_LEVEL}) ...")
    t0 = time.perf_counter()
    gz = _gzip_copies(plain, gz_dir)
    log(f"  gzipped in {time.perf_counter() - t0:.1f} s")
    files = {str(p.relative_to(out)): p.stat().st_size for p in [*plain, *gz]}
    marker.write_text(json.dumps({"params": params, "files": files}, indent=2) + "\n")
    return Dataset(run_dir, gz_dir, plain, gz)


def prepare_real(out: Path, trace: Path, ranks: int, log: Callable[[str], None]) -> Dataset:
    """The real trace once per rank, only ``distributedInfo.rank`` changed, and gzipped copies."""
    import gzip
    import re

    raw = trace.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    name = f"real-{trace.name.split('.')[0]}-{ranks}ranks"
    run_dir, gz_dir = out / name, out / f"{name}-gz"
    for folder in (run_dir, gz_dir):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
    info = re.search(rb'"distributedInfo"\s*:\s*\{[^{}]*\}', raw[: 1 << 24])
    plain = []
    for rank in range(ranks):
        if info is not None:
            block = re.sub(rb'"rank"\s*:\s*-?\d+', b'"rank": %d' % rank, info.group(0))
            data = raw[: info.start()] + block + raw[info.end() :]
        else:  # no distributedInfo: one is added as the object's first key
            start = raw.index(b"{") + 1
            block = b'"distributedInfo": {"rank": %d, "world_size": %d}, ' % (rank, ranks)
            data = raw[:start] + block + raw[start:]
        path = run_dir / f"rank{rank}.json"
        path.write_bytes(data)
        plain.append(path)
    log(f"wrote {ranks} copies of {trace} ({len(raw) / MB:.1f} MB each) into {run_dir}")
    gz = _gzip_copies(plain, gz_dir)
    return Dataset(run_dir, gz_dir, plain, gz)


def _files_match(out: Path, files: dict[str, int]) -> bool:
    return all((out / p).is_file() and (out / p).stat().st_size == n for p, n in files.items())


def _rank_key(path: Path) -> int:
    digits = "".join(c for c in path.name.split(".")[0] if c.isdigit())
    return int(digits) if digits else 0


def _gzip_copies(plain: Sequence[Path], gz_dir: Path) -> list[Path]:
    """``gzip -6 -n -c`` of each file (no name, no mtime: same input, same bytes), in parallel."""
    gz_dir.mkdir(parents=True, exist_ok=True)
    targets = [gz_dir / (p.name + ".gz") for p in plain]
    jobs = max(1, os.cpu_count() or 1)
    running: list[tuple[subprocess.Popen[bytes], Any]] = []
    for src, dst in zip(plain, targets, strict=True):
        while len(running) >= jobs:
            _finish(running.pop(0))
        sink = dst.open("wb")
        proc = subprocess.Popen(["gzip", f"-{GZIP_LEVEL}", "-n", "-c", str(src)], stdout=sink)
        running.append((proc, sink))
    while running:
        _finish(running.pop(0))
    return targets


def _finish(job: tuple[subprocess.Popen[bytes], Any]) -> None:
    proc, sink = job
    rc = proc.wait()
    sink.close()
    if rc:
        raise RuntimeError(f"gzip failed with exit code {rc}")


@dataclass(frozen=True)
class Hta:
    """One HTA release to measure, in the interpreter (virtual environment) that has it."""

    python: str
    version: str  # hta.__version__
    dist: str  # the PyPI distribution that installed it

    @property
    def label(self) -> str:
        return f"HTA {self.version}"


_HTA_PROBE = """
import importlib.metadata as m, json
import hta, hta.common.trace, hta.trace_analysis
dists = []
for name in ("traceinsight", "holistictraceanalysis"):
    try:
        m.version(name)
        dists.append(name)
    except m.PackageNotFoundError:
        pass
try:
    pandas = m.version("pandas")
except m.PackageNotFoundError:
    pandas = "absent"
print(json.dumps({"version": hta.__version__, "dists": dists, "pandas": pandas}))
"""


def probe_hta(python: str) -> tuple[Hta, str] | str:
    """The HTA that ``python`` imports and its pandas version, or why there is none."""
    try:
        done = subprocess.run([python, "-c", _HTA_PROBE], capture_output=True, text=True)
    except OSError as exc:
        return f"{python}: {exc.strerror or exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"HTA does not import with {python} ({last})"
    info = json.loads(done.stdout.strip().splitlines()[-1])
    dist = " + ".join(info["dists"]) or "unknown distribution"
    return Hta(python, str(info["version"]), dist), str(info["pandas"])


# ---- measuring one subprocess -------------------------------------------------------------


@dataclass
class Measured:
    wall_s: float
    cpu_s: float  # user + system time of the command and all its processes
    max_rss_kb: int  # largest single process of the tree (wait4's ru_maxrss)
    total_pss_kb: int  # largest sum of PSS over the whole tree, sampled every 50 ms
    busy_processes: int  # processes that used ≥ 20% of the busiest one's CPU time
    returncode: int
    stdout: str
    killed_for_memory: bool = False


class _TreeWatch:
    """Samples a process tree from /proc (no psutil): summed PSS, CPU ticks per process."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peak_pss_kb = 0
        self.ticks: dict[int, int] = {}

    def sample(self) -> int:
        children: dict[int, list[int]] = {}
        ticks: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2 :].split()
            pid = int(entry.name)
            children.setdefault(int(fields[1]), []).append(pid)
            ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
        total, todo = 0, list(children.get(self.root, ()))  # the launcher itself is left out
        while todo:
            pid = todo.pop()
            total += _pss_kb(pid)
            self.ticks[pid] = max(self.ticks.get(pid, 0), ticks[pid])
            todo.extend(children.get(pid, ()))
        self.peak_pss_kb = max(self.peak_pss_kb, total)
        return total

    def busy(self) -> int:
        """Processes that did a real share of the work: ≥ 20% of the busiest one's CPU time."""
        top = max(self.ticks.values(), default=0)
        return max(1, sum(1 for t in self.ticks.values() if top and t >= 0.2 * top))


def _pss_kb(pid: int) -> int:
    """Proportional set size: pages shared with a forked parent are split, not double-counted."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


# Runs the measured command from a small interpreter (python -S): a child's ru_maxrss starts at
# the RSS of the process that forked it, so forking from this (large) process would inflate it.
_LAUNCHER = """
import os, sys, time
result, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
code = os.waitstatus_to_exitcode(status)
with open(result, "w") as fh:
    fh.write(f"{wall} {usage.ru_utime + usage.ru_stime} {usage.ru_maxrss} {code}")
sys.exit(code if 0 <= code < 256 else 1)
"""


def measure(
    cmd: Sequence[str],
    log_file: Path,
    stdout_file: Path | None = None,
    mem_limit_kb: int | None = None,
) -> Measured:
    """Run cmd in a fresh process group; wall time, CPU time, memory, and its stdout."""
    result = log_file.parent / "last-measure.txt"
    result.unlink(missing_ok=True)
    launcher = [sys.executable, "-S", "-c", _LAUNCHER, str(result), *cmd]
    with log_file.open("ab") as err:
        err.write(f"\n$ {' '.join(cmd)}\n".encode())
        err.flush()
        sink = stdout_file.open("wb") if stdout_file else None
        try:
            proc = subprocess.Popen(
                launcher,
                stdout=sink if sink else subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
            tree = _TreeWatch(proc.pid)
            killed = False
            done = threading.Event()

            def watch() -> None:
                nonlocal killed
                while not done.wait(0.05):
                    if tree.sample() > (mem_limit_kb or 1 << 62) and not killed:
                        killed = True
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, signal.SIGKILL)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            stdout, _ = proc.communicate()
            done.set()
            watcher.join()
            if killed:
                # pool workers left behind by the killed tree are in the same group
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        finally:
            if sink:
                sink.close()
    if killed or not result.exists():
        code = proc.returncode or -9
        return Measured(0.0, 0.0, 0, tree.peak_pss_kb, tree.busy(), code, "", killed)
    wall, cpu, maxrss, code = result.read_text().split()
    return Measured(
        wall_s=float(wall),
        cpu_s=float(cpu),
        max_rss_kb=int(maxrss),
        total_pss_kb=tree.peak_pss_kb,
        busy_processes=tree.busy(),
        returncode=int(code),
        stdout=(stdout or b"").decode(errors="replace"),
    )


# ---- workers (run in the measured subprocess) ----------------------------------------------


def _worker_tracecomm(paths: list[str]) -> dict[str, Any]:
    from tracecomm.engine import breakdown
    from tracecomm.ingest import load_rank

    per_file: list[dict[str, Any]] = []
    for path in paths:
        t0 = time.perf_counter()
        events = load_rank(path)
        t1 = time.perf_counter()
        result = breakdown(events)
        t2 = time.perf_counter()
        per_file.append({"path": path, "load_s": t1 - t0, "breakdown_s": t2 - t1})
        if result.window is None:
            raise SystemExit(f"{path}: empty breakdown")
        del events, result
    seconds = sum(f["load_s"] + f["breakdown_s"] for f in per_file)
    return {"seconds": seconds, "per_file": per_file}


def _worker_hta_parse(paths: list[str]) -> dict[str, Any]:
    # The function Trace.parse_multiple_ranks maps over its pool, one rank file per call: run
    # here sequentially in this one process, so the number is per process.
    from hta.common.trace import parse_trace_file

    per_file: list[dict[str, Any]] = []
    for path in paths:
        t0 = time.perf_counter()
        _, df, _ = parse_trace_file(path)
        per_file.append({"path": path, "seconds": time.perf_counter() - t0, "rows": len(df)})
        del df
        gc.collect()  # outside the timer: keeps one rank's frame alive at a time
    return {"seconds": sum(f["seconds"] for f in per_file), "per_file": per_file}


def _worker_hta_e2e(args: list[str]) -> dict[str, Any]:
    # TraceAnalysis parses every rank with a fork pool of min(ranks, cpu_count) processes.
    from hta.trace_analysis import TraceAnalysis

    t0 = time.perf_counter()
    if args[0] == "--dir":
        analysis = TraceAnalysis(trace_dir=args[1])
    else:
        files = {_rank_key(Path(p)): p for p in args}
        analysis = TraceAnalysis(trace_files=files)
    t1 = time.perf_counter()
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    t2 = time.perf_counter()
    return {"load_s": t1 - t0, "overlap_s": t2 - t1, "ranks": len(overlap)}


def _worker_inflate(args: list[str]) -> dict[str, Any]:
    from tracecomm.ingest.inflate import _BY_NAME

    inflater = _BY_NAME[args[0]]()
    t0 = time.perf_counter()
    total = 0
    for path in args[1:]:
        with inflater.open(Path(path)) as handle:
            while block := handle.read(8 << 20):
                total += len(block)
    return {"seconds": time.perf_counter() - t0, "bytes": total}


def _worker_main(argv: list[str]) -> int:
    kind, rest = argv[0], argv[1:]
    workers: dict[str, Callable[[list[str]], dict[str, Any]]] = {
        "inflate": _worker_inflate,
        "tracecomm": _worker_tracecomm,
        "hta-parse": _worker_hta_parse,
        "hta-e2e": _worker_hta_e2e,
    }
    result = workers[kind](rest)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


# ---- the benchmark -------------------------------------------------------------------------


@dataclass
class Row:
    key: str
    tool: str
    input: str
    ranks: int
    mb: float
    seconds: float  # in-process timer (one-process rows) or wall time (whole commands)
    run: Measured
    timer: str
    detail: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def mbps(self) -> float:
        return self.mb / self.seconds if self.seconds > 0 else float("nan")


class Bench:
    def __init__(self, args: argparse.Namespace, data: Dataset, log: Callable[[str], None]):
        self.args = args
        self.data = data
        self.log = log
        logs = args.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log_file = logs / "parse_throughput.stderr.log"
        self.log_file.write_text("")
        self.py = sys.executable

    def _runs(self, cmd: Sequence[str], what: str, **kw: Any) -> list[Measured]:
        results = []
        for i in range(self.args.repeat):
            self.log(f"  {what} ({i + 1}/{self.args.repeat}) ...")
            m = measure(cmd, self.log_file, **kw)
            if m.killed_for_memory:
                return [m]
            if m.returncode != 0:
                raise SystemExit(f"{what} failed (exit {m.returncode}); see {self.log_file}")
            results.append(m)
        return results

    def _command_row(self, key: str, tool: str, inp: str, ranks: int, runs: list[Measured]) -> Row:
        best = min(runs, key=lambda m: m.wall_s)
        mb = self.data.plain_mb(ranks)
        return Row(key, tool, inp, ranks, mb, best.wall_s, best, "wall time of the command")

    def _worker_row(
        self, key: str, tool: str, inp: str, python: str, kind: str, paths: list[Path]
    ) -> Row:
        cmd = [python, str(SCRIPT), _WORKER, kind, *map(str, paths)]
        runs = self._runs(cmd, f"{tool} ({inp}, {len(paths)} files, one process)")
        parsed = [json.loads(m.stdout.strip().splitlines()[-1]) for m in runs]
        i = min(range(len(runs)), key=lambda j: parsed[j]["seconds"])
        detail = parsed[i]
        mb = self.data.plain_mb(len(paths))
        return Row(key, tool, inp, len(paths), mb, detail["seconds"], runs[i], "in-process", detail)

    def gzip_floor(self) -> Row:
        cmd = ["gzip", "-dc", *map(str, self.data.gz)]
        runs = self._runs(cmd, "gzip -dc", stdout_file=Path(os.devnull))
        return self._command_row("gzip", "gzip -dc > /dev/null", ".json.gz", len(cmd) - 2, runs)

    def cat_floor(self) -> Row:
        cmd = ["cat", *map(str, self.data.plain)]
        runs = self._runs(cmd, "cat", stdout_file=Path(os.devnull))
        return self._command_row("cat", "cat > /dev/null", ".json", len(cmd) - 1, runs)

    def inflate_floors(self) -> list[Row]:
        """Each inflater tracecomm can use, in one process over the .gz files."""
        from tracecomm.ingest.inflate import _BY_NAME

        rows = []
        for name, make in _BY_NAME.items():
            try:
                make()
            except ImportError:
                self.log(f"  {name}: not installed, not measured")
                continue
            row = self._worker_row(
                f"inflate:{name}",
                f"inflate with {name}",
                ".json.gz",
                self.py,
                "inflate",
                [Path(name), *self.data.gz],
            )
            row.ranks = len(self.data.gz)
            row.mb = self.data.plain_mb()
            rows.append(row)
        return rows

    def tracecomm_parse(self, gz: bool) -> Row:
        paths = self.data.gz if gz else self.data.plain
        row = self._worker_row(
            "tc-gz" if gz else "tc",
            "tracecomm load_rank + breakdown",
            ".json.gz" if gz else ".json",
            self.py,
            "tracecomm",
            paths,
        )
        row.detail["load_s"] = sum(f["load_s"] for f in row.detail["per_file"])
        row.detail["breakdown_s"] = sum(f["breakdown_s"] for f in row.detail["per_file"])
        return row

    def hta_parse(self, hta: Hta, ranks: int) -> Row:
        paths = self.data.plain[:ranks]
        return self._worker_row(
            f"hta:{hta.version}",
            f"{hta.label} parse_trace_file",
            ".json",
            hta.python,
            "hta-parse",
            paths,
        )

    def tracecomm_e2e(self, gz: bool, inflater: str | None = None) -> Row:
        exe = Path(self.py).parent / "tracecomm"
        run_dir = self.data.gz_dir if gz else self.data.run_dir
        cmd = [str(exe), "analyze", str(run_dir), "--format", "json"]
        if inflater is not None:
            cmd = ["env", f"TRACECOMM_GZIP={inflater}", *cmd]
        what = (
            "tracecomm analyze" + (" (gz)" if gz else "") + (f" ({inflater})" if inflater else "")
        )
        key = ("tc-e2e-gz" if gz else "tc-e2e") + (f":{inflater}" if inflater else "")
        out = self.log_file.parent / f"{key.replace(':', '-')}.json"
        runs = self._runs(cmd, what, stdout_file=out)
        row = self._command_row(
            key,
            "tracecomm analyze --format json"
            + (f", TRACECOMM_GZIP={inflater}" if inflater else ""),
            ".json.gz" if gz else ".json",
            len(self.data.plain),
            runs,
        )
        row.detail["output"] = str(out)
        row.detail["input_dir"] = str(run_dir)
        return row

    def hta_e2e(self, hta: Hta, ranks: int, mem_limit_gb: float) -> Row | None:
        """HTA's load + overlap; on half the ranks while it goes over the memory cap."""
        note = ""
        while ranks >= 1:
            if ranks == len(self.data.plain):
                args = ["--dir", str(self.data.run_dir)]  # HTA's own discovery, as users run it
            else:
                args = [str(p) for p in self.data.plain[:ranks]]
            cmd = [hta.python, str(SCRIPT), _WORKER, "hta-e2e", *args]
            limit = int(mem_limit_gb * 2**20)
            runs = self._runs(cmd, f"{hta.label} TraceAnalysis, {ranks} ranks", mem_limit_kb=limit)
            if runs[0].killed_for_memory:
                self.log(
                    f"  {hta.label} went over {mem_limit_gb:g} GB on {ranks} ranks: stopped it"
                )
                note = f"first {ranks // 2} ranks only: over {mem_limit_gb:g} GB on {ranks}"
                ranks //= 2
                continue
            row = self._command_row(
                f"hta-e2e:{hta.version}",
                f"{hta.label} TraceAnalysis + get_comm_comp_overlap",
                ".json",
                ranks,
                runs,
            )
            row.detail = json.loads(row.run.stdout.strip().splitlines()[-1])
            row.note = note
            return row
        return None


def same_figures(rows: Sequence[Row]) -> list[str]:
    """tracecomm's JSON of every variant, the input folder's name aside: the differences."""
    docs = {}
    for r in rows:
        if "output" not in r.detail:
            continue
        text = Path(r.detail["output"]).read_text()
        text = text.replace(r.detail["input_dir"], "RUN").replace(".json.gz", ".json")
        docs[r.tool + " " + r.input] = json.loads(text)
    if not docs:
        return []
    (first, base), *rest = docs.items()
    return [f"{name} differs from {first}" for name, doc in rest if doc != base]


# ---- report --------------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def machine(htas: Sequence[tuple[Hta, str]]) -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    commit = _git("rev-parse", "--short", "HEAD")
    if commit and _git("status", "--porcelain", "--untracked-files=no", "--", "tracecomm"):
        commit += " (tracecomm/ modified)"
    gzip_version = subprocess.run(["gzip", "--version"], capture_output=True, text=True).stdout
    info = {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "ram": ram,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "tracecomm": _version("tracecomm"),
        "polars": _version("polars"),
        "msgspec": _version("msgspec"),
        "numpy": _version("numpy"),
        "gzip": gzip_version.splitlines()[0] if gzip_version else "unknown",
        "git commit": commit or "unknown",
    }
    for hta, pandas in htas:
        info[f"{hta.label}"] = f"{hta.dist}, pandas {pandas}, {hta.python}"
    if not htas:
        info["HTA"] = "not measured"
    return info


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def headers(htas: Sequence[Hta]) -> list[str]:
    """The table's columns: one "× HTA <version> MB/s" column per HTA release measured."""
    return [
        "measurement",
        "input",
        "ranks",
        "MB",
        "timed",
        "seconds",
        "MB/s",
        *(f"× {h.label} MB/s" for h in htas),
        "time ÷ gzip -dc",
        "busy processes",
        "CPU s",
        "MB per CPU s",
        "peak RSS, largest process",
        "peak PSS, all processes",
    ]


_LEFT = {0, 1, 4}


def _mib(kb: int) -> str:
    return f"{kb / 2**10:,.0f} MiB"


def _baseline(by_key: dict[str, Row], row: Row, hta: Hta) -> Row | None:
    """The HTA row a tracecomm row is compared with: end to end with end to end, one process
    with one process."""
    kind = "hta-e2e" if "e2e" in row.key else "hta"
    return by_key.get(f"{kind}:{hta.version}")


def table_rows(rows: list[Row], htas: Sequence[Hta]) -> list[list[str]]:
    by_key = {r.key: r for r in rows}
    gzip_row = by_key.get("gzip")
    out = []
    for r in rows:
        vs_hta = []
        for hta in htas:
            base = _baseline(by_key, r, hta)
            vs_hta.append(f"{r.mbps / base.mbps:.1f}×" if base and r.key.startswith("tc") else "")
        # time for the same bytes, relative to gunzipping them
        vs_gzip = f"{gzip_row.mbps / r.mbps:.2f}" if gzip_row else ""
        cpu = r.run.cpu_s
        out.append(
            [
                r.tool,
                r.input,
                str(r.ranks),
                f"{r.mb:.0f}",
                r.timer,
                f"{r.seconds:.2f}",
                f"{r.mbps:.1f}",
                *vs_hta,
                vs_gzip,
                str(r.run.busy_processes),
                f"{cpu:.1f}",
                f"{r.mb / cpu:.1f}" if cpu > 0 else "",
                _mib(r.run.max_rss_kb),
                _mib(r.run.total_pss_kb),
            ]
        )
    return out


def plain_table(head: Sequence[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in _LEFT else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    lines = [fmt(head), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def markdown_table(head: Sequence[str], rows: list[list[str]]) -> str:
    align = ["---" if i in _LEFT else "---:" for i in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def summary(rows: list[Row], htas: Sequence[Hta]) -> list[str]:
    by_key = {r.key: r for r in rows}
    lines = []
    for key in ("tc", "tc-gz"):
        r = by_key.get(key)
        if r:
            lines.append(
                f"{r.tool} ({r.input}): load_rank {r.detail['load_s']:.2f} s, "
                f"breakdown {r.detail['breakdown_s']:.2f} s of {r.seconds:.2f} s"
            )
    for hta in htas:
        e2e = by_key.get(f"hta-e2e:{hta.version}")
        if e2e and e2e.detail:
            lines.append(
                f"{hta.label} end to end: TraceAnalysis load {e2e.detail['load_s']:.2f} s, "
                f"get_comm_comp_overlap {e2e.detail['overlap_s']:.2f} s (in-process timers)"
            )
    tc = by_key.get("tc-e2e")
    ratios = []
    for hta in htas:
        e2e = by_key.get(f"hta-e2e:{hta.version}")
        if tc and e2e:
            ratios.append(f"{tc.mbps / e2e.mbps:.1f}× {hta.label} ({e2e.seconds:.2f} s)")
    if tc and ratios:
        lines.append(
            f"tracecomm analyze (.json, {tc.seconds:.2f} s) end to end: " + ", ".join(ratios)
        )
    if len(htas) > 1:
        first, *rest = htas
        for other in rest:
            a, b = by_key.get(f"hta-e2e:{first.version}"), by_key.get(f"hta-e2e:{other.version}")
            if a and b and a.ranks == b.ranks:
                lines.append(
                    f"{first.label} takes {a.seconds / b.seconds:.2f}× the time of {other.label} "
                    "end to end on the same files"
                )
    return lines


# ---- main ----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python bench/parse_throughput.py",
        description="Parse throughput of tracecomm vs each HTA release given and gzip -dc.",
    )
    p.add_argument(
        "--real",
        type=Path,
        metavar="TRACE",
        help="a real trace (.json or .json.gz) written once per rank instead of a generated run",
    )
    p.add_argument("--mb-per-rank", type=float, default=200.0)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    p.add_argument("--repeat", type=int, default=1, help="runs per measurement; best is kept")
    p.add_argument("--skip-hta", action="store_true", help="do not measure HTA")
    p.add_argument(
        "--hta-ranks",
        type=int,
        default=None,
        help="measure HTA on the first N rank files only (default: all)",
    )
    p.add_argument(
        "--hta-mem-limit-gb",
        type=float,
        default=16.0,
        help="stop HTA's end-to-end run above this much RSS and retry on half the ranks",
    )
    p.add_argument(
        "--hta-python",
        type=Path,
        action="append",
        default=None,
        metavar="PY",
        help="an interpreter with one HTA installed; repeat it for each release (0.6.1 and 0.5.0 "
        "need separate venvs: both install the hta module); default: this interpreter",
    )
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [_WORKER]:
        return _worker_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.repeat < 1 or args.ranks < 1 or args.mb_per_rank <= 0:
        print("error: --repeat, --ranks and --mb-per-rank must be positive", file=sys.stderr)
        return 2
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    htas: list[tuple[Hta, str]] = []
    if not args.skip_hta:
        for python in [str(p) for p in args.hta_python or []] or [sys.executable]:
            found = probe_hta(python)
            if isinstance(found, str):
                log(f"{found}: not measured (pip install -e '.[hta]' in that venv)")
            elif any(h.version == found[0].version for h, _ in htas):
                log(f"{python}: HTA {found[0].version} is measured already, with another python")
            else:
                htas.append(found)
                log(f"measuring HTA {found[0].version} ({found[0].dist}) with {python}")
    measured = [h for h, _ in htas]

    if args.real is not None:
        data = prepare_real(args.out, args.real.resolve(), args.ranks, log)
    else:
        data = prepare_data(args.out, args.mb_per_rank, args.ranks, log)
    compile_bytecode(log)
    code_before, commit_before = _tracecomm_digest(), _git("rev-parse", "--short", "HEAD")
    bench = Bench(args, data, log)
    hta_ranks = min(args.hta_ranks or len(data.plain), len(data.plain))
    log(f"measuring {len(data.plain)} ranks, {data.plain_mb():.0f} MB uncompressed ...")
    rows = [bench.cat_floor(), bench.gzip_floor(), *bench.inflate_floors()]
    rows += [bench.tracecomm_parse(gz=False), bench.tracecomm_parse(gz=True)]
    rows += [bench.hta_parse(hta, hta_ranks) for hta in measured]
    rows += [bench.tracecomm_e2e(gz=False), bench.tracecomm_e2e(gz=True)]
    rows += [bench.tracecomm_e2e(gz=True, inflater="zlib")]
    differences = same_figures(rows)
    for hta in measured:
        e2e = bench.hta_e2e(hta, hta_ranks, args.hta_mem_limit_gb)
        if e2e is None:
            log(f"{hta.label} end to end went over {args.hta_mem_limit_gb:g} GB even on one rank")
        else:
            rows.append(e2e)

    info = machine(htas)
    if _tracecomm_digest() != code_before:
        info["git commit"] = (
            f"{commit_before} → {info['git commit']}: tracecomm/ CHANGED DURING THE RUN"
        )
    head = headers(measured)
    cells = table_rows(rows, measured)
    sizes = ", ".join(f"{p.stat().st_size / MB:.1f}" for p in data.plain)
    notes = [
        f"run: {data.run_dir} ({len(data.plain)} ranks; MB per rank: {sizes}); "
        f"gzipped copies (gzip -{GZIP_LEVEL}) in {data.gz_dir}",
        "MB = 10^6 bytes of uncompressed JSON, whatever the input; MB/s = MB ÷ seconds.",
        "timed: 'in-process' = one process parses the files in turn, timer around the parse "
        "calls only (imports excluded); 'wall time of the command' = the whole command, "
        "interpreter start and the tool's own process pool included.",
        "× HTA <version> MB/s: against that HTA's one-process row (one-process rows) or its "
        "end-to-end row, each HTA in its own interpreter (--hta-python); "
        "time ÷ gzip -dc: time for the same bytes relative to gunzipping them.",
        "busy processes: processes of the command that used ≥ 20% of the busiest one's CPU time "
        "(a pool's workers, its parent when it works too); CPU s: user + system of "
        "all of them, whole command; peak PSS: largest sum over the command's processes "
        "(sampled every 50 ms; pages shared after fork counted once).",
        f"best of {args.repeat} run(s) per row.",
        "tracecomm's modules are byte-compiled before measuring, as pip install leaves them.",
        *summary(rows, measured),
    ]
    if not measured:
        notes.append("HTA not measured (--skip-hta, or not importable).")
    notes += [f"{r.tool}: {r.note}" for r in rows if r.note]
    if measured and hta_ranks < len(data.plain):
        notes.append(f"HTA measured on the first {hta_ranks} rank files (--hta-ranks).")

    if args.markdown:
        print("| machine | |\n|---|---|")
        for k, v in info.items():
            print(f"| {k} | {v} |")
        print()
        print(markdown_table(head, cells))
        print()
        for n in notes:
            print(f"- {n}")
    else:
        for k, v in info.items():
            print(f"{k:>28}: {v}")
        print()
        print(plain_table(head, cells))
        print()
        for n in notes:
            print(n)
    record = {
        "machine": info,
        "hta": [asdict(h) | {"pandas": pandas} for h, pandas in htas],
        "rows": [asdict(r) | {"mbps": r.mbps} for r in rows],
    }
    (args.out / "parse_throughput.json").write_text(json.dumps(record, indent=2) + "\n")
    for line in differences:
        print(f"error: tracecomm's figures {line}", file=sys.stderr)
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
