"""The progress line of long CLI operations: done, rate, time left."""

from __future__ import annotations

import io

from memory_core.cli.progress import Progress


def test_the_line_shows_done_total_rate_and_time_left():
    out = io.StringIO()
    progress = Progress("import", 1000, stream=out)
    progress.advance(250)
    line = progress.line()
    assert line.startswith("import: 250/1,000 items, ")
    assert "/s" in line
    assert "left" in line
    progress.advance(750)
    progress.finish()
    assert out.getvalue().rstrip().splitlines()[-1].startswith("import: 1,000/1,000 items")
    assert "left" not in out.getvalue().rstrip().splitlines()[-1]


def test_without_a_total_it_counts():
    progress = Progress("add", stream=io.StringIO())
    progress.advance(3)
    assert progress.line().startswith("add: 3 items, ")
