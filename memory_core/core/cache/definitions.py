"""Memory-set definitions cached in the client, on the same L1/L2 tiers as items and search results.

Definitions change rarely (create, delete), and the client needs one for every ``add`` (to
check item types before enqueueing). The worker re-checks against the durable registry in
the store, so a stale entry here can never corrupt data: at worst the worker answers
``MemorySetNotFound``.
"""

from __future__ import annotations

import logging

from memory_core.core.cache.tiered import TieredCache
from memory_core.core.errors import CorruptDataError
from memory_core.core.jsoncodec import stored_model
from memory_core.core.keys import Keys
from memory_core.core.models import MemorySet

logger = logging.getLogger(__name__)


class DefinitionCache:
    """Definitions by namespace, key and set name."""

    def __init__(self, tiered: TieredCache, keys: Keys) -> None:
        self._tiered = tiered
        self._keys = keys

    def get(self, namespace: str, key: str, set_name: str) -> MemorySet | None:
        """The cached definition, or None on a miss in both tiers."""
        cache_key = self._keys.set_definition(namespace, key, set_name)
        raw = self._tiered.get(cache_key)
        if raw is None:
            return None
        try:
            return stored_model(MemorySet, raw, f"cached definition {cache_key!r}")
        except CorruptDataError as exc:  # a miss: the worker's registry in the store has the definition
            logger.warning("ignored a malformed cache entry %s: %s", cache_key, exc)
            return None

    def put(self, namespace: str, key: str, definition: MemorySet) -> None:
        """Caches a definition the store confirmed."""
        cache_key = self._keys.set_definition(namespace, key, definition.name)
        self._tiered.set(cache_key, definition.model_dump_json().encode("utf-8"))

    def forget(self, namespace: str, key: str, set_name: str) -> None:
        """Drops a definition from both tiers (after a delete)."""
        self._tiered.delete(self._keys.set_definition(namespace, key, set_name))
