"""The JSON bodies of the ``/v1`` routes, requests and answers, with the examples OpenAPI shows."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue

from memory_core.core.models import (
    ChatMessage,
    CompactionConfig,
    DedupMode,
    EvictionPolicy,
    MemorySet,
    MemorySetItem,
    SearchMode,
)
from memory_core.core.validation import INT64_MAX, INT64_MIN, MAX_TTL_SECONDS, MAX_WAIT_SECONDS
from memory_core.servers.boundary import MAX_RESULTS, MAX_TOKEN_BUDGET
from memory_core.tiers.checkpoints import Checkpoint

# Every number a body takes has its range in the schema, checked before the client is called: a value out
# of range is a 400 naming it, never an overflow deeper down.
Importance = Annotated[float, Field(ge=0, le=1)]
ItemTtl = Annotated[int, Field(ge=1, le=MAX_TTL_SECONDS)]
StateTtl = Annotated[float, Field(gt=0, le=MAX_TTL_SECONDS)]
FilterInt = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
"""Metadata ints are signed 64-bit, as the store filters them."""
ResultLimit = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_RESULTS,
        description="How many items, best first; at most MEMORY_LIMITS__MAX_SEARCH_LIMIT (100 by default).",
    ),
]

# -- bodies -----------------------------------------------------------------------


class _Body(BaseModel):
    # Strict like the client's own models: "0.5" is not a number and "yes" is not a bool.
    model_config = ConfigDict(extra="forbid", strict=True)


def _example(**fields: Any) -> ConfigDict:
    """A request model's example, shown in the OpenAPI document."""
    return ConfigDict(json_schema_extra={"examples": [fields]})


class ErrorDetail(BaseModel):
    code: str = Field(examples=["memory_set_not_found"])
    message: str = Field(examples=["memory set 'notes' not found in namespace 'acme', key 'alice'"])
    field: str | None = Field(default=None, description="The offending field, for a request that fails its schema.")


class ErrorBody(BaseModel):
    """Every error response."""

    error: ErrorDetail


class Eviction(_Body):
    """``EvictionPolicy`` with the range of ``max_items`` in the schema."""

    max_items: int = Field(ge=1, le=1_000_000_000, description="Items the set keeps; past it the policy evicts.")
    policy: Literal["lru", "importance"] = "lru"

    def policy_of(self) -> EvictionPolicy:
        return EvictionPolicy(max_items=self.max_items, policy=self.policy)


class SetOptions(_Body):
    """A memory set's definition (its name is in the path); an existing set must match it."""

    model_config = _example(capacity=200, ttl_seconds=2_592_000, dedup="exact")

    item_type: Literal["str", "ChatMessage"] = "str"
    capacity: int = Field(default=100, ge=1, le=1_000_000, description="Items before a compaction runs.")
    compaction_config: CompactionConfig | None = None
    ttl_seconds: int | None = Field(
        default=None, ge=1, le=MAX_TTL_SECONDS, description="Default time to live of its items, in seconds."
    )
    eviction: Eviction | None = None
    dedup: DedupMode | None = None
    dedup_threshold: float = Field(default=0.95, gt=0, le=1)
    context_window: int = Field(default=2, ge=0, le=16, description="Earlier items indexed with each one.")


class SetDefinition(BaseModel):
    """A memory set's definition as stored."""

    name: str
    item_type: Literal["str", "ChatMessage"]
    capacity: int
    compaction_config: CompactionConfig
    ttl_seconds: int | None
    eviction: EvictionPolicy | None
    dedup: DedupMode | None
    dedup_threshold: float
    context_window: int

    @classmethod
    def of(cls, definition: MemorySet) -> SetDefinition:
        return cls.model_validate(definition.model_dump(mode="json"))


class SetListing(BaseModel):
    key: str
    size: int
    definition: SetDefinition


class SetList(BaseModel):
    sets: list[SetListing]


class AddItems(_Body):
    """Items to add. Lifecycle fields are one value for every item, or a list with one per item."""

    model_config = _example(
        items=["Alice prefers green tea", "Alice is allergic to peanuts"],
        metadatas=[{"source": "chat"}, {"source": "chat"}],
        importance=0.8,
    )

    items: list[str | ChatMessage]
    ids: list[str] | None = Field(default=None, description="One id per item; generated when omitted.")
    metadatas: list[dict[str, JsonValue]] | None = None
    wait: bool = Field(default=True, description="Answer once stored durably (200), or once enqueued (202).")
    importance: Importance | list[Importance] | None = Field(default=None, description="0 to 1.")
    source: str | list[str] | None = None
    pinned: bool | list[bool] | None = None
    ttl: ItemTtl | list[ItemTtl] | None = Field(default=None, description="Seconds to live.")
    # Not strict: JSON has no datetime type, and a strict field refuses the ISO text it arrives as.
    expires_at: (
        Annotated[AwareDatetime, Field(strict=False)] | list[Annotated[AwareDatetime, Field(strict=False)]] | None
    ) = Field(default=None, description="An aware ISO 8601 time (or one per item) the items expire at.")

    def lifecycle(self) -> dict[str, Any]:
        fields = ("importance", "source", "pinned", "ttl", "expires_at")
        return {name: getattr(self, name) for name in fields if getattr(self, name) is not None}


class Stored(BaseModel):
    ids: list[str]


class Search(_Body):
    model_config = _example(query="what does Alice drink?", limit=5, filters={"source": "chat"})

    query: str
    limit: ResultLimit = 10
    filters: dict[str, str | FilterInt | list[str | FilterInt]] | None = Field(
        default=None, description="Metadata keys matched exactly; a list matches any of its values."
    )
    mode: SearchMode = "hybrid"
    rerank: bool | None = Field(
        default=None,
        description="Rerank the hits with the workers' reranker (MEMORY_RERANK__MODEL): true asks for it, false "
        "turns it off for this search, null leaves it to the workers.",
    )
    include_superseded: bool = Field(
        default=False,
        description="Facts that formation superseded come too (each with its fact.valid_to set); live ones only "
        "by default.",
    )


class Items(BaseModel):
    items: list[MemorySetItem]


class Count(BaseModel):
    deleted: int


class Deleted(BaseModel):
    deleted: bool


class Size(BaseModel):
    size: int


class StateValue(_Body):
    model_config = _example(value="book a table", ttl=3600)

    value: JsonValue
    ttl: StateTtl | None = Field(default=None, description="Seconds until this path expires.")


class StatePatch(_Body):
    """Values to set, by dotted path; all or none are written."""

    model_config = _example(values={"plan.step": "book a table", "plan.guests": 4})

    values: dict[str, JsonValue]
    ttl: StateTtl | None = Field(default=None, description="Seconds until each of these paths expires.")


class State(BaseModel):
    """A short-term state object: nested objects as JSON objects; bytes as ``{"base64": ...}``."""

    state: dict[str, Any]


class PathValue(BaseModel):
    path: str
    value: Any


class NewCheckpoint(_Body):
    model_config = _example(checkpoint={"step": 3, "messages": []}, metadata={"source": "loop"})

    checkpoint: dict[str, JsonValue]
    checkpoint_ns: str = ""
    checkpoint_id: str | None = Field(default=None, description="Generated when omitted; 'latest' is reserved.")
    parent_id: str | None = Field(default=None, description="The thread's newest checkpoint when omitted.")
    metadata: dict[str, JsonValue] | None = None


class Checkpoints(BaseModel):
    checkpoints: list[Checkpoint]


class RecallQuery(_Body):
    model_config = _example(query="plan dinner for Alice", limit=5, token_budget=500)

    query: str
    limit: ResultLimit = 10
    token_budget: int | None = Field(default=None, ge=1, le=MAX_TOKEN_BUDGET, description="Tokens of context.")
    session_id: str | None = None
    sets: list[str] | None = Field(default=None, description="Only these long-term sets; every set when omitted.")


class Message(_Body):
    """One message of a conversation to form memories from."""

    role: Literal["user", "assistant", "system", "tool"] = "user"
    content: str
    id: str | None = Field(
        default=None,
        description="The message's own id, 1 to 128 characters; derived from its role, content and position when "
        "omitted, so the same call twice is the same operation.",
    )
    # A time is JSON text: parsed from its ISO 8601 form, which the body's strict mode would refuse.
    at: Annotated[AwareDatetime, Field(strict=False)] | None = Field(
        default=None, description="When it was said, with its offset: relative dates in it are resolved against it."
    )


class Remember(_Body):
    """Messages to form memories (facts) from, in the background unless ``wait`` is true."""

    model_config = _example(
        messages=[
            {"role": "user", "content": "I moved to Lisbon last month", "id": "m1"},
            {"role": "assistant", "content": "Lisbon is lovely!", "id": "m2"},
        ],
        set_name="facts",
    )

    messages: list[Message] = Field(
        description="The conversation, oldest first; at most MEMORY_FORMATION__MAX_MESSAGES (100 by default)."
    )
    set_name: str = Field(default="facts", description="The set the facts are formed into (made when it is new).")
    wait: bool = Field(
        default=False, description="Answer once the facts are formed (200), or at once with the receipt (202)."
    )
    timeout: Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)] | None = Field(
        default=None,
        description="Seconds to wait with wait=true; the larger of 600 and MEMORY_CLIENT__TIMEOUT when omitted.",
    )

    def message_dicts(self) -> list[dict[str, Any]]:
        """The messages as the client takes them: unset fields left out, so an id is derived where none was given."""
        return [message.model_dump(exclude_none=True) for message in self.messages]


class ForgetSources(_Body):
    """Messages to erase from the set's facts, by the ids they were remembered with."""

    model_config = _example(source_ids=["m1", "m2"])

    source_ids: list[str] = Field(
        description="Ids of the messages to erase (1 to 1,000): facts resting on them alone are deleted, the "
        "others lose them from their evidence."
    )
