"""Polling for what a worker does asynchronously."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> None:
    """Returns once ``predicate()`` holds; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)
