"""Progress of long CLI operations: a live bar on a terminal, one line elsewhere, nothing when quiet."""

from __future__ import annotations

import io

from memory_core.cli.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_it_prints_one_line_when_done():
    out = io.StringIO()
    progress = Progress("import", 1000, stream=out)
    progress.advance(250)
    progress.advance(750)
    assert out.getvalue() == ""  # no redraws into a log
    progress.finish()
    (line,) = out.getvalue().splitlines()
    assert line.startswith("import: 1,000/1,000 items, ")
    assert line.endswith("elapsed")


def test_on_a_terminal_it_draws_a_bar_with_the_total_and_time_left():
    out = _Terminal()
    progress = Progress("import", 1000, stream=out)
    progress.advance(400)
    progress.finish()
    drawn = out.getvalue()
    assert "import" in drawn
    assert "400/1000" in drawn
    assert "import: 400/1,000 items" not in drawn  # the bar, not the log line


def test_quiet_prints_nothing_anywhere():
    for out in (io.StringIO(), _Terminal()):
        progress = Progress("export", 10, stream=out, quiet=True)
        progress.advance(10)
        progress.finish()
        assert out.getvalue() == ""


def test_without_a_total_it_counts():
    progress = Progress("add", stream=io.StringIO())
    progress.advance(3)
    assert progress.line().startswith("add: 3 items, ")
