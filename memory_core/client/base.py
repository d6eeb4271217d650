"""What ``MemoryClient`` and ``AsyncMemoryClient`` share: configuration, scope checks, caches, and the
operations (``core.steps``) behind every call that is more than one handle's.

Each client adds only how it performs a step: blocking, or awaited on the running loop.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from memory_core.client.candidates import from_session, from_short_term
from memory_core.client.checks import KEY, NAMESPACE, SET_NAME, check_query, checked
from memory_core.client.reads import ReadCache
from memory_core.core import routing, tracing
from memory_core.core.auth import TokenMap, refusal
from memory_core.core.cache.definitions import DefinitionCache
from memory_core.core.cache.local import LocalCache
from memory_core.core.coordination import stored_counters
from memory_core.core.errors import InvalidRequestError
from memory_core.core.keys import Keys
from memory_core.core.messages import AddRequest, ForgetReceipt, ForgetRequest, RecallReply, RecallRequest
from memory_core.core.models import ClientStats, Usage
from memory_core.core.redis_errors import redis_failure
from memory_core.core.settings import Settings, redact_url
from memory_core.core.steps import Call, Command, LongTermSteps, Operation
from memory_core.core.tokens import TokenCounter, default_counter
from memory_core.core.validation import MAX_TOKENS, check_count, check_ttl
from memory_core.tiers.checkpoints import CheckpointOperations
from memory_core.tiers.profile import ProfileOperations
from memory_core.tiers.session.history import HistoryOperations, SessionKeys
from memory_core.tiers.session.session import Promotion, SessionOperations
from memory_core.tiers.short_term import _Root


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


def add_summary(request: AddRequest) -> str:
    """What Flower and logs show for an add task: scope and counts, never memory text."""
    fields = {"namespace": request.namespace, "key": request.key, "set": request.set_name}
    return json.dumps({**fields, "items": len(request.items)})


class ClientBase:
    """Settings, scope checks, caches and shared operations of a memory-core client."""

    definitions: DefinitionCache
    reads: ReadCache | None

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        tracing.configure(settings.tracing)
        self.keys = Keys(settings.redis.key_prefix)
        self._where = redact_url(settings.redis.url)
        self._tokens = TokenMap.from_secret(settings.auth.tokens)
        self._token = settings.client.token.get_secret_value() if settings.client.token else None
        cache = settings.cache
        self.l1 = LocalCache(max_entries=cache.l1_max_entries, max_bytes=cache.l1_max_bytes)
        self._seq = _SeqClock()

    @property
    def tokens(self) -> TokenCounter:
        """The token counter budgets are measured with (cl100k_base)."""
        return default_counter()

    def reserve_seq(self, count: int) -> int:
        """The first of ``count`` consecutive insertion-order numbers."""
        return self._seq.reserve(count)

    def _authorized(self, namespace: str) -> str:
        # When this process knows the token map, refuse early; the workers check every task regardless.
        if self._tokens is not None and not self._tokens.grants(self._token, namespace):
            raise refusal(namespace)
        return namespace

    def _scope(self, namespace: str, key: str, what: str = "key") -> tuple[str, str]:
        return self._authorized(checked(NAMESPACE, namespace, "namespace")), checked(KEY, key, what)

    def _state_scope(self, namespace: str, key: str, kind: str, ttl: int | None) -> tuple[str, str, str, int | None]:
        """The namespace, key, Redis key and TTL of a short-term or sensory object."""
        namespace, key = self._scope(namespace, key)
        # Bounded above too: Redis refuses an EXPIRE past its clock's range, which would surface as a
        # misleading BrokerUnavailable at the first persist().
        seconds = check_ttl(self.settings.short_term.ttl if ttl is None else ttl, "ttl", 0)
        return namespace, key, self.keys.short_term(namespace, key, kind), seconds or None

    def _session_scope(
        self,
        namespace: str,
        session_id: str,
        key: str | None,
        promote: Promotion,
        set_name: str | None,
        ttl: int | None,
        max_messages: int | None,
    ) -> dict[str, Any]:
        """The checked arguments of a session handle (see ``MemoryClient.session``)."""
        namespace, session_id = self._scope(namespace, session_id, "session_id")
        key = session_id if key is None else checked(KEY, key, "key")
        if promote not in ("messages", "summary", "both", "none"):
            raise InvalidRequestError(f"promote must be 'messages', 'summary', 'both' or 'none', got {promote!r}")
        config = self.settings.session
        name = checked(SET_NAME, config.promotion_set if set_name is None else set_name, "set_name")
        seconds = check_ttl(config.ttl if ttl is None else ttl, "ttl", 0)
        # The setting was checked when it was loaded; only a value given here is bounded by the call's range.
        count = config.max_messages if max_messages is None else check_count(max_messages, "max_messages", 2)
        return {
            "namespace": namespace,
            "key": key,
            "session_id": session_id,
            "promote": promote,
            "set_name": name,
            "ttl": seconds or None,
            "max_messages": count,
        }

    def history_operations(
        self, namespace: str, key: str, session_id: str, *, ttl: int | None, max_messages: int
    ) -> HistoryOperations:
        """The logic of one session's messages (already checked names)."""
        return HistoryOperations(
            keys=SessionKeys(self.keys, namespace, key, session_id),
            max_messages=max_messages,
            ttl=ttl,
            limits=self.settings.limits,
            where=self._where,
        )

    def session_operations(self, scope: dict[str, Any], long_term: LongTermSteps) -> SessionOperations:
        """The logic of one session (``scope`` from ``_session_scope``) over the long-term steps of its key."""
        history = self.history_operations(
            scope["namespace"], scope["key"], scope["session_id"], ttl=scope["ttl"], max_messages=scope["max_messages"]
        )
        return SessionOperations(
            history,
            long_term,
            namespace=scope["namespace"],
            key=scope["key"],
            session_id=scope["session_id"],
            promote=scope["promote"],
            set_name=scope["set_name"],
            capacity=self.settings.session.promotion_capacity,
        )

    def profile_operations(
        self, namespace: str, user_id: str, long_term: Callable[[str, str], Any]
    ) -> ProfileOperations:
        """The logic of one user's profile; ``long_term`` gives the client's long-term handle of a key."""
        namespace, user_id = self._scope(namespace, user_id, "user_id")
        return ProfileOperations(
            redis_key=self.keys.profile(namespace, user_id),
            namespace=namespace,
            user_id=user_id,
            long_term=long_term(namespace, user_id)._ops,
            set_name=self.settings.profile.set_name,
            limits=self.settings.limits,
        )

    def checkpoint_operations(self, namespace: str) -> CheckpointOperations:
        """The logic of the checkpoints of ``namespace``."""
        config = self.settings.checkpoints
        return CheckpointOperations(
            keys=self.keys,
            namespace=self._authorized(checked(NAMESPACE, namespace, "namespace")),
            check_thread=lambda thread: checked(KEY, thread, "thread_id"),
            limits=self.settings.limits,
            ttl=config.ttl or None,
            max_per_thread=config.max_per_thread,
            clock=self.reserve_seq,
            where=self._where,
        )

    def recalling(
        self,
        namespace: str,
        key: str,
        query: str,
        *,
        session_id: str | None,
        limit: int,
        token_budget: int | None,
        sets: Sequence[str] | None,
    ) -> Operation[RecallReply]:
        """See ``MemoryClient.recall``."""
        namespace, key = self._scope(namespace, key)
        check_query(query, limit, self.settings.limits)
        if token_budget is not None:
            check_count(token_budget, "token_budget", 1, MAX_TOKENS)
        names = None if sets is None else [checked(SET_NAME, n, "memory set name") for n in sets]
        config = self.settings.recall
        _, _, state_key, _ = self._state_scope(namespace, key, "stm", 0)
        state = _Root(None, state_key, namespace=namespace, key=key, ttl=None, where=self._where)
        yield from state._state.loading()
        candidates = from_short_term(state, config.max_candidates)
        if session_id is not None:
            scope = self._session_scope(namespace, session_id, key, "none", None, None, None)
            history = self.history_operations(
                namespace, key, scope["session_id"], ttl=scope["ttl"], max_messages=scope["max_messages"]
            )
            room = max(0, config.max_candidates - len(candidates))
            candidates += yield from from_session(history, config.session_messages, room)
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
        return RecallReply.model_validate((yield Call(routing.RECALL, request, summary)))

    def usage_of(self, namespace: str) -> Operation[Usage]:
        """See ``MemoryClient.usage``."""
        namespace = checked(NAMESPACE, namespace, "namespace")
        try:
            raw = yield Command(lambda r: r.hgetall(self.keys.usage(namespace)))
        except redis.RedisError as exc:
            raise redis_failure(exc, f"read the usage of namespace {namespace!r}", self._where) from exc
        return Usage.from_counters(namespace, stored_counters(raw, f"the usage counters of {namespace!r}"))

    def forgetting(self, namespace: str, key: str | None) -> Operation[ForgetReceipt]:
        """See ``MemoryClient.forget``."""
        namespace = self._authorized(checked(NAMESPACE, namespace, "namespace"))
        key = None if key is None else checked(KEY, key, "key")
        request = ForgetRequest(namespace=namespace, key=key)
        summary = json.dumps({"namespace": namespace, "key": key})
        receipt = ForgetReceipt.model_validate((yield Call(routing.FORGET, request, summary)))
        prefix = f"{self.keys.prefix}:{namespace}:"
        # Items, searches and definitions of the scope, all in the one L1 this process has.
        self.l1.delete_where(lambda k: k.startswith(prefix) and (key is None or f":{key}:" in k))
        return receipt

    def stats(self) -> ClientStats:
        """Hit and miss counts of this process's caches, per tier, and the L1's size."""
        if self.reads is None:
            return ClientStats(l1_entries=len(self.l1), l1_bytes=self.l1.size_bytes)
        counters = self.reads.tiered.stats
        return ClientStats(
            l1_hits=counters.l1.hits,
            l1_misses=counters.l1.misses,
            l2_hits=counters.l2.hits,
            l2_misses=counters.l2.misses,
            l1_entries=len(self.l1),
            l1_bytes=self.l1.size_bytes,
        )
