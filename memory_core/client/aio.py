"""``AsyncMemoryClient``: the client for asyncio code, on ``redis.asyncio``, never blocking the loop.

    async with AsyncMemoryClient.from_env() as client:
        notes = client.long_term("acme", "user-42")
        await notes.get_or_create_memory_set("notes")
        await notes.add("notes", ["Alice prefers green tea"])
        hits = await notes.search("notes", "what does Alice drink?", limit=5)

Every call runs the same operation as ``MemoryClient``'s (``core.steps``): the same validation,
messages, scope checks and errors. Only the I/O is awaited. Differences, by design:

* Memory sets come back unbound: call ``await memory.add(memory_set, ...)``, not ``memory_set.add``.
* Reads are not cached: this client keeps set definitions in its process and sends every get and
  search to a worker.
* Sessions have their history, promotion, folds and ``finish``, not the LangChain-style strategies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self, TypeVar

from memory_core.client.async_session import AsyncSession
from memory_core.client.base import ClientBase, add_summary
from memory_core.client.coalescing import AsyncAddCoalescer
from memory_core.client.formation import FormationOperations, MessageLike
from memory_core.client.long_term import LongTermOperations, SetRef, stored_ids
from memory_core.core import routing
from memory_core.core.cache.definitions import DefinitionCache
from memory_core.core.cache.tiered import TieredCache
from memory_core.core.dispatch_async import AsyncDispatcher, open_async_redis
from memory_core.core.messages import (
    AddRequest,
    BrowseSort,
    CompactionReport,
    Explained,
    ForgetReceipt,
    ForgetSourcesReport,
    FormationReport,
    Page,
    RecallReply,
)
from memory_core.core.models import ChatMessage, MemorySet, MemorySetItem, SearchMode, Usage
from memory_core.core.settings import Settings, load_settings
from memory_core.core.steps import Call, Operation, Send, Step, SubmitAdd, Wait, on_redis_async, run_async
from memory_core.core.validation import check_seconds
from memory_core.tiers.checkpoints import AsyncCheckpointStore
from memory_core.tiers.profile import AsyncUserProfile
from memory_core.tiers.session.session import Promotion
from memory_core.tiers.short_term import AsyncShortTermMemory

T = TypeVar("T")
Items = Sequence[str | ChatMessage]
Ids = Sequence[str] | None
Metadatas = Sequence[dict[str, Any]] | None
Filters = dict[str, Any] | None

_STARTING = 16
"""Calls that may be in their sending part at once (``AsyncMemoryClient.run``)."""


class _Nowhere:
    """A shared cache tier that holds nothing: the asyncio client's caches stay in its process."""

    def get(self, key: str) -> bytes | None:
        return None

    def set(self, key: str, value: bytes, ttl: float) -> None:
        pass

    def delete(self, *keys: str) -> None:
        pass

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        return {}

    def set_many(self, entries: dict[str, bytes], ttl: float) -> None:
        pass


class AsyncMemoryClient(ClientBase):
    """Entry point for asyncio apps: hands out scoped memory handles whose calls are coroutines.

    One per process and event loop; it holds up to ``MEMORY_CLIENT__ASYNC_CONNECTIONS`` Redis connections.
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._redis = open_async_redis(settings)
        self._perform_redis = on_redis_async(self._redis)
        self.dispatcher = AsyncDispatcher(settings, self._redis, self.keys)
        cache = settings.cache
        self.definitions = DefinitionCache(
            TieredCache(self.l1, _Nowhere(), l1_ttl=cache.l1_ttl, l2_ttl=cache.l2_ttl), self.keys
        )
        self.reads = None
        self._gate = asyncio.Semaphore(_STARTING)
        client = settings.client
        self.adds = AsyncAddCoalescer(
            self._publish_add, max_items=client.coalesce_max_items, linger=client.coalesce_linger_ms / 1000
        )

    @classmethod
    def from_env(cls) -> AsyncMemoryClient:
        """A client configured from ``MEMORY_*`` environment variables (and ``.env``)."""
        return cls(load_settings())

    def long_term(self, namespace: str, key: str) -> AsyncLongTermMemory:
        """Long-term memory of one key (user, agent, conversation) inside one namespace (tenant)."""
        return AsyncLongTermMemory(self, *self._scope(namespace, key))

    def short_term(self, namespace: str, key: str, *, ttl: int | None = None) -> AsyncShortTermMemory:
        """The short-term state of one run; see ``MemoryClient.short_term``. ``async with`` loads it, and
        persists it on a clean exit."""
        return self._state(namespace, key, "stm", ttl, clear_on_exit=False)

    def sensory(self, namespace: str, key: str) -> AsyncShortTermMemory:
        """Sensory memory of one run: cleared (both tiers) when its ``async with`` block ends."""
        return self._state(namespace, key, "sensory", None, clear_on_exit=True)

    def _state(
        self, namespace: str, key: str, kind: str, ttl: int | None, *, clear_on_exit: bool
    ) -> AsyncShortTermMemory:
        namespace, key, redis_key, seconds = self._state_scope(namespace, key, kind, ttl)
        return AsyncShortTermMemory(
            redis_key,
            namespace=namespace,
            key=key,
            ttl=seconds,
            where=self._where,
            run_async=self.run,
            clear_on_exit=clear_on_exit,
            max_value_bytes=self.settings.short_term.max_value_bytes,
        )

    def session(
        self, namespace: str, session_id: str, *, key: str | None = None, promote: Promotion = "messages", **more: Any
    ) -> AsyncSession:
        """One conversation; see ``MemoryClient.session`` (also ``set_name``, ``ttl``, ``max_messages``,
        ``form_into``, ``debounce`` and ``max_wait``)."""
        set_name, ttl, most = more.pop("set_name", None), more.pop("ttl", None), more.pop("max_messages", None)
        form_into, debounce = more.pop("form_into", None), more.pop("debounce", 5.0)
        max_wait = more.pop("max_wait", 60.0)
        limits = more
        if limits:
            raise TypeError(f"session() got unexpected keyword arguments {sorted(limits)}")
        scope = self._session_scope(namespace, session_id, key, promote, set_name, ttl, most)
        long_term = self.long_term(scope["namespace"], scope["key"])
        operations = self.session_operations(scope, long_term._ops)
        operations.feed_formation(
            form_into,
            debounce,
            max_wait,
            keys=self.keys,
            settings=self.settings.formation,
            remember=long_term._formation.remember,
            publish=lambda task, request, summary, countdown: self.dispatcher.send(
                task, request, summary, countdown=countdown
            ),
        )
        return AsyncSession(operations, self.run)

    def profile(self, namespace: str, user_id: str) -> AsyncUserProfile:
        """The merged profile document of one user; see ``MemoryClient.profile``."""
        return AsyncUserProfile(self.profile_operations(namespace, user_id, self.long_term), self.run)

    def checkpoints(self, namespace: str) -> AsyncCheckpointStore:
        """Agent state snapshots of one namespace; see ``MemoryClient.checkpoints``."""
        return AsyncCheckpointStore(self.checkpoint_operations(namespace), self.run)

    async def recall(
        self, namespace: str, key: str, query: str, *, session_id: str | None = None, limit: int = 10, **more: Any
    ) -> RecallReply:
        """The memories most useful for ``query`` from every tier of ``(namespace, key)``; see
        ``MemoryClient.recall`` (also ``token_budget`` and ``sets``)."""
        budget, sets = more.pop("token_budget", None), more.pop("sets", None)
        if more:
            raise TypeError(f"recall() got unexpected keyword arguments {sorted(more)}")
        operation = self.recalling(
            namespace, key, query, session_id=session_id, limit=limit, token_budget=budget, sets=sets
        )
        return await self.run(operation)

    async def usage(self, namespace: str) -> Usage:
        """Compaction counters and model tokens of one namespace (read from Redis, no task)."""
        return await self.run(self.usage_of(namespace))

    async def forget(self, namespace: str, key: str | None = None) -> ForgetReceipt:
        """Erases everything of a namespace, or of one key in it; see ``MemoryClient.forget``."""
        return await self.run(self.forgetting(namespace, key))

    async def run(self, operation: Operation[T]) -> T:
        """Performs an operation (``core.steps``) with this client's connections, on the running loop.

        At most ``_STARTING`` calls at a time do their sending part (checks, message, publish); the rest
        queue for it, so a burst of calls never fills one turn of the loop with all their work at once.
        Waiting for replies is not limited.
        """
        gate = self._gate
        await gate.acquire()
        admitted = True

        def leave() -> None:
            nonlocal admitted
            if admitted:
                admitted = False
                gate.release()

        async def perform(step: Step) -> Any:
            dispatcher = self.dispatcher
            if isinstance(step, Call):
                await dispatcher.require_worker(step.task)
                task_id = await dispatcher.send(step.task, step.request, step.summary)
                leave()
                return await dispatcher.wait(step.request.namespace, task_id, step.timeout, task=step.task)
            if isinstance(step, SubmitAdd):
                if step.need_worker:
                    await dispatcher.require_worker(routing.ADD)
                # Queued adds wait for the publish that carries them outside the gate: the more that queue, the
                # fewer messages carry them.
                leave()
                return await self.adds.send(step.request)
            if isinstance(step, Wait):
                leave()
                return await dispatcher.wait(
                    step.namespace, step.task_id, step.timeout, shared=step.shared, task=step.task
                )
            if isinstance(step, Send):
                return await dispatcher.send(step.task, step.request, step.summary)
            return await self._perform_redis(step)

        try:
            return await run_async(operation, perform)
        finally:
            leave()

    async def _publish_add(self, request: AddRequest) -> str:
        return await self.dispatcher.send(routing.ADD, request, add_summary(request))

    async def aclose(self) -> None:
        """Releases broker and Redis connections."""
        await self.dispatcher.close()
        await self._redis.aclose(close_connection_pool=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@dataclass(frozen=True)
class AsyncWriteReceipt:
    """What ``submit`` returns at once: the ids, and a way to wait until the write is durable."""

    ids: list[str]
    task_id: str
    namespace: str
    _client: AsyncMemoryClient
    _offset: int = 0
    _shared: bool = False

    async def wait(self, timeout: float | None = None) -> list[str]:
        """Waits until the worker has stored the items; returns the id each is stored under. See ``WriteReceipt.wait``."""
        if timeout is not None:
            check_seconds(timeout, "timeout")
        if not self.task_id:
            return self.ids
        dispatcher = self._client.dispatcher
        reply = await dispatcher.wait(self.namespace, self.task_id, timeout, shared=self._shared, task=routing.ADD)
        return stored_ids(reply, self._offset, len(self.ids))


class AsyncLongTermMemory:
    """Memory sets of one ``(namespace, key)``; every call of ``LongTermMemory``, awaited."""

    def __init__(self, client: AsyncMemoryClient, namespace: str, key: str) -> None:
        self._client = client
        self.namespace = namespace
        self.key = key
        self._ops = LongTermOperations(client, namespace, key, lambda definition: definition)
        self._formation = FormationOperations(client, namespace, key)

    def __repr__(self) -> str:
        return f"AsyncLongTermMemory(namespace={self.namespace!r}, key={self.key!r})"

    async def get_or_create_memory_set(
        self, name: str, item_type: type[str | ChatMessage] = str, capacity: int = 100, **options: Any
    ) -> MemorySet:
        """See ``LongTermMemory.get_or_create_memory_set`` (``compaction_config``, ``ttl_seconds``, ``eviction``,
        ``dedup``, ``dedup_threshold``, ``context_window``)."""
        window = options.pop("context_window", 2)
        return await self._client.run(self._ops.get_or_create_memory_set(name, item_type, capacity, window, **options))

    async def get_memory_set(self, name: str) -> MemorySet:
        """The set ``name``; raises ``MemorySetNotFound`` when it does not exist."""
        return await self._client.run(self._ops.get_memory_set(name))

    async def delete_memory_set(self, name: str) -> bool:
        """Deletes the set and all its items; False when it did not exist."""
        return await self._client.run(self._ops.delete_memory_set(name))

    async def size(self, memory_set: SetRef) -> int:
        """The number of items in the set."""
        return await self._client.run(self._ops.size(memory_set))

    async def add(
        self,
        memory_set: SetRef,
        items: Items,
        ids: Ids = None,
        metadatas: Metadatas = None,
        *,
        wait: bool = True,
        **lifecycle: Any,
    ) -> list[str]:
        """Adds items; returns their ids. See ``LongTermMemory.add`` (``wait``, lifecycle keywords)."""
        return await self._client.run(self._ops.add(memory_set, items, ids, metadatas, lifecycle, wait=wait))

    async def submit(
        self, memory_set: SetRef, items: Items, ids: Ids = None, metadatas: Metadatas = None, **lifecycle: Any
    ) -> AsyncWriteReceipt:
        """Like ``add(wait=False)``, returning a receipt that can be awaited for durability."""
        operation = self._ops.submit(memory_set, items, ids, metadatas, lifecycle, need_worker=False)
        sent_ids, sent = await self._client.run(operation)
        if sent is None:
            return AsyncWriteReceipt([], "", self.namespace, self._client)
        return AsyncWriteReceipt(sent_ids, sent.task_id, self.namespace, self._client, sent.offset, sent.shared)

    async def compact(self, memory_set: SetRef, *, timeout: float | None = None) -> CompactionReport:
        """Compacts the set now, even below capacity, and waits for the report."""
        return await self._client.run(self._ops.compact(memory_set, timeout))

    async def get(self, memory_set: SetRef, ids: Sequence[str] | None = None) -> list[MemorySetItem]:
        """Items by id (unknown ids are left out), or every item when ``ids`` is None; insertion order."""
        return await self._client.run(self._ops.get(memory_set, ids))

    async def delete(self, memory_set: SetRef, ids: Sequence[str] | None = None) -> int:
        """Deletes items by id, or every item when ``ids`` is None; returns how many existed."""
        return await self._client.run(self._ops.delete(memory_set, ids))

    async def search(
        self,
        memory_set: SetRef,
        query: str,
        limit: int = 10,
        filters: Filters = None,
        *,
        mode: SearchMode = "hybrid",
        rerank: bool | None = None,
        include_superseded: bool = False,
    ) -> list[MemorySetItem]:
        """The ``limit`` items most relevant to ``query``, best first; see ``LongTermMemory.search`` (facts
        superseded by formation are left out unless include_superseded=True)."""
        return await self._client.run(
            self._ops.search(memory_set, query, limit, filters, mode, rerank, include_superseded)
        )

    async def browse(
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
        """One page of the set's visible items, filtered and sorted; see ``LongTermMemory.browse``. Records no
        access."""
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
        return await self._client.run(self._ops.browse(memory_set, sort, descending, cursor, limit, filters))

    async def explain(
        self,
        memory_set: SetRef,
        query: str,
        limit: int = 10,
        *,
        mode: SearchMode = "hybrid",
        rerank: bool | None = None,
        filters: Filters = None,
        include_superseded: bool = False,
    ) -> list[Explained]:
        """A search's hits, each with every ranker's part in its score; see ``LongTermMemory.explain``. Records no
        access."""
        operation = self._ops.explain(memory_set, query, limit, filters, mode, rerank, include_superseded)
        return await self._client.run(operation)

    async def remember(
        self,
        messages: Sequence[MessageLike],
        *,
        set_name: str = "facts",
        wait: bool = False,
        timeout: float | None = None,
    ) -> FormationReport:
        """Forms memories from a conversation; see ``LongTermMemory.remember``."""
        return await self._client.run(self._formation.remember(messages, set_name, wait=wait, timeout=timeout))

    async def operation(self, op_id: str) -> FormationReport:
        """Where a formation operation stands; see ``LongTermMemory.operation``."""
        return await self._client.run(self._formation.operation(op_id))

    async def history(self, fact_id: str, *, set_name: str = "facts") -> list[MemorySetItem]:
        """A fact's chain, oldest first; see ``LongTermMemory.history``."""
        return await self._client.run(self._formation.history(fact_id, set_name))

    async def forget_sources(self, source_ids: Sequence[str], *, set_name: str = "facts") -> ForgetSourcesReport:
        """Erases messages from the set's facts; see ``LongTermMemory.forget_sources``."""
        return await self._client.run(self._formation.forget_sources(source_ids, set_name))
