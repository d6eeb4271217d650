"""What formation may spend and how much of it may run at once: a namespace's daily tokens, its formations in
flight across the workers, and one worker's formation slots.

Each limit makes an operation wait, never fail: over the daily budget it is deferred (messages kept) until
the next UTC day or ``memory-core formation resume``; past a running limit it raises ``FormationBusy`` and the
queue brings it back a little later, so one tenant cannot hold every slot and model calls never take all of
a worker's threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import redis

from memory_core.core.errors import FormationBusy
from memory_core.core.keys import Keys, decoded
from memory_core.core.settings import FormationSettings

_DAY_SECONDS = 24 * 3600


def today() -> str:
    """The UTC day budgets are counted by (``YYYYMMDD``)."""
    return datetime.now(UTC).strftime("%Y%m%d")


class FormationBudget:
    """A namespace's tokens per UTC day, and its formations in flight."""

    def __init__(self, *, redis_client: redis.Redis, keys: Keys, settings: FormationSettings) -> None:
        self._redis = redis_client
        self._keys = keys
        self._settings = settings
        self._local = threading.BoundedSemaphore(settings.concurrency)

    def spent_today(self, namespace: str) -> int:
        """Tokens the namespace's formations spent today."""
        raw = self._redis.get(self._keys.formation_tokens(namespace, today()))
        try:
            return int(decoded(raw)) if raw is not None else 0
        except ValueError:
            return 0  # not ours to trust: a corrupt counter neither blocks nor grants more than a new day would

    def allows(self, namespace: str) -> bool:
        """Whether the namespace may call the model now (under its daily tokens, or no budget set)."""
        limit = self._settings.daily_tokens
        return limit is None or self.spent_today(namespace) < limit

    def charge(self, pipe: redis.client.Pipeline, namespace: str, tokens: int) -> None:
        """Adds ``tokens`` to today's count, in the caller's pipeline (with the reply it paid for)."""
        key = self._keys.formation_tokens(namespace, today())
        pipe.incrby(key, tokens)
        pipe.expire(key, 2 * _DAY_SECONDS)

    @contextmanager
    def running(self, namespace: str, op_id: str) -> Iterator[None]:
        """Holds one of this worker's slots and one of the namespace's; ``FormationBusy`` when either is full."""
        wait = self._settings.busy_retry
        if not self._local.acquire(blocking=False):
            raise FormationBusy("this worker runs its MEMORY_FORMATION__CONCURRENCY formations", retry_after=wait)
        try:
            if not self._claim(namespace, op_id):
                raise FormationBusy(
                    f"namespace {namespace!r} has MEMORY_FORMATION__MAX_IN_FLIGHT formations running",
                    retry_after=wait,
                )
            try:
                yield
            finally:
                self._redis.zrem(self._keys.formation_in_flight(namespace), op_id)
        finally:
            self._local.release()

    def extend(self, namespace: str, op_id: str) -> None:
        """Moves the lapse of a running formation's claim a ``lock_ttl`` on (a claim released meanwhile stays
        released)."""
        key = self._keys.formation_in_flight(namespace)
        with self._redis.pipeline() as pipe:
            pipe.zadd(key, {op_id: time.time() + self._settings.lock_ttl}, xx=True)
            pipe.expire(key, self._settings.lock_ttl)
            pipe.execute()

    def _claim(self, namespace: str, op_id: str) -> bool:
        # A claim lapses with the scope lock's lifetime, so a killed worker's claim frees itself.
        key = self._keys.formation_in_flight(namespace)
        now = time.time()
        with self._redis.pipeline() as pipe:
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.zadd(key, {op_id: now + self._settings.lock_ttl})
            pipe.zcard(key)
            pipe.expire(key, self._settings.lock_ttl)
            _, _, count, _ = pipe.execute()
        if int(count) > self._settings.max_in_flight:
            self._redis.zrem(key, op_id)
            return False
        return True
