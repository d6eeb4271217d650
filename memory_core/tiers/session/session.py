"""The handle apps get from ``client.session(namespace, session_id)``: history, strategies, promotion."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import redis

from memory_core.core import routing
from memory_core.core.errors import BrokerUnavailable, SetDefinitionConflict
from memory_core.core.messages import EntitiesReport, EntitiesRequest, FoldReport, FoldRequest
from memory_core.core.models import ChatMessage, MemorySet, MessageRole
from memory_core.core.settings import redact_url
from memory_core.core.tokens import TokenCounter
from memory_core.tiers.session.history import (
    HistoryOperations,
    SessionHistory,
    SessionKeys,
    SessionMessage,
    SummaryState,
    text,
)
from memory_core.tiers.session.strategies import (
    BufferMemory,
    EntityMemory,
    SummaryMemory,
    TokenBufferMemory,
    VectorMemory,
    WindowMemory,
)

if TYPE_CHECKING:
    from memory_core.client import MemoryClient

Promotion = Literal["messages", "summary", "both", "none"]
R = TypeVar("R", FoldReport, EntitiesReport)


class Session:
    """One conversation of a key (user, agent) in a namespace.

    Promotion keeps what is said beyond the Redis TTL: with ``promote="messages"`` (the default) or
    ``"both"``, every message is also written, by a task, into the long-term chat set ``set_name`` of the
    same namespace and key (ids are the message ids, so a retried write changes nothing). With
    ``"summary"`` or ``"both"``, ``finish()`` folds the whole session into its summary and writes that
    too. ``"none"`` keeps the session in Redis only.
    """

    def __init__(
        self,
        client: MemoryClient,
        namespace: str,
        key: str,
        session_id: str,
        *,
        promote: Promotion,
        set_name: str,
        ttl: int | None,
        max_messages: int,
        tokens: TokenCounter,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.key = key
        self.session_id = session_id
        self.promote = promote
        self.set_name = set_name
        self.ttl = ttl
        self.tokens = tokens
        self.keys = SessionKeys(client.keys, namespace, key, session_id)
        operations = HistoryOperations(
            keys=self.keys,
            max_messages=max_messages,
            ttl=ttl,
            limits=client.settings.limits,
            where=redact_url(client.settings.redis.url),
        )
        self.history = SessionHistory(operations, client.dispatcher_redis)
        self._sets: dict[str, MemorySet] = {}

    def __repr__(self) -> str:
        return f"Session(namespace={self.namespace!r}, key={self.key!r}, session_id={self.session_id!r})"

    # -- strategies -------------------------------------------------------------------

    def buffer(self, **options: Any) -> BufferMemory:
        """Every message."""
        return BufferMemory(self, **options)

    def window(self, k: int = 5, **options: Any) -> WindowMemory:
        """The last ``k`` exchanges."""
        return WindowMemory(self, k, **options)

    def token_buffer(self, max_tokens: int = 2000, **options: Any) -> TokenBufferMemory:
        """The newest messages that fit ``max_tokens``."""
        return TokenBufferMemory(self, max_tokens, **options)

    def summary(self, max_tokens: int = 2000, **options: Any) -> SummaryMemory:
        """A progressive summary plus the recent messages not yet in it."""
        return SummaryMemory(self, max_tokens, **options)

    def entity(self, k: int = 3, **options: Any) -> EntityMemory:
        """The last ``k`` exchanges plus summaries of the entities the input mentions."""
        return EntityMemory(self, k, **options)

    def vector(self, k: int = 4, **options: Any) -> VectorMemory:
        """The past exchanges of this key most relevant to the input."""
        return VectorMemory(self, k, **options)

    # -- what strategies use ------------------------------------------------------------

    def add_messages(self, messages: Sequence[ChatMessage]) -> list[SessionMessage]:
        """Appends to the history and, unless ``promote`` says otherwise, enqueues their long-term copy."""
        saved = self.history.add_messages(messages)
        if saved and self.promote in ("messages", "both"):
            metadatas = [
                {"session_id": self.session_id, "kind": "message", "at": s.created_at.isoformat()} for s in saved
            ]
            self.promotion_set().add(
                [s.message for s in saved], ids=[s.id for s in saved], metadatas=metadatas, wait=False
            )
        return saved

    def summary_state(self) -> SummaryState:
        """The summary and how far it reaches, as the workers last wrote it."""
        return self._client.run(self.history.ops.summary_state())

    def entities(self) -> dict[str, str]:
        """Every entity of the session and its summary."""
        try:
            raw = self._client.dispatcher_redis.hgetall(self.keys.entities)
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot read the session entities from Redis: {exc}") from exc
        return {text(k): text(v) for k, v in raw.items()}

    def fold(
        self,
        max_tokens: int,
        *,
        model: str | None = None,
        wait: bool = True,
        prefixes: tuple[str, str] = ("Human", "AI"),
    ) -> FoldReport | None:
        """Has a worker fold the oldest unsummarized messages into the summary until the rest fit ``max_tokens``."""
        request = FoldRequest(
            namespace=self.namespace,
            key=self.key,
            session_id=self.session_id,
            max_tokens=max_tokens,
            model=model,
            ttl=self.ttl,
            human_prefix=prefixes[0],
            ai_prefix=prefixes[1],
        )
        return self._run(routing.SESSION_FOLD, request, FoldReport, wait)

    def extract_entities(self, first: str, last: str, *, wait: bool = True) -> EntitiesReport | None:
        """Has a worker update the entities mentioned by the messages ``first``..``last`` (stream cursors)."""
        request = EntitiesRequest(
            namespace=self.namespace, key=self.key, session_id=self.session_id, first=first, last=last, ttl=self.ttl
        )
        return self._run(routing.SESSION_ENTITIES, request, EntitiesReport, wait)

    def promotion_set(self) -> MemorySet:
        """The long-term chat set this session is promoted into."""
        return self._set(self.set_name, ChatMessage)

    def exchange_set(self, name: str) -> MemorySet:
        """A long-term text set of this key (the vector strategy's index of exchanges)."""
        return self._set(name, str)

    def finish(self) -> list[str]:
        """Ends the session: with summary promotion, folds everything into the summary and stores it durably.

        Returns the ids written to long-term memory by this call. Messages were promoted as they came.
        """
        if self.promote not in ("summary", "both") or len(self.history) == 0:
            return []
        self.fold(0)
        state = self.summary_state()
        if not state.summary:
            return []
        summary = ChatMessage(role=MessageRole.SYSTEM, content=state.summary)
        metadata = {"session_id": self.session_id, "kind": "summary", "messages": state.folded_messages}
        return self.promotion_set().add([summary], ids=[f"summary-{self.session_id}"], metadatas=[metadata])

    def _set(self, name: str, item_type: type[str | ChatMessage]) -> MemorySet:
        if name not in self._sets:
            capacity = self._client.settings.session.promotion_capacity
            ltm = self._client.long_term(self.namespace, self.key)
            try:
                self._sets[name] = ltm.get_or_create_memory_set(name, item_type=item_type, capacity=capacity)
            except SetDefinitionConflict:
                # The set was made under another MEMORY_SESSION__PROMOTION_CAPACITY (or by hand): the setting
                # is for new sets, and a changed setting must not stop every existing user's sessions saving.
                existing = ltm.get_memory_set(name)
                if existing.item_type is not item_type:
                    raise SetDefinitionConflict(
                        f"session set {name!r} of namespace {self.namespace!r}, key {self.key!r} holds "
                        f"{existing.item_type.__name__} items, not {item_type.__name__}; pick another set_name"
                    ) from None
                self._sets[name] = existing
        return self._sets[name]

    def _run(self, task: str, request: Any, reply: type[R], wait: bool) -> R | None:
        summary = json.dumps({"namespace": self.namespace, "key": self.key, "session": self.session_id})
        dispatcher = self._client.dispatcher
        if not wait:
            dispatcher.send(task, request, summary)
            return None
        return reply.model_validate(dispatcher.call(task, request, summary))
