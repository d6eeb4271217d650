"""What workers and clients share through Redis besides tasks: set versions, access times, per-set locks."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from memory_core.core.errors import TransientStoreError
from memory_core.core.keys import Keys
from memory_core.core.locks import RedisLock
from memory_core.core.models import Scope

_FIELD_SEPARATOR = "\x1f"

SIZE_HINT_TTL = 600
"""Seconds a set's size hint is trusted after its exact count; then the next add counts again. Growth
that bypasses the hint (a crash between a compaction's writes and its version bump) is healed by then."""

# Records an exact count in the hint it was taken under, unless that hint was dropped meanwhile (a
# delete, a compaction, an import: an older count must not become the base of a newer hint), or a count
# that covers more adds is recorded already (two workers counting at once).
_RECORD_SIZE = """
if redis.call('HGET', KEYS[1], 'epoch') == ARGV[1]
   and tonumber(redis.call('HGET', KEYS[1], 'through') or '-1') < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'counted', ARGV[2], 'through', ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
"""


@dataclass(frozen=True)
class SizeHint:
    """What bounds a set's size after an add: an exact count, plus the items added after it.

    ``added`` is the running total of items added under this hint; ``through`` is what that total was
    when the exact count began, so every add it covers was written before the count (an add is summed
    only once written). Adds are the only writes that leave the hint in place; every other change drops
    it (``bump``). So ``bound`` is never below the true size: deletes, duplicates and adds the count
    saw anyway only make it larger than needed.
    """

    counted: int | None  # None: no exact count since the hint was (re)created
    through: int
    added: int
    epoch: str

    @property
    def bound(self) -> int | None:
        """At most this many items are in the set; None when unknown."""
        return None if self.counted is None else self.counted + self.added - self.through


class Coordinator:
    """Redis-backed helpers for the worker's services (and the client's cache reads)."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys
        self._record_size = client.register_script(_RECORD_SIZE)

    def version(self, scope: Scope) -> int:
        """The set's version: bumped by every mutation, part of every cache key of the set."""
        value = self.redis.get(self.keys.set_version(*scope))
        return int(value) if value else 0

    def bump(self, scope: Scope) -> None:
        """Marks the set changed: every cached item and search result of an older version becomes unreachable.

        Also drops the set's size hint: a change other than an add (an import, a compaction) may grow it.
        """
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.incr(self.keys.set_version(*scope))
            pipe.delete(self.keys.size_hint(*scope))
            pipe.execute()

    def grew(self, scope: Scope, added: int) -> SizeHint:
        """Marks the set changed by an add of ``added`` items (already written); returns its size hint."""
        key = self.keys.size_hint(*scope)
        with self.redis.pipeline() as pipe:  # MULTI: the epoch, the total and the base read as one state
            pipe.incr(self.keys.set_version(*scope))
            pipe.hsetnx(key, "epoch", uuid.uuid4().hex)
            pipe.hincrby(key, "added", added)
            pipe.hmget(key, ["counted", "through", "epoch"])
            _, _, total, (counted, through, epoch) = pipe.execute()
        return SizeHint(
            counted=None if counted is None else int(counted),
            through=int(through or 0),
            added=int(total),
            epoch=epoch.decode(),
        )

    def counted(self, scope: Scope, hint: SizeHint, size: int) -> None:
        """Records ``size``, counted after ``hint`` was taken, as the base of the set's hint."""
        self._record_size(keys=[self.keys.size_hint(*scope)], args=[hint.epoch, size, hint.added, SIZE_HINT_TTL])

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
