"""What workers and clients share through Redis besides tasks: set versions, access times, per-set locks."""

from __future__ import annotations

import logging
import math
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from memory_core.core.errors import CorruptDataError, TransientStoreError
from memory_core.core.keys import Keys, decoded
from memory_core.core.locks import RedisLock
from memory_core.core.models import Scope

logger = logging.getLogger(__name__)

_FIELD_SEPARATOR = "\x1f"

# What INCR and HINCRBY leave: the decimal digits of a signed 64-bit integer, nothing else. ``int()`` alone
# would also take spaces, underscores and other scripts' digits, and spend quadratic time on a huge number.
_STORED_INT = re.compile(rb"-?[0-9]{1,19}")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def stored_int(raw: Any, what: str) -> int:
    """An integer Redis keeps as text (a version, a counter); 0 when the key or field is absent.

    Raises:
        CorruptDataError: ``raw`` is not the decimal text of a signed 64-bit integer; the message names ``what``.
    """
    if raw is None:
        return 0
    if isinstance(raw, int):
        raw = str(raw)
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    if _STORED_INT.fullmatch(data) is None or not _INT64_MIN <= int(data) <= _INT64_MAX:
        raise CorruptDataError(f"{what} read back from Redis is {data[:40]!r}, not a 64-bit integer")
    return int(data)


def stored_counters(raw: Mapping[Any, Any], what: str) -> dict[str, int]:
    """A hash of counters (an HGETALL reply) as names and ints; ``CorruptDataError`` naming ``what`` otherwise."""
    counters = {}
    for name, value in raw.items():
        try:
            field = decoded(name)
        except UnicodeDecodeError as exc:
            raise CorruptDataError(f"{what} read back from Redis hold a field name that is no UTF-8") from exc
        counters[field] = stored_int(value, f"{what}, field {field!r}")
    return counters


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
        return stored_int(self.redis.get(self.keys.set_version(*scope)), f"the version of set {scope!r}")

    def version_and(self, scope: Scope, key: str) -> tuple[int, bytes | None]:
        """The set's version and the value at ``key`` (a cache entry of the version the caller expects), in one
        round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.set_version(*scope))
            pipe.get(key)
            raw, value = pipe.execute()
        return stored_int(raw, f"the version of set {scope!r}"), value if isinstance(value, bytes) else None

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
        try:
            return SizeHint(
                counted=None if counted is None else stored_int(counted, f"the size hint of {scope!r}"),
                through=stored_int(through, f"the size hint of {scope!r}"),
                added=int(total),  # HINCRBY's own reply: Redis checked the field is an integer
                epoch=decoded(epoch),
            )
        except (CorruptDataError, UnicodeDecodeError) as exc:
            # The items are written already: a hint that does not read is dropped (the next add starts a new
            # one) and this add counts the set exactly, rather than fail a write that succeeded.
            logger.warning("dropped the malformed size hint of %s: %s", scope, exc)
            self.redis.delete(key)
            return SizeHint(counted=None, through=0, added=0, epoch="")

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
            try:
                key_name, set_name, item_id = decoded(field).split(_FIELD_SEPARATOR, 2)
                at = float(stamp)
                if not math.isfinite(at):
                    raise ValueError(f"access time {at!r}")
            except ValueError as exc:  # UnicodeDecodeError included
                # One access time that does not read is lost, not the namespace's whole batch: they only
                # refine LRU order.
                logger.warning("skipped a malformed access record of namespace %s: %s", namespace, exc)
                continue
            taken.setdefault(Scope(namespace, key_name, set_name), {})[item_id] = at
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
