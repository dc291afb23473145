"""The command line's tables: a ``rich`` table when standard output is a terminal, plain aligned
text otherwise (a pipe, a file, the tests), so a script reading the output sees the same columns
whatever the terminal.  The design reports (``Design.summary`` / ``report``) are strings that also
go into generated files: they use :func:`plain` only.
"""

from __future__ import annotations

import io
import shutil
import sys
from collections.abc import Collection, Sequence


def plain(rows: Sequence[Sequence[str]], rule: bool = True, indent: str = "", right: Collection[int] = ()) -> str:
    """The header row, a rule of dashes (unless not ``rule``), then the rows; columns two spaces
    apart, left-aligned except the columns numbered in ``right``, each line after ``indent``, no
    trailing spaces.  With neither header nor rule wanted, pass ``rule=False`` and no header row
    is special: every row is printed alike."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for k, r in enumerate(rows):
        cells = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        lines.append((indent + "  ".join(cells)).rstrip())
        if k == 0 and rule:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render(rows: Sequence[Sequence[str]], terminal: bool | None = None, width: int | None = None) -> str:
    """``rows`` (the first: the header) as text for standard output: on a terminal (``terminal``
    None: ``sys.stdout.isatty()``) a rich table that fits the terminal's width (long cells wrap,
    numbers are right-aligned), else :func:`plain`."""
    if terminal is None:
        terminal = _isatty(sys.stdout)
    if not terminal:
        return plain(rows)
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False)
    for i, name in enumerate(rows[0]):
        numeric = len(rows) > 1 and all(_number(r[i]) for r in rows[1:] if r[i] not in ("", "-"))
        table.add_column(name, justify="right" if numeric else "left", overflow="fold")
    for r in rows[1:]:
        table.add_row(*r)
    console = Console(file=io.StringIO(), force_terminal=True, width=width or shutil.get_terminal_size().columns)
    console.print(table)
    return console.file.getvalue().rstrip("\n")  # type: ignore[attr-defined]


def _number(cell: str) -> bool:
    try:
        float(cell.replace(",", "").rstrip("%"))
    except ValueError:
        return False
    return True


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):  # replaced or closed streams
        return False
