"""Long-term memory sets of one (namespace, key): the handle apps use to add, get, search and delete.

``LongTermOperations`` holds the logic of every call once, as operations (``core.steps``);
``LongTermMemory`` runs them blocking and ``AsyncLongTermMemory`` (``client.aio``) awaits them.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from memory_core.client.checks import ITEM_ID, SET_NAME, check_query, checked, lifecycle_fields
from memory_core.client.coalescing import Sent
from memory_core.client.formation import FormationOperations, MessageLike
from memory_core.client.reads import ReadCache, search_digest
from memory_core.core import routing
from memory_core.core.cache.definitions import DefinitionCache
from memory_core.core.dispatch import Dispatcher
from memory_core.core.errors import BrokerUnavailable, InvalidRequestError, MemorySetNotFound
from memory_core.core.keys import Keys
from memory_core.core.messages import (
    MAX_BROWSE_LIMIT,
    MAX_CONTAINS_CHARS,
    MAX_CURSOR_CHARS,
    AddReply,
    AddRequest,
    BrowseQuery,
    BrowseRequest,
    BrowseSort,
    CompactionReport,
    CompactRequest,
    CountReply,
    CreateSetRequest,
    DeleteRequest,
    DeleteSetRequest,
    Explained,
    ExplainReply,
    ExplainRequest,
    ForgetSourcesReport,
    FormationReport,
    IdsRequest,
    ItemsReply,
    NewItem,
    Page,
    SearchRequest,
    SetReply,
    SetRequest,
)
from memory_core.core.models import (
    ChatMessage,
    CompactionConfig,
    DedupMode,
    EvictionPolicy,
    MemorySet,
    MemorySetItem,
    SearchMode,
    utcnow,
)
from memory_core.core.settings import Settings, redact_url
from memory_core.core.steps import Call, Operation, SubmitAdd, Wait
from memory_core.core.validation import (
    check_filters,
    check_metadata,
    check_seconds,
    check_text,
    check_ttl,
    check_value,
    parse,
    short_repr,
)

if TYPE_CHECKING:
    from memory_core.client.client import MemoryClient


class ClientParts(Protocol):
    """What the operations need of a client, blocking or asyncio."""

    settings: Settings
    keys: Keys
    definitions: DefinitionCache
    reads: ReadCache | None

    def reserve_seq(self, count: int) -> int: ...


SetRef = MemorySet | str


def stored_ids(reply: dict[str, Any], offset: int, count: int) -> list[str]:
    """The ids stored for the ``count`` items at ``offset`` of an add task's items."""
    return AddReply.model_validate(reply).ids[offset : offset + count]


@dataclass(frozen=True)
class WriteReceipt:
    """What ``submit`` returns at once: the ids, and a way to wait until the write is durable."""

    ids: list[str]
    task_id: str
    namespace: str
    _dispatcher: Dispatcher
    # Where these items sit in the task's items: concurrent adds to one set may share a task.
    _offset: int = 0
    _shared: bool = False

    def wait(self, timeout: float | None = None) -> list[str]:
        """Blocks until the worker has stored the items; raises the worker's typed error if it failed.

        Returns the id each item is stored under. Receipts that share a task share its reply. ``timeout``:
        seconds, above 0 and at most 604800 (a week); default ``MEMORY_CLIENT__TIMEOUT``.
        """
        if timeout is not None:
            check_seconds(timeout, "timeout")
        if not self.task_id:  # an empty add sent nothing, so there is nothing to wait for
            return self.ids
        stored = self._dispatcher.wait(self.namespace, self.task_id, timeout, shared=self._shared, task=routing.ADD)
        return stored_ids(stored, self._offset, len(self.ids))


class LongTermOperations:
    """Every long-term call of one ``(namespace, key)`` as an operation: validation, requests, caches, replies.

    ``bind`` turns a definition the store returned into what the handle gives back.
    """

    def __init__(self, client: ClientParts, namespace: str, key: str, bind: Callable[[MemorySet], MemorySet]) -> None:
        self._client = client
        self.namespace = namespace
        self.key = key
        self._bind = bind

    def get_or_create_memory_set(
        self, name: str, item_type: Any, capacity: Any, context_window: Any, **options: Any
    ) -> Operation[MemorySet]:
        ttl_seconds = options.get("ttl_seconds")
        if ttl_seconds is not None:
            # The model bounds it below only; past MAX_TTL_SECONDS the worker's date arithmetic overflows.
            check_ttl(ttl_seconds, "ttl_seconds", 1)
        fields = {
            "name": checked(SET_NAME, name, "memory set name"),
            "item_type": item_type,
            "capacity": capacity,
            "context_window": context_window,
            **options,
            "compaction_config": options.get("compaction_config") or CompactionConfig(),
        }
        definition = parse(MemorySet, fields, f"memory set definition {name!r}")
        request = CreateSetRequest(namespace=self.namespace, key=self.key, definition=definition)
        reply = SetReply.model_validate((yield self._call(routing.CREATE_SET, request, definition.name)))
        assert reply.definition is not None
        self._client.definitions.put(self.namespace, self.key, reply.definition)
        return self._bind(reply.definition)

    def get_memory_set(self, name: str) -> Operation[MemorySet]:
        set_name = checked(SET_NAME, name, "memory set name")
        request = SetRequest(namespace=self.namespace, key=self.key, set_name=set_name)
        reply = SetReply.model_validate((yield self._call(routing.GET_SET, request, set_name)))
        if reply.definition is None:
            self._client.definitions.forget(self.namespace, self.key, set_name)
            raise self._not_found(set_name)
        self._client.definitions.put(self.namespace, self.key, reply.definition)
        return self._bind(reply.definition)

    def delete_memory_set(self, name: str) -> Operation[bool]:
        set_name = checked(SET_NAME, name, "memory set name")
        self._client.definitions.forget(self.namespace, self.key, set_name)
        seq = self._client.reserve_seq(1)  # from the clock that orders the set's writes
        request = DeleteSetRequest(namespace=self.namespace, key=self.key, set_name=set_name, seq=seq)
        reply = CountReply.model_validate((yield self._call(routing.DELETE_SET, request, set_name)))
        self._client.definitions.forget(self.namespace, self.key, set_name)
        return reply.count > 0

    def size(self, memory_set: SetRef) -> Operation[int]:
        request = self._set_request(memory_set)
        return CountReply.model_validate((yield self._call(routing.SIZE, request, request.set_name))).count

    def add(
        self,
        memory_set: SetRef,
        items: Sequence[str | ChatMessage],
        ids: Sequence[str] | None,
        metadatas: Sequence[dict[str, Any]] | None,
        lifecycle: dict[str, Any],
        *,
        wait: bool,
    ) -> Operation[list[str]]:
        # wait=True: told now, with nothing enqueued, that no worker would answer (after validation: bad
        # input is reported as such, worker or not).
        ids_sent, sent = yield from self.submit(memory_set, items, ids, metadatas, lifecycle, need_worker=wait)
        if not wait or sent is None:
            return ids_sent
        reply = yield Wait(self.namespace, sent.task_id, routing.ADD, shared=sent.shared)
        return stored_ids(reply, sent.offset, len(ids_sent))

    def submit(
        self,
        memory_set: SetRef,
        items: Sequence[str | ChatMessage],
        ids: Sequence[str] | None,
        metadatas: Sequence[dict[str, Any]] | None,
        lifecycle: dict[str, Any],
        *,
        need_worker: bool,
    ) -> Operation[tuple[list[str], Sent | None]]:
        """The ids sent and where they went (None for an empty add, which sends nothing)."""
        definition = yield from self._definition(memory_set)
        if isinstance(items, str | bytes) or not isinstance(items, Sequence):
            raise InvalidRequestError(f"items must be a list of values, got {type(items).__name__}")
        count = len(items)
        limits = self._client.settings.limits
        if count > limits.max_items_per_call:
            raise InvalidRequestError(f"add got {count} items; at most {limits.max_items_per_call} per call")
        id_given = ids is not None
        ids = self._item_ids(ids, count)
        metadatas = self._metadatas(metadatas, count)
        for i, value in enumerate(items):
            check_value(value, definition.item_type, f"item {i}", limits)
        if count == 0:
            return [], None
        now = utcnow()
        per_item = lifecycle_fields(lifecycle, count, now)
        first_seq = self._client.reserve_seq(count)
        new_items = [
            parse(
                NewItem,
                {
                    "id": ids[i],
                    "value": items[i],
                    "metadata": metadatas[i],
                    "created_time": now,
                    "seq": first_seq + i,
                    "id_given": id_given,
                    **per_item[i],
                },
                f"item {i}",
            )
            for i in range(count)
        ]
        request = AddRequest(namespace=self.namespace, key=self.key, set_name=definition.name, items=new_items)
        sent: Sent = yield SubmitAdd(request, need_worker)
        return ids, sent

    def compact(self, memory_set: SetRef, timeout: float | None) -> Operation[CompactionReport]:
        if timeout is not None:
            check_seconds(timeout, "timeout")
        base = self._set_request(memory_set)
        request = CompactRequest(namespace=base.namespace, key=base.key, set_name=base.set_name, force=True)
        limit = max(self._client.settings.client.timeout, 600.0) if timeout is None else timeout
        reply = yield Call(routing.COMPACT, request, self._summary(base.set_name), limit)
        return CompactionReport.model_validate(reply)

    def get(self, memory_set: SetRef, ids: Sequence[str] | None) -> Operation[list[MemorySetItem]]:
        request = self._ids_request(memory_set, ids)
        reads = self._client.reads
        if reads is None or request.ids is None:
            reply = yield self._call(routing.GET, request, request.set_name, ids=len(request.ids or ()))
            return ItemsReply.model_validate(reply).items
        scope = request.scope
        found, version, online = reads.items(scope, request.ids)
        missing = [i for i in dict.fromkeys(request.ids) if i not in found]
        if missing:
            if not online:
                raise BrokerUnavailable(f"Redis at {redact_url(self._client.settings.redis.url)} is unreachable")
            fetch = request.model_copy(update={"ids": missing})
            reply = yield self._call(routing.GET, fetch, request.set_name, ids=len(missing))
            fetched = ItemsReply.model_validate(reply).items
            reads.store_items(scope, version, fetched)
            found.update((item.id, item) for item in fetched)
        return sorted(found.values(), key=lambda item: item.seq or 0)

    def delete(self, memory_set: SetRef, ids: Sequence[str] | None) -> Operation[int]:
        ids_request = self._ids_request(memory_set, ids)
        # Ordered against the items' writes by the same clock: an add issued after this delete survives it,
        # and one issued before it never brings the items back (a redelivered task included).
        request = DeleteRequest(**dict(ids_request), seq=self._client.reserve_seq(1))
        reply = yield self._call(routing.DELETE, request, request.set_name, ids=len(request.ids or ()))
        return CountReply.model_validate(reply).count

    def search(
        self,
        memory_set: SetRef,
        query: str,
        limit: int,
        filters: dict[str, Any] | None,
        mode: SearchMode,
        rerank: bool | None = None,
        include_superseded: bool = False,
    ) -> Operation[list[MemorySetItem]]:
        request = self._search_request(memory_set, query, limit, filters, mode, rerank, include_superseded)
        set_name, filters = request.set_name, request.filters
        reads = self._client.reads
        if reads is None:
            return ItemsReply.model_validate((yield self._call(routing.SEARCH, request, set_name, limit=limit))).items
        scope, digest = request.scope, search_digest(query, limit, filters, mode, rerank, include_superseded)
        cached, version, online = reads.search(scope, digest)
        if cached is not None:
            return cached
        if not online:
            raise BrokerUnavailable(f"Redis at {redact_url(self._client.settings.redis.url)} is unreachable")
        items = ItemsReply.model_validate((yield self._call(routing.SEARCH, request, set_name, limit=limit))).items
        reads.store_search(scope, version, digest, items)
        return items

    def explain(
        self,
        memory_set: SetRef,
        query: str,
        limit: int,
        filters: dict[str, Any] | None,
        mode: SearchMode,
        rerank: bool | None,
        include_superseded: bool,
    ) -> Operation[list[Explained]]:
        searched = self._search_request(memory_set, query, limit, filters, mode, rerank, include_superseded)
        request = ExplainRequest(**dict(searched))
        reply = yield self._call(routing.EXPLAIN, request, request.set_name, limit=limit)
        return ExplainReply.model_validate(reply).hits

    def browse(
        self, memory_set: SetRef, sort: Any, descending: Any, cursor: Any, limit: Any, filters: dict[str, Any]
    ) -> Operation[Page]:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_BROWSE_LIMIT:
            raise InvalidRequestError(f"limit must be an int from 1 to {MAX_BROWSE_LIMIT}, got {short_repr(limit)}")
        if cursor is not None and (not isinstance(cursor, str) or not 1 <= len(cursor) <= MAX_CURSOR_CHARS):
            raise InvalidRequestError(f"cursor must be a page's next_cursor (a str) or None, got {short_repr(cursor)}")
        query = parse(BrowseQuery, _browse_fields(sort, descending, filters), "browse query")
        set_name = self._set_name(memory_set)
        request = BrowseRequest(
            namespace=self.namespace, key=self.key, set_name=set_name, query=query, cursor=cursor, limit=limit
        )
        return Page.model_validate((yield self._call(routing.BROWSE, request, set_name, limit=limit)))

    # -- helpers --------------------------------------------------------------

    def _search_request(
        self,
        memory_set: SetRef,
        query: str,
        limit: int,
        filters: dict[str, Any] | None,
        mode: SearchMode,
        rerank: bool | None,
        include_superseded: bool,
    ) -> SearchRequest:
        limits = self._client.settings.limits
        check_query(query, limit, limits)
        filters = {} if filters is None else filters
        check_filters(filters)  # before dict(): a str or a list of pairs is not a mapping of filters
        if mode not in ("hybrid", "dense", "lexical"):
            raise InvalidRequestError(f"mode must be 'hybrid', 'dense' or 'lexical', got {short_repr(mode)}")
        if rerank is not None and not isinstance(rerank, bool):
            raise InvalidRequestError(f"rerank must be True, False or None, got {short_repr(rerank)}")
        if not isinstance(include_superseded, bool):
            raise InvalidRequestError(f"include_superseded must be True or False, got {short_repr(include_superseded)}")
        return SearchRequest(
            namespace=self.namespace,
            key=self.key,
            set_name=self._set_name(memory_set),
            query=query,
            limit=limit,
            filters=dict(filters),
            mode=mode,
            rerank=rerank,
            include_superseded=include_superseded,
        )

    def _call(self, task: str, request: Any, set_name: str, **counts: int) -> Call:
        return Call(task, request, self._summary(set_name, **counts))

    def _summary(self, set_name: str, **counts: int) -> str:
        # What Flower and logs show for a task: scope and counts, never memory text.
        fields = {"namespace": self.namespace, "key": self.key, "set": set_name, **counts}
        return json.dumps(fields)

    def _not_found(self, set_name: str) -> MemorySetNotFound:
        return MemorySetNotFound(f"memory set {set_name!r} not found in namespace {self.namespace!r}, key {self.key!r}")

    def _set_name(self, memory_set: SetRef) -> str:
        name = memory_set.name if isinstance(memory_set, MemorySet) else memory_set
        return checked(SET_NAME, name, "memory set name")

    def _set_request(self, memory_set: SetRef) -> SetRequest:
        return SetRequest(namespace=self.namespace, key=self.key, set_name=self._set_name(memory_set))

    def _definition(self, memory_set: SetRef) -> Operation[MemorySet]:
        if isinstance(memory_set, MemorySet):
            return memory_set
        set_name = self._set_name(memory_set)
        cached = self._client.definitions.get(self.namespace, self.key, set_name)
        return cached if cached is not None else (yield from self.get_memory_set(set_name))

    def _ids_request(self, memory_set: SetRef, ids: Sequence[str] | None) -> IdsRequest:
        valid = None
        if ids is not None:
            if isinstance(ids, str) or not isinstance(ids, Sequence):
                raise InvalidRequestError(f"ids must be a list of str or None, got {type(ids).__name__}")
            valid = [checked(ITEM_ID, i, "item id") for i in ids]
        return IdsRequest(namespace=self.namespace, key=self.key, set_name=self._set_name(memory_set), ids=valid)

    @staticmethod
    def _item_ids(ids: Sequence[str] | None, count: int) -> list[str]:
        if ids is None:
            return [str(uuid.uuid4()) for _ in range(count)]
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise InvalidRequestError(f"ids must be a list of str, got {type(ids).__name__}")
        if len(ids) != count:
            raise InvalidRequestError(f"got {len(ids)} ids for {count} items; give one id per item or none")
        return [checked(ITEM_ID, i, "item id") for i in ids]

    def _metadatas(self, metadatas: Sequence[dict[str, Any]] | None, count: int) -> list[dict[str, Any]]:
        if metadatas is None:
            return [{} for _ in range(count)]
        if not isinstance(metadatas, Sequence) or isinstance(metadatas, str):
            raise InvalidRequestError(f"metadatas must be a list of dicts, got {type(metadatas).__name__}")
        if len(metadatas) != count:
            raise InvalidRequestError(f"got {len(metadatas)} metadatas for {count} items; give one per item or none")
        copies = []
        for i, metadata in enumerate(metadatas):
            check_metadata(metadata, f"metadatas[{i}]", self._client.settings.limits)
            copies.append(json.loads(json.dumps(metadata)))  # each item its own copy; shared dicts stay apart
        return copies


BROWSE_SORTS = ("created", "updated", "importance", "last_access", "expires")


def _is_moment(value: object) -> bool:
    return isinstance(value, datetime) and value.utcoffset() is not None


def _is_share(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= 1


_FLAG = (lambda value: isinstance(value, bool), "True, False or None")
_MOMENT = (_is_moment, "an aware datetime (with a timezone) or None")
_SHARE = (_is_share, "a number from 0 to 1 or None")
_BROWSE_CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "created_after": _MOMENT,
    "created_before": _MOMENT,
    "compacted": _FLAG,
    "pinned": _FLAG,
    "expiring": _FLAG,
    "min_importance": _SHARE,
    "max_importance": _SHARE,
}


def _browse_fields(sort: object, descending: object, filters: dict[str, Any]) -> dict[str, Any]:
    """A browse's query fields, each checked as given (pydantic alone would take ``"yes"`` for True, or a naive
    datetime's local time for an instant)."""
    if sort not in BROWSE_SORTS:
        raise InvalidRequestError(f"sort must be one of {', '.join(map(repr, BROWSE_SORTS))}, got {short_repr(sort)}")
    if not isinstance(descending, bool):
        raise InvalidRequestError(f"descending must be True or False, got {short_repr(descending)}")
    contains = filters.get("contains")
    if contains is not None:
        if not isinstance(contains, str):
            raise InvalidRequestError(f"contains must be a str of words or None, got {short_repr(contains)}")
        check_text(contains, f"contains {short_repr(contains)}", MAX_CONTAINS_CHARS)
    metadata = filters.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise InvalidRequestError(
                f"metadata must be a dict of metadata key -> str or int, got {short_repr(metadata)}"
            )
        check_filters(metadata)
    for name, (valid, expected) in _BROWSE_CHECKS.items():
        value = filters.get(name)
        if value is not None and not valid(value):
            raise InvalidRequestError(f"{name} must be {expected}, got {short_repr(value)}")
    fields = {name: value for name, value in filters.items() if value is not None}
    for name in ("min_importance", "max_importance"):
        if name in fields:
            fields[name] = float(fields[name])  # an int (0 or 1) is a number too; the message takes floats
    return {"sort": sort, "descending": descending, **fields}


class LongTermMemory:
    """Memory sets of one ``(namespace, key)``; the Flink Agents long-term memory API.

    Decisions where the API could be read several ways:

    * ``get_or_create_memory_set`` with a different definition for an existing name raises
      ``SetDefinitionConflict``: the first definition wins.
    * ``add`` with an id that exists replaces that item (value, metadata, time, position).
    * ``add([])`` returns ``[]`` and sends nothing.
    """

    def __init__(self, client: MemoryClient, namespace: str, key: str) -> None:
        self._client = client
        self.namespace = namespace
        self.key = key
        self._ops = LongTermOperations(client, namespace, key, lambda definition: definition.bind(self))
        self._formation = FormationOperations(client, namespace, key)

    def __repr__(self) -> str:
        return f"LongTermMemory(namespace={self.namespace!r}, key={self.key!r})"

    # -- set administration -------------------------------------------------

    def get_or_create_memory_set(
        self,
        name: str,
        item_type: type[str | ChatMessage] = str,
        capacity: int = 100,
        compaction_config: CompactionConfig | None = None,
        *,
        ttl_seconds: int | None = None,
        eviction: EvictionPolicy | None = None,
        dedup: DedupMode | None = None,
        dedup_threshold: float = 0.95,
        context_window: int = 2,
    ) -> MemorySet:
        """Returns the set ``name``, creating it with this definition if it does not exist.

        ``capacity``: the items it holds before compaction folds them (an int from 1 to 1000000).
        ``ttl_seconds``: default time to live of its items (an int from 1 to 3153600000, 100 years).
        ``eviction``: keep at most ``max_items`` (lru or importance). ``dedup``: ``exact`` (default for text
        sets), ``semantic`` (``dedup_threshold`` cosine, a number above 0 and at most 1), or ``none`` (default
        for chat sets). ``context_window``: how many earlier items are indexed with each item for lexical
        search (an int from 0 to 16; 2 by default, 0 for sets of unrelated facts).
        """
        options: dict[str, Any] = {"compaction_config": compaction_config, "ttl_seconds": ttl_seconds}
        options |= {"eviction": eviction, "dedup": dedup, "dedup_threshold": dedup_threshold}
        operation = self._ops.get_or_create_memory_set(name, item_type, capacity, context_window, **options)
        return self._client.run(operation)

    def get_memory_set(self, name: str) -> MemorySet:
        """The set ``name``; raises ``MemorySetNotFound`` when it does not exist."""
        return self._client.run(self._ops.get_memory_set(name))

    def delete_memory_set(self, name: str) -> bool:
        """Deletes the set and all its items; False when it did not exist."""
        return self._client.run(self._ops.delete_memory_set(name))

    # -- items ----------------------------------------------------------------

    def size(self, memory_set: SetRef) -> int:
        """The number of items in the set."""
        return self._client.run(self._ops.size(memory_set))

    def add(
        self,
        memory_set: SetRef,
        items: Sequence[str | ChatMessage],
        ids: Sequence[str] | None = None,
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        wait: bool = True,
        **lifecycle: Any,
    ) -> list[str]:
        """Adds items; returns their ids, in the order given.

        With ``wait=True`` (the default) it returns once the worker has stored them durably, with the
        id each item is stored under (its own, or the existing item a deduplicating set folded it into).
        With ``wait=False`` it returns the ids sent as soon as the broker has accepted the task.
        Lifecycle keywords, each one value for all items or a list with one per item: ``importance``
        (0..1, default 0.5), ``source`` (free text), ``pinned`` (never evicted or expired by policy),
        ``ttl`` (whole seconds, up to 100 years) or ``expires_at`` (an aware datetime within 100 years of
        now); without either, the set's default TTL. Metadata ints must fit in signed 64 bits.
        Everything is validated before anything is enqueued.
        """
        return self._client.run(self._ops.add(memory_set, items, ids, metadatas, lifecycle, wait=wait))

    def submit(
        self,
        memory_set: SetRef,
        items: Sequence[str | ChatMessage],
        ids: Sequence[str] | None = None,
        metadatas: Sequence[dict[str, Any]] | None = None,
        **lifecycle: Any,
    ) -> WriteReceipt:
        """Like ``add(wait=False)``, returning a receipt that can be waited on for durability."""
        operation = self._ops.submit(memory_set, items, ids, metadatas, lifecycle, need_worker=False)
        sent_ids, sent = self._client.run(operation)
        dispatcher = self._client.dispatcher
        if sent is None:
            return WriteReceipt(ids=[], task_id="", namespace=self.namespace, _dispatcher=dispatcher)
        return WriteReceipt(sent_ids, sent.task_id, self.namespace, dispatcher, sent.offset, sent.shared)

    def compact(self, memory_set: SetRef, *, timeout: float | None = None) -> CompactionReport:
        """Compacts the set now, even below capacity, and waits for the report.

        ``timeout``: seconds, above 0 and at most 604800 (a week); default the larger of 600 and
        ``MEMORY_CLIENT__TIMEOUT``.
        """
        return self._client.run(self._ops.compact(memory_set, timeout))

    def get(self, memory_set: SetRef, ids: Sequence[str] | None = None) -> list[MemorySetItem]:
        """Items by id (unknown ids are left out), or every item when ``ids`` is None; insertion order."""
        return self._client.run(self._ops.get(memory_set, ids))

    def delete(self, memory_set: SetRef, ids: Sequence[str] | None = None) -> int:
        """Deletes items by id, or every item when ``ids`` is None (the set stays); returns how many existed."""
        return self._client.run(self._ops.delete(memory_set, ids))

    def search(
        self,
        memory_set: SetRef,
        query: str,
        limit: int = 10,
        filters: dict[str, Any] | None = None,
        *,
        mode: SearchMode = "hybrid",
        rerank: bool | None = None,
        include_superseded: bool = False,
    ) -> list[MemorySetItem]:
        """The ``limit`` items most relevant to ``query``, best first, each with a ``score`` (higher = better).

        ``limit``: an int from 1 to ``MEMORY_LIMITS__MAX_SEARCH_LIMIT`` (100).

        ``mode``: ``hybrid`` (the default: dense and BM25 rankers fused by DBSF), ``dense`` (cosine only;
        ``score`` is the cosine) or ``lexical`` (BM25 only). ``filters`` match metadata keys exactly:
        ``{"source": "chat"}``, or a list for any-of; values are str or 64-bit int.

        ``rerank``: where the workers have a reranker (``MEMORY_RERANK__MODEL``), it scores the best
        ``MEMORY_RERANK__CANDIDATES`` hits against the query and ``score`` is its own. None (the default) leaves
        it to the workers, False turns it off for this search, True asks for it (``InvalidRequestError`` where
        the workers have none). A failing reranker raises ``RerankerError`` (``TransientRerankerError`` when
        retrying may help).

        ``include_superseded``: facts superseded by formation are left out unless include_superseded=True
        (then they come too, each with its ``fact.valid_to`` set). True or False.
        """
        return self._client.run(self._ops.search(memory_set, query, limit, filters, mode, rerank, include_superseded))

    def browse(
        self,
        memory_set: SetRef,
        *,
        sort: BrowseSort = "created",
        descending: bool = True,
        cursor: str | None = None,
        limit: int = 50,
        contains: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        compacted: bool | None = None,
        pinned: bool | None = None,
        min_importance: float | None = None,
        max_importance: float | None = None,
        expiring: bool | None = None,
    ) -> Page:
        """One page of the set's visible items (superseded facts included, each with its ``fact``), for looking at
        a set of any size: ``page.items``, ``page.next_cursor`` (pass it as ``cursor`` for the next page; None after
        the last) and ``page.total`` (how many items match, exact). Reads record no access.

        ``sort``: ``created`` (the creation time; a range's start), ``updated`` (the last write), ``importance``,
        ``last_access`` or ``expires`` (items without an expiry are left out); ties by the last write, then by id,
        in the same direction (``descending``: newest, highest first). ``limit``: an int from 1 to 200.
        A cursor continues the set, sort and direction it came from (others raise ``InvalidRequestError``); pages
        are stable under writes: an item written meanwhile shows on a later page or not at all, never twice.

        Filters, each narrowing: ``contains`` (every word, case-insensitive, a word of the item's text or of a chat
        message's content), ``metadata`` (exact matches, as search ``filters``), ``created_after`` (inclusive) and
        ``created_before`` (exclusive; aware datetimes), ``compacted`` (True: summaries only; False: no summaries),
        ``pinned``, ``min_importance`` and ``max_importance`` (0 to 1, inclusive), ``expiring`` (True: items with
        an expiry; False: without). Every bad argument raises ``InvalidRequestError`` naming it.
        """
        filters = {
            "contains": contains,
            "metadata": metadata,
            "created_after": created_after,
            "created_before": created_before,
            "compacted": compacted,
            "pinned": pinned,
            "min_importance": min_importance,
            "max_importance": max_importance,
            "expiring": expiring,
        }
        return self._client.run(self._ops.browse(memory_set, sort, descending, cursor, limit, filters))

    def explain(
        self,
        memory_set: SetRef,
        query: str,
        limit: int = 10,
        *,
        mode: SearchMode = "hybrid",
        rerank: bool | None = None,
        filters: dict[str, Any] | None = None,
        include_superseded: bool = False,
    ) -> list[Explained]:
        """The hits ``search`` would return (the same arguments), each with its score taken apart: ``item`` (its
        ``score`` the final one), ``fused`` (the fused score, before any reranking), and per ranker its raw score
        and DBSF-scaled part, None where that ranker did not return the hit: ``dense``/``dense_scaled`` (cosine),
        ``bm25``/``bm25_scaled`` (the item's text), ``context``/``context_scaled`` (its text with the turns before
        it), and ``rerank`` (the reranker's score, where one ranked the hits). Records no access."""
        operation = self._ops.explain(memory_set, query, limit, filters, mode, rerank, include_superseded)
        return self._client.run(operation)

    # -- formation --------------------------------------------------------------

    def remember(
        self,
        messages: Sequence[MessageLike],
        *,
        set_name: str = "facts",
        wait: bool = False,
        timeout: float | None = None,
    ) -> FormationReport:
        """Forms memories from a conversation: a model (Claude) extracts self-contained facts and reconciles them
        with the set's live facts, on the ``memory.formation`` queue, exactly once per operation.

        ``messages``: ``ChatMessage``s or ``{"role", "content"}`` dicts (optionally ``"id"``, the message's own
        id, and ``"at"``, an aware datetime it was said at; a ``ChatMessage`` carries them in ``extra_args``).
        Messages without an id get one from their role, content and position, so the same call twice is the
        same operation: its facts are formed once.

        Returns the operation's receipt at once (``status="pending"``, its ``op_id``); with ``wait=True`` it
        returns when the facts are visible (``status="done"`` with the decisions), or ``"deferred"`` when the
        namespace is over its daily token budget (the messages are kept). Without a model on the workers the
        user's own turns are kept verbatim (``formed_by="verbatim"``). ``timeout``: seconds (``wait=True``).
        """
        return self._client.run(self._formation.remember(messages, set_name, wait=wait, timeout=timeout))

    def operation(self, op_id: str) -> FormationReport:
        """Where a formation operation stands: pending, running, done (with its decisions), deferred or failed."""
        return self._client.run(self._formation.operation(op_id))

    def history(self, fact_id: str, *, set_name: str = "facts") -> list[MemorySetItem]:
        """A fact's chain, oldest first: the facts it superseded, itself, and those that superseded it; each with
        its provenance in ``fact`` (sources, operation, decisions, model, prompt version, times)."""
        return self._client.run(self._formation.history(fact_id, set_name))

    def forget_sources(self, source_ids: Sequence[str], *, set_name: str = "facts") -> ForgetSourcesReport:
        """Erases messages from the set's facts: a fact resting on them alone is deleted, the others lose them
        from their evidence (and the key's kept operations lose their text)."""
        return self._client.run(self._formation.forget_sources(source_ids, set_name))
