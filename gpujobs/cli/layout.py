"""Aligned tables and wrapped text that fit the terminal (or any width), for the CLI's output."""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO


def terminal_width(stream: TextIO, *, wide: bool = False) -> int | None:
    """The columns output to `stream` must fit: `COLUMNS` when set, else the terminal's width;
    None (no limit) with `--wide` or off a terminal (a pipe, a file), where lines are not cut."""
    if wide:
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if not stream.isatty():
        return None
    try:
        return os.get_terminal_size(stream.fileno()).columns or DEFAULT_COLUMNS
    except (OSError, ValueError):
        return DEFAULT_COLUMNS


DEFAULT_COLUMNS = 80
GAP = 2  # spaces between a table's columns


def wrapped(text: str, width: int | None, *, indent: int = 0) -> list[str]:
    """`text` in lines of at most `width` (no limit: one line), those after the first indented."""
    if width is None or len(text) <= width:
        return [text]
    return textwrap.wrap(
        text, width, subsequent_indent=" " * min(indent, width // 2), break_on_hyphens=False
    ) or [""]


def write_wrapped(out: TextIO, text: str, width: int | None, *, indent: int = 4) -> None:
    for line in wrapped(text, width, indent=indent):
        out.write(line + "\n")


@dataclass(frozen=True)
class Column:
    """A table column, and what it may give up when the table is wider than the terminal."""

    header: str
    drop: int = 0  # > 0: left out when the table does not fit, the lowest first; 0: kept
    wrap: bool = False  # long text, wrapped within the column to fit
    below: bool = False  # long text, moved under its row (wrapped, indented) to fit


def table(
    columns: Sequence[Column | str],
    rows: Sequence[Sequence[Any]],
    out: TextIO,
    *,
    width: int | None = None,
) -> None:
    """Aligned columns. With a `width`, a table wider than it first moves its `below` columns
    under their rows, then leaves out droppable columns, then wraps the `wrap` columns (and,
    if that is not enough, every column)."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    natural = [max([len(c.header), *(len(r[i]) for r in cells)]) for i, c in enumerate(cols)]
    shown, below = _fit(cols, natural, width)
    widths = {i: natural[i] for i in shown}
    if width is not None and _span(widths.values()) > width:
        widths = _share(cols, natural, shown, width)
    _row(out, [cols[i].header for i in shown], widths, shown)
    for cell_row in cells:
        _row(out, [cell_row[i] for i in shown], widths, shown)
        for i in below:
            if cell_row[i] not in ("", "-"):
                write_wrapped(out, "    " + cell_row[i], width, indent=6)


def _span(widths: Iterable[int]) -> int:
    listed = list(widths)
    return sum(listed) + GAP * max(0, len(listed) - 1)


def _fit(cols: list[Column], natural: list[int], width: int | None) -> tuple[list[int], list[int]]:
    """The columns shown in the rows, and those moved under them."""
    shown = list(range(len(cols)))
    if width is None or _span(natural) <= width:
        return shown, []
    below = [i for i in shown if cols[i].below]
    shown = [i for i in shown if not cols[i].below]
    # A column left out reads better than every row wrapped: drop first, then wrap.
    for i in sorted((i for i in shown if cols[i].drop), key=lambda i: cols[i].drop):
        if _span(natural[j] for j in shown) <= width:
            break
        shown.remove(i)
    return shown, below


def _share(cols: list[Column], natural: list[int], shown: list[int], width: int) -> dict[int, int]:
    """Widths that fit: the wrapped columns share what the others leave, the narrowest served
    first; when even that does not fit, every column shares the whole width."""
    for wrapping in ([i for i in shown if cols[i].wrap], shown):
        fixed = sum(natural[i] for i in shown if i not in wrapping)
        room = width - fixed - GAP * (len(shown) - 1)
        widths = {i: natural[i] for i in shown}
        for n, i in enumerate(sorted(wrapping, key=lambda i: natural[i])):
            widths[i] = max(1, min(natural[i], room // (len(wrapping) - n)))
            room -= widths[i]
        if room >= 0 and wrapping:
            return widths
    return widths


def cell_lines(text: str, width: int) -> list[str]:
    """A cell in lines of at most `width`: prose at its spaces; a name (`gcp/us-east4/us-east4-a`)
    after a `/` or `-`, so no part of it is cut mid-word unless it alone is wider."""
    if len(text) <= width or " " in text:
        return wrapped(text, width)
    lines = [""]
    for segment in re.findall(r"[^/]+/?|/", text):
        # After a `/` first (`aws/ap-south-1/` over `aps1-az3`); a segment wider than the
        # column after its `-`s; a part wider still, cut.
        parts = [segment] if len(segment) <= width else re.findall(r"[^-]+-?|-", segment)
        for part in parts:
            if lines[-1] and len(lines[-1]) + len(part) > width:
                lines.append("")
            lines[-1] += part
            while len(lines[-1]) > width:
                lines[-1:] = [lines[-1][:width], lines[-1][width:]]
    return lines


def _row(out: TextIO, texts: list[str], widths: dict[int, int], shown: list[int]) -> None:
    parts = [cell_lines(t, widths[i]) for t, i in zip(texts, shown, strict=True)]
    for n in range(max(len(p) for p in parts)):
        line = "  ".join(
            (p[n] if n < len(p) else "").ljust(widths[i]) for p, i in zip(parts, shown, strict=True)
        )
        out.write(line.rstrip() + "\n")
