"""Erasure: everything memory-core holds for a namespace, or for one key in it, in every store.

The vector store loses the items and set definitions; Redis loses cached items, search
results, definitions, replies, access logs, locks, dead letters, formation operations and the
console audit entries of the key (and, for a whole
namespace, usage counters and cached embeddings). Set version counters are bumped, never
deleted: a counter that restarted at 0 would make entries cached under old versions
reachable again in other processes' L1.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis

from memory_core.core.coordination import Coordinator
from memory_core.core.keys import Keys, decoded
from memory_core.core.messages import ForgetReceipt, ForgetRequest
from memory_core.core.models import Scope
from memory_core.core.validation import parse
from memory_core.engine.stores import VectorStore

logger = logging.getLogger(__name__)


class Eraser:
    """Runs ``memory.forget`` in the worker."""

    def __init__(self, *, store: VectorStore, coordinator: Coordinator, keys: Keys) -> None:
        self.store = store
        self.coordinator = coordinator
        self.redis: redis.Redis = coordinator.redis
        self.keys = keys

    def forget(self, raw: dict[str, Any]) -> ForgetReceipt:
        """Erases the namespace (or key) and returns what went, per store."""
        request = parse(ForgetRequest, raw, "forget request")
        namespace, key = request.namespace, request.key
        items, sets = self.store.forget(namespace, key)
        for name in sets:
            set_key, set_name = name.split(":", 1)
            self.coordinator.bump(Scope(namespace, set_key, set_name))
        redis_keys = self._erase_keys(namespace, key)
        letters = self._erase_dead_letters(namespace, key)
        logger.info("erased namespace %s key %s: %d items, %d sets", namespace, key, items, len(sets))
        return ForgetReceipt(
            namespace=namespace, key=key, items=items, sets=len(sets), redis_keys=redis_keys, dead_letters=letters
        )

    def _erase_keys(self, namespace: str, key: str | None) -> int:
        if key is None:
            patterns = [self.keys.namespace_pattern(namespace)]
        else:
            patterns = self.keys.key_patterns(namespace, key)
        keep = {self.keys.dead_letters(namespace)}  # counted separately, below
        doomed = [
            k
            for pattern in patterns
            for k in self.redis.scan_iter(pattern, count=1000)
            if ":version:" not in decoded(k) and decoded(k) not in keep
        ]
        if key is not None:
            self._erase_access_fields(namespace, key)
            self._erase_audit_entries(namespace, key)
        for start in range(0, len(doomed), 500):
            self.redis.delete(*doomed[start : start + 500])
        return len(doomed)

    def _erase_access_fields(self, namespace: str, key: str) -> None:
        log = self.keys.access_log(namespace)
        fields = [f for f, _ in self.redis.hscan_iter(log, match=f"{key}\x1f*")]
        if fields:
            self.redis.hdel(log, *fields)

    def _erase_audit_entries(self, namespace: str, key: str) -> None:
        """The key's entries of the namespace's console audit log: their before and after hold memory text."""
        log = self.keys.console_audit(namespace)
        for entry in self.redis.lrange(log, 0, -1):
            try:
                target = json.loads(entry).get("target", {})
            except ValueError:
                continue  # not ours to read: left for the namespace's own erasure
            if isinstance(target, dict) and target.get("key") == key:
                self.redis.lrem(log, 1, decoded(entry))

    def _erase_dead_letters(self, namespace: str, key: str | None) -> int:
        letters_key = self.keys.dead_letters(namespace)
        if key is None:
            count = int(self.redis.llen(letters_key))
            self.redis.delete(letters_key)
            self.redis.srem(self.keys.dead_letter_namespaces(), namespace)
            return count
        removed = 0
        for entry in self.redis.lrange(letters_key, 0, -1):
            request = json.loads(entry).get("kwargs", {}).get("request", {})
            if isinstance(request, dict) and request.get("key") == key:
                removed += int(self.redis.lrem(letters_key, 1, decoded(entry)))
        return removed
