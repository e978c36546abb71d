"""GPU power sampled while a recording runs, written as the power log ``analyze`` reads
(``ingest.power``): ``timestamp,host,index,power.draw [W]``, epoch ns, one file per host."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tracecomm.record.files import write_atomically

HEADER = "timestamp,host,index,power.draw [W]"
DEFAULT_PERIOD_S = 0.1


class PowerReader(Protocol):
    """What the sampler reads: the GPUs' indices, and one GPU's draw now."""

    def gpus(self) -> list[int]: ...

    def watts(self, gpu: int) -> float: ...

    def close(self) -> None: ...


class NvmlReader:
    """NVML's board power (``nvmlDeviceGetPowerUsage``, mW), through ``nvidia-ml-py``. NVML
    indices are PCI order: the trace's CUDA device numbers when every GPU is visible and
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (the usual torchrun job)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        nvml.nvmlInit()
        self._handles = [
            nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
        ]

    def gpus(self) -> list[int]:
        return list(range(len(self._handles)))

    def watts(self, gpu: int) -> float:
        return float(self._nvml.nvmlDeviceGetPowerUsage(self._handles[gpu])) / 1000.0

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def nvml_reader() -> NvmlReader:
    """Raises ``ImportError`` without nvidia-ml-py, or NVML's error without a driver."""
    import pynvml

    return NvmlReader(pynvml)


class PowerSampler:
    """Samples every GPU of the reader each ``period_s`` on a thread of its own, from
    ``start`` to ``stop`` (which takes one last sample, so the samples cover the window), and
    writes them to ``path`` at ``stop``. A reader that fails stops the sampling; what was
    sampled is still written."""

    def __init__(
        self,
        reader: PowerReader,
        path: Path,
        host: str,
        period_s: float = DEFAULT_PERIOD_S,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._reader, self._path, self._host = reader, path, host
        self._period_s, self._clock = period_s, clock
        self._rows: list[str] = []
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.problem: str | None = None

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="tracecomm-power", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._period_s) and self.problem is None:
            self.sample()

    def sample(self) -> None:
        if self.problem is not None:
            return
        try:
            now = int(self._clock())
            readings = [(gpu, float(self._reader.watts(gpu))) for gpu in self._reader.gpus()]
        except Exception as exc:  # NVML errors are its own classes: any stops the sampling
            self.problem = f"power sampling stopped: {type(exc).__name__}: {exc}"
            return
        host = self._host.replace(",", "_")
        self._rows.extend(f"{now},{host},{gpu},{watts:.3f}" for gpu, watts in readings)

    def stop(self, write: bool = True) -> Path | None:
        """Stops the thread, writes the log (unless ``write`` is false: nothing was recorded
        to go with it); None when nothing was written."""
        self._stopped.set()
        if self._thread is not None:
            # a reader stuck in a driver call keeps its (daemon) thread, not the job
            self._thread.join(timeout=max(1.0, 10 * self._period_s))
        if self._thread is None or not self._thread.is_alive():
            self.sample()
        try:
            self._reader.close()
        except Exception as exc:
            self.problem = self.problem or f"power reader: {type(exc).__name__}: {exc}"
        if not self._rows or not write:
            return None
        write_atomically(self._path, "\n".join([HEADER, *self._rows]) + "\n")
        return self._path
