"""The thin client: validates, scopes, assigns ids, and enqueues tasks. It never opens the vector store.

    client = MemoryClient.from_env()
    notes = client.long_term("acme", "user-42").get_or_create_memory_set("notes", item_type=str, capacity=100)
    ids = notes.add(["Alice prefers green tea"])
    notes.search("what does Alice drink?", limit=5)

Every call is scoped to the namespace and key of its ``LongTermMemory`` handle;
the names are validated here (and again by the worker) before anything is sent.
``AsyncMemoryClient`` (``client.aio``) is the same client for asyncio code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self, TypeVar

import redis

from memory_core.client.base import ClientBase, add_summary
from memory_core.client.coalescing import AddCoalescer
from memory_core.client.long_term import LongTermMemory
from memory_core.client.reads import ReadCache
from memory_core.core import routing
from memory_core.core.cache.definitions import DefinitionCache
from memory_core.core.cache.redis import RedisCache
from memory_core.core.cache.tiered import TieredCache
from memory_core.core.coordination import Coordinator
from memory_core.core.dispatch import Dispatcher, open_redis
from memory_core.core.messages import AddRequest, ForgetReceipt, RecallReply
from memory_core.core.models import Usage
from memory_core.core.settings import Settings, load_settings
from memory_core.core.steps import Call, Operation, Send, Step, SubmitAdd, Wait, on_redis, run
from memory_core.tiers.checkpoints import CheckpointStore
from memory_core.tiers.profile import UserProfile
from memory_core.tiers.session import Session
from memory_core.tiers.session.session import Promotion
from memory_core.tiers.short_term import ShortTermMemory, end_of_run

T = TypeVar("T")


class MemoryClient(ClientBase):
    """Entry point for apps: hands out scoped memory handles. Thread-safe; share one per process."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._redis = open_redis(settings)
        self._perform_redis = on_redis(self._redis)
        self.dispatcher = Dispatcher(settings, self._redis, self.keys)
        self.coordinator = Coordinator(self._redis, self.keys)
        cache = settings.cache
        tiered = TieredCache(self.l1, RedisCache(self._redis, self._where), l1_ttl=cache.l1_ttl, l2_ttl=cache.l2_ttl)
        self.definitions = DefinitionCache(tiered, self.keys)
        self.reads = ReadCache(tiered, self.coordinator, self.keys, self._where) if cache.enabled else None
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
        return LongTermMemory(self, *self._scope(namespace, key))

    def short_term(self, namespace: str, key: str, *, ttl: int | None = None) -> ShortTermMemory:
        """The short-term state of one run (``key``): a path-addressed ``MemoryObject``, written back on persist.

        ``ttl`` (an int of seconds from 0 to 3153600000, 100 years; default ``MEMORY_SHORT_TERM__TTL``; 0 for
        none) expires the whole object after its last ``persist()``. Use it as a context manager: a clean exit persists, an exception discards.
        """
        return self._state(namespace, key, "stm", ttl, None)

    def sensory(self, namespace: str, key: str) -> ShortTermMemory:
        """Sensory memory of one run: the same object as ``short_term``, cleared (both tiers) when the
        ``with`` block of the run ends, whether it raised or not."""
        return self._state(namespace, key, "sensory", None, end_of_run)

    def _state(self, namespace: str, key: str, kind: str, ttl: int | None, on_exit: Any) -> ShortTermMemory:
        namespace, key, redis_key, seconds = self._state_scope(namespace, key, kind, ttl)
        return ShortTermMemory(
            self._redis,
            redis_key,
            namespace=namespace,
            key=key,
            ttl=seconds,
            where=self._where,
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
        form_into: str | None = None,
        debounce: float = 5.0,
        max_wait: float = 60.0,
    ) -> Session:
        """One conversation: a Redis chat history and its strategies (buffer, window, token_buffer, summary,
        entity, vector), promoted into the long-term chat set ``set_name`` of ``(namespace, key)``.

        ``key`` (the user or agent the conversation belongs to) defaults to ``session_id``. ``ttl`` (an int of
        seconds from 0 to 3153600000; 0 for none) and ``max_messages`` (an int from 2 to 1000000) default to
        ``MEMORY_SESSION__*``; every write renews the TTL.

        ``form_into``: a long-term set of ``(namespace, key)`` (e.g. ``"facts"``) that what is saved is formed
        into (``remember``), debounced per session, whichever process saves: one formation once no message came
        for ``debounce`` seconds, and at most ``max_wait`` seconds after the oldest message not yet sent (both
        numbers of seconds above 0 and at most 3600, ``max_wait`` at least ``debounce``). A newer save replaces
        a formation still waiting, so each message is formed once; the facts' sources are the message ids.
        """
        scope = self._session_scope(namespace, session_id, key, promote, set_name, ttl, max_messages)
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
        return Session(self, operations, tokens=self.tokens)

    def checkpoints(self, namespace: str) -> CheckpointStore:
        """Agent state snapshots of one namespace, by thread, checkpoint namespace and id."""
        return CheckpointStore(self.checkpoint_operations(namespace), self._redis)

    def profile(self, namespace: str, user_id: str) -> UserProfile:
        """The merged profile document of one user (the user id is the key), searchable in long-term memory."""
        return UserProfile(self.profile_operations(namespace, user_id, self.long_term), self.run)

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
        other tiers in ``also_in``), and cuts to ``limit`` items (an int from 1 to
        ``MEMORY_LIMITS__MAX_SEARCH_LIMIT``, 100) and ``token_budget`` tokens of context (an int from 1 to
        10000000, or None for no budget).
        Returns the items, best first, and ``context``: a block to put in a prompt as it is.
        """
        operation = self.recalling(
            namespace, key, query, session_id=session_id, limit=limit, token_budget=token_budget, sets=sets
        )
        return self.run(operation)

    def usage(self, namespace: str) -> Usage:
        """Compaction counters and model tokens of one namespace (read from Redis, no task)."""
        return self.run(self.usage_of(namespace))

    def forget(self, namespace: str, key: str | None = None) -> ForgetReceipt:
        """Erases everything of a namespace, or of one key in it: items, set definitions, short-term and sensory
        state, sessions, checkpoints (a thread id counts as a key), the profile, caches and dead letters.

        Returns a receipt with counts per store. This process's own caches are cleared too; other
        processes' cached entries are unreachable (set versions are bumped) and expire with their TTL.
        """
        return self.run(self.forgetting(namespace, key))

    def run(self, operation: Operation[T]) -> T:
        """Performs an operation (``core.steps``) with this client's connections, blocking until it ends."""
        return run(operation, self._perform)

    def _perform(self, step: Step) -> Any:
        if isinstance(step, Call):
            return self.dispatcher.call(step.task, step.request, step.summary, step.timeout)
        if isinstance(step, SubmitAdd):
            if step.need_worker:
                self.dispatcher.require_worker(routing.ADD)
            return self.adds.send(step.request)
        if isinstance(step, Wait):
            return self.dispatcher.wait(step.namespace, step.task_id, step.timeout, shared=step.shared, task=step.task)
        if isinstance(step, Send):
            return self.dispatcher.send(step.task, step.request, step.summary)
        return self._perform_redis(step)

    def _publish_add(self, request: AddRequest) -> str:
        return self.dispatcher.send(routing.ADD, request, add_summary(request))

    def close(self) -> None:
        """Releases broker and Redis connections."""
        self.dispatcher.close()
        self._redis.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
