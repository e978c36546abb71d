"""When Python's cyclic garbage collector may run. Its passes cost time in proportion to the
objects alive, and the objects tracecomm makes in bulk hold no cycles to reclaim: module
objects while a process loads polars, numpy and the analysis, the events of a parse, and
everything at exit. Measured on the real 8-rank trace (BENCHMARKS.md, issue 47): the passes
took 35-46 ms of the 0.36-0.39 CPU-s that loading the modules costs, and the last one at exit
58-93 ms of wall time after the output was written (17-18 ms with the objects frozen)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No collection inside (one that was already off stays off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def loading_modules() -> Iterator[None]:
    """No collection while modules load, then what they made is frozen: the passes after it
    (and the last, at exit) leave those objects out."""
    with paused():
        yield
    gc.freeze()


def before_exit() -> None:
    """Leave every object out of the interpreter's last pass: at exit nothing needs it."""
    gc.freeze()
