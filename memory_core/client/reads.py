"""The client's read cache: items by id and search results, keyed by the set's version.

Every mutation of a set bumps its version in Redis (the worker does it after the
store write, before it replies), and every key here includes the version, so an
entry written before a change can no longer be found after it: a stale result is
never served. Expired items are checked on every hit, so they vanish from cached
results the moment they expire.

While Redis is down, the last version seen by this process is used and only L1
answers; anything else raises ``BrokerUnavailable`` at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis
from pydantic import ValidationError

from memory_core.core.cache.tiered import TieredCache
from memory_core.core.coordination import Coordinator
from memory_core.core.errors import BrokerUnavailable, CorruptDataError
from memory_core.core.jsoncodec import stored_json
from memory_core.core.keys import Keys
from memory_core.core.models import MemorySetItem, Scope, utcnow
from memory_core.core.redis_errors import redis_failure, unavailable

logger = logging.getLogger(__name__)


def search_digest(
    query: str, limit: int, filters: dict[str, Any], mode: str = "hybrid", rerank: bool | None = None
) -> str:
    """A stable hash of everything that shapes a search result. ``rerank`` as asked: a reranked result is
    never served to a search that turned reranking off, nor the reverse (left out when None, so the default
    search keeps its key)."""
    fields: dict[str, Any] = {"query": query, "limit": limit, "filters": filters, "mode": mode}
    if rerank is not None:
        fields["rerank"] = rerank
    text = json.dumps(fields, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _dump(items: Sequence[MemorySetItem]) -> bytes:
    return json.dumps([i.model_dump(mode="json") for i in items]).encode("utf-8")


def _load(raw: bytes, key: str) -> list[MemorySetItem] | None:
    # A cache entry that does not decode is a miss: the store still has the truth, and the read goes there.
    try:
        entries = stored_json(raw, f"cache entry {key!r}")
        if not isinstance(entries, list):
            raise CorruptDataError(f"cache entry {key!r} read back from Redis is no list of items")
        return [MemorySetItem.model_validate(i) for i in entries]
    except (CorruptDataError, ValidationError) as exc:
        logger.warning("ignored a malformed cache entry %s: %s", key, exc)
        return None


class ReadCache:
    """Versioned item and search caches over a ``TieredCache``."""

    def __init__(self, tiered: TieredCache, coordinator: Coordinator, keys: Keys, redis_url: str) -> None:
        self.tiered = tiered
        self._coordinator = coordinator
        self._keys = keys
        self._url = redis_url
        self._versions: dict[Scope, int] = {}
        self._lock = threading.Lock()

    def version(self, scope: Scope) -> tuple[int, bool]:
        """The set's current version and whether Redis answered (else the last version this process saw)."""
        try:
            current = self._coordinator.version(scope)  # CorruptDataError when it is no number
        except redis.RedisError as exc:
            if not unavailable(exc):
                raise redis_failure(exc, "read a set's version", self._url) from exc
            with self._lock:
                known = self._versions.get(scope)
            if known is None:
                raise BrokerUnavailable(f"Redis at {self._url} is unreachable: {exc}") from exc
            return known, False
        with self._lock:
            self._versions[scope] = current
        return current, True

    def _get(self, key: str, online: bool) -> bytes | None:
        return self.tiered.get(key) if online else self.tiered.get_local(key)

    def search(self, scope: Scope, digest: str) -> tuple[list[MemorySetItem] | None, int, bool]:
        """A cached result (None on a miss, or if an item in it has expired), the version, and Redis' state."""
        version, online = self.version(scope)
        cache_key = self._keys.cached_search(*scope, version, digest)
        raw = self._get(cache_key, online)
        items = None if raw is None else _load(raw, cache_key)
        if items is None:
            return None, version, online
        now = utcnow()
        if any(i.is_expired(now) for i in items):
            return None, version, online
        self._touch(scope, items, online)
        return items, version, online

    def store_search(self, scope: Scope, version: int, digest: str, items: Sequence[MemorySetItem]) -> None:
        """Caches a result computed at ``version``."""
        self._quietly(lambda: self.tiered.set(self._keys.cached_search(*scope, version, digest), _dump(items)))

    def items(self, scope: Scope, ids: Sequence[str]) -> tuple[dict[str, MemorySetItem], int, bool]:
        """The cached, unexpired items among ``ids``, the version, and Redis' state."""
        version, online = self.version(scope)
        now = utcnow()
        keys = {self._keys.cached_item(*scope, version, item_id): item_id for item_id in dict.fromkeys(ids)}
        found: dict[str, MemorySetItem] = {}
        for cache_key, raw in self.tiered.get_many(list(keys), local_only=not online).items():
            loaded = _load(raw, cache_key)
            if loaded and len(loaded) == 1 and not loaded[0].is_expired(now):
                found[keys[cache_key]] = loaded[0]
        self._touch(scope, list(found.values()), online)
        return found, version, online

    def store_items(self, scope: Scope, version: int, items: Sequence[MemorySetItem]) -> None:
        """Caches items read at ``version``."""

        entries = {self._keys.cached_item(*scope, version, item.id): _dump([item]) for item in items}
        self._quietly(lambda: self.tiered.set_many(entries))

    def _touch(self, scope: Scope, items: Sequence[MemorySetItem], online: bool) -> None:
        # A cache hit is a read too: LRU must see it.
        if online and items:
            self._quietly(lambda: self._coordinator.record_access(scope, [i.id for i in items]))

    @staticmethod
    def _quietly(action: Callable[[], None]) -> None:
        # Filling a cache or logging an access is an optimization; the read itself already succeeded.
        try:
            action()
        except (redis.RedisError, BrokerUnavailable):
            pass
