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
from collections.abc import Sequence
from typing import Any, Self

import redis

from memory_core.client.candidates import from_session, from_short_term
from memory_core.client.checks import KEY, NAMESPACE, SET_NAME, check_query, checked
from memory_core.client.coalescing import AddCoalescer
from memory_core.client.long_term import LongTermMemory
from memory_core.client.reads import ReadCache
from memory_core.core import routing, tracing
from memory_core.core.auth import TokenMap, refusal
from memory_core.core.cache.definitions import DefinitionCache
from memory_core.core.cache.local import LocalCache
from memory_core.core.cache.redis import RedisCache
from memory_core.core.cache.tiered import TieredCache
from memory_core.core.coordination import Coordinator
from memory_core.core.dispatch import Dispatcher, open_redis
from memory_core.core.errors import BrokerUnavailable, InvalidRequestError
from memory_core.core.keys import Keys, decoded
from memory_core.core.messages import (
    AddRequest,
    ForgetReceipt,
    ForgetRequest,
    RecallReply,
    RecallRequest,
)
from memory_core.core.models import (
    ClientStats,
    Usage,
)
from memory_core.core.settings import Settings, load_settings, redact_url
from memory_core.core.tokens import TokenCounter, default_counter
from memory_core.core.validation import (
    check_ttl,
    short_repr,
)
from memory_core.tiers.checkpoints import CheckpointStore
from memory_core.tiers.profile import UserProfile
from memory_core.tiers.session import Session
from memory_core.tiers.session.session import Promotion
from memory_core.tiers.short_term import ShortTermMemory, end_of_run


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
        namespace = self._authorized(checked(NAMESPACE, namespace, "namespace"))
        return LongTermMemory(self, namespace, checked(KEY, key, "key"))

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
        namespace = self._authorized(checked(NAMESPACE, namespace, "namespace"))
        key = checked(KEY, key, "key")
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
        namespace = self._authorized(checked(NAMESPACE, namespace, "namespace"))
        session_id = checked(KEY, session_id, "session_id")
        key = session_id if key is None else checked(KEY, key, "key")
        if promote not in ("messages", "summary", "both", "none"):
            raise InvalidRequestError(f"promote must be 'messages', 'summary', 'both' or 'none', got {promote!r}")
        config = self.settings.session
        name = checked(SET_NAME, config.promotion_set if set_name is None else set_name, "set_name")
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
        namespace = self._authorized(checked(NAMESPACE, namespace, "namespace"))
        config = self.settings.checkpoints
        return CheckpointStore(
            redis_client=self._redis,
            keys=self.keys,
            namespace=namespace,
            check_thread=lambda thread: checked(KEY, thread, "thread_id"),
            limits=self.settings.limits,
            ttl=config.ttl or None,
            max_per_thread=config.max_per_thread,
            clock=self.reserve_seq,
            where=redact_url(self.settings.redis.url),
        )

    def profile(self, namespace: str, user_id: str) -> UserProfile:
        """The merged profile document of one user (the user id is the key), searchable in long-term memory."""
        namespace = self._authorized(checked(NAMESPACE, namespace, "namespace"))
        return UserProfile(self, namespace, checked(KEY, user_id, "user_id"))

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
        namespace = self._authorized(checked(NAMESPACE, namespace, "namespace"))
        key = checked(KEY, key, "key")
        limits = self.settings.limits
        check_query(query, limit, limits)
        if token_budget is not None and (
            isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1
        ):
            raise InvalidRequestError(f"token_budget must be a positive int or None, got {token_budget!r}")
        names = None if sets is None else [checked(SET_NAME, n, "memory set name") for n in sets]
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
        namespace = checked(NAMESPACE, namespace, "namespace")
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
        namespace = self._authorized(checked(NAMESPACE, namespace, "namespace"))
        key = None if key is None else checked(KEY, key, "key")
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
