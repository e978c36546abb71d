"""``tracecomm.profile``: record a training loop's steps the way ``tracecomm analyze`` reads
them best. torch is imported when a recorder is made, never by ``import tracecomm``.

The helper never breaks the training loop: whatever goes wrong in it (no torch, a folder it
cannot write, steps that never come, an export that fails) is one line on stderr, and the
recording stops; the loop's own exceptions pass through untouched.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracecomm.frameworks import PRIORITY, framework_key
from tracecomm.record.files import (
    TOML_INT_MAX,
    RunFacts,
    apply_environment,
    partial_path,
    recording_environment,
    trace_name,
    write_settings,
)
from tracecomm.record.power import PowerReader, PowerSampler, nvml_reader
from tracecomm.record.window import Action, Window, on_demand_window, window_of
from tracecomm.record.world import Agreement, World, this_world

# `touch RUN/tracecomm.trigger` asks a running job for a recording (on_demand=True)
TRIGGER_FILE = "tracecomm.trigger"
DEFAULT_STEPS = range(5, 9)  # four steps after five of warm-up (compile, caches, allocator)
Log = Callable[[str], None]
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]{1,100}")  # a TOML bare key: the layout's dimensions


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def profile(
    run_dir: str | Path,
    steps: Iterable[int] | int | None = None,
    *,
    on_demand: bool = False,
    record_steps: int = 4,
    poll_every: int = 10,
    model_flops_per_step: int | float | None = None,
    flops_per_token: int | float | None = None,
    tokens_per_step: int | None = None,
    dtype: str | None = None,
    peak_tflops: float | None = None,
    framework: str | None = None,
    layout: Mapping[str, int] | None = None,
    power: bool | PowerReader = False,
    power_period_s: float = 0.1,
    nccl_env: bool = True,
    log: Log | None = None,
) -> Recorder:
    """A recorder for a training loop: ``with tracecomm.profile("run/", steps=range(10, 14))
    as prof:`` and ``prof.step()`` after each step.

    - ``steps``: the steps to record (consecutive; step N is the one after N ``step()`` calls),
      or a count; default 5–8. ``on_demand=True`` records nothing until asked — SIGUSR1 to any
      rank, or a file ``run_dir/tracecomm.trigger`` — then ``record_steps`` steps on every rank
      at one step number, agreed every ``poll_every`` steps, into ``run_dir/step<N>/``.
    - ``model_flops_per_step`` (or ``flops_per_token`` with ``tokens_per_step``), ``dtype``,
      ``peak_tflops``, ``framework`` and ``layout`` (``{"dp": 8, "tp": 2}``) go into the
      folder's ``tracecomm.toml``, which ``analyze`` reads: MFU needs no flags.
    - ``power``: sample GPU power through NVML (``nvidia-ml-py``) into ``power.<host>.csv``,
      or through the reader given.
    - ``nccl_env``: set NCCL's log and the Flight Recorder's dump path to the folder, when the
      process group does not exist yet (else say what the launcher should set).
    - ``log``: where the helper's lines go (default: stderr).
    """
    say = log or _stderr
    try:  # any argument it cannot use is one line, never an exception in the training script
        facts = _facts(
            model_flops_per_step,
            flops_per_token,
            tokens_per_step,
            dtype,
            peak_tflops,
            framework,
            layout,
        )
        window = None if on_demand else window_of(DEFAULT_STEPS if steps is None else steps)
        if on_demand and not (_count(record_steps) and _count(poll_every)):
            raise ValueError("record_steps and poll_every are positive counts of steps")
        problem = None
    except Exception as exc:
        facts, window, problem = RunFacts(), None, str(exc) or type(exc).__name__
    return Recorder(
        Path(run_dir),
        window,
        facts,
        on_demand=on_demand and problem is None,
        record_steps=record_steps,
        poll_every=poll_every,
        power=power,
        power_period_s=power_period_s,
        nccl_env=nccl_env,
        log=say,
        problem=problem,
    )


def _count(value: object) -> bool:
    return type(value) is int and 0 < value <= TOML_INT_MAX


def _facts(
    model_flops_per_step: object,
    flops_per_token: object,
    tokens_per_step: object,
    dtype: object,
    peak_tflops: object,
    framework: object,
    layout: object,
) -> RunFacts:
    """The facts for the settings file, checked as ``analyze`` will read them. Raises
    ``ValueError`` with the one line to say."""
    from tracecomm.mfu.inputs import InputError, model_inputs

    values = {
        "model_flops_per_step": model_flops_per_step,
        "flops_per_token": flops_per_token,
        "tokens_per_step": tokens_per_step,
        "dtype": dtype,
        "peak_tflops": peak_tflops,
    }
    try:
        inputs = model_inputs(values, lambda name: name)
    except InputError as exc:
        raise ValueError(str(exc)) from None
    if inputs.tokens_per_step is not None and not _count(inputs.tokens_per_step):
        raise ValueError(f"tokens_per_step {tokens_per_step!r}: past a 64-bit count")
    key = framework_key(framework) if isinstance(framework, str) else None
    if framework is not None and key is None:
        raise ValueError(f"framework={framework!r}: one of {', '.join(PRIORITY)}")
    dims = dict(layout) if isinstance(layout, Mapping) else None
    if layout is not None and (
        dims is None or not all(_BARE_KEY.fullmatch(str(k)) and _count(v) for k, v in dims.items())
    ):
        raise ValueError(f"layout={layout!r}: parallel dimensions and their sizes ({{'dp': 8}})")
    return RunFacts(model=inputs, framework=key, layout=dims or {})


class Recorder:
    """The context manager ``profile`` returns; ``step()`` after every training step."""

    def __init__(
        self,
        run_dir: Path,
        window: Window | None,
        facts: RunFacts,
        *,
        on_demand: bool,
        record_steps: int,
        poll_every: int,
        power: bool | PowerReader,
        power_period_s: float,
        nccl_env: bool,
        log: Log,
        problem: str | None,
    ) -> None:
        self.run_dir = run_dir.absolute()
        self.window = window
        self._facts = facts
        self._on_demand = on_demand
        self._record_steps = record_steps
        self._poll_every = poll_every
        self._power = power
        self._power_period_s = power_period_s
        self._nccl_env = nccl_env
        self._log = log
        self._torch: Any = None
        self._profiler: Any = None
        self._world: World | None = None
        self._agreement: Agreement | None = None
        self._sampler: PowerSampler | None = None
        self._asked = threading.Event()
        self._old_handler: Any = None
        self.step_num = 0
        self._entered = False
        self._trigger_since = 0.0  # a trigger file older than this was already answered
        self._ending = False  # the loop has ended: the step begun last never ran
        self.recorded: list[Path] = []  # the traces this rank wrote
        self.stopped: str | None = problem  # why the recorder records nothing more
        if problem is not None:
            self._say(f"recording nothing: {problem}")

    # -- the context manager -------------------------------------------------------------

    def __enter__(self) -> Recorder:
        if self._entered:  # torch's step numbers would restart under ours: never twice
            self._stop("a recorder records once: make a new tracecomm.profile for more")
            return self
        self._entered = True
        if self.stopped is None:
            self._guard(self._start)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: types.TracebackType | None,
    ) -> None:
        self._guard(self._finish)
        self._guard(self._restore_signal)

    def step(self) -> None:
        """Call once per training step, after it."""
        starting = self.step_num + 1
        try:
            if self._polls(starting):
                self._guard(lambda: self._poll(starting))
            if self._profiler is not None:
                self._guard(self._profiler.step)
                if self._profiler is not None:
                    self._guard(lambda: self._begin_power(starting))
        finally:  # the loop's step count goes on whatever the helper's work did
            self.step_num = starting

    # -- internals -----------------------------------------------------------------------

    def _guard(self, action: Callable[[], None]) -> None:
        """Runs the helper's own work: an exception stops the recording, never the loop."""
        try:
            action()
        except Exception as exc:
            self._abandon(f"{type(exc).__name__}: {exc}")

    def _abandon(self, why: str) -> None:
        """Stops everything the recorder runs; nothing in here may raise."""
        self._stop(f"recording stopped: {why}")
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            profiler.on_trace_ready = None
            with contextlib.suppress(Exception):
                profiler.stop()
        with contextlib.suppress(Exception):
            self._discard_power()

    def _stop(self, line: str) -> None:
        self.stopped = line
        self._say(line)

    def _say(self, line: str, job: bool = False) -> None:
        """One line: this rank's own problem (named by its rank), or the job's (``job``)."""
        many = self._world is not None and self._world.size > 1 and not job
        rank = f"rank {self._world.rank}: " if many and self._world else ""
        with contextlib.suppress(Exception):  # a log that fails is no reason to stop a job
            self._log(f"tracecomm.profile: {rank}{line}")

    def _start(self) -> None:
        try:
            import torch
            import torch.profiler
        except ImportError:
            self._on_demand = False  # no torch anywhere: nothing to vote with
            self._stop("recording nothing: torch is not installed (pip install torch)")
            return
        self._torch = torch
        self._world = this_world(torch.distributed)
        self._trigger_since = time.time()
        if self._on_demand:
            self._listen()
        if not self._writable(self.run_dir):
            return  # an on-demand rank still votes (the others wait for its vote)
        if self._nccl_env:
            self._set_nccl_env()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=self._action,
            on_trace_ready=self._save,
            record_shapes=True,  # matmul shapes (observed FLOPs), gloo's message sizes
        )
        self._profiler.__enter__()
        self._begin_power(0)

    def _writable(self, folder: Path) -> bool:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = partial_path(folder / "probe")
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            self._stop(f"recording nothing: {folder} is not writable ({exc.strerror or exc})")
            return False
        return True

    def _set_nccl_env(self) -> None:
        import os

        assert self._world is not None
        backend = self._world.backend or ""
        if self._world.initialized and "nccl" not in backend:
            return  # gloo / mpi: no NCCL to log
        wanted = recording_environment(self.run_dir)
        _, late = apply_environment(wanted, os.environ, self._world.initialized)
        if late and self._world.rank == 0:
            exports = " ".join(f"{k}={shlex.quote(wanted[k])}" for k in late)
            self._say(
                "NCCL log and Flight Recorder: the process group exists already; set in the "
                f"launcher's environment (docs/record.md): {exports}"
            )

    def _listen(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            self._say("not on the main thread: SIGUSR1 is not heard (the trigger file is)")
            return
        self._old_handler = signal.signal(signal.SIGUSR1, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._asked.set()

    def _restore_signal(self) -> None:
        if self._old_handler is not None:
            signal.signal(signal.SIGUSR1, self._old_handler)
            self._old_handler = None

    def _action(self, step: int) -> Any:
        """torch.profiler's schedule: what to do during ``step``."""
        return getattr(self._torch.profiler.ProfilerAction, self._action_name(step).value)

    def _action_name(self, step: int) -> Action:
        return Action.NONE if self.window is None else self.window.action(step)

    def _polls(self, step: int) -> bool:
        """Whether the ranks vote at ``step``: on demand, every ``poll_every`` steps outside a
        window. Every rank keeps the same count whatever its own recording did (one that
        stopped still votes), so that they always vote together."""
        inside = self.window is not None and step <= self.window.last
        return (
            self._on_demand
            and self._torch is not None
            and not inside
            and (step % self._poll_every == 0)
        )

    def _poll(self, step: int) -> None:
        if self._agreement is None:
            # at the first vote, not at the start: the process group may come later, and
            # every rank gets here at the same step (new_group is itself collective)
            self._world = this_world(self._torch.distributed)
            self._agreement = Agreement(self._torch, self._world)
            if self._world.size > 1 and not self._world.initialized:
                self._say(
                    "no process group: each rank records when it alone is asked (call "
                    "init_process_group before the first poll to record all at one step)"
                )
        trigger = self.run_dir / TRIGGER_FILE
        asked = self._asked.is_set() or self._fresh(trigger)
        try:
            agreed = self._agreement.any_asked(asked)
        except Exception:
            self._on_demand = False  # a vote that failed leaves the group unusable
            raise
        if not agreed:
            return
        # first: every rank's window, hence its voting steps, stays the others'
        self.window = on_demand_window(step, self._record_steps)
        self._asked.clear()
        self._trigger_since = time.time()
        with contextlib.suppress(OSError):  # gone already, or a folder this rank cannot use
            trigger.unlink()

    def _fresh(self, trigger: Path) -> bool:
        """A trigger file written since the last recording began (a stale copy that a shared
        file system still shows after its removal is not a new request)."""
        try:
            return trigger.stat().st_mtime > self._trigger_since
        except OSError:
            return False

    def _folder(self) -> Path:
        if self._on_demand and self.window is not None:
            return self.run_dir / f"step{self.window.first}"
        return self.run_dir

    def _begin_power(self, step: int) -> None:
        """Samples from the warm-up step (or the window's first, without one) to the save."""
        starts = self._action_name(step) is Action.WARMUP or (
            self.window is not None and step == self.window.first
        )
        if not self._power or self._sampler is not None or not starts:
            return
        assert self._world is not None
        if not self._world.samples_power:
            return
        reader = self._power
        if reader is True:
            try:
                reader = nvml_reader()
            except ImportError:
                self._power = False
                self._say("no power log: nvidia-ml-py is not installed (pip install nvidia-ml-py)")
                return
            except Exception as exc:  # NVML's own errors: no driver, no GPU
                self._power = False
                self._say(f"no power log: NVML: {exc}")
                return
        folder = self._folder()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"power.{self._world.host}.csv"
        assert not isinstance(reader, bool)
        self._sampler = PowerSampler(reader, path, self._world.host, self._power_period_s)
        self._sampler.start()

    def _stop_power(self) -> Path | None:
        sampler, self._sampler = self._sampler, None
        if sampler is None:
            return None
        written = sampler.stop()
        if sampler.problem:
            self._say(sampler.problem)
        return written

    def _discard_power(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop(write=False)

    def _save(self, profiler: Any) -> None:
        """on_trace_ready: this rank's trace into the folder, renamed into place when whole."""
        assert self._world is not None and self.window is not None
        if not self._world.initialized:  # entered before init_process_group: ask again
            self._world = this_world(self._torch.distributed)
        folder = self._folder()
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / trace_name(self._world.rank)
        plain = partial_path(final.with_name(final.name.removesuffix(".gz")))
        packed = partial_path(final)
        try:
            profiler.export_chrome_trace(str(plain))
            _gzip(plain, packed)
            packed.replace(final)
        finally:
            plain.unlink(missing_ok=True)
            packed.unlink(missing_ok=True)
        self.recorded.append(final)
        # the last step recorded: the one that just ended, or the last that ran when the loop
        # ended inside the window (stop() saves it)
        last = min(self.step_num - 1 if self._ending else self.step_num, self.window.last)
        power = self._stop_power()
        if self._world.rank == 0:
            self._write_settings(folder, Window(self.window.first, last), power)

    def _write_settings(self, folder: Path, window: Window, power: Path | None) -> None:
        assert self._world is not None
        facts = replace(self._facts, world_size=self._world.size, steps=(window.first, window.last))
        settings = write_settings(folder, facts)
        beside = ", ".join(p.name for p in (settings, power) if p is not None)
        ranks = f"{self._world.size} ranks" if self._world.size > 1 else "1 rank"
        self._say(
            f"recorded {window.label()} of {ranks} into {folder} ({beside}); "
            f"analyze with: tracecomm analyze {shlex.quote(str(folder))}",
            job=True,
        )

    def _finish(self) -> None:
        profiler = self._profiler
        if profiler is None:
            return
        window, ran = self.window, self.step_num  # steps 0 to ran - 1 ran
        if window is not None and ran <= window.first:
            done = f"the loop ran steps 0–{ran - 1}" if ran else "the loop ran no step"
            self._say(f"{window.label()} never came: {done}; nothing recorded")
        if window is not None and ran <= window.first:
            profiler.on_trace_ready = None  # a warm-up only: no trace, no power log
            self._discard_power()
        elif window is not None and ran <= window.last:
            self._say(f"the loop ended after step {ran - 1}, inside {window.label()}")
        self._ending = True
        self._profiler = None
        profiler.__exit__(None, None, None)  # saves a window the loop cut short
        self._stop_power()


def _gzip(source: Path, target: Path) -> None:
    """Streams ``source`` into a gzip file: isal's igzip where it is installed (several times
    zlib's speed on a GB trace), else zlib at level 6."""
    try:
        from isal import igzip

        gzip_open: Any = igzip.open
        level = 2  # isal's default (0-3); about zlib's 6 in size
    except ImportError:
        import gzip

        gzip_open, level = gzip.open, 6
    with source.open("rb") as plain, gzip_open(target, "wb", compresslevel=level) as packed:
        shutil.copyfileobj(plain, packed, 1 << 20)
