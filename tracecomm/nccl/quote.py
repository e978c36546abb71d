"""Text quoted from a log, made safe to print: nothing read from an input reaches a terminal
as a control sequence.

Logs are written by any process (and pasted by anyone): an ESC, a carriage return, a
backspace or a bidirectional override inside a quoted line could rewrite what the terminal
shows. :func:`quote` escapes every such character visibly (``\\x1b``, ``\\u202e``) and cuts the
text to a bounded length, so a finding can quote the line that proves it.
"""

from __future__ import annotations

import re

QUOTE_LIMIT = 400  # characters of a quoted line (NCCL's own lines stop at 1023 bytes)

# C0 controls (tab included: it would shift columns), DEL, C1 controls, and the Unicode
# format characters that reorder or hide text (bidi embeddings / overrides / isolates,
# zero-width joiners, the BOM, line / paragraph separators).
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def quote(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` with control and format characters escaped, cut to ``limit`` characters."""
    if len(text) > limit:
        text = text[:limit] + "…"
    return _UNSAFE.sub(_escape, text)
