"""The worker-side half of long-term memory: what each task does, given a store and an embedder.

Every method takes the raw JSON request of its task, validates it (a raw message
may come from anywhere, not only from our client), acts, and returns a reply
model. Writes are idempotent: point ids are derived from the scope and item id,
so a redelivered message overwrites the same points with the same values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from memory_core.embedders import Embedder
from memory_core.errors import InvalidRequestError, MemoryCoreError, MemorySetNotFound, SetDefinitionConflict
from memory_core.messages import (
    AddReply,
    AddRequest,
    CountReply,
    CreateSetRequest,
    IdsRequest,
    ItemsReply,
    SearchRequest,
    SetReply,
    SetRequest,
)
from memory_core.models import MemorySet, MemorySetItem, Scope
from memory_core.settings import LimitsSettings
from memory_core.stores import ItemRecord, VectorStore
from memory_core.validation import check_filters, check_metadata, check_text, check_value, parse

logger = logging.getLogger(__name__)


def embedding_text(item: MemorySetItem) -> str:
    """The text an item is embedded by: the value itself, or ``"role: content"`` for a chat message."""
    return str(item.value)


class MemoryService:
    """Long-term memory operations over one store and one embedder (one instance per worker process)."""

    def __init__(
        self,
        *,
        store: VectorStore,
        embedder: Embedder,
        limits: LimitsSettings,
        on_capacity: Callable[[Scope], object] | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.limits = limits
        self.on_capacity = on_capacity

    def _definition(self, scope: Scope) -> MemorySet:
        definition = self.store.get_set(*scope)
        if definition is None:
            raise MemorySetNotFound(
                f"memory set {scope.set_name!r} not found in namespace {scope.namespace!r}, key {scope.key!r}"
            )
        return definition

    def create_set(self, raw: dict[str, Any]) -> SetReply:
        """Get-or-create: the first definition wins; a different one for the same name is a conflict."""
        request = parse(CreateSetRequest, raw, "create_set request")
        existing = self.store.get_set(request.namespace, request.key, request.definition.name)
        if existing is not None:
            if existing != request.definition:
                raise SetDefinitionConflict(
                    f"memory set {existing.name!r} already exists with {existing.model_dump(mode='json')}; "
                    f"got {request.definition.model_dump(mode='json')}"
                )
            return SetReply(definition=existing)
        self.store.put_set(request.namespace, request.key, request.definition)
        return SetReply(definition=request.definition)

    def get_set(self, raw: dict[str, Any]) -> SetReply:
        """The set's definition, or None."""
        request = parse(SetRequest, raw, "get_set request")
        return SetReply(definition=self.store.get_set(*request.scope))

    def delete_set(self, raw: dict[str, Any]) -> CountReply:
        """Deletes the items, then the definition (a crash in between leaves a retryable, harmless state)."""
        request = parse(SetRequest, raw, "delete_set request")
        self.store.delete(request.scope, None)
        return CountReply(count=int(self.store.delete_set(*request.scope)))

    def add(self, raw: dict[str, Any]) -> AddReply:
        """Embeds and upserts the items; durable when this returns."""
        request = parse(AddRequest, raw, "add request")
        definition = self._definition(request.scope)
        if len(request.items) > self.limits.max_items_per_call:
            raise InvalidRequestError(
                f"add carries {len(request.items)} items; at most {self.limits.max_items_per_call} are allowed"
            )
        latest = {item.id: item for item in request.items}  # a repeated id in one call: the last one wins
        items = []
        for new in latest.values():
            check_value(new.value, definition.item_type, f"item {new.id!r}", self.limits)
            check_metadata(new.metadata, f"metadata of item {new.id!r}", self.limits)
            items.append(
                (
                    new.seq,
                    MemorySetItem(
                        memory_set_name=definition.name,
                        id=new.id,
                        value=new.value,
                        created_time=new.created_time,
                        last_accessed_time=new.created_time,
                        additional_metadata=new.metadata,
                    ),
                )
            )
        vectors = self.embedder.embed([embedding_text(item) for _, item in items])
        records = [ItemRecord(item=item, seq=seq, vector=v) for (seq, item), v in zip(items, vectors, strict=True)]
        self.store.upsert(request.scope, records)
        logger.debug("added %d items to %s", len(records), request.scope)
        self._check_capacity(request.scope, definition)
        return AddReply(ids=[item.id for item in request.items])

    def _check_capacity(self, scope: Scope, definition: MemorySet) -> None:
        if self.on_capacity is None or self.store.count(scope) < definition.capacity:
            return
        try:
            self.on_capacity(scope)
        except MemoryCoreError:
            # The write is durable already; beat's compaction sweep will catch this set later.
            logger.warning("could not enqueue the compaction of %s", scope, exc_info=True)

    def get(self, raw: dict[str, Any]) -> ItemsReply:
        """Items by id (unknown ids are absent), or all of them; insertion order."""
        request = parse(IdsRequest, raw, "get request")
        self._definition(request.scope)
        if request.ids is None:
            return ItemsReply(items=self.store.list_items(request.scope))
        return ItemsReply(items=self.store.retrieve(request.scope, request.ids))

    def delete(self, raw: dict[str, Any]) -> CountReply:
        """Deletes items by id, or all items (the definition stays); returns how many existed."""
        request = parse(IdsRequest, raw, "delete request")
        self._definition(request.scope)
        if request.ids is None:
            count = self.store.count(request.scope)
        else:
            count = len(self.store.retrieve(request.scope, request.ids))
        self.store.delete(request.scope, request.ids)
        return CountReply(count=count)

    def search(self, raw: dict[str, Any]) -> ItemsReply:
        """The items nearest to the query (best first) whose metadata match every filter."""
        request = parse(SearchRequest, raw, "search request")
        check_text(request.query, "query", self.limits.max_query_chars)
        check_filters(request.filters)
        if request.limit > self.limits.max_search_limit:
            raise InvalidRequestError(f"limit {request.limit} is above the maximum {self.limits.max_search_limit}")
        self._definition(request.scope)
        (vector,) = self.embedder.embed([request.query])
        return ItemsReply(items=self.store.search(request.scope, vector, request.limit, request.filters))

    def size(self, raw: dict[str, Any]) -> CountReply:
        """The number of items in the set."""
        request = parse(SetRequest, raw, "size request")
        self._definition(request.scope)
        return CountReply(count=self.store.count(request.scope))
