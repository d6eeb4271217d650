"""Polling for what a worker does asynchronously."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from memory_core import routing
from memory_core.settings import Settings


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> None:
    """Returns once ``predicate()`` holds; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def queued_tasks(broker: redis.Redis, settings: Settings) -> int:
    """How many tasks of this deployment wait in its queues (Redis broker)."""
    return sum(int(broker.llen(settings.broker_key_prefix + q)) for q in routing.QUEUES)


def broker_drained(broker: redis.Redis, settings: Settings) -> bool:
    """Whether no task of this deployment is queued or delivered but unacknowledged (Redis broker)."""
    return queued_tasks(broker, settings) == 0 and not broker.hlen(settings.broker_key_prefix + "unacked")
