"""Tables that fit the terminal without cutting a number or a label (issue 34).

rich shrinks a table that is wider than the terminal by cutting its cells with an ellipsis:
"2,090.…" is a number the reader can no longer use. ``FitTable`` decides at render time, from
the width it is given: numbers never wrap and never shrink below their width, labels (kernel
and group names) fold onto more lines; when that is wider than the terminal, the frame gives
way to a space between columns; and when even that does not fit, every cell folds: a number
on two lines, but whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Column, Table
from rich.text import Text

# a cell that is a figure: a number (signs, separators, a unit or a flag after it) or a dash
_FIGURE = re.compile(r"^\s*(?:[-+−–]\s*)?[\d.,]+(?:\s*\S{0,3})?(?:\s*\([^()]*\))?\s*$|^\s*[–-]\s*$")
_LABEL_MIN = 8  # a label column keeps at least this many characters a line


def _text(cell: object) -> str | None:
    if isinstance(cell, str):
        return cell
    if isinstance(cell, Text):
        return cell.plain
    return None


def _longest_word(header: object) -> int:
    text = _text(header) or ""
    return max((len(w) for w in text.split()), default=0)


class FitTable(Table):
    """A ``rich.table.Table`` that fits its width without cutting (module docstring)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self._fit(options.max_width)
        yield from super().__rich_console__(console, options)

    def _fit(self, width: int) -> None:
        figures = [_is_figures(c._cells) for c in self.columns]
        cells = [max((len(_text(x) or "") for x in c._cells), default=1) for c in self.columns]
        words = [_longest_word(c.header) for c in self.columns]
        # rich keeps a column as wide as its header's longest word: a header cannot fold below
        need = [
            max(c, w) if f else max(_LABEL_MIN, w)
            for f, c, w in zip(figures, cells, words, strict=True)
        ]
        for compact in (False, True):
            if compact:  # a space between columns, no frame: three characters a column saved
                self.box, self.show_edge, self.pad_edge = box.SIMPLE_HEAD, False, False
                self.padding = (0, 0)
            if sum(need) + _overhead(self) <= width:
                for column, figure, least in zip(self.columns, figures, need, strict=True):
                    _set(column, figure, least)
                return
        for column in self.columns:  # the last resort: whole, on more lines
            column.no_wrap, column.min_width, column.overflow = False, None, "fold"


def _is_figures(cells: Iterable[object]) -> bool:
    texts = [_text(c) for c in cells]
    return bool(texts) and all(t is not None and _FIGURE.match(t) for t in texts)


def _set(column: Column, figure: bool, least: int) -> None:
    if figure:  # wrapable, so that its header may wrap; a number is one word, never split
        # once the column is as wide as the longest
        column.no_wrap, column.min_width, column.overflow = False, least, "fold"
    else:
        column.no_wrap, column.overflow = False, "fold"
        column.min_width = min(least, column.min_width or least)


def _overhead(table: Table) -> int:
    """Characters a row spends on borders and padding."""
    n = len(table.columns)
    _, right, _, left = table.padding
    borders = (n + 1 if table.show_edge else n - 1) if table.box is not None else 0
    pads = n * (left + right) - (0 if table.pad_edge else left + right)
    return borders + pads
