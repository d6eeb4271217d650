"""Scheduled maintenance: TTL sweep, access-time flush, eviction. Run by beat through ``memory.*`` tasks.

Every sweep is single-flight across beats and workers: it takes a Redis lock that
lives for most of its interval, so a second beat started by mistake (or a
redelivered message) finds it taken and skips. Every sweep is idempotent and
bounded per run (``max_items_per_run``); what is left is done on the next tick.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable

import redis

from memory_core.core.coordination import Coordinator
from memory_core.core.keys import Keys
from memory_core.core.messages import MaintenanceReport
from memory_core.core.models import MemorySetItem, Scope
from memory_core.core.settings import MaintenanceSettings
from memory_core.engine.stores import VectorStore
from memory_core.engine.stores.base import versions_of

logger = logging.getLogger(__name__)

TTL_SWEEP = "ttl_sweep"
FLUSH_ACCESS = "flush_access"
EVICT = "evict"
OPTIMIZE = "optimize"


def eviction_order(items: list[MemorySetItem], policy: str) -> list[MemorySetItem]:
    """Unpinned items, first to go first: least recently read (lru), or least important then least recently read."""
    candidates = [i for i in items if not i.pinned]
    if policy == "importance":
        return sorted(candidates, key=lambda i: (i.importance, i.last_accessed_time, i.seq or 0))
    return sorted(candidates, key=lambda i: (i.last_accessed_time, i.seq or 0))


class Maintenance:
    """The three sweeps over every namespace of one store."""

    def __init__(
        self,
        *,
        store: VectorStore,
        coordinator: Coordinator,
        keys: Keys,
        settings: MaintenanceSettings,
        max_sets: int = 10_000,
    ) -> None:
        self.store = store
        self.coordinator = coordinator
        self.redis: redis.Redis = coordinator.redis
        self.keys = keys
        self.settings = settings
        self.max_sets = max_sets

    def ttl_sweep(self) -> MaintenanceReport:
        """Deletes expired, unpinned items (already invisible to reads since they expired)."""
        return self._exclusive(TTL_SWEEP, self.settings.ttl_sweep_interval, self._ttl_sweep)

    def flush_access(self) -> MaintenanceReport:
        """Writes the access times recorded in Redis to the store's ``last_accessed_time``, in bulk."""
        return self._exclusive(FLUSH_ACCESS, self.settings.flush_access_interval, self._flush_all)

    def evict(self) -> MaintenanceReport:
        """Applies each set's eviction policy down to its ``max_items`` (pinned items stay)."""
        return self._exclusive(EVICT, self.settings.evict_interval, self._evict)

    def optimize(self) -> MaintenanceReport:
        """Builds the store's search indexes over recent writes (embedded engine; a no-op on a server)."""
        return self._exclusive(OPTIMIZE, self.settings.optimize_interval, lambda: (int(self.store.optimize()), 0))

    def _exclusive(self, name: str, interval: float, sweep: Callable[[], tuple[int, int]]) -> MaintenanceReport:
        # Held for most of the interval and never released early: one run per tick, however many beats.
        hold = max(1, int(interval * 0.8))
        stats = self.keys.maintenance_stats()
        if not self.redis.set(self.keys.sweep_lock(name), "1", nx=True, ex=hold):
            self.redis.hincrby(stats, f"{name}:skipped", 1)
            return MaintenanceReport(sweep=name, status="skipped")
        started = time.perf_counter()
        items, sets = sweep()
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hincrby(stats, f"{name}:ran", 1)
            pipe.hincrby(stats, f"{name}:items", items)
            pipe.execute()
        took = time.perf_counter() - started
        logger.info("%s: %d items in %d sets in %.3fs", name, items, sets, took)
        return MaintenanceReport(sweep=name, status="ran", items=items, sets=sets, seconds=took)

    def _ttl_sweep(self) -> tuple[int, int]:
        # No version bumps: expired items have been invisible to every read since they expired, and
        # cached results are re-checked for expiry on every hit. The sweep only reclaims space.
        return self.store.delete_expired(time.time(), self.settings.max_items_per_run), 0

    def _flush_all(self) -> tuple[int, int]:
        items = sets = 0
        budget = self.settings.max_items_per_run
        while items < budget:
            popped = self.redis.spop(self.keys.access_namespaces())
            if not isinstance(popped, bytes | str):  # None: nothing pending
                break
            flushed, touched = self._flush_namespace(popped.decode() if isinstance(popped, bytes) else popped)
            items += flushed
            sets += touched
        return items, sets

    def _flush_namespace(self, namespace: str) -> tuple[int, int]:
        taken = self.coordinator.take_accesses(namespace)
        items = 0
        for scope, stamps in taken.items():
            by_second: dict[float, list[str]] = defaultdict(list)
            for item_id, stamp in stamps.items():
                by_second[round(stamp, 3)].append(item_id)
            for stamp, ids in by_second.items():
                self.store.set_fields(scope, ids, {"last_accessed_time": stamp})
            items += len(stamps)
        return items, len(taken)

    def _evict(self) -> tuple[int, int]:
        evicted = sets = 0
        flushed: set[str] = set()
        for namespace, key, definition in self.store.list_sets(self.max_sets):
            policy = definition.eviction
            if policy is None or evicted >= self.settings.max_items_per_run:
                continue
            scope = Scope(namespace, key, definition.name)
            if self.store.count(scope) <= policy.max_items:
                continue
            if namespace not in flushed:  # LRU must see the latest reads
                self._flush_namespace(namespace)
                flushed.add(namespace)
            items = self.store.list_items(scope)
            excess = min(len(items) - policy.max_items, self.settings.max_items_per_run - evicted)
            victims = eviction_order(items, policy.policy)[:excess]
            if victims:
                self.store.delete(scope, versions_of(victims))  # a victim rewritten since it was read stays
                self.coordinator.bump(scope)
                evicted += len(victims)
                sets += 1
        return evicted, sets
