"""Per-namespace quotas on long-term adds (items, bytes, a write rate), shared by every worker through Redis.

A namespace's usage is measured from the store (every set of the namespace) at most once per
``recount_interval`` and kept in a Redis hash beside what was admitted since. One Lua script checks an add
against the limits and counts it in the same step, so workers admitting at once never take a namespace over
a limit together. Nothing is subtracted between counts (a delete or a compaction frees room at the next
count). Adds admitted before a recount that are still being written when it ends are in neither the count
nor what was added since: a namespace can end above its item or byte quota by at most the adds in flight at
a recount (one batch per worker thread), never by more. The first count of a namespace is exact: every
worker waits for it.

The write rate is a token bucket in Redis, refilled by Redis's own clock (workers' clocks may differ).
An add is checked before it is embedded: a refused add costs the worker no model time.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import NoReturn

import redis

from memory_core.core import metrics
from memory_core.core.errors import QuotaExceeded
from memory_core.core.keys import Keys
from memory_core.core.locks import RedisLock
from memory_core.core.models import MemorySetItem, Scope
from memory_core.core.settings import NamespaceQuota, QuotaSettings
from memory_core.engine.stores.base import VectorStore

logger = logging.getLogger(__name__)

_MAX_SETS = 100_000
"""Sets read when measuring a namespace (the store's registry of sets, across namespaces)."""

_COUNT_LOCK_TTL = 120
_FIRST_COUNT_WAIT = 30.0
"""Seconds an add waits for another worker's first count of its namespace, then counts by itself."""

# KEYS[1]: the usage hash. ARGV: items and bytes of this add, the item and byte limits (0: none).
# Returns {admitted (1/0), the quota refused ('' when admitted), the usage it was checked against}.
_ADMIT = """
local h = redis.call('HMGET', KEYS[1], 'items', 'bytes', 'added_items', 'added_bytes', 'through_items', 'through_bytes')
local items = tonumber(h[1] or '0') + tonumber(h[3] or '0') - tonumber(h[5] or '0')
local bytes = tonumber(h[2] or '0') + tonumber(h[4] or '0') - tonumber(h[6] or '0')
local n, b = tonumber(ARGV[1]), tonumber(ARGV[2])
local max_items, max_bytes = tonumber(ARGV[3]), tonumber(ARGV[4])
if max_items > 0 and items + n > max_items then return {0, 'items', tostring(items)} end
if max_bytes > 0 and bytes + b > max_bytes then return {0, 'bytes', tostring(bytes)} end
redis.call('HINCRBY', KEYS[1], 'added_items', n)
redis.call('HINCRBY', KEYS[1], 'added_bytes', b)
return {1, '', tostring(items)}
"""

# KEYS[1]: the bucket. ARGV: rate (tokens per second), size, cost. Returns {taken (1/0), seconds to wait}.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, size, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local h = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = math.min(size, tonumber(h[1] or ARGV[2]) + math.max(0, now - tonumber(h[2] or now)) * rate)
if cost > tokens then return {0, tostring((cost - tokens) / rate)} end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - cost), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(size / rate) + 60)
return {1, '0'}
"""


def item_bytes(item: MemorySetItem) -> int:
    """What an item counts against a bytes quota: its value and metadata as JSON, UTF-8."""
    value = item.value if isinstance(item.value, str) else item.value.model_dump(mode="json")
    return len(json.dumps(value, ensure_ascii=False).encode()) + len(
        json.dumps(item.additional_metadata, ensure_ascii=False).encode()
    )


class QuotaGuard:
    """Admits or refuses long-term adds by their namespace's quotas (``QuotaExceeded``)."""

    def __init__(
        self, *, settings: QuotaSettings, store: VectorStore, client: redis.Redis, keys: Keys, max_items_per_call: int
    ) -> None:
        self.settings = settings
        self.store = store
        self.redis = client
        self.keys = keys
        self.max_items_per_call = max_items_per_call
        self._admit = client.register_script(_ADMIT)
        self._take = client.register_script(_TAKE)

    def admit(self, scope: Scope, items: Sequence[MemorySetItem]) -> None:
        """Counts ``items`` into ``scope``'s namespace, or raises ``QuotaExceeded`` (nothing counted, nothing
        written). Items whose ids exist already in the set count only by how much they grow."""
        quota = self.settings.for_namespace(scope.namespace)
        if not quota.limited or not items:
            return
        if quota.writes_per_second:
            self._take_rate(scope.namespace, quota, len(items))
        if quota.items or quota.bytes:
            self._admit_usage(scope, quota, items)

    def _take_rate(self, namespace: str, quota: NamespaceQuota, cost: int) -> None:
        rate = quota.writes_per_second
        size = quota.burst or max(int(rate + 0.999), self.max_items_per_call)
        if cost > size:
            self._refuse(
                "writes_per_second",
                f"an add of {cost} items to namespace {namespace!r} is larger than its write burst of {size} items "
                f"(MEMORY_QUOTAS__BURST); nothing was written; split it into adds of at most {size}",
            )
        taken, wait = self._take(keys=[self.keys.write_rate(namespace)], args=[rate, size, cost])
        if not int(taken):
            self._refuse(
                "writes_per_second",
                f"namespace {namespace!r} is over its write rate of {rate:g} items/s (burst {size}): this add of "
                f"{cost} items was refused and nothing was written; retry in {float(wait):.1f} s",
            )

    def _admit_usage(self, scope: Scope, quota: NamespaceQuota, items: Sequence[MemorySetItem]) -> None:
        self._measure_if_stale(scope.namespace, bytes_too=bool(quota.bytes))
        sizes = sum(item_bytes(item) for item in items) if quota.bytes else 0
        admitted, which, usage = self._admit(
            keys=[self.keys.quota_usage(scope.namespace)], args=[len(items), sizes, quota.items, quota.bytes]
        )
        if int(admitted):
            return
        # Near the limit: items that replace stored ones add no item and only their growth in bytes.
        stored = self.store.retrieve(scope, [item.id for item in items])
        new_items = len(items) - len(stored)
        new_bytes = sizes - sum(item_bytes(item) for item in stored) if quota.bytes else 0
        admitted, which, usage = self._admit(
            keys=[self.keys.quota_usage(scope.namespace)], args=[new_items, new_bytes, quota.items, quota.bytes]
        )
        if int(admitted):
            return
        which = which.decode() if isinstance(which, bytes) else str(which)
        limit, unit, added = (
            (quota.items, "long-term items", new_items) if which == "items" else (quota.bytes, "bytes", new_bytes)
        )
        self._refuse(
            which,
            f"namespace {scope.namespace!r} is at its quota of {limit} {unit} ({int(usage)} held): this add of "
            f"{added} more was refused and nothing was written; delete items (room is counted again within "
            f"{self.settings.recount_interval:g} s), or raise MEMORY_QUOTAS__{which.upper()} "
            f"(or the namespace's entry in MEMORY_QUOTAS__NAMESPACES)",
        )

    def _measure_if_stale(self, namespace: str, *, bytes_too: bool) -> None:
        key = self.keys.quota_usage(namespace)
        counted, fresh = self._last_count(key, bytes_too=bytes_too)
        if fresh:
            return
        lock = RedisLock(self.redis, self.keys.quota_count_lock(namespace), _COUNT_LOCK_TTL)
        if not lock.acquire():
            if counted:
                return  # another worker is counting; until it is done the last count (plus adds since) stands
            if self._first_count_by_another(key):
                return  # nothing was admitted while it counted: that count is exact
        try:
            # Another worker may have finished a count between the read above and this lock (it writes its
            # count before it frees the lock). Counting again would miss its adds still being written (the
            # namespace could go over) and count twice those written during this count (room refused).
            if self._last_count(key, bytes_too=bytes_too)[1]:
                return
            through_items, through_bytes = self.redis.hmget(key, ["added_items", "added_bytes"])
            with metrics.timed(metrics.QUOTA_RECOUNT_SECONDS):
                items, size = self._usage(namespace, bytes_too=bytes_too)
            # Adds admitted while counting are in the count and still in what was added since: counted
            # twice until the next count, never missed.
            self.redis.hset(
                key,
                mapping={
                    "items": items,
                    "bytes": size,
                    "bytes_measured": int(bytes_too),
                    "through_items": int(through_items or 0),
                    "through_bytes": int(through_bytes or 0),
                    "at": time.time(),
                },
            )
            logger.info("namespace %r holds %d long-term items (%d bytes counted)", namespace, items, size)
        finally:
            lock.release()  # only if still ours: a count that outlived the lock's expiry frees no other's

    def _last_count(self, key: str, *, bytes_too: bool) -> tuple[bool, bool]:
        """Whether the namespace of the usage hash ``key`` was ever counted, and whether that count still holds
        for an add (recent enough, and of bytes too when the add's quota has a byte limit)."""
        at, measured_bytes = self.redis.hmget(key, ["at", "bytes_measured"])
        if at is None:
            return False, False
        recent = time.time() - float(at) < self.settings.recount_interval
        return True, recent and (measured_bytes == b"1" or not bytes_too)

    def _first_count_by_another(self, key: str) -> bool:
        """Waits for the first count of a namespace that another worker is taking; False if it never comes."""
        deadline = time.monotonic() + _FIRST_COUNT_WAIT
        while time.monotonic() < deadline:
            time.sleep(0.02)
            if self.redis.hget(key, "at") is not None:
                return True
        return False

    def _usage(self, namespace: str, *, bytes_too: bool) -> tuple[int, int]:
        scopes = [Scope(ns, key, d.name) for ns, key, d in self.store.list_sets(_MAX_SETS) if ns == namespace]
        if not bytes_too:
            return sum(self.store.count(scope) for scope in scopes), 0
        items = size = 0
        for scope in scopes:
            for item in self.store.list_items(scope):
                items += 1
                size += item_bytes(item)
        return items, size

    def _refuse(self, quota: str, message: str) -> NoReturn:
        metrics.QUOTA_REFUSALS.labels(quota).inc()
        logger.info("quota refused an add: %s", message)
        raise QuotaExceeded(message)
