"""The cache seam: byte values under string keys, with a time to live. Values are always JSON text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class Cache(Protocol):
    """One tier of cache."""

    def get(self, key: str) -> bytes | None:
        """The value, or None on a miss (or when it expired)."""
        ...

    def set(self, key: str, value: bytes, ttl: float) -> None:
        """Stores ``value`` for ``ttl`` seconds (a tier may decline, e.g. when it is over budget)."""
        ...

    def delete(self, *keys: str) -> None:
        """Removes keys; missing ones are ignored."""
        ...


@dataclass
class TierStats:
    """Hits and misses of one tier, counted in this process."""

    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        """Hits over lookups; 0 before any lookup."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


@dataclass
class CacheStats:
    """Per-tier counters, readable through ``MemoryClient.stats()``."""

    l1: TierStats = field(default_factory=TierStats)
    l2: TierStats = field(default_factory=TierStats)
