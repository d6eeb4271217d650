"""Enqueuing compactions: after a write that reaches capacity, and from beat's sweep."""

from __future__ import annotations

import json
import logging

import redis

from memory_core.core import routing
from memory_core.core.dispatch import Dispatcher
from memory_core.core.keys import Keys
from memory_core.core.messages import CompactRequest, SweepReport
from memory_core.core.models import Scope
from memory_core.engine.stores import VectorStore

logger = logging.getLogger(__name__)


class CompactionTrigger:
    """Enqueues at most one pending compaction per set (a Redis flag cleared when the task starts)."""

    def __init__(self, *, redis_client: redis.Redis, keys: Keys, dispatcher: Dispatcher, pending_ttl: int) -> None:
        self._redis = redis_client
        self._keys = keys
        self._dispatcher = dispatcher
        self._ttl = pending_ttl

    def __call__(self, scope: Scope) -> bool:
        """Enqueues a compaction of ``scope`` unless one is already pending; returns whether it did."""
        pending = self._keys.compaction_pending(*scope)
        if not self._redis.set(pending, "1", nx=True, ex=self._ttl):
            return False
        request = CompactRequest(namespace=scope.namespace, key=scope.key, set_name=scope.set_name)
        summary = json.dumps({"namespace": scope.namespace, "key": scope.key, "set": scope.set_name})
        try:
            self._dispatcher.send(routing.COMPACT, request, summary)
        except Exception:
            self._redis.delete(pending)  # let the next write or sweep try again
            raise
        return True

    def sweep(self, store: VectorStore, max_sets: int) -> SweepReport:
        """Enqueues a compaction for every set at or over capacity (e.g. after a failed run)."""
        sets = store.list_sets(max_sets)
        enqueued = 0
        for namespace, key, definition in sets:
            scope = Scope(namespace, key, definition.name)
            if store.count(scope) >= definition.capacity and self(scope):
                enqueued += 1
        logger.info("compaction sweep: %d sets checked, %d compactions enqueued", len(sets), enqueued)
        return SweepReport(sets_checked=len(sets), enqueued=enqueued)
