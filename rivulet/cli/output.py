"""How the CLI shows things: tables (Kafka's tools' plain layout, or rich's on a terminal),
`--format json`, and progress bars.

Scripts parse stdout, so nothing here changes what goes there when it is not a terminal:
Kafka-compatible tables (`groups describe` and friends) are always the plain layout, other
tables take rich's only on a terminal, and progress goes to stderr, and only when stderr is
a terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

FORMATS = ("text", "json")


def add_format_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="describe, list: text tables (default) or JSON, for scripts")


def plain_table(rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns one space apart, trailing blanks trimmed: Kafka's tools' layout."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)


@dataclass(frozen=True)
class Column:
    title: str  # the text header
    key: str  # the JSON field


def _cell(v: object) -> str:
    return "-" if v is None else str(v)


def print_json(doc: object) -> None:
    print(json.dumps(doc, indent=2, ensure_ascii=False))


def print_table(columns: Sequence[Column], rows: Sequence[Sequence[object]], fmt: str = "text",
                kafka: bool = False) -> None:
    """Rows as a table (None shows as '-'), or with ``fmt='json'`` as a list of objects keyed
    by the columns' JSON fields (None as null). ``kafka``: a layout scripts written for Kafka's
    tools parse, kept plain even on a terminal."""
    if fmt == "json":
        print_json([{c.key: v for c, v in zip(columns, r)} for r in rows])
        return
    cells = [[_cell(v) for v in r] for r in rows]
    if kafka or not sys.stdout.isatty():
        print(plain_table([[c.title for c in columns], *cells]))
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False)
    for i, c in enumerate(columns):
        numeric = all(isinstance(r[i], (int, float)) for r in rows if r[i] is not None)
        table.add_column(c.title, overflow="fold", justify="right" if numeric and rows else "left")
    for r in cells:
        table.add_row(*r)
    Console(highlight=False).print(table)


class Progress:
    """Advances a progress bar on stderr; does nothing where stderr is not a terminal."""

    def __init__(self, bar: RichProgress | None, task: TaskID | None) -> None:
        self._bar = bar  # None (and task None): not shown
        self._task = task
        self._shown_at = 0.0

    def completed(self, n: int) -> None:
        """``n`` done so far; cheap enough to call for every record (the bar redraws at most
        ten times a second)."""
        if self._bar is not None and self._task is not None:
            now = time.monotonic()
            if now - self._shown_at >= 0.1:
                self._shown_at = now
                self._bar.update(self._task, completed=n)

    def advance(self, n: int = 1) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, n)

    def update(self, description: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=description)


@contextmanager
def progress(description: str, total: int | None, unit: str = "", enabled: bool = True) -> Iterator[Progress]:
    """A progress bar (a spinner when ``total`` is None) for the block, on stderr, shown only
    when stderr is a terminal and ``enabled``; it disappears when the block ends."""
    if not enabled or not sys.stderr.isatty():
        yield Progress(None, None)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress
    counted = [BarColumn(), MofNCompleteColumn()] if total is not None else [TextColumn("{task.completed}")]
    columns = [SpinnerColumn(), TextColumn("{task.description}"), *counted, TextColumn(unit), TimeElapsedColumn()]
    # Lines printed meanwhile go above the bar only when stdout is that terminal too; a piped
    # stdout is left alone.
    with RichProgress(*columns, console=Console(stderr=True), transient=True,
                      redirect_stdout=sys.stdout.isatty()) as bar:
        yield Progress(bar, bar.add_task(description, total=total))
