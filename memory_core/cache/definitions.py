"""Memory-set definitions cached in the client: a small per-process L1 over Redis (L2).

Definitions change rarely (create, delete), and the client needs one for every
``add`` (to check item types before enqueueing). The worker re-checks against the
durable registry in the store, so a stale entry here can never corrupt data: at
worst the worker answers ``MemorySetNotFound``.
"""

from __future__ import annotations

import threading
import time

import redis

from memory_core.errors import BrokerUnavailable
from memory_core.keys import Keys
from memory_core.models import MemorySet


class DefinitionCache:
    """L1 (dict with expiry) over L2 (Redis strings with TTL), keyed by namespace, key and set name."""

    def __init__(self, redis_client: redis.Redis, keys: Keys, *, l1_ttl: float = 30.0, l2_ttl: int = 3600) -> None:
        self._redis = redis_client
        self._keys = keys
        self._l1: dict[tuple[str, str, str], tuple[float, MemorySet]] = {}
        self._l1_ttl = l1_ttl
        self._l2_ttl = l2_ttl
        self._lock = threading.Lock()

    def get(self, namespace: str, key: str, set_name: str) -> MemorySet | None:
        """The cached definition, or None on a miss in both tiers."""
        slot = (namespace, key, set_name)
        with self._lock:
            hit = self._l1.get(slot)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        try:
            raw = self._redis.get(self._keys.set_definition(*slot))
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot read the set cache from Redis: {exc}") from exc
        if raw is None:
            return None
        definition = MemorySet.model_validate_json(raw)
        self._remember(slot, definition)
        return definition

    def put(self, namespace: str, key: str, definition: MemorySet) -> None:
        """Caches a definition the store confirmed."""
        slot = (namespace, key, definition.name)
        try:
            self._redis.set(self._keys.set_definition(*slot), definition.model_dump_json(), ex=self._l2_ttl)
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot write the set cache to Redis: {exc}") from exc
        self._remember(slot, definition)

    def forget(self, namespace: str, key: str, set_name: str) -> None:
        """Drops a definition from both tiers (after a delete)."""
        with self._lock:
            self._l1.pop((namespace, key, set_name), None)
        try:
            self._redis.delete(self._keys.set_definition(namespace, key, set_name))
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot update the set cache in Redis: {exc}") from exc

    def forget_scope(self, namespace: str, key: str | None) -> None:
        """Drops this process's L1 definitions of a namespace (or one key); L2 is erased by the worker."""
        with self._lock:
            for slot in [s for s in self._l1 if s[0] == namespace and (key is None or s[1] == key)]:
                del self._l1[slot]

    def _remember(self, slot: tuple[str, str, str], definition: MemorySet) -> None:
        with self._lock:
            self._l1[slot] = (time.monotonic() + self._l1_ttl, definition)
