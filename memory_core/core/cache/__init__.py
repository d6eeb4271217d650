"""Caches: one Protocol, L1 (per process), L2 (Redis), the tiered pair, set definitions and embeddings."""

from memory_core.core.cache.base import Cache, CacheStats, TierStats
from memory_core.core.cache.definitions import DefinitionCache
from memory_core.core.cache.local import LocalCache
from memory_core.core.cache.redis import RedisCache
from memory_core.core.cache.tiered import TieredCache

__all__ = ["Cache", "CacheStats", "DefinitionCache", "LocalCache", "RedisCache", "TierStats", "TieredCache"]
