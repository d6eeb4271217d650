"""Polling for what a worker does asynchronously."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import redis

from memory_core.core import routing
from memory_core.core.dispatch import open_redis
from memory_core.core.keys import Keys
from memory_core.core.liveness import Heartbeat, WorkerInfo
from memory_core.core.settings import Settings
from tests.integration.processes import RabbitNode, rabbitmq_queue_depths


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


def flush_keeping_heartbeats(url: str) -> None:
    """FLUSHDB, but the heartbeats of workers that run on across tests survive it (a flush is no restart)."""
    client = redis.Redis.from_url(url)
    kept = [(key, client.dump(key), client.pttl(key)) for key in client.scan_iter(match="*:!ops:*worker*")]
    client.flushdb()
    for key, value, ttl in kept:
        if value is not None and ttl != -2:
            client.restore(key, max(ttl, 0), value, replace=True)


@contextlib.contextmanager
def phantom_worker(settings: Settings) -> Iterator[Heartbeat]:
    """A heartbeat for every queue of ``settings``' deployment, with nobody consuming: calls get through
    the client's liveness check and stay queued, countable (the idle clients of the input tests)."""
    info = WorkerInfo(hostname="phantom@tests", queues=routing.QUEUES)
    heartbeat = Heartbeat(open_redis(settings), Keys(settings.redis.key_prefix), info, interval=1.0)
    heartbeat.start()
    try:
        yield heartbeat
    finally:
        heartbeat.stop()


_RABBITMQ_STATS_SECONDS = 5.0
"""How old the per-queue counts RabbitMQ lists may be (its default statistics interval)."""


def rabbitmq_drained(vhost: str, *, node: RabbitNode | None = None) -> bool:
    """Whether no task is ready or delivered but unacknowledged in ``vhost``'s task queues (RabbitMQ broker),
    nor waiting out a retry's countdown in the broker's delayed-delivery queues.

    The counts RabbitMQ lists lag by up to its statistics interval (a message published 4 s ago may not show
    yet), so an empty look counts only when a second look, that much later, is empty too.
    """
    if not _rabbitmq_empty(vhost, node):
        return False
    time.sleep(_RABBITMQ_STATS_SECONDS + 1)
    return _rabbitmq_empty(vhost, node)


def _rabbitmq_empty(vhost: str, node: RabbitNode | None) -> bool:
    depths = rabbitmq_queue_depths(vhost, node=node)
    tasks = [depth for name, depth in depths.items() if name in routing.QUEUES or name.startswith("celery_delayed_")]
    return set(routing.QUEUES) <= set(depths) and all(ready == 0 and unacked == 0 for ready, unacked in tasks)
