"""Progress of long operations on stderr, so stdout stays data.

On a terminal, a live bar (rich): items done of the total, rate, time left. Anywhere else (a pipe, a log
file, CI), one line when the work is done, so logs get a record and no redraws. ``quiet`` (the commands'
``--json``) prints nothing at all.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as Bar
from rich.text import Text


class _Rate(ProgressColumn):
    """Items per second (rich's own speed columns count bytes)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f}/s" if speed else "", style="progress.data.speed")


class Progress:
    """Counts items of a long operation and shows it: a bar on a terminal, a final line elsewhere."""

    def __init__(
        self, label: str, total: int | None = None, *, stream: TextIO | None = None, quiet: bool = False
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream or sys.stderr
        self._quiet = quiet
        self._started = time.monotonic()
        self._bar: Bar | None = None
        console = Console(file=self._stream)
        if not quiet and console.is_terminal:
            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                _Rate(),
                TimeRemainingColumn(),
                TimeElapsedColumn(),
                console=console,
            )
            self._task = self._bar.add_task(label, total=total)
            self._bar.start()

    def advance(self, count: int) -> None:
        """Adds ``count`` items done."""
        self.done += count
        if self._bar is not None:
            self._bar.update(self._task, advance=count)

    def finish(self) -> None:
        """Ends the bar, or prints the one summary line (nothing when quiet)."""
        if self._bar is not None:
            self._bar.stop()
        elif not self._quiet:
            self._stream.write(self.line() + "\n")
            self._stream.flush()

    def line(self) -> str:
        """``label: done[/total] items, rate/s, elapsed``."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        text = f"{self.label}: {self.done:,}" + (f"/{self.total:,}" if self.total is not None else "") + " items"
        return text + f", {self.done / elapsed:,.0f}/s, {_duration(elapsed)} elapsed"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
