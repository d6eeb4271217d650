"""Memory-set definitions cached in the client, on the same L1/L2 tiers as items and search results.

Definitions change rarely (create, delete), and the client needs one for every ``add`` (to
check item types before enqueueing). The worker re-checks against the durable registry in
the store, so a stale entry here can never corrupt data: at worst the worker answers
``MemorySetNotFound``.
"""

from __future__ import annotations

from memory_core.core.cache.tiered import TieredCache
from memory_core.core.keys import Keys
from memory_core.core.models import MemorySet


class DefinitionCache:
    """Definitions by namespace, key and set name."""

    def __init__(self, tiered: TieredCache, keys: Keys) -> None:
        self._tiered = tiered
        self._keys = keys

    def get(self, namespace: str, key: str, set_name: str) -> MemorySet | None:
        """The cached definition, or None on a miss in both tiers."""
        raw = self._tiered.get(self._keys.set_definition(namespace, key, set_name))
        return None if raw is None else MemorySet.model_validate_json(raw)

    def put(self, namespace: str, key: str, definition: MemorySet) -> None:
        """Caches a definition the store confirmed."""
        cache_key = self._keys.set_definition(namespace, key, definition.name)
        self._tiered.set(cache_key, definition.model_dump_json().encode("utf-8"))

    def forget(self, namespace: str, key: str, set_name: str) -> None:
        """Drops a definition from both tiers (after a delete)."""
        self._tiered.delete(self._keys.set_definition(namespace, key, set_name))
