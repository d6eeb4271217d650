"""The handle apps get from ``client.session(namespace, session_id)``: history, strategies, promotion."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import redis

from memory_core.core import routing
from memory_core.core.errors import InvalidRequestError, SetDefinitionConflict
from memory_core.core.keys import Keys
from memory_core.core.messages import EntitiesReport, EntitiesRequest, FoldReport, FoldRequest
from memory_core.core.models import ChatMessage, MemorySet, MessageRole, Scope
from memory_core.core.redis_errors import redis_failure
from memory_core.core.settings import FormationSettings
from memory_core.core.steps import Call, Command, LongTermSteps, Operation, Send
from memory_core.core.tokens import TokenCounter
from memory_core.core.validation import MAX_TOKENS, check_count, parse
from memory_core.tiers.session.formation import FormationFeed, Publish, Remember, check_feed
from memory_core.tiers.session.history import (
    HistoryOperations,
    SessionHistory,
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


class SessionOperations:
    """The logic of a session's calls beyond its history (promotion, folds, entities), as operations for both
    clients (``core.steps``)."""

    def __init__(
        self,
        history: HistoryOperations,
        long_term: LongTermSteps,
        *,
        namespace: str,
        key: str,
        session_id: str,
        promote: Promotion,
        set_name: str,
        capacity: int,
    ) -> None:
        self.history = history
        self._long_term = long_term
        self.namespace = namespace
        self.key = key
        self.session_id = session_id
        self.promote = promote
        self.set_name = set_name
        self._capacity = capacity
        self._sets: dict[str, MemorySet] = {}
        self.feed: FormationFeed | None = None
        """Sends what is saved to formation (``form_into``), set by the client that made the session."""

    def add_messages(self, messages: Sequence[ChatMessage]) -> Operation[list[SessionMessage]]:
        promoted = None
        if self.history.checked(messages) and self.promote in ("messages", "both"):
            # Resolved before the append: a promotion set that cannot be had (no worker, another item type)
            # fails the call with nothing stored, rather than after the messages are in the session.
            promoted = yield from self.memory_set(self.set_name, ChatMessage)
        saved = yield from self.history.add_messages(messages)
        if saved and promoted is not None:
            metadatas = [
                {"session_id": self.session_id, "kind": "message", "at": s.created_at.isoformat()} for s in saved
            ]
            messages = [s.message for s in saved]
            yield from self._long_term.add(promoted, messages, [s.id for s in saved], metadatas, {}, wait=False)
        if saved and self.feed is not None:
            yield from self.feed.feed()
        return saved

    def feed_formation(
        self,
        set_name: str | None,
        debounce: float,
        max_wait: float,
        *,
        keys: Keys,
        settings: FormationSettings,
        remember: Remember,
        publish: Publish,
    ) -> None:
        """Feeds what is saved from now on to formation into ``set_name`` (None: not at all), checking the values.

        ``remember`` is the client's formation call for this key, ``publish`` its dispatcher's delayed send.
        """
        name, wait, most = check_feed(set_name, debounce, max_wait)
        if name is not None and name == self.set_name and self.promote != "none":
            raise InvalidRequestError(
                f"form_into {name!r} is the set this session's messages are promoted into (chat messages); "
                "facts are text: form into another set"
            )
        self.feed = None
        if name is not None:
            self.feed = FormationFeed(
                self.history,
                keys=keys,
                scope=Scope(self.namespace, self.key, name),
                session_id=self.session_id,
                debounce=wait,
                max_wait=most,
                model=settings.model,
                max_messages=settings.max_messages,
                operation_ttl=settings.operation_ttl,
                remember=remember,
                publish=publish,
            )

    def entities(self) -> Operation[dict[str, str]]:
        try:
            raw = yield Command(lambda r: r.hgetall(self.history.keys.entities))
        except redis.RedisError as exc:
            raise redis_failure(exc, "read the session entities") from exc
        return {text(k): text(v) for k, v in raw.items()}

    def fold(
        self, max_tokens: int, model: str | None, wait: bool, prefixes: tuple[str, str]
    ) -> Operation[FoldReport | None]:
        check_count(max_tokens, "max_tokens", 0, MAX_TOKENS)
        human, ai = prefixes
        fields = {"max_tokens": max_tokens, "model": model, "human_prefix": human, "ai_prefix": ai}
        request = parse(FoldRequest, {**self._scope(), **fields}, "session fold")
        return (yield from self._task(routing.SESSION_FOLD, request, FoldReport, wait))

    def extract_entities(self, first: str, last: str, wait: bool) -> Operation[EntitiesReport | None]:
        request = parse(EntitiesRequest, {**self._scope(), "first": first, "last": last}, "entity extraction")
        return (yield from self._task(routing.SESSION_ENTITIES, request, EntitiesReport, wait))

    def finish(self) -> Operation[list[str]]:
        if self.promote not in ("summary", "both") or (yield from self.history.count()) == 0:
            return []
        yield from self.fold(0, None, True, ("Human", "AI"))
        state = yield from self.history.summary_state()
        if not state.summary:
            return []
        summary = ChatMessage(role=MessageRole.SYSTEM, content=state.summary)
        metadata = {"session_id": self.session_id, "kind": "summary", "messages": state.folded_messages}
        promoted = yield from self.memory_set(self.set_name, ChatMessage)
        ids = [f"summary-{self.session_id}"]
        return (yield from self._long_term.add(promoted, [summary], ids, [metadata], {}, wait=True))

    def memory_set(self, name: str, item_type: type[str | ChatMessage]) -> Operation[MemorySet]:
        """The long-term set ``name`` of this key, made on first use."""
        if name not in self._sets:
            try:
                made = yield from self._long_term.get_or_create_memory_set(name, item_type, self._capacity, 2)
            except SetDefinitionConflict:
                # The set was made under another MEMORY_SESSION__PROMOTION_CAPACITY (or by hand): the setting
                # is for new sets, and a changed setting must not stop every existing user's sessions saving.
                made = yield from self._long_term.get_memory_set(name)
                if made.item_type is not item_type:
                    raise SetDefinitionConflict(
                        f"session set {name!r} of namespace {self.namespace!r}, key {self.key!r} holds "
                        f"{made.item_type.__name__} items, not {item_type.__name__}; pick another set_name"
                    ) from None
            self._sets[name] = made
        return self._sets[name]

    def _scope(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "key": self.key, "session_id": self.session_id, "ttl": self.history.ttl}

    def _task(self, task: str, request: Any, reply: type[R], wait: bool) -> Operation[R | None]:
        summary = json.dumps({"namespace": self.namespace, "key": self.key, "session": self.session_id})
        if not wait:
            yield Send(task, request, summary)
            return None
        return reply.model_validate((yield Call(task, request, summary)))


class SessionHandle:
    """What both session handles show: the scope and promotion of their operations."""

    def __init__(self, operations: SessionOperations) -> None:
        self.ops = operations
        self.namespace = operations.namespace
        self.key = operations.key
        self.session_id = operations.session_id
        self.promote = operations.promote
        self.set_name = operations.set_name
        self.ttl = operations.history.ttl
        feed = operations.feed
        self.form_into = feed.set_name if feed is not None else None
        self.debounce = feed.debounce if feed is not None else None
        self.max_wait = feed.max_wait if feed is not None else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(namespace={self.namespace!r}, key={self.key!r}, session_id={self.session_id!r})"


class Session(SessionHandle):
    """One conversation of a key (user, agent) in a namespace.

    Promotion keeps what is said beyond the Redis TTL: with ``promote="messages"`` (the default) or
    ``"both"``, every message is also written, by a task, into the long-term chat set ``set_name`` of the
    same namespace and key (ids are the message ids, so a retried write changes nothing). With
    ``"summary"`` or ``"both"``, ``finish()`` folds the whole session into its summary and writes that
    too. ``"none"`` keeps the session in Redis only.

    Formation: with ``form_into`` (a set name), what is saved is also sent to formation into that long-term set
    of the same namespace and key, debounced per session across processes (``debounce``, ``max_wait``; see
    ``tiers.session.formation``). Each message is formed once, under its own id as the facts' source.
    """

    def __init__(self, client: MemoryClient, operations: SessionOperations, *, tokens: TokenCounter) -> None:
        super().__init__(operations)
        self._client = client
        self.tokens = tokens
        self.keys = operations.history.keys
        self.history = SessionHistory(operations.history, client.dispatcher_redis)

    # -- strategies -------------------------------------------------------------------

    def buffer(self, **options: Any) -> BufferMemory:
        """Every message."""
        return BufferMemory(self, **options)

    def window(self, k: int = 5, **options: Any) -> WindowMemory:
        """The last ``k`` exchanges (an int from 0 to 500000)."""
        return WindowMemory(self, k, **options)

    def token_buffer(self, max_tokens: int = 2000, **options: Any) -> TokenBufferMemory:
        """The newest messages that fit ``max_tokens`` (an int from 1 to 10000000)."""
        return TokenBufferMemory(self, max_tokens, **options)

    def summary(self, max_tokens: int = 2000, **options: Any) -> SummaryMemory:
        """A progressive summary plus the recent messages not yet in it, which fit ``max_tokens`` (an int from 1
        to 10000000)."""
        return SummaryMemory(self, max_tokens, **options)

    def entity(self, k: int = 3, **options: Any) -> EntityMemory:
        """The last ``k`` exchanges (an int from 0 to 500000) plus summaries of the entities the input mentions."""
        return EntityMemory(self, k, **options)

    def vector(self, k: int = 4, **options: Any) -> VectorMemory:
        """The ``k`` past exchanges of this key (an int from 1 to 100) most relevant to the input."""
        return VectorMemory(self, k, **options)

    # -- what strategies use ------------------------------------------------------------

    def add_messages(self, messages: Sequence[ChatMessage]) -> list[SessionMessage]:
        """Appends to the history and, unless ``promote`` says otherwise, enqueues their long-term copy; with
        ``form_into``, sends what no formation covers yet to formation (debounced)."""
        return self._client.run(self.ops.add_messages(messages))

    def summary_state(self) -> SummaryState:
        """The summary and how far it reaches, as the workers last wrote it."""
        return self._client.run(self.ops.history.summary_state())

    def entities(self) -> dict[str, str]:
        """Every entity of the session and its summary."""
        return self._client.run(self.ops.entities())

    def fold(
        self,
        max_tokens: int,
        *,
        model: str | None = None,
        wait: bool = True,
        prefixes: tuple[str, str] = ("Human", "AI"),
    ) -> FoldReport | None:
        """Has a worker fold the oldest unsummarized messages into the summary until the rest fit ``max_tokens``
        (an int from 0 to 10000000; 0 folds them all)."""
        return self._client.run(self.ops.fold(max_tokens, model, wait, prefixes))

    def extract_entities(self, first: str, last: str, *, wait: bool = True) -> EntitiesReport | None:
        """Has a worker update the entities mentioned by the messages ``first``..``last`` (stream cursors)."""
        return self._client.run(self.ops.extract_entities(first, last, wait))

    def promotion_set(self) -> MemorySet:
        """The long-term chat set this session is promoted into."""
        return self._bound(self._client.run(self.ops.memory_set(self.set_name, ChatMessage)))

    def exchange_set(self, name: str) -> MemorySet:
        """A long-term text set of this key (the vector strategy's index of exchanges)."""
        return self._bound(self._client.run(self.ops.memory_set(name, str)))

    def finish(self) -> list[str]:
        """Ends the session: with summary promotion, folds everything into the summary and stores it durably.

        Returns the ids written to long-term memory by this call. Messages were promoted as they came.
        """
        return self._client.run(self.ops.finish())

    def _bound(self, memory_set: MemorySet) -> MemorySet:
        return (
            memory_set
            if memory_set._ltm is not None
            else memory_set.bind(self._client.long_term(self.namespace, self.key))
        )
