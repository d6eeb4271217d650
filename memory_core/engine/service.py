"""The worker-side half of long-term memory: what each task does, given a store and an embedder.

Every method takes the raw JSON request of its task, validates it (a raw message
may come from anywhere, not only from our client), acts, and returns a reply
model. Writes are idempotent and monotonic: point ids are derived from the scope
and item id, and the store keeps the newest ``seq`` of each item (deletes leave
tombstones), so a redelivered or late message never undoes a newer write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from memory_core.core.coordination import Coordinator, SizeHint
from memory_core.core.errors import InvalidRequestError, MemoryCoreError, SetDefinitionConflict
from memory_core.core.messages import (
    AddReply,
    AddRequest,
    CountReply,
    CreateSetRequest,
    DeleteRequest,
    DeleteSetRequest,
    IdsRequest,
    ItemsReply,
    NewItem,
    SearchRequest,
    SetReply,
    SetRequest,
)
from memory_core.core.models import MemorySet, MemorySetItem, Scope
from memory_core.core.settings import LimitsSettings
from memory_core.core.validation import check_filters, check_metadata, check_text, check_value, parse
from memory_core.engine.embedders import Embedder
from memory_core.engine.embedders.base import embed_timed
from memory_core.engine.embedders.cache import EmbeddingCache
from memory_core.engine.embedders.metering import charging
from memory_core.engine.quotas import QuotaGuard
from memory_core.engine.redaction import Redactor
from memory_core.engine.rerankers import Reranker, rerank_timed
from memory_core.engine.stores import ItemRecord, VectorStore
from memory_core.engine.stores.base import lifecycle_payload, require_set, text_hash

logger = logging.getLogger(__name__)


def _delete_seq(seq: int | None) -> int:
    """A delete's place in the writes' order: the client's, or now on this worker for a message without one."""
    return seq if seq is not None else time.time_ns()


def folded(target: MemorySetItem, item: MemorySetItem) -> MemorySetItem:
    """``target`` with ``item`` folded into it, losing nothing the caller set on either.

    Metadata: merged, the newer item's keys winning. Pinned: if either is. Importance: the higher.
    Source: the newer item's, when it names one. Expiry: the later; none (never) if either has none.
    """
    expires = None if target.expires_at is None or item.expires_at is None else max(target.expires_at, item.expires_at)
    return target.model_copy(
        update={
            "additional_metadata": {**target.additional_metadata, **item.additional_metadata},
            "pinned": target.pinned or item.pinned,
            "importance": max(target.importance, item.importance),
            "source": item.source if item.source is not None else target.source,
            "expires_at": expires,
        }
    )


def definition_conflict(namespace: str, key: str, existing: MemorySet, asked: MemorySet) -> SetDefinitionConflict:
    """The conflict of ``asked`` with the ``existing`` definition of a set: each field that differs, with the
    value it has and the value asked (long values cut short), and the ways out."""
    have, want = _fields(existing.model_dump(mode="json")), _fields(asked.model_dump(mode="json"))
    differ = [
        f"{name} is {have.get(name)!r:.80} there, {want.get(name)!r:.80} asked"
        for name in sorted(have.keys() | want.keys())
        if have.get(name) != want.get(name)
    ]
    return SetDefinitionConflict(
        f"memory set {existing.name!r} of namespace {namespace!r}, key {key!r} already exists with another "
        f"definition: {'; '.join(differ)}. Use the existing definition (get_memory_set({existing.name!r}), or "
        "get_or_create_memory_set with its values), delete the set and create it anew (its items go with it), "
        "or choose another set name"
    )


def _fields(dumped: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A dumped model's fields, nested ones by dotted name (``compaction_config.model``)."""
    flat: dict[str, Any] = {}
    for name, value in dumped.items():
        if isinstance(value, dict) and value:
            flat.update(_fields(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def embedding_text(item: MemorySetItem) -> str:
    """The text an item is embedded by: the value itself, or ``"role: content"`` for a chat message."""
    return str(item.value)


@dataclass(frozen=True)
class PreparedAdd:
    """A validated add request: its set's definition and the items to write, in order (with their seq)."""

    request: AddRequest
    definition: MemorySet
    items: list[tuple[MemorySetItem, int]]

    @property
    def texts(self) -> list[str]:
        """What each item is embedded by."""
        return [embedding_text(item) for item, _ in self.items]


class MemoryService:
    """Long-term memory operations over one store and one embedder (one instance per worker process).

    With a ``coordinator`` (Redis) it bumps set versions on every mutation (cache invalidation),
    records read access times (for LRU), and serializes deduplicating writers across processes.
    """

    def __init__(
        self,
        *,
        store: VectorStore,
        embedder: Embedder,
        limits: LimitsSettings,
        on_capacity: Callable[[Scope], object] | None = None,
        coordinator: Coordinator | None = None,
        embeddings: EmbeddingCache | None = None,
        redactor: Redactor | None = None,
        quotas: QuotaGuard | None = None,
        reranker: Reranker | None = None,
        rerank_candidates: int = 30,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.limits = limits
        self.on_capacity = on_capacity
        self.coordinator = coordinator
        self.embeddings = embeddings
        self.redactor = redactor
        self.quotas = quotas
        self.reranker = reranker
        self.rerank_candidates = rerank_candidates
        self._local_locks: dict[Scope, threading.Lock] = {}
        self._local_locks_guard = threading.Lock()

    def embed(self, namespace: str, texts: list[str], *, written: bool = False) -> list[list[float]]:
        """Vectors for ``texts``, through the embedding cache when there is one (``written``: texts being
        stored, cached for a shorter time)."""
        return self.embed_many([(namespace, text) for text in texts], written=written)

    def embed_many(self, pairs: list[tuple[str, str]], *, written: bool = False) -> list[list[float]]:
        """Vectors for ``(namespace, text)`` pairs, in one embedder call (cache misses only, with a cache); a
        remote embedder's tokens are charged to the pairs' namespaces (``metering.charging``)."""
        if self.embeddings is not None:
            return self.embeddings.embed_many(pairs, written=written)
        with charging(pairs):
            return embed_timed(self.embedder, [text for _, text in pairs])

    def embed_queries(self, namespace: str, texts: list[str]) -> list[list[float]]:
        """Vectors for search queries (``Embedder.embed_queries``: a model's query prefix applied), cached apart
        from documents' vectors."""
        if self.embeddings is not None:
            return self.embeddings.embed(namespace, texts, queries=True)
        with charging((namespace, text) for text in texts):
            return embed_timed(self.embedder, texts, queries=True)

    def _definition(self, scope: Scope) -> MemorySet:
        return require_set(self.store, scope)

    def _changed(self, scope: Scope) -> None:
        if self.coordinator is not None:
            self.coordinator.bump(scope)

    def record_access(self, scope: Scope, items: list[MemorySetItem]) -> None:
        """Notes that ``items`` were read now (for LRU eviction); flushed to the store by beat."""
        if self.coordinator is not None and items:
            self.coordinator.record_access(scope, [i.id for i in items])

    @contextmanager
    def _write_lock(self, scope: Scope) -> Iterator[None]:
        if self.coordinator is not None:
            with self.coordinator.set_lock(scope):
                yield
            return
        with self._local_locks_guard:
            lock = self._local_locks.setdefault(scope, threading.Lock())
        with lock:
            yield

    def create_set(self, raw: dict[str, Any]) -> SetReply:
        """Get-or-create: the first definition wins; a different one for the same name is a conflict."""
        request = parse(CreateSetRequest, raw, "create_set request")
        existing = self.store.get_set(request.namespace, request.key, request.definition.name)
        if existing is not None:
            if existing != request.definition:
                raise definition_conflict(request.namespace, request.key, existing, request.definition)
            return SetReply(definition=existing)
        self.store.put_set(request.namespace, request.key, request.definition)
        return SetReply(definition=request.definition)

    def get_set(self, raw: dict[str, Any]) -> SetReply:
        """The set's definition, or None."""
        request = parse(SetRequest, raw, "get_set request")
        return SetReply(definition=self.store.get_set(*request.scope))

    def delete_set(self, raw: dict[str, Any]) -> CountReply:
        """Deletes the items, then the definition (a crash in between leaves a retryable, harmless state)."""
        request = parse(DeleteSetRequest, raw, "delete_set request")
        self._clear(request.scope, _delete_seq(request.seq))
        existed = self.store.delete_set(*request.scope)
        self._changed(request.scope)
        return CountReply(count=int(existed))

    def add(self, raw: dict[str, Any]) -> AddReply:
        """Embeds and upserts the items (or folds duplicates into existing ones); durable when this returns.

        Returns, for each item sent, the id it is stored under: its own, or that of the existing item a
        deduplicating set folded it into.
        """
        prepared = self.prepare_add(raw)
        return self.store_add(prepared, self.embed(prepared.request.namespace, prepared.texts, written=True))

    def prepare_add(self, raw: dict[str, Any]) -> PreparedAdd:
        """Validates an add request, builds its items (redacted when redaction is on) and admits them by the
        namespace's quotas (``QuotaExceeded``); writes nothing."""
        request = parse(AddRequest, raw, "add request")
        definition = self._definition(request.scope)
        if len(request.items) > self.limits.max_items_per_call:
            raise InvalidRequestError(
                f"add carries {len(request.items)} items; at most {self.limits.max_items_per_call} are allowed"
            )
        latest = {item.id: item for item in request.items}  # a repeated id in one call: the last one wins
        items = [self._new_item(definition, new) for new in latest.values()]
        if self.quotas is not None:  # before embedding: a refused add costs no model time
            self.quotas.admit(request.scope, [item for item, _ in items])
        return PreparedAdd(request, definition, items)

    def store_add(self, prepared: PreparedAdd, vectors: list[list[float]]) -> AddReply:
        """Writes prepared items with their vectors (deduplicating under the set's lock when the set does)."""
        return self.store_add_many([prepared], [vectors])[0]

    def store_add_many(self, prepared: list[PreparedAdd], vectors: list[list[list[float]]]) -> list[AddReply]:
        """Writes several prepared adds of one set as one: one dedup pass, one upsert, one version bump.

        The result is the same as writing them one after another in this order: a later request's items
        deduplicate against an earlier one's, and an id sent twice keeps the later value.
        """
        first = prepared[0]
        request, definition = first.request, first.definition
        if any(p.request.scope != request.scope for p in prepared):
            raise ValueError("store_add_many takes adds of one set; group them by scope first")
        latest: dict[str, tuple[tuple[MemorySetItem, int], list[float]]] = {}
        for one, one_vectors in zip(prepared, vectors, strict=True):
            for item, vector in zip(one.items, one_vectors, strict=True):
                latest.pop(item[0].id, None)  # a later write of the id takes the later place in the order
                latest[item[0].id] = (item, vector)
        items = [item for item, _ in latest.values()]
        merged_vectors = [vector for _, vector in latest.values()]
        named = {new.id for one in prepared for new in one.request.items if new.id_given}
        if definition.effective_dedup == "none":
            self._upsert(request.scope, items, merged_vectors, definition.context_window)
            stored_as = {item.id: item.id for item, _ in items}
        else:
            # Embedded before taking the set's lock: only the check-and-write needs to be serialized.
            with self._write_lock(request.scope):
                stored_as = self._add_deduplicated(request.scope, definition, items, merged_vectors, named)
        hint = self.coordinator.grew(request.scope, len(items)) if self.coordinator is not None else None
        logger.debug("added %d items to %s from %d requests", len(items), request.scope, len(prepared))
        self._check_capacity(request.scope, definition, hint)
        return [AddReply(ids=[stored_as[item.id] for item in one.request.items]) for one in prepared]

    def _new_item(self, definition: MemorySet, new: NewItem) -> tuple[MemorySetItem, int]:
        check_value(new.value, definition.item_type, f"item {new.id!r}", self.limits)
        check_metadata(new.metadata, f"metadata of item {new.id!r}", self.limits)
        value, metadata = new.value, new.metadata
        if self.redactor is not None:  # before anything is embedded or stored
            metadata = self.redactor.data(metadata)
            if isinstance(value, str):
                value = self.redactor.text(value)
            else:
                value = value.model_copy(update={"content": self.redactor.text(value.content)})
        expires_at = new.expires_at
        # A pinned item never expires by policy, so the set's default TTL gives it no expiry to show.
        ttl = new.ttl if new.ttl is not None or new.pinned else definition.ttl_seconds
        if expires_at is None and ttl is not None:
            expires_at = new.created_time + timedelta(seconds=ttl)
        item = MemorySetItem(
            memory_set_name=definition.name,
            id=new.id,
            value=value,
            created_time=new.created_time,
            last_accessed_time=new.created_time,
            additional_metadata=metadata,
            importance=new.importance,
            source=new.source,
            pinned=new.pinned,
            expires_at=expires_at,
        )
        return item, new.seq

    def _upsert(
        self, scope: Scope, items: list[tuple[MemorySetItem, int]], vectors: list[list[float]], context_window: int
    ) -> None:
        records = [ItemRecord(item=item, seq=seq, vector=v) for (item, seq), v in zip(items, vectors, strict=True)]
        self.store.upsert(scope, records, context_window=context_window)

    def _add_deduplicated(
        self,
        scope: Scope,
        definition: MemorySet,
        items: list[tuple[MemorySetItem, int]],
        vectors: list[list[float]],
        named: set[str],
    ) -> dict[str, str]:
        """Folds items equal (exact) or close (semantic) to an existing or earlier one into it; stores the rest.

        An item whose id the caller named is never folded into another id: it is stored under its own, so
        ``get`` finds it by that id. A fold keeps what the caller set (``folded``).
        """
        existing = self.store.find_by_text_hash(scope, [text_hash(item.value) for item, _ in items])
        stored_as: dict[str, str] = {}
        kept: list[tuple[MemorySetItem, int]] = []
        kept_vectors: list[list[float]] = []
        merges: dict[str, MemorySetItem] = {}  # target id -> the target with every fold into it applied
        for (item, seq), vector in zip(items, vectors, strict=True):
            target = None if item.id in named else existing.get(text_hash(item.value))
            if target is None and item.id not in named and definition.effective_dedup == "semantic":
                target = self._nearest(scope, vector, kept, kept_vectors, definition.dedup_threshold)
            if target is None or target.id == item.id:
                kept.append((item, seq))
                kept_vectors.append(vector)
                existing.setdefault(text_hash(item.value), item)
                stored_as[item.id] = item.id
                continue
            merges[target.id] = folded(merges.get(target.id, target), item)
            stored_as[item.id] = target.id
        self._upsert(scope, kept, kept_vectors, definition.context_window)
        now = time.time()
        kept_seqs = {item.id: seq for item, seq in kept}
        for target_id, merged in merges.items():
            fields: dict[str, Any] = {"metadata": merged.additional_metadata, **lifecycle_payload(merged)}
            version: int | None
            if target_id in kept_seqs:  # folded into an item of this same call
                version = kept_seqs[target_id]
            else:
                fields["last_accessed_time"] = now
                version = merged.seq
            # Only onto the version the fold read: a replayed fold never merges into a newer write of the item.
            self.store.set_fields(scope, [target_id], fields, seq=version)
        return stored_as

    def _nearest(
        self,
        scope: Scope,
        vector: list[float],
        kept: list[tuple[MemorySetItem, int]],
        kept_vectors: list[list[float]],
        threshold: float,
    ) -> MemorySetItem | None:
        hits = self.store.search(scope, vector, 1, {})
        best = hits[0] if hits and (hits[0].score or 0.0) >= threshold else None
        for (candidate, _), other in zip(kept, kept_vectors, strict=True):
            score = float(np.dot(vector, other))
            if score >= threshold and (best is None or score > (best.score or 0.0)):
                best = candidate.model_copy(update={"score": score})
        return best

    def _check_capacity(self, scope: Scope, definition: MemorySet, hint: SizeHint | None) -> None:
        if self.on_capacity is None:
            return
        bound = hint.bound if hint is not None else None
        if bound is not None and bound < definition.capacity:
            # Below capacity for sure. An exact count walks the whole set (~11 ms at 100k items, on every
            # write batch), so it is taken only when the bound reaches capacity or the hint has expired.
            return
        size = self.store.count(scope)
        if hint is not None and self.coordinator is not None:
            self.coordinator.counted(scope, hint, size)
        if size < definition.capacity:
            return
        try:
            self.on_capacity(scope)
        except MemoryCoreError:
            # The write is durable already; beat's compaction sweep will catch this set later.
            logger.warning("could not enqueue the compaction of %s", scope, exc_info=True)

    def get(self, raw: dict[str, Any]) -> ItemsReply:
        """Items by id (unknown ids are absent), or all of them; insertion order. Reads count as access."""
        request = parse(IdsRequest, raw, "get request")
        self._definition(request.scope)
        if request.ids is None:
            items = self.store.list_items(request.scope)
        else:
            items = self.store.retrieve(request.scope, request.ids)
        self.record_access(request.scope, items)
        return ItemsReply(items=items)

    def delete(self, raw: dict[str, Any]) -> CountReply:
        """Deletes items by id, or all items (the definition stays), as of the request's ``seq``; returns how
        many existed."""
        request = parse(DeleteRequest, raw, "delete request")
        self._definition(request.scope)
        seq = _delete_seq(request.seq)
        if request.ids is None:
            count = self.store.count(request.scope)
            self._clear(request.scope, seq)
        else:
            count = len(self.store.retrieve(request.scope, request.ids))
            self.store.delete(request.scope, dict.fromkeys(request.ids, seq))
        self._changed(request.scope)
        return CountReply(count=count)

    def _clear(self, scope: Scope, seq: int) -> None:
        """Deletes every item stored in the set as of ``seq`` (each leaves a tombstone)."""
        self.store.delete(scope, dict.fromkeys(self.store.item_versions(scope), seq))

    def search(self, raw: dict[str, Any]) -> ItemsReply:
        """The items nearest to the query (best first) whose metadata match every filter. Hits count as access.
        Facts superseded by formation are left out unless the request has ``include_superseded``.

        Reranked (when a reranker is set and the request does not turn it off): the best ``rerank_candidates``
        hits (at least ``limit``) are scored against the query in one reranker call, and the best ``limit`` of
        them returned, each with the reranker's score."""
        request = parse(SearchRequest, raw, "search request")
        reranker, depth = self.search_plan(request)
        (vector,) = self.embed_queries(request.namespace, [request.query])
        items = self.store.search(
            request.scope,
            vector,
            depth,
            request.filters,
            text=request.query,
            mode=request.mode,
            include_superseded=request.include_superseded,
        )
        if reranker is not None:
            items = self._reranked(reranker, request.query, items, request.limit)
        self.record_access(request.scope, items)
        return ItemsReply(items=items)

    def search_plan(self, request: SearchRequest) -> tuple[Reranker | None, int]:
        """Checks a search request against the limits, the reranker and the set (which must exist); returns the
        reranker to use (None: none) and how many hits to ask the store for."""
        check_text(request.query, "query", self.limits.max_query_chars)
        check_filters(request.filters)
        if request.limit > self.limits.max_search_limit:
            raise InvalidRequestError(f"limit {request.limit} is above the maximum {self.limits.max_search_limit}")
        if request.rerank and self.reranker is None:
            raise InvalidRequestError(
                "this search asks for reranking (rerank=True) but the workers have no reranker: set "
                "MEMORY_RERANK__MODEL on them, or search with rerank=False or None"
            )
        self._definition(request.scope)
        reranker = self.reranker if request.rerank is not False else None
        return reranker, request.limit if reranker is None else max(request.limit, self.rerank_candidates)

    def _reranked(self, reranker: Reranker, query: str, items: list[MemorySetItem], limit: int) -> list[MemorySetItem]:
        """The best ``limit`` of ``items`` by the reranker's score (which replaces the fused one)."""
        ranking = rerank_timed(reranker, query, [embedding_text(item) for item in items], limit)
        return [items[index].model_copy(update={"score": score}) for index, score in ranking]

    def size(self, raw: dict[str, Any]) -> CountReply:
        """The number of visible items in the set."""
        request = parse(SetRequest, raw, "size request")
        self._definition(request.scope)
        return CountReply(count=self.store.count(request.scope))
