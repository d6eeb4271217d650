"""L1 over L2, with hit and miss counters per tier."""

from __future__ import annotations

from memory_core.cache.base import Cache, CacheStats


class TieredCache:
    """Reads L1, then L2 (filling L1 on an L2 hit); writes both."""

    def __init__(self, l1: Cache, l2: Cache, *, l1_ttl: float, l2_ttl: float) -> None:
        self.l1 = l1
        self.l2 = l2
        self.l1_ttl = l1_ttl
        self.l2_ttl = l2_ttl
        self.stats = CacheStats()

    def get(self, key: str) -> bytes | None:
        """L1, then L2. Raises ``BrokerUnavailable`` only when L1 misses and Redis is down."""
        value = self.get_local(key)
        if value is not None:
            return value
        value = self.l2.get(key)
        if value is None:
            self.stats.l2.misses += 1
            return None
        self.stats.l2.hits += 1
        self.l1.set(key, value, self.l1_ttl)
        return value

    def get_local(self, key: str) -> bytes | None:
        """L1 only (what still answers while Redis is down)."""
        value = self.l1.get(key)
        if value is None:
            self.stats.l1.misses += 1
        else:
            self.stats.l1.hits += 1
        return value

    def set(self, key: str, value: bytes) -> None:
        """Stores in both tiers."""
        self.l1.set(key, value, self.l1_ttl)
        self.l2.set(key, value, self.l2_ttl)
