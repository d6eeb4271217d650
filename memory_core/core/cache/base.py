"""The cache seam: byte values under string keys, with a time to live. Values are always JSON text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from memory_core.core.metrics import CACHE


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


class SharedCache(Cache, Protocol):
    """A tier shared across processes, where a round trip costs: it also reads and writes in batches."""

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The values found among ``keys`` (misses are absent)."""
        ...

    def set_many(self, entries: dict[str, bytes], ttl: float) -> None:
        """Stores every entry for ``ttl`` seconds."""
        ...


@dataclass
class TierStats:
    """Hits and misses of one tier, counted in this process (and in the Prometheus counters)."""

    tier: str = ""
    hits: int = 0
    misses: int = 0

    def count(self, *, hits: int = 0, misses: int = 0) -> None:
        """Adds lookups' outcomes."""
        self.hits += hits
        self.misses += misses
        if hits:
            CACHE.labels(self.tier, "hit").inc(hits)
        if misses:
            CACHE.labels(self.tier, "miss").inc(misses)

    @property
    def hit_rate(self) -> float:
        """Hits over lookups; 0 before any lookup."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


@dataclass
class CacheStats:
    """Per-tier counters, readable through ``MemoryClient.stats()``."""

    l1: TierStats = field(default_factory=lambda: TierStats("l1"))
    l2: TierStats = field(default_factory=lambda: TierStats("l2"))
