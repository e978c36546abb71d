"""Text quoted from a log, made safe to print: nothing read from an input reaches a terminal
as a control sequence.

Logs are written by any process (and pasted by anyone): an ESC, a carriage return, a
backspace or a bidirectional override inside a quoted line could rewrite what the terminal
shows. :func:`quote` escapes every such character visibly (``\\x1b``, ``\\u202e``) and cuts the
text to a bounded length, so a finding can quote the line that proves it.
"""

from __future__ import annotations

from tracecomm.text import visible

QUOTE_LIMIT = 400  # characters of a quoted line (NCCL's own lines stop at 1023 bytes)


def quote(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` with control and format characters escaped, cut to ``limit`` characters."""
    if len(text) > limit:
        text = text[:limit] + "…"
    return visible(text)
