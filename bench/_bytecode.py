"""Compile tracecomm's modules before anything is timed, as ``pip install`` does.

An installed package ships its bytecode; a checkout gets it written on first import, unless
``PYTHONDONTWRITEBYTECODE`` is set (it is on some CI images and sandboxes), and then every
process compiles every module it imports again: 0.16 CPU-s per process for ``analyze`` on the
machine of BENCHMARKS.md, paid by each worker too, where HTA, installed, pays nothing. The
benches time the tool as users run it: compiled. ``compileall`` writes the files whatever
that variable says.
"""

from __future__ import annotations

import compileall
import importlib.util
from pathlib import Path


def compile_tracecomm(package: Path | None = None) -> Path:
    """The bytecode of every module of ``package`` (default: the tracecomm package this
    interpreter imports, the checkout ``PYTHONPATH`` names first, else the installed one)
    written next to its source, once: later calls find it current. Imports nothing of it.
    Returns the package's folder."""
    if package is None:
        spec = importlib.util.find_spec("tracecomm")
        if spec is None or spec.origin is None:
            raise SystemExit("tracecomm is not importable here")
        package = Path(spec.origin).parent
    compileall.compile_dir(str(package), quiet=1)
    return package
