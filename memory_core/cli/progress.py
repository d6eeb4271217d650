"""A progress line for long operations: items done, rate, time left (stderr, so stdout stays data)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts items; redraws at most a few times a second (a line every 5 s when stderr is not a terminal)."""

    def __init__(self, label: str, total: int | None = None, *, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._started = time.monotonic()
        self._shown = 0.0

    def advance(self, count: int) -> None:
        """Adds ``count`` items done."""
        self.done += count
        now = time.monotonic()
        if now - self._shown >= (0.2 if self._tty else 5.0):
            self._shown = now
            self._show(final=False)

    def finish(self) -> None:
        """Prints the final line."""
        self._show(final=True)

    def line(self) -> str:
        """``label: done[/total] items, rate/s[, time left]``."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = self.done / elapsed
        text = f"{self.label}: {self.done:,}" + (f"/{self.total:,}" if self.total is not None else "") + " items"
        text += f", {rate:,.0f}/s"
        if self.total is not None and 0 < rate and self.done < self.total:
            text += f", {_duration((self.total - self.done) / rate)} left"
        return text + f", {_duration(elapsed)} elapsed"

    def _show(self, *, final: bool) -> None:
        end = "\n" if final or not self._tty else ""
        self._stream.write(("\r" if self._tty else "") + self.line() + end)
        self._stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
