"""Domain models: memory sets, their items, chat messages and compaction settings.

Names follow Apache Flink Agents' long-term memory (``MemorySet``,
``MemorySetItem``, ``CompactionConfig``, ``DatetimeRange``) so its users feel at
home. All models round-trip through JSON (``model_dump(mode="json")``), which
is the only form they take on the broker and in caches.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    StrictFloat,
    StrictInt,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

# pydantic's model metaclass has no public name (SQLModel and others import it from here too).
from pydantic._internal._model_construction import ModelMetaclass

from memory_core.core.errors import InvalidRequestError

if TYPE_CHECKING:
    from memory_core.client import LongTermMemory

# A name is a Redis-key and payload-safe token: no ':' (our key separator), no '*' or
# other glob characters, no path separators, and never only dots.
_NAME = r"^[A-Za-z0-9_.-]+$"


def _not_only_dots(name: str) -> str:
    if not name.strip("."):
        raise ValueError(f"{name!r} is only dots; a name needs a letter, digit, '_' or '-'")
    return name


Namespace = Annotated[
    str, StringConstraints(pattern=_NAME, min_length=1, max_length=64), AfterValidator(_not_only_dots)
]
Key = Annotated[str, StringConstraints(pattern=_NAME, min_length=1, max_length=128), AfterValidator(_not_only_dots)]
SetName = Annotated[str, StringConstraints(pattern=_NAME, min_length=1, max_length=128), AfterValidator(_not_only_dots)]
ItemId = Annotated[str, StringConstraints(min_length=1, max_length=128)]


def describe(exc: ValidationError, what: str) -> str:
    """One line naming each offending field, what was wrong, and the value given (cut short)."""
    problems = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or what
        given = repr(err.get("input"))
        problems.append(f"{where}: {err['msg']} (got {given if len(given) <= 80 else given[:77] + '...'})")
    return f"invalid {what}: " + "; ".join(problems)


class _Refusing(ModelMetaclass):
    # Only a direct ``Model(...)`` call goes through here; validation of nested fields and model_validate
    # (the worker's parsing, whose callers convert errors themselves) build instances without it.
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as exc:
            raise InvalidRequestError(describe(exc, cls.__name__)) from exc


class PublicModel(BaseModel, metaclass=_Refusing):
    """A model callers build themselves: bad input raises ``InvalidRequestError``, like every other call.

    Numbers are strict (``StrictInt``, ``StrictFloat`` on their fields): a string is never read as a
    number, nor a float cut to an int.
    """


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


class Scope(NamedTuple):
    """The address of one memory set: every store call carries one, and the store filters on all three."""

    namespace: str
    key: str
    set_name: str


class MessageRole(enum.StrEnum):
    """Who said a chat message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ChatMessage(PublicModel):
    """One chat turn; ``str()`` gives ``"role: content"``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: MessageRole = MessageRole.USER
    content: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    extra_args: dict[str, Any] = Field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.role.value}: {self.content}"


class CompactionConfig(PublicModel):
    """How a set is folded into summaries once it reaches capacity.

    Attributes:
        model: the summarizer's model name (a Claude model id for the Claude summarizer).
        prompt: ``None`` for the built-in prompt, else a prompt text or a named template.
        limit: the most topics (summaries) one compaction may produce.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(default="claude-haiku-4-5", min_length=1, max_length=200)
    prompt: str | None = Field(default=None, max_length=20_000)
    limit: StrictInt = Field(default=1, ge=1, le=100)


class DatetimeRange(PublicModel):
    """A span of time, used as the ``created_time`` of a summary: from its oldest source to its newest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: datetime
    end: datetime

    @model_validator(mode="after")
    def _ordered(self) -> DatetimeRange:
        if self.end < self.start:
            raise ValueError(f"DatetimeRange end {self.end.isoformat()} is before start {self.start.isoformat()}")
        return self


class EvictionPolicy(PublicModel):
    """Keep a set at ``max_items`` by evicting the least recently read (``lru``) or least important items.

    ``importance`` evicts the lowest importance first, then the least recently read. Pinned items are
    never evicted.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_items: StrictInt = Field(ge=1)
    policy: Literal["lru", "importance"] = "lru"


DedupMode = Literal["exact", "semantic", "none"]
SearchMode = Literal["dense", "lexical", "hybrid"]


def _item_type_name(item_type: type[str | ChatMessage]) -> str:
    return "ChatMessage" if item_type is ChatMessage else "str"


_ITEM_TYPES: dict[str, type[str | ChatMessage]] = {
    "str": str,
    "text": str,
    "ChatMessage": ChatMessage,
    "chat_message": ChatMessage,
}

ItemType = Annotated[type[str] | type[ChatMessage], PlainSerializer(_item_type_name, return_type=str)]


class MemorySet(PublicModel):
    """The definition of a memory set, plus (when obtained from a client) convenience methods.

    Two sets are equal when their definitions are equal; the binding to a client is not compared.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: SetName
    item_type: ItemType = str
    capacity: StrictInt = Field(default=100, ge=1, le=1_000_000)
    compaction_config: CompactionConfig = CompactionConfig()
    ttl_seconds: StrictInt | None = Field(default=None, ge=1)
    eviction: EvictionPolicy | None = None
    dedup: DedupMode | None = None
    dedup_threshold: StrictFloat = Field(default=0.95, gt=0.0, le=1.0)
    # How many earlier items of the set are indexed with each item for lexical search (its "context"):
    # a turn is found by the words of the turns that led to it. 0 indexes each item alone.
    context_window: StrictInt = Field(default=2, ge=0, le=16)

    # Typed loosely: pydantic would otherwise need the client module to build this model.
    _ltm: Any = PrivateAttr(default=None)

    @field_validator("item_type", mode="before")
    @classmethod
    def _parse_item_type(cls, value: object) -> object:
        if isinstance(value, str):
            if value not in _ITEM_TYPES:
                raise ValueError(f"item_type {value!r} is not one of 'str' or 'ChatMessage'")
            return _ITEM_TYPES[value]
        if value not in (str, ChatMessage):
            raise ValueError(f"item_type {value!r} is not str or ChatMessage")
        return value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemorySet):
            return NotImplemented
        return self.model_dump(mode="json") == other.model_dump(mode="json")

    def __hash__(self) -> int:
        return hash((self.name, _item_type_name(self.item_type), self.capacity))

    @property
    def effective_dedup(self) -> DedupMode:
        """``dedup``, or its default: ``exact`` for text sets, ``none`` for chat sets (a repeated "yes" is a turn)."""
        if self.dedup is not None:
            return self.dedup
        return "none" if self.item_type is ChatMessage else "exact"

    def bind(self, ltm: LongTermMemory) -> MemorySet:
        """Returns a copy whose convenience methods call ``ltm``."""
        bound = self.model_copy()
        bound._ltm = ltm
        return bound

    def _bound(self) -> LongTermMemory:
        if self._ltm is None:
            raise RuntimeError(
                f"memory set {self.name!r} is not bound to a client; get it from MemoryClient.long_term(...), "
                "or with AsyncMemoryClient call await memory.add(memory_set, ...)"
            )
        ltm: LongTermMemory = self._ltm
        return ltm

    def add(
        self,
        items: Sequence[str | ChatMessage],
        ids: Sequence[str] | None = None,
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        wait: bool = True,
        **lifecycle: Any,
    ) -> list[str]:
        """Adds items to this set; see ``LongTermMemory.add`` (``importance``, ``source``, ``pinned``, ``ttl``...)."""
        return self._bound().add(self, items, ids=ids, metadatas=metadatas, wait=wait, **lifecycle)

    def submit(
        self,
        items: Sequence[str | ChatMessage],
        ids: Sequence[str] | None = None,
        metadatas: Sequence[dict[str, Any]] | None = None,
        **lifecycle: Any,
    ) -> Any:
        """Adds items without waiting; returns a ``WriteReceipt`` to wait on. See ``LongTermMemory.submit``."""
        return self._bound().submit(self, items, ids=ids, metadatas=metadatas, **lifecycle)

    def get(self, ids: Sequence[str] | None = None) -> list[MemorySetItem]:
        """Returns items of this set in insertion order; see ``LongTermMemory.get``."""
        return self._bound().get(self, ids)

    def search(
        self,
        query: str,
        limit: int = 10,
        filters: dict[str, Any] | None = None,
        *,
        mode: SearchMode = "hybrid",
        rerank: bool | None = None,
        include_superseded: bool = False,
    ) -> list[MemorySetItem]:
        """Searches this set; see ``LongTermMemory.search`` (``mode``: hybrid, dense or lexical; ``rerank``: the
        workers' reranker on or off for this search, None leaving it to them; ``include_superseded``: facts
        superseded by formation too)."""
        return self._bound().search(
            self, query, limit=limit, filters=filters, mode=mode, rerank=rerank, include_superseded=include_superseded
        )

    def delete(self, ids: Sequence[str] | None = None) -> int:
        """Deletes items of this set; see ``LongTermMemory.delete``."""
        return self._bound().delete(self, ids)

    def size(self) -> int:
        """The number of items in this set."""
        return self._bound().size(self)

    def compact(self, *, timeout: float | None = None) -> Any:
        """Compacts this set now and returns the ``CompactionReport``; see ``LongTermMemory.compact``."""
        return self._bound().compact(self, timeout=timeout)


FactKind = Literal["fact", "preference", "event", "plan", "relationship"]
"""What a formed fact is about: a plain fact, a preference, an event, a plan or a relationship."""
Decision = Literal["add", "same", "update", "contradict"]
"""What formation decided for one proposed fact against the scope's live facts: a new fact, one it already
holds (its evidence grows), or a change or contradiction of one (which it supersedes)."""
EventKind = Decision | Literal["superseded", "source_removed", "verbatim"]
"""What one step of a fact's provenance did: a decision of formation, a supersession, an erased source."""
VERBATIM = "verbatim"
"""``FactInfo.formed_by`` of a user's turn kept as it was said, by a worker with no model to form facts."""
FORMATION_PROMPT_VERSION = "facts-v1"
"""The formation prompt this release writes with (``engine/formation/prompts/<version>.txt``). It is part of
every operation id, so a new prompt forms the same messages anew instead of replaying an older reply."""


class FactEvent(BaseModel):
    """One step of a fact's provenance: the operation that formed, confirmed or superseded it."""

    model_config = ConfigDict(extra="forbid")

    op_id: str = Field(min_length=1, max_length=128)
    decision: EventKind
    sources: list[str] = Field(default_factory=list)
    """The ids of the messages this step rests on."""
    model: str = ""
    prompt_version: str = ""
    at: datetime


class FactInfo(BaseModel):
    """What formation knows of a fact: its kind, evidence, validity and provenance.

    A fact is live while ``valid_to`` is None. A superseded fact keeps its text; ``superseded_by`` names the
    fact that replaced it, and that fact's ``supersedes`` names it back, so ``history`` walks the chain.
    """

    model_config = ConfigDict(extra="forbid")

    kind: FactKind = "fact"
    entities: list[str] = Field(default_factory=list, max_length=32)
    occurred_at: datetime | None = None
    """When what the fact tells happened, where the messages say (resolved against their timestamps)."""
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    sources: list[str] = Field(default_factory=list)
    """The ids of every message the fact rests on (its evidence; ``same`` decisions add to it)."""
    formed_by: str = Field(min_length=1, max_length=200)
    """The model that formed it, or ``"verbatim"`` for a user's turn kept as said (no model was available)."""
    prompt_version: str = ""
    op_id: str = Field(min_length=1, max_length=128)
    """The operation that formed it."""
    valid_from: datetime
    valid_to: datetime | None = None
    superseded_by: str | None = None
    supersedes: str | None = None
    events: list[FactEvent] = Field(default_factory=list)

    @property
    def live(self) -> bool:
        """Whether the fact holds now (nothing superseded it)."""
        return self.valid_to is None


class MemorySetItem(BaseModel):
    """One item of a memory set, as stored and returned.

    ``additional_metadata`` holds only the caller's keys. ``compacted_from`` lists, on a
    summary, the ids of the items it replaced. ``importance`` (0..1), ``source``, ``pinned``
    and ``expires_at`` drive eviction and expiry. ``seq`` is the item's place in insertion
    order (set by the store). ``score`` is set on search hits only (higher = more relevant)
    and is ``None`` elsewhere.
    """

    model_config = ConfigDict(extra="forbid")

    memory_set_name: SetName
    id: ItemId
    value: str | ChatMessage
    compacted: bool = False
    created_time: datetime | DatetimeRange
    last_accessed_time: datetime
    additional_metadata: dict[str, Any] = Field(default_factory=dict)
    compacted_from: list[str] = Field(default_factory=list)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    source: str | None = None
    pinned: bool = False
    expires_at: datetime | None = None
    seq: int | None = None
    score: float | None = None
    fact: FactInfo | None = None
    """Set on facts that formation wrote (``LongTermMemory.remember``): provenance, validity, supersession."""

    def is_expired(self, now: datetime) -> bool:
        """Expired items are invisible to every read; pinned ones never expire by policy."""
        return not self.pinned and self.expires_at is not None and self.expires_at <= now


class TokenUsage(BaseModel):
    """Tokens one model used, and how many calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0


class EmbeddingUsage(BaseModel):
    """Tokens a remote embedding model was paid for, and how many texts it embedded.

    A call that embedded several namespaces' texts is split between them in proportion to their texts'
    characters (the endpoint reports a request's tokens, not each text's). Local models are not counted.
    """

    tokens: int = 0
    texts: int = 0


class Usage(BaseModel):
    """Model usage and compaction counters of one namespace, kept in Redis by the workers: summarizer tokens
    per model (``tokens``) and remote embedding tokens per model (``embeddings``)."""

    namespace: str
    tokens: dict[str, TokenUsage] = Field(default_factory=dict)
    embeddings: dict[str, EmbeddingUsage] = Field(default_factory=dict)
    compactions: int = 0
    items_folded: int = 0
    summaries_written: int = 0
    failures: int = 0
    formations: int = 0
    """Formation operations that called a model (replays and verbatim ones are not counted)."""
    facts_formed: int = 0
    """Facts formation wrote (added, updated or contradicting; confirmations are not new facts)."""
    formation_tokens: int = 0
    """Model tokens (input and output) formation spent, also counted per model in ``tokens``."""

    @classmethod
    def from_counters(cls, namespace: str, counters: dict[str, int]) -> Usage:
        """Builds the report from the Redis hash (``input_tokens:<model>``, ``embedding_tokens:<model>``,
        ``compactions``, ...)."""
        tokens: dict[str, TokenUsage] = {}
        embeddings: dict[str, EmbeddingUsage] = {}
        plain: dict[str, int] = {}
        fields = {"input_tokens": "input_tokens", "output_tokens": "output_tokens", "model_calls": "calls"}
        embedding_fields = {"embedding_tokens": "tokens", "embedding_texts": "texts"}
        for name, value in counters.items():
            kind, _, model = name.partition(":")
            if model and kind in fields:
                setattr(tokens.setdefault(model, TokenUsage()), fields[kind], value)
            elif model and kind in embedding_fields:
                setattr(embeddings.setdefault(model, EmbeddingUsage()), embedding_fields[kind], value)
            else:
                plain[name] = value
        return cls(
            namespace=namespace,
            tokens=tokens,
            embeddings=embeddings,
            compactions=plain.get("compactions", 0),
            items_folded=plain.get("items_folded", 0),
            summaries_written=plain.get("summaries_written", 0),
            failures=plain.get("failures", 0),
            formations=plain.get("formations", 0),
            facts_formed=plain.get("facts_formed", 0),
            formation_tokens=plain.get("formation_tokens", 0),
        )


class ClientStats(BaseModel):
    """Cache hits and misses of one client process, per tier, and the L1's size."""

    l1_hits: int = 0
    l1_misses: int = 0
    l2_hits: int = 0
    l2_misses: int = 0
    l1_entries: int = 0
    l1_bytes: int = 0
