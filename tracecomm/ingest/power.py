"""GPU power logs next to the traces: nvidia-smi ``--query-gpu`` CSV or a DCGM-style CSV.

Accepted: a header row naming a timestamp column (``timestamp``, ``time``, ``ts``), a GPU
index column (``index``, ``gpu``, ``gpu_index``, ``gpu_id``, ``entity_id``, ``device``) and a
power column (``power.draw [W]``, ``power.draw``, ``power``, ``power_w``, ``power_usage``,
``DCGM_FI_DEV_POWER_USAGE``), optionally a host column (``host``, ``hostname``). Timestamps
are epoch seconds / ms / µs / ns (told apart by magnitude) or date-times (nvidia-smi's
``2026/11/29 09:00:00.123``, ISO 8601); a date-time without a zone is read as UTC. Power
values may carry a `` W`` unit; ``[N/A]`` rows are dropped.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

_TIME = ("timestamp", "time", "ts", "timestamp_ns", "timestamp_us")
_GPU = ("index", "gpu", "gpu_index", "gpu_id", "gpuid", "entity_id", "entityid", "device")
_POWER = (
    "power.draw [w]",
    "power.draw",
    "power.draw.average [w]",
    "power",
    "power_w",
    "power_usage",
    "powerusage",
    "dcgm_fi_dev_power_usage",
)
_HOST = ("host", "hostname", "host_name", "node")
_NUMBER = re.compile(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?")


class PowerLogError(ValueError):
    """A CSV that looks like a power log but cannot be read (the message names the problem)."""


@dataclass(frozen=True)
class PowerSeries:
    """One GPU's samples: power (W) holds from each sample's time until the next sample."""

    t_ns: npt.NDArray[np.int64]  # sorted epoch ns
    watts: npt.NDArray[np.float64]

    def energy_at(self, t: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Joules drawn from the first sample up to each time (0 before the first sample;
        the last sample's power holds on: callers check coverage)."""
        if self.t_ns.size == 0:
            return np.zeros(t.shape, dtype=np.float64)
        steps = np.diff(self.t_ns).astype(np.float64) * self.watts[:-1] * 1e-9
        cumulative = np.concatenate([[0.0], np.cumsum(steps)])
        k = np.searchsorted(self.t_ns, t, side="right") - 1
        inside = k >= 0
        k = np.clip(k, 0, self.t_ns.size - 1)
        since = (t - self.t_ns[k]).astype(np.float64) * self.watts[k] * 1e-9
        return np.where(inside, cumulative[k] + since, 0.0)

    @property
    def span(self) -> tuple[int, int]:
        return int(self.t_ns[0]), int(self.t_ns[-1])


@dataclass(frozen=True)
class PowerLog:
    path: str
    # host (None: not named in the log) -> GPU index -> samples
    series: dict[str | None, dict[int, PowerSeries]]


def is_power_log(path: Path) -> bool:
    """A CSV whose header names a timestamp, a GPU index and a power column."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            header = f.readline()
    except OSError:
        return False
    names = [_norm(h) for h in next(csv.reader([header]), [])]
    return all(_pick(names, kind) is not None for kind in (_TIME, _GPU, _POWER))


def find_power_logs(inputs: Sequence[str | Path]) -> list[Path]:
    folders = [Path(i) for i in inputs if Path(i).is_dir()]
    return sorted(p for f in folders for p in f.rglob("*.csv") if is_power_log(p))


def load_power_log(path: Path) -> PowerLog:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise PowerLogError(f"{path}: {exc.strerror or exc}") from exc
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise PowerLogError(f"{path}: empty power log")
    names = [_norm(h) for h in rows[0]]
    t_col, gpu_col, p_col = (_pick(names, kind) for kind in (_TIME, _GPU, _POWER))
    if t_col is None or gpu_col is None or p_col is None:
        raise PowerLogError(f"{path}: no timestamp, GPU index and power columns in the header")
    host_col = _pick(names, _HOST)
    samples: dict[tuple[str | None, int], list[tuple[int, float]]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        try:
            watts = _watts(row[p_col])
            if watts is None:
                continue
            key = (row[host_col].strip() if host_col is not None else None, int(row[gpu_col]))
            samples.setdefault(key, []).append((_epoch_ns(row[t_col]), watts))
        except (ValueError, IndexError) as exc:
            raise PowerLogError(f"{path}: line {line}: {exc}") from None
    if not samples:
        raise PowerLogError(f"{path}: no power samples")
    series: dict[str | None, dict[int, PowerSeries]] = {}
    for (host, gpu), values in samples.items():
        values.sort()
        series.setdefault(host, {})[gpu] = PowerSeries(
            np.array([t for t, _ in values], dtype=np.int64),
            np.array([w for _, w in values], dtype=np.float64),
        )
    return PowerLog(str(path), series)


def series_for_host(
    logs: Sequence[PowerLog], host: str | None
) -> tuple[Mapping[int, PowerSeries], str | None]:
    """The GPUs' series of one host and where they came from: a log's own host column, else a
    log whose file name holds the host name, else the run's only log (the report checks that
    its ranks then share one host)."""
    for log in logs:
        if host is not None and host in log.series:
            return log.series[host], f"{log.path} (host column)"
    unnamed = [log for log in logs if None in log.series]
    for log in unnamed:
        if host and host in Path(log.path).name:
            return log.series[None], f"{log.path} (file name)"
    if len(logs) == 1 and unnamed:
        return unnamed[0].series[None], f"{unnamed[0].path} (the only log)"
    return {}, None


def _norm(name: str) -> str:
    return name.strip().lower()


def _pick(names: list[str], wanted: tuple[str, ...]) -> int | None:
    for w in wanted:
        if w in names:
            return names.index(w)
    return None


def _watts(text: str) -> float | None:
    text = text.strip()
    match = _NUMBER.match(text)
    if match is None:
        if text.strip("[]").lower() in ("n/a", "not supported", ""):
            return None
        raise ValueError(f"power {text!r} is not a number")
    return float(match.group())


def _epoch_ns(text: str) -> int:
    text = text.strip()
    if _NUMBER.fullmatch(text):
        value = float(text) if any(c in text for c in ".eE") else int(text)
        # seconds, ms, µs or ns since the epoch, by magnitude (years 2001-2286)
        for scale, limit in ((10**9, 10**10), (10**6, 10**13), (10**3, 10**16), (1, 10**19)):
            if abs(value) < limit:
                return round(value * scale) if isinstance(value, float) else value * scale
        raise ValueError(f"timestamp {text!r} is out of range")
    stamp = dt.datetime.fromisoformat(text.replace("/", "-").replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.timezone.utc)
    delta = stamp - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000
