"""The thin client: validates, scopes, assigns ids, and enqueues tasks. It never opens the vector store.

    client = MemoryClient.from_env()
    notes = client.long_term("acme", "user-42").get_or_create_memory_set("notes", item_type=str, capacity=100)
    ids = notes.add(["Alice prefers green tea"])
    notes.search("what does Alice drink?", limit=5)

Every call is scoped to the namespace and key of its ``LongTermMemory`` handle;
the names are validated here (and again by the worker) before anything is sent.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

import redis
from pydantic import TypeAdapter, ValidationError

from memory_core import routing, tracing
from memory_core.auth import TokenMap, refusal
from memory_core.cache.definitions import DefinitionCache
from memory_core.cache.local import LocalCache
from memory_core.cache.reads import ReadCache, search_digest
from memory_core.cache.redis import RedisCache
from memory_core.cache.tiered import TieredCache
from memory_core.candidates import from_session, from_short_term
from memory_core.checkpoints import CheckpointStore
from memory_core.coalescing import AddCoalescer
from memory_core.coordination import Coordinator
from memory_core.dispatch import Dispatcher, open_redis
from memory_core.errors import BrokerUnavailable, InvalidRequestError, MemorySetNotFound
from memory_core.keys import Keys, decoded
from memory_core.messages import (
    AddReply,
    AddRequest,
    CompactionReport,
    CompactRequest,
    CountReply,
    CreateSetRequest,
    DeleteRequest,
    DeleteSetRequest,
    ForgetReceipt,
    ForgetRequest,
    IdsRequest,
    ItemsReply,
    NewItem,
    RecallReply,
    RecallRequest,
    SearchRequest,
    SetReply,
    SetRequest,
)
from memory_core.models import (
    ChatMessage,
    ClientStats,
    CompactionConfig,
    DedupMode,
    EvictionPolicy,
    ItemId,
    Key,
    MemorySet,
    MemorySetItem,
    Namespace,
    SearchMode,
    SetName,
    Usage,
    utcnow,
)
from memory_core.profile import UserProfile
from memory_core.session import Session
from memory_core.session.session import Promotion
from memory_core.settings import LimitsSettings, Settings, load_settings, redact_url
from memory_core.short_term import ShortTermMemory, end_of_run
from memory_core.tokens import TokenCounter, default_counter
from memory_core.validation import (
    check_filters,
    check_lifecycle,
    check_metadata,
    check_text,
    check_ttl,
    check_value,
    parse,
    short_repr,
)

_NAMESPACE: TypeAdapter[str] = TypeAdapter(Namespace)
_KEY: TypeAdapter[str] = TypeAdapter(Key)
_SET_NAME: TypeAdapter[str] = TypeAdapter(SetName)
_ITEM_ID: TypeAdapter[str] = TypeAdapter(ItemId)


def _checked(adapter: TypeAdapter[str], value: object, what: str) -> str:
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        raise InvalidRequestError(f"{what} {short_repr(value)} is invalid: {reason}") from exc


def _check_query(query: object, limit: object, limits: LimitsSettings) -> None:
    """The checks ``search`` and ``recall`` share: a non-empty UTF-8 query within size, a limit in range."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidRequestError(f"query must be a non-empty str, got {short_repr(query)}")
    check_text(query, "query", limits.max_query_chars)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= limits.max_search_limit:
        raise InvalidRequestError(f"limit must be an int from 1 to {limits.max_search_limit}, got {limit!r}")


_LIFECYCLE = ("importance", "source", "pinned", "ttl", "expires_at")


def _lifecycle(options: dict[str, Any], count: int, now: datetime) -> list[dict[str, Any]]:
    """Per-item lifecycle fields from keywords that are each one value for all items or a list of ``count``.

    Each value is checked as given (``check_lifecycle``): pydantic alone would coerce ``True`` to an importance
    of 1.0 or ``"yes"`` to pinned, and would let a ttl through that overflows the worker's date arithmetic.
    """
    unknown = set(options) - set(_LIFECYCLE)
    if unknown:
        raise InvalidRequestError(f"unknown add() options {sorted(unknown)}; expected some of {list(_LIFECYCLE)}")
    per_item: list[dict[str, Any]] = [{} for _ in range(count)]
    for name, value in options.items():
        if value is None:
            continue
        if isinstance(value, list | tuple):
            if len(value) != count:
                raise InvalidRequestError(
                    f"got {len(value)} values of {name!r} for {count} items; give one or one each"
                )
            values = list(value)
        else:
            values = [value] * count
        for i, (fields, one) in enumerate(zip(per_item, values, strict=True)):
            if one is not None:
                check_lifecycle(name, one, f"item {i}", now)
                fields[name] = one
    return per_item


class _SeqClock:
    """Insertion-order numbers: nanoseconds since the epoch, strictly increasing within a process."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def reserve(self, count: int) -> int:
        with self._lock:
            start = max(time.time_ns(), self._last + 1)
            self._last = start + count - 1
            return start


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

        Returns the id each item is stored under. Receipts that share a task share its reply.
        """
        if not self.task_id:  # an empty add sent nothing, so there is nothing to wait for
            return self.ids
        stored = self._dispatcher.wait(self.namespace, self.task_id, timeout, shared=self._shared, task=routing.ADD)
        return AddReply.model_validate(stored).ids[self._offset : self._offset + len(self.ids)]


class MemoryClient:
    """Entry point for apps: hands out scoped memory handles. Thread-safe; share one per process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        tracing.configure(settings.tracing)
        self.keys = Keys(settings.redis.key_prefix)
        self._redis = open_redis(settings)
        self.dispatcher = Dispatcher(settings, self._redis, self.keys)
        self._tokens = TokenMap.from_secret(settings.auth.tokens)
        self._token = settings.client.token.get_secret_value() if settings.client.token else None
        self.coordinator = Coordinator(self._redis, self.keys)
        cache = settings.cache
        self.l1 = LocalCache(max_entries=cache.l1_max_entries, max_bytes=cache.l1_max_bytes)
        tiered = TieredCache(
            self.l1, RedisCache(self._redis, redact_url(settings.redis.url)), l1_ttl=cache.l1_ttl, l2_ttl=cache.l2_ttl
        )
        self.definitions = DefinitionCache(tiered, self.keys)
        self.reads: ReadCache | None = (
            ReadCache(tiered, self.coordinator, self.keys, redact_url(settings.redis.url)) if cache.enabled else None
        )
        self._seq = _SeqClock()
        self.adds = AddCoalescer(
            self._publish_add,
            max_items=settings.client.coalesce_max_items,
            linger=settings.client.coalesce_linger_ms / 1000,
        )

    @classmethod
    def from_env(cls) -> MemoryClient:
        """A client configured from ``MEMORY_*`` environment variables (and ``.env``)."""
        return cls(load_settings())

    @property
    def dispatcher_redis(self) -> redis.Redis:
        """The Redis connection this client uses for replies, caches and counters (for ops tools)."""
        return self._redis

    def long_term(self, namespace: str, key: str) -> LongTermMemory:
        """Long-term memory of one key (user, agent, conversation) inside one namespace (tenant)."""
        namespace = self._authorized(_checked(_NAMESPACE, namespace, "namespace"))
        return LongTermMemory(self, namespace, _checked(_KEY, key, "key"))

    def short_term(self, namespace: str, key: str, *, ttl: int | None = None) -> ShortTermMemory:
        """The short-term state of one run (``key``): a path-addressed ``MemoryObject``, written back on persist.

        ``ttl`` (seconds, default ``MEMORY_SHORT_TERM__TTL``; 0 for none) expires the whole object after its
        last ``persist()``. Use it as a context manager: a clean exit persists, an exception discards.
        """
        return self._state(namespace, key, "stm", ttl, None)

    def sensory(self, namespace: str, key: str) -> ShortTermMemory:
        """Sensory memory of one run: the same object as ``short_term``, cleared (both tiers) when the
        ``with`` block of the run ends, whether it raised or not."""
        return self._state(namespace, key, "sensory", None, end_of_run)

    def _state(self, namespace: str, key: str, kind: str, ttl: int | None, on_exit: Any) -> ShortTermMemory:
        namespace = self._authorized(_checked(_NAMESPACE, namespace, "namespace"))
        key = _checked(_KEY, key, "key")
        # Bounded above too: Redis refuses an EXPIRE past its clock's range, which would surface as a
        # misleading BrokerUnavailable at the first persist().
        seconds = check_ttl(self.settings.short_term.ttl if ttl is None else ttl, "ttl", 0)
        return ShortTermMemory(
            self._redis,
            self.keys.short_term(namespace, key, kind),
            namespace=namespace,
            key=key,
            ttl=seconds or None,
            where=redact_url(self.settings.redis.url),
            on_exit=on_exit,
            max_value_bytes=self.settings.short_term.max_value_bytes,
        )

    def session(
        self,
        namespace: str,
        session_id: str,
        *,
        key: str | None = None,
        promote: Promotion = "messages",
        set_name: str | None = None,
        ttl: int | None = None,
        max_messages: int | None = None,
    ) -> Session:
        """One conversation: a Redis chat history and its strategies (buffer, window, token_buffer, summary,
        entity, vector), promoted into the long-term chat set ``set_name`` of ``(namespace, key)``.

        ``key`` (the user or agent the conversation belongs to) defaults to ``session_id``. ``ttl`` and
        ``max_messages`` default to ``MEMORY_SESSION__*``; every write renews the TTL.
        """
        namespace = self._authorized(_checked(_NAMESPACE, namespace, "namespace"))
        session_id = _checked(_KEY, session_id, "session_id")
        key = session_id if key is None else _checked(_KEY, key, "key")
        if promote not in ("messages", "summary", "both", "none"):
            raise InvalidRequestError(f"promote must be 'messages', 'summary', 'both' or 'none', got {promote!r}")
        config = self.settings.session
        name = _checked(_SET_NAME, config.promotion_set if set_name is None else set_name, "set_name")
        seconds = check_ttl(config.ttl if ttl is None else ttl, "ttl", 0)
        count = config.max_messages if max_messages is None else max_messages
        if isinstance(count, bool) or not isinstance(count, int) or count < 2:
            raise InvalidRequestError(f"max_messages must be an int >= 2, got {short_repr(count)}")
        return Session(
            self,
            namespace,
            key,
            session_id,
            promote=promote,
            set_name=name,
            ttl=seconds or None,
            max_messages=count,
            tokens=self.tokens,
        )

    def checkpoints(self, namespace: str) -> CheckpointStore:
        """Agent state snapshots of one namespace, by thread, checkpoint namespace and id."""
        namespace = self._authorized(_checked(_NAMESPACE, namespace, "namespace"))
        config = self.settings.checkpoints
        return CheckpointStore(
            redis_client=self._redis,
            keys=self.keys,
            namespace=namespace,
            check_thread=lambda thread: _checked(_KEY, thread, "thread_id"),
            limits=self.settings.limits,
            ttl=config.ttl or None,
            max_per_thread=config.max_per_thread,
            clock=self.reserve_seq,
            where=redact_url(self.settings.redis.url),
        )

    def profile(self, namespace: str, user_id: str) -> UserProfile:
        """The merged profile document of one user (the user id is the key), searchable in long-term memory."""
        namespace = self._authorized(_checked(_NAMESPACE, namespace, "namespace"))
        return UserProfile(self, namespace, _checked(_KEY, user_id, "user_id"))

    def recall(
        self,
        namespace: str,
        key: str,
        query: str,
        *,
        session_id: str | None = None,
        limit: int = 10,
        token_budget: int | None = None,
        sets: Sequence[str] | None = None,
    ) -> RecallReply:
        """The memories most useful for ``query`` from every tier of ``(namespace, key)``, ready for a prompt.

        Gathers the key's short-term state, the session ``session_id`` (its summary and newest messages)
        and the hits of its long-term sets (all of them, or ``sets``); a worker scores them by relevance,
        recency and importance (``MEMORY_RECALL__*`` weights), keeps one of each near-duplicate (noting the
        other tiers in ``also_in``), and cuts to ``limit`` items and ``token_budget`` tokens of context.
        Returns the items, best first, and ``context``: a block to put in a prompt as it is.
        """
        namespace = self._authorized(_checked(_NAMESPACE, namespace, "namespace"))
        key = _checked(_KEY, key, "key")
        limits = self.settings.limits
        _check_query(query, limit, limits)
        if token_budget is not None and (
            isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1
        ):
            raise InvalidRequestError(f"token_budget must be a positive int or None, got {token_budget!r}")
        names = None if sets is None else [_checked(_SET_NAME, n, "memory set name") for n in sets]
        config = self.settings.recall
        candidates = from_short_term(self.short_term(namespace, key), config.max_candidates)
        if session_id is not None:
            session = self.session(namespace, session_id, key=key, promote="none")
            room = max(0, config.max_candidates - len(candidates))
            candidates += from_session(session, config.session_messages, room)
        request = RecallRequest(
            namespace=namespace,
            key=key,
            query=query,
            limit=limit,
            token_budget=token_budget,
            candidates=candidates,
            sets=names,
        )
        summary = json.dumps({"namespace": namespace, "key": key, "candidates": len(candidates), "limit": limit})
        return RecallReply.model_validate(self.dispatcher.call(routing.RECALL, request, summary))

    @property
    def tokens(self) -> TokenCounter:
        """The token counter budgets are measured with (cl100k_base)."""
        return default_counter()

    def _authorized(self, namespace: str) -> str:
        # When this process knows the token map, refuse early; the workers check every task regardless.
        if self._tokens is not None and not self._tokens.grants(self._token, namespace):
            raise refusal(namespace)
        return namespace

    def usage(self, namespace: str) -> Usage:
        """Compaction counters and model tokens of one namespace (read from Redis, no task)."""
        namespace = _checked(_NAMESPACE, namespace, "namespace")
        try:
            raw = self._redis.hgetall(self.keys.usage(namespace))
        except redis.RedisError as exc:
            raise BrokerUnavailable(
                f"cannot read usage from Redis at {redact_url(self.settings.redis.url)}: {exc}"
            ) from exc
        return Usage.from_counters(namespace, {decoded(k): int(v) for k, v in raw.items()})

    def forget(self, namespace: str, key: str | None = None) -> ForgetReceipt:
        """Erases everything of a namespace, or of one key in it: items, set definitions, short-term and sensory
        state, sessions, checkpoints (a thread id counts as a key), the profile, caches and dead letters.

        Returns a receipt with counts per store. This process's own caches are cleared too; other
        processes' cached entries are unreachable (set versions are bumped) and expire with their TTL.
        """
        namespace = self._authorized(_checked(_NAMESPACE, namespace, "namespace"))
        key = None if key is None else _checked(_KEY, key, "key")
        request = ForgetRequest(namespace=namespace, key=key)
        summary = json.dumps({"namespace": namespace, "key": key})
        receipt = ForgetReceipt.model_validate(self.dispatcher.call(routing.FORGET, request, summary))
        prefix = f"{self.keys.prefix}:{namespace}:"
        # Items, searches and definitions of the scope, all in the one L1 this process has.
        self.l1.delete_where(lambda k: k.startswith(prefix) and (key is None or f":{key}:" in k))
        return receipt

    def stats(self) -> ClientStats:
        """Hit and miss counts of this process's caches, per tier, and the L1's size."""
        if self.reads is None:
            return ClientStats()
        counters = self.reads.tiered.stats
        return ClientStats(
            l1_hits=counters.l1.hits,
            l1_misses=counters.l1.misses,
            l2_hits=counters.l2.hits,
            l2_misses=counters.l2.misses,
            l1_entries=len(self.l1),
            l1_bytes=self.l1.size_bytes,
        )

    def _publish_add(self, request: AddRequest) -> str:
        # What Flower and logs show for a task: scope and counts, never memory text.
        summary = {"namespace": request.namespace, "key": request.key, "set": request.set_name}
        return self.dispatcher.send(routing.ADD, request, json.dumps({**summary, "items": len(request.items)}))

    def reserve_seq(self, count: int) -> int:
        """The first of ``count`` consecutive insertion-order numbers."""
        return self._seq.reserve(count)

    def close(self) -> None:
        """Releases broker and Redis connections."""
        self.dispatcher.close()
        self._redis.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


SetRef = MemorySet | str


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

        ``ttl_seconds``: default time to live of its items. ``eviction``: keep at most ``max_items`` (lru or
        importance). ``dedup``: ``exact`` (default for text sets), ``semantic`` (``dedup_threshold`` cosine),
        or ``none`` (default for chat sets). ``context_window``: how many earlier items are indexed with each
        item for lexical search (2; 0 for sets of unrelated facts).
        """
        fields = {
            "name": _checked(_SET_NAME, name, "memory set name"),
            "item_type": item_type,
            "capacity": capacity,
            "compaction_config": compaction_config or CompactionConfig(),
            "ttl_seconds": ttl_seconds,
            "eviction": eviction,
            "dedup": dedup,
            "dedup_threshold": dedup_threshold,
            "context_window": context_window,
        }
        definition = parse(MemorySet, fields, f"memory set definition {name!r}")
        request = CreateSetRequest(namespace=self.namespace, key=self.key, definition=definition)
        reply = SetReply.model_validate(self._call(routing.CREATE_SET, request, definition.name))
        assert reply.definition is not None
        self._client.definitions.put(self.namespace, self.key, reply.definition)
        return reply.definition.bind(self)

    def get_memory_set(self, name: str) -> MemorySet:
        """The set ``name``; raises ``MemorySetNotFound`` when it does not exist."""
        set_name = _checked(_SET_NAME, name, "memory set name")
        request = SetRequest(namespace=self.namespace, key=self.key, set_name=set_name)
        reply = SetReply.model_validate(self._call(routing.GET_SET, request, set_name))
        if reply.definition is None:
            self._client.definitions.forget(self.namespace, self.key, set_name)
            raise self._not_found(set_name)
        self._client.definitions.put(self.namespace, self.key, reply.definition)
        return reply.definition.bind(self)

    def delete_memory_set(self, name: str) -> bool:
        """Deletes the set and all its items; False when it did not exist."""
        set_name = _checked(_SET_NAME, name, "memory set name")
        self._client.definitions.forget(self.namespace, self.key, set_name)
        seq = self._client.reserve_seq(1)  # from the clock that orders the set's writes
        request = DeleteSetRequest(namespace=self.namespace, key=self.key, set_name=set_name, seq=seq)
        reply = CountReply.model_validate(self._call(routing.DELETE_SET, request, set_name))
        self._client.definitions.forget(self.namespace, self.key, set_name)
        return reply.count > 0

    # -- items ----------------------------------------------------------------

    def size(self, memory_set: SetRef) -> int:
        """The number of items in the set."""
        request = self._set_request(memory_set)
        return CountReply.model_validate(self._call(routing.SIZE, request, request.set_name)).count

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
        # wait=True: told now, with nothing enqueued, that no worker would answer (after validation: bad
        # input is reported as such, worker or not).
        receipt = self._submit(memory_set, items, ids, metadatas, lifecycle, need_worker=wait)
        if wait:
            return receipt.wait()
        return receipt.ids

    def submit(
        self,
        memory_set: SetRef,
        items: Sequence[str | ChatMessage],
        ids: Sequence[str] | None = None,
        metadatas: Sequence[dict[str, Any]] | None = None,
        **lifecycle: Any,
    ) -> WriteReceipt:
        """Like ``add(wait=False)``, returning a receipt that can be waited on for durability."""
        return self._submit(memory_set, items, ids, metadatas, lifecycle, need_worker=False)

    def _submit(
        self,
        memory_set: SetRef,
        items: Sequence[str | ChatMessage],
        ids: Sequence[str] | None,
        metadatas: Sequence[dict[str, Any]] | None,
        lifecycle: dict[str, Any],
        *,
        need_worker: bool,
    ) -> WriteReceipt:
        definition = self._definition(memory_set)
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
            return WriteReceipt(ids=[], task_id="", namespace=self.namespace, _dispatcher=self._client.dispatcher)
        now = utcnow()
        per_item = _lifecycle(lifecycle, count, now)
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
        if need_worker:
            self._client.dispatcher.require_worker(routing.ADD)
        sent = self._client.adds.send(request)
        return WriteReceipt(ids, sent.task_id, self.namespace, self._client.dispatcher, sent.offset, sent.shared)

    def compact(self, memory_set: SetRef, *, timeout: float | None = None) -> CompactionReport:
        """Compacts the set now, even below capacity, and waits for the report."""
        base = self._set_request(memory_set)
        request = CompactRequest(namespace=base.namespace, key=base.key, set_name=base.set_name, force=True)
        limit = max(self._client.settings.client.timeout, 600.0) if timeout is None else timeout
        reply = self._client.dispatcher.call(routing.COMPACT, request, self._summary(base.set_name), limit)
        return CompactionReport.model_validate(reply)

    def get(self, memory_set: SetRef, ids: Sequence[str] | None = None) -> list[MemorySetItem]:
        """Items by id (unknown ids are left out), or every item when ``ids`` is None; insertion order."""
        request = self._ids_request(memory_set, ids)
        reads = self._client.reads
        if reads is None or request.ids is None:
            reply = self._call(routing.GET, request, request.set_name, ids=len(request.ids or ()))
            return ItemsReply.model_validate(reply).items
        scope = request.scope
        found, version, online = reads.items(scope, request.ids)
        missing = [i for i in dict.fromkeys(request.ids) if i not in found]
        if missing:
            if not online:
                raise BrokerUnavailable(f"Redis at {redact_url(self._client.settings.redis.url)} is unreachable")
            fetch = request.model_copy(update={"ids": missing})
            fetched = ItemsReply.model_validate(
                self._call(routing.GET, fetch, request.set_name, ids=len(missing))
            ).items
            reads.store_items(scope, version, fetched)
            found.update((item.id, item) for item in fetched)
        return sorted(found.values(), key=lambda item: item.seq or 0)

    def delete(self, memory_set: SetRef, ids: Sequence[str] | None = None) -> int:
        """Deletes items by id, or every item when ``ids`` is None (the set stays); returns how many existed."""
        ids_request = self._ids_request(memory_set, ids)
        # Ordered against the items' writes by the same clock: an add issued after this delete survives it,
        # and one issued before it never brings the items back (a redelivered task included).
        request = DeleteRequest(**dict(ids_request), seq=self._client.reserve_seq(1))
        reply = self._call(routing.DELETE, request, request.set_name, ids=len(request.ids or ()))
        return CountReply.model_validate(reply).count

    def search(
        self,
        memory_set: SetRef,
        query: str,
        limit: int = 10,
        filters: dict[str, Any] | None = None,
        *,
        mode: SearchMode = "hybrid",
    ) -> list[MemorySetItem]:
        """The ``limit`` items most relevant to ``query``, best first, each with a ``score`` (higher = better).

        ``mode``: ``hybrid`` (the default: dense and BM25 rankers fused by DBSF), ``dense`` (cosine only;
        ``score`` is the cosine) or ``lexical`` (BM25 only). ``filters`` match metadata keys exactly:
        ``{"source": "chat"}``, or a list for any-of; values are str or 64-bit int.
        """
        limits = self._client.settings.limits
        _check_query(query, limit, limits)
        filters = {} if filters is None else filters
        check_filters(filters)  # before dict(): a str or a list of pairs is not a mapping of filters
        filters = dict(filters)
        if mode not in ("hybrid", "dense", "lexical"):
            raise InvalidRequestError(f"mode must be 'hybrid', 'dense' or 'lexical', got {short_repr(mode)}")
        set_name = self._set_name(memory_set)
        request = SearchRequest(
            namespace=self.namespace,
            key=self.key,
            set_name=set_name,
            query=query,
            limit=limit,
            filters=filters,
            mode=mode,
        )
        reads = self._client.reads
        if reads is None:
            return ItemsReply.model_validate(self._call(routing.SEARCH, request, set_name, limit=limit)).items
        scope, digest = request.scope, search_digest(query, limit, filters, mode)
        cached, version, online = reads.search(scope, digest)
        if cached is not None:
            return cached
        if not online:
            raise BrokerUnavailable(f"Redis at {redact_url(self._client.settings.redis.url)} is unreachable")
        items = ItemsReply.model_validate(self._call(routing.SEARCH, request, set_name, limit=limit)).items
        reads.store_search(scope, version, digest, items)
        return items

    # -- helpers --------------------------------------------------------------

    def _call(self, task: str, request: Any, set_name: str, **counts: int) -> dict[str, Any]:
        return self._client.dispatcher.call(task, request, self._summary(set_name, **counts))

    def _summary(self, set_name: str, **counts: int) -> str:
        # What Flower and logs show for a task: scope and counts, never memory text.
        fields = {"namespace": self.namespace, "key": self.key, "set": set_name, **counts}
        return json.dumps(fields)

    def _not_found(self, set_name: str) -> MemorySetNotFound:
        return MemorySetNotFound(f"memory set {set_name!r} not found in namespace {self.namespace!r}, key {self.key!r}")

    def _set_name(self, memory_set: SetRef) -> str:
        name = memory_set.name if isinstance(memory_set, MemorySet) else memory_set
        return _checked(_SET_NAME, name, "memory set name")

    def _set_request(self, memory_set: SetRef) -> SetRequest:
        return SetRequest(namespace=self.namespace, key=self.key, set_name=self._set_name(memory_set))

    def _definition(self, memory_set: SetRef) -> MemorySet:
        if isinstance(memory_set, MemorySet):
            return memory_set
        set_name = self._set_name(memory_set)
        cached = self._client.definitions.get(self.namespace, self.key, set_name)
        return cached if cached is not None else self.get_memory_set(set_name)

    def _ids_request(self, memory_set: SetRef, ids: Sequence[str] | None) -> IdsRequest:
        checked = None
        if ids is not None:
            if isinstance(ids, str) or not isinstance(ids, Sequence):
                raise InvalidRequestError(f"ids must be a list of str or None, got {type(ids).__name__}")
            checked = [_checked(_ITEM_ID, i, "item id") for i in ids]
        return IdsRequest(namespace=self.namespace, key=self.key, set_name=self._set_name(memory_set), ids=checked)

    @staticmethod
    def _item_ids(ids: Sequence[str] | None, count: int) -> list[str]:
        if ids is None:
            return [str(uuid.uuid4()) for _ in range(count)]
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise InvalidRequestError(f"ids must be a list of str, got {type(ids).__name__}")
        if len(ids) != count:
            raise InvalidRequestError(f"got {len(ids)} ids for {count} items; give one id per item or none")
        return [_checked(_ITEM_ID, i, "item id") for i in ids]

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
