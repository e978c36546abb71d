"""``python -m tracecomm.cli``: the same as ``tracecomm``."""

from tracecomm.cli import main

main()
