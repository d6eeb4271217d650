"""What workers and clients share through Redis besides tasks: set versions, access times, per-set locks."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import redis

from memory_core.errors import TransientStoreError
from memory_core.keys import Keys
from memory_core.locks import RedisLock
from memory_core.models import Scope

_FIELD_SEPARATOR = "\x1f"


class Coordinator:
    """Redis-backed helpers for the worker's services (and the client's cache reads)."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def version(self, scope: Scope) -> int:
        """The set's version: bumped by every mutation, part of every cache key of the set."""
        value = self.redis.get(self.keys.set_version(*scope))
        return int(value) if value else 0

    def bump(self, scope: Scope) -> None:
        """Marks the set changed: every cached item and search result of an older version becomes unreachable."""
        self.redis.incr(self.keys.set_version(*scope))

    def record_access(self, scope: Scope, item_ids: Sequence[str], at: float | None = None) -> None:
        """Notes that these items were read (flushed to the store in bulk by ``memory.flush_access``)."""
        if not item_ids:
            return
        stamp = time.time() if at is None else at
        fields = {_FIELD_SEPARATOR.join((scope.key, scope.set_name, i)): stamp for i in item_ids}
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(self.keys.access_log(scope.namespace), mapping=fields)  # type: ignore[arg-type]  # str keys are fine; redis' key type is invariant
            pipe.sadd(self.keys.access_namespaces(), scope.namespace)
            pipe.execute()

    def take_accesses(self, namespace: str) -> dict[Scope, dict[str, float]]:
        """Atomically takes a namespace's pending access times, grouped by set."""
        key = self.keys.access_log(namespace)
        with self.redis.pipeline() as pipe:
            pipe.hgetall(key)
            pipe.delete(key)
            raw, _ = pipe.execute()
        taken: dict[Scope, dict[str, float]] = {}
        for field, stamp in raw.items():
            text = field.decode() if isinstance(field, bytes) else field
            key_name, set_name, item_id = text.split(_FIELD_SEPARATOR, 2)
            taken.setdefault(Scope(namespace, key_name, set_name), {})[item_id] = float(stamp)
        return taken

    @contextmanager
    def set_lock(self, scope: Scope, *, ttl: int = 30, wait: float = 20.0) -> Iterator[None]:
        """Serializes writers of one set across processes (used by deduplicating writes)."""
        lock = RedisLock(self.redis, self.keys.write_lock(*scope), ttl)
        deadline = time.monotonic() + wait
        pause = 0.001  # a dedup write holds the lock for milliseconds: poll fast first, then back off
        while not lock.acquire():
            if time.monotonic() > deadline:
                raise TransientStoreError(f"the write lock of {scope} is busy; retrying")
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        try:
            yield
        finally:
            lock.release()
