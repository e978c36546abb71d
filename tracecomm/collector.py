"""When Python's cyclic garbage collector may run. Its passes cost time in proportion to the
objects alive, and the objects tracecomm makes in bulk hold no cycles to reclaim: module
objects while a process loads polars, numpy and the analysis, the events of a parse, and
everything at exit. Measured on the real 8-rank trace (BENCHMARKS.md, issue 47): the passes
took 35-46 ms of the 0.36-0.39 CPU-s that loading the modules costs, and the last one at exit
58-93 ms of wall time after the output was written (17-18 ms with the objects frozen)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext


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
    """No collection while modules load, and what they made frozen before the collector is
    back on: the passes after it (and the last, at exit) leave those objects out. (Frozen
    after it, the first allocation ran a 15 ms pass over the 48,000 new objects.)"""
    with paused():
        try:
            yield
        finally:
            gc.freeze()


def loading(module: str) -> AbstractContextManager[None]:
    """``loading_modules`` around the first import of ``module`` in this process; nothing
    where it is loaded already (a test process, a second command in one process), whose
    objects are not all the modules'."""
    return nullcontext() if module in sys.modules else loading_modules()


def before_exit() -> None:
    """Leave every object out of the interpreter's last pass: at exit nothing needs it."""
    gc.freeze()
