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
from pydantic import RootModel

from memory_core.core.cache.tiered import TieredCache
from memory_core.core.coordination import Coordinator
from memory_core.core.errors import BrokerUnavailable, CorruptDataError
from memory_core.core.jsoncodec import stored_model
from memory_core.core.keys import Keys
from memory_core.core.models import MemorySetItem, Scope, utcnow
from memory_core.core.redis_errors import redis_failure, unavailable

logger = logging.getLogger(__name__)


def search_digest(
    query: str,
    limit: int,
    filters: dict[str, Any],
    mode: str = "hybrid",
    rerank: bool | None = None,
    include_superseded: bool = False,
) -> str:
    """A stable hash of everything that shapes a search result. ``rerank`` as asked: a reranked result is
    never served to a search that turned reranking off, nor the reverse; ``include_superseded`` likewise keeps
    results with superseded facts apart from live-only ones. Each is left out at its default, so the default
    search keeps its key."""
    fields: dict[str, Any] = {"query": query, "limit": limit, "filters": filters, "mode": mode}
    if rerank is not None:
        fields["rerank"] = rerank
    if include_superseded:
        fields["include_superseded"] = True
    text = json.dumps(fields, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class _Entry(RootModel[list[MemorySetItem]]):
    """A cache entry: a JSON list of items. pydantic-core writes and reads it in one pass, without the dicts in
    between (for a search's 10 hits, a third of the time of ``model_dump`` then ``json.dumps``; read back, a fifth
    of ``json.loads`` then ``model_validate``)."""


def _dump(items: Sequence[MemorySetItem]) -> bytes:
    return _Entry(list(items)).model_dump_json().encode("utf-8")


def _load(raw: bytes, key: str) -> list[MemorySetItem] | None:
    # A cache entry that does not decode is a miss: the store still has the truth, and the read goes there.
    try:
        return stored_model(_Entry, raw, f"cache entry {key!r}").root
    except CorruptDataError as exc:
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
        current, online, _ = self._version(scope, None)
        return current, online

    def _version(self, scope: Scope, peek: str | None) -> tuple[int, bool, bytes | None]:
        """``version``, and the value at ``peek`` read in the same round trip (None without ``peek`` or Redis)."""
        value = None
        try:
            # CorruptDataError when the version is no number
            if peek is None:
                current = self._coordinator.version(scope)
            else:
                current, value = self._coordinator.version_and(scope, peek)
        except redis.RedisError as exc:
            if not unavailable(exc):
                raise redis_failure(exc, "read a set's version", self._url) from exc
            with self._lock:
                known = self._versions.get(scope)
            if known is None:
                raise BrokerUnavailable(f"Redis at {self._url} is unreachable: {exc}") from exc
            return known, False, None
        with self._lock:
            self._versions[scope] = current
        return current, True, value

    def _get(self, key: str, online: bool) -> bytes | None:
        return self.tiered.get(key) if online else self.tiered.get_local(key)

    def search(self, scope: Scope, digest: str) -> tuple[list[MemorySetItem] | None, int, bool]:
        """A cached result (None on a miss, or if an item in it has expired), the version, and Redis' state.

        The entry of the version last seen is read with the version, in one round trip; it answers only if that
        is still the version (else the current version's entry is read, as without a guess)."""
        with self._lock:
            known = self._versions.get(scope)
        guess = None if known is None else self._keys.cached_search(*scope, known, digest)
        version, online, fetched = self._version(scope, guess)
        cache_key = self._keys.cached_search(*scope, version, digest)
        if online and cache_key == guess:
            raw = self.tiered.get_fetched(cache_key, fetched)
        else:
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
