"""L1 over L2, with hit and miss counters per tier."""

from __future__ import annotations

from collections.abc import Sequence

from memory_core.core.cache.base import Cache, CacheStats, SharedCache


class TieredCache:
    """Reads L1, then L2 (filling L1 on an L2 hit); writes both."""

    def __init__(self, l1: Cache, l2: SharedCache, *, l1_ttl: float, l2_ttl: float) -> None:
        self.l1 = l1
        self.l2 = l2
        self.l1_ttl = l1_ttl
        self.l2_ttl = l2_ttl
        self.stats = CacheStats()

    def get(self, key: str) -> bytes | None:
        """L1, then L2. Raises ``BrokerUnavailable`` only when L1 misses and Redis is down."""
        value = self.get_local(key)
        return value if value is not None else self._from_l2(key, self.l2.get(key))

    def get_fetched(self, key: str, fetched: bytes | None) -> bytes | None:
        """``get``, where the caller already read L2's value (``fetched``, in a round trip of its own)."""
        value = self.get_local(key)
        return value if value is not None else self._from_l2(key, fetched)

    def _from_l2(self, key: str, value: bytes | None) -> bytes | None:
        """What L2 held for ``key``: counted, and kept in L1 when it was there."""
        if value is None:
            self.stats.l2.count(misses=1)
            return None
        self.stats.l2.count(hits=1)
        self.l1.set(key, value, self.l1_ttl)
        return value

    def get_local(self, key: str) -> bytes | None:
        """L1 only (what still answers while Redis is down)."""
        value = self.l1.get(key)
        if value is None:
            self.stats.l1.count(misses=1)
        else:
            self.stats.l1.count(hits=1)
        return value

    def get_many(self, keys: Sequence[str], *, local_only: bool = False) -> dict[str, bytes]:
        """The values found for ``keys``: L1 first, then one L2 round trip for the rest (unless ``local_only``)."""
        found: dict[str, bytes] = {}
        for key in keys:
            value = self.get_local(key)
            if value is not None:
                found[key] = value
        missing = [k for k in keys if k not in found]
        if missing and not local_only:
            fetched = self.l2.get_many(missing)
            self.stats.l2.count(hits=len(fetched))
            self.stats.l2.count(misses=len(missing) - len(fetched))
            for key, value in fetched.items():
                self.l1.set(key, value, self.l1_ttl)
            found.update(fetched)
        return found

    def set(self, key: str, value: bytes) -> None:
        """Stores in both tiers."""
        self.l1.set(key, value, self.l1_ttl)
        self.l2.set(key, value, self.l2_ttl)

    def set_many(self, entries: dict[str, bytes]) -> None:
        """Stores several entries in both tiers (one L2 round trip)."""
        for key, value in entries.items():
            self.l1.set(key, value, self.l1_ttl)
        self.l2.set_many(entries, self.l2_ttl)

    def delete(self, *keys: str) -> None:
        """Removes keys from both tiers."""
        self.l1.delete(*keys)
        self.l2.delete(*keys)
