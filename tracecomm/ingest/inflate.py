"""The gzip inflater: the fastest one installed, the standard zlib as the fallback.

Measured (bench/parse_throughput.py, BENCHMARKS.md): inflating a trace with isal's igzip takes
about a third of zlib's time and zlib-ng's a little more than isal's, and on a ``.json.gz`` run
inflation is most of what the parse waits for. All three produce the same bytes (the bench
checks the figures of every variant are identical); ``TRACECOMM_GZIP=zlib|zlib-ng|isal``
chooses one, for measuring.
"""

from __future__ import annotations

import functools
import gzip
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

ENV = "TRACECOMM_GZIP"


@dataclass(frozen=True)
class Inflater:
    name: str
    open: Callable[[Path], Any]  # a gzip file as a stream of its inflated bytes (read(n))
    decompressobj: Callable[[], Any]  # zlib's interface: decompress, eof, unused_data, …
    errors: tuple[type[BaseException], ...]  # what corrupt data raises


def _zlib() -> Inflater:
    return Inflater(
        "zlib",
        lambda path: gzip.open(path, "rb"),
        lambda: zlib.decompressobj(wbits=31),
        (zlib.error, gzip.BadGzipFile, EOFError, OSError),
    )


def _isal() -> Inflater:
    from isal import igzip, isal_zlib

    return Inflater(
        "isal",
        lambda path: igzip.open(path, "rb"),
        lambda: isal_zlib.decompressobj(wbits=31),
        (cast(type[BaseException], isal_zlib.error), igzip.BadGzipFile, EOFError, OSError),
    )


def _zlib_ng() -> Inflater:
    from zlib_ng import gzip_ng, zlib_ng

    return Inflater(
        "zlib-ng",
        lambda path: gzip_ng.open(path, "rb"),
        lambda: zlib_ng.decompressobj(wbits=31),
        (cast(type[BaseException], zlib_ng.error), gzip_ng.BadGzipFile, EOFError, OSError),
    )


_BY_NAME = {"isal": _isal, "zlib-ng": _zlib_ng, "zlib": _zlib}


def inflater() -> Inflater:
    """The one ``TRACECOMM_GZIP`` names, else the fastest installed: isal, zlib-ng, zlib (a
    named one that is not installed falls back the same way)."""
    return _inflater(os.environ.get(ENV, ""))


@functools.cache
def _inflater(wanted: str) -> Inflater:
    order = [wanted] if wanted in _BY_NAME else []
    order += [n for n in _BY_NAME if n not in order]
    for candidate in order:
        try:
            return _BY_NAME[candidate]()
        except ImportError:
            continue
    return _zlib()
