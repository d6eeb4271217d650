"""What crosses the broker: versioned JSON requests and replies of every task.

A request is a pydantic model dumped with ``model_dump(mode="json")``. Its ``v``
field is the schema version: a worker rejects (and dead-letters) a message of a
version it does not know instead of guessing. Replies are small JSON objects.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_serializer,
    model_validator,
)

from memory_core.core.models import (
    ChatMessage,
    ItemId,
    Key,
    MemorySet,
    MemorySetItem,
    Namespace,
    Scope,
    SearchMode,
    SetName,
)
from memory_core.core.settings import embedder_spec
from memory_core.core.validation import MAX_TTL_SECONDS

SCHEMA_VERSION = 1

FilterValue = str | int | list[str | int]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NamespaceRequest(_Wire):
    """Fields every task request carries: the schema version and the tenant."""

    v: Literal[1] = 1
    namespace: Namespace


class Request(NamespaceRequest):
    """A request about one key (user, agent, conversation) of a namespace."""

    key: Key


class SetRequest(Request):
    """A request about one memory set."""

    set_name: SetName

    @property
    def scope(self) -> Scope:
        """The store address of the set."""
        return Scope(self.namespace, self.key, self.set_name)


class NewItem(_Wire):
    """One item to write. ``seq`` orders items within a set; the client assigns it at accept time."""

    id: ItemId
    value: str | ChatMessage
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_time: datetime
    seq: int = Field(ge=0)
    importance: StrictFloat = Field(default=0.5, ge=0.0, le=1.0)
    source: str | None = Field(default=None, max_length=200)
    pinned: StrictBool = False
    # Bounded so the worker's created_time + timedelta(seconds=ttl) cannot overflow (a raw message included).
    ttl: StrictInt | None = Field(default=None, ge=1, le=MAX_TTL_SECONDS)
    expires_at: datetime | None = None
    # The caller named this id: a deduplicating set then never folds the item into another id (it stays
    # addressable by it); items the client named itself fold into an equal one.
    id_given: StrictBool = False

    @model_validator(mode="after")
    def _one_expiry(self) -> NewItem:
        if self.ttl is not None and self.expires_at is not None:
            raise ValueError(f"item {self.id!r} has both ttl and expires_at; give one")
        return self


class AddRequest(SetRequest):
    """memory.add: upsert these items (idempotent: same ids, same points)."""

    items: list[NewItem]


class IdsRequest(SetRequest):
    """memory.get and memory.delete: these ids, or the whole set when ``ids`` is None."""

    ids: list[ItemId] | None = None


class DeleteRequest(IdsRequest):
    """memory.delete: delete these ids, or every item of the set, as of ``seq``.

    ``seq`` comes from the same client clock as the items' (``NewItem.seq``): an item written later than
    the delete was issued stays, and a write issued before it never brings the item back. Without it
    (a message of an older client) the worker uses its own clock.
    """

    seq: int | None = Field(default=None, ge=0)


class DeleteSetRequest(SetRequest):
    """memory.delete_set: delete the set's items as of ``seq`` (see ``DeleteRequest``), then its definition."""

    seq: int | None = Field(default=None, ge=0)


class SearchRequest(SetRequest):
    """memory.search: the ``limit`` items most similar to ``query`` that match every filter."""

    query: str
    limit: int = Field(ge=1)
    filters: dict[str, FilterValue] = Field(default_factory=dict)
    mode: SearchMode = "hybrid"
    rerank: StrictBool | None = None
    """Rerank the fused hits (``MEMORY_RERANK__MODEL``): True asks for it (refused where no reranker is set),
    False turns it off for this search, None leaves it to the worker (on when a reranker is set)."""

    @model_serializer(mode="wrap")
    def _unset_rerank_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Sent only when asked: a default search stays a message that workers without the field accept.
        dumped: dict[str, Any] = handler(self)
        if self.rerank is None:
            dumped.pop("rerank", None)
        return dumped


class CreateSetRequest(Request):
    """memory.create_set: get-or-create a set definition (a different existing definition is a conflict)."""

    definition: MemorySet


class CompactRequest(SetRequest):
    """memory.compact: fold the set into summaries; ``force`` compacts even below capacity (on demand)."""

    force: bool = False


class CompactionReport(_Wire):
    """What a compaction did. ``status``: compacted, under_capacity, busy (another run holds the lock)."""

    status: str
    items_before: int = 0
    items_after: int = 0
    items_folded: int = 0
    summaries_written: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    recovered: int = 0
    # Who wrote the summaries (a Claude model id, or "extractive"), and what the caller should know about it.
    summarizer: str | None = None
    notes: list[str] = Field(default_factory=list)


class SweepReport(_Wire):
    """What a sweep did: sets looked at, and tasks enqueued for them."""

    sets_checked: int
    enqueued: int


class MaintenanceReport(_Wire):
    """What one maintenance sweep did; ``skipped`` when another run of it holds this tick."""

    sweep: str
    status: str
    items: int = 0
    sets: int = 0
    seconds: float = 0.0


class ForgetRequest(NamespaceRequest):
    """memory.forget: erase everything of one namespace, or of one key in it."""

    key: Key | None = None


class ForgetReceipt(_Wire):
    """What an erasure removed, per store."""

    namespace: str
    key: str | None
    items: int
    sets: int
    redis_keys: int
    dead_letters: int


class SessionRequest(Request):
    """A request about one session of a key."""

    session_id: Key
    ttl: int | None = Field(default=None, ge=1)


class FoldRequest(SessionRequest):
    """memory.session_fold: fold the oldest unsummarized messages into the summary until the rest fit."""

    max_tokens: int = Field(ge=0)
    model: str | None = Field(default=None, max_length=200)
    human_prefix: str = Field(default="Human", max_length=64)
    ai_prefix: str = Field(default="AI", max_length=64)


class FoldReport(_Wire):
    """What a fold did. ``status``: folded, or within_budget (nothing to fold)."""

    status: str
    folded: int = 0
    summary: str = ""


class EntitiesRequest(SessionRequest):
    """memory.session_entities: update the entities of the messages ``first``..``last`` (stream cursors)."""

    first: str = Field(pattern=r"^\d+-\d+$")
    last: str = Field(pattern=r"^\d+-\d+$")


class EntitiesReport(_Wire):
    """The entities whose summaries an extraction wrote."""

    updated: list[str]


class RecallCandidate(_Wire):
    """Something the client found in a volatile tier (short-term state, the session) for recall to weigh."""

    tier: Literal["short_term", "session"]
    text: str = Field(min_length=1, max_length=32_000)
    ref: str = Field(max_length=1_024)
    created_at: datetime | None = None
    importance: float = Field(default=0.5, ge=0.0, le=1.0)


class RecallRequest(Request):
    """memory.recall: score these candidates and the key's long-term sets against ``query``."""

    query: str
    limit: int = Field(ge=1)
    token_budget: int | None = Field(default=None, ge=1)
    candidates: list[RecallCandidate] = Field(default_factory=list)
    sets: list[SetName] | None = None


class RecalledItem(_Wire):
    """One recalled memory: where it came from, its text, and why it ranks where it does.

    ``score`` = weights . (``relevance``, ``recency``, ``importance``). ``also_in`` names the other tiers
    (or sets) that held the same fact, folded into this one.
    """

    tier: Literal["short_term", "session", "long_term"]
    text: str
    score: float
    relevance: float
    recency: float
    importance: float
    ref: str
    set_name: str | None = None
    created_at: datetime | None = None
    also_in: list[str] = Field(default_factory=list)


class RecallReply(_Wire):
    """Scored, deduplicated, budget-trimmed memories, best first, and the context block built from them."""

    items: list[RecalledItem]
    context: str
    tokens: int


class AddReply(_Wire):
    """Ids written and made durable."""

    ids: list[str]


class ItemsReply(_Wire):
    """Items, in the order the operation defines (insertion order, or best first for search)."""

    items: list[MemorySetItem]


class CountReply(_Wire):
    """A number of items (size, or how many a delete removed)."""

    count: int


class SetReply(_Wire):
    """A set definition, or None when there is none."""

    definition: MemorySet | None


class ListSetsRequest(NamespaceRequest):
    """memory.list_sets: the sets of a namespace (or of one key of it), with their sizes."""

    key: Key | None = None


class SetInfo(_Wire):
    """One set of a listing."""

    key: Key
    definition: MemorySet
    size: int


class SetsReply(_Wire):
    """Sets, by key then name."""

    sets: list[SetInfo]


class ExportRequest(SetRequest):
    """memory.export: every item id of the set in insertion order (``ids`` None), or these items."""

    ids: list[ItemId] | None = None
    vectors: bool = False


class ExportedItem(_Wire):
    """An item as exported: everything stored, and its dense vector when asked for."""

    item: MemorySetItem
    vector: list[float] | None = None


class ExportReply(_Wire):
    """Either the ids of the set (a first call) or the items asked for."""

    ids: list[ItemId] = Field(default_factory=list)
    items: list[ExportedItem] = Field(default_factory=list)


class ImportRequest(SetRequest):
    """memory.import: writes exported items as they were (ids, order, times); re-embeds those without vectors.

    Idempotent: an item already there is overwritten with the same content.
    """

    items: list[ExportedItem]


class BackupRequest(_Wire):
    """memory.backup: a consistent snapshot of the store, named ``label`` under the backup directory."""

    v: Literal[1] = 1
    label: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class BackupReply(_Wire):
    """What the snapshot made: directories (embedded engine) or server snapshot names."""

    location: str
    parts: list[str]
    bytes_on_disk: int = 0  # what the snapshot takes (its files stay sparse); 0 for server snapshots


class ReindexRequest(_Wire):
    """memory.reindex: start, follow, abort or finish the re-embedding of the store for another embedder."""

    v: Literal[1] = 1
    action: Literal["start", "status", "abort", "drop_old", "kick"]
    to: Annotated[str, AfterValidator(embedder_spec)] | None = None
    """The target embedder (``MEMORY_EMBEDDER__MODEL`` syntax); ``start`` only."""
    path: str | None = Field(default=None, min_length=1, max_length=4096)
    """A local model directory for the target (``MEMORY_EMBEDDER__PATH`` of the new setting)."""
    base_url: str | None = Field(default=None, pattern=r"^https?://\S+$", max_length=2048)
    """The target's embeddings endpoint (``MEMORY_EMBEDDER__BASE_URL`` of the new setting)."""
    dimensions: StrictInt | None = Field(default=None, ge=1, le=65536)
    """The target's vector length, for endpoints that can shorten vectors."""
    roles: str | None = Field(default=None, max_length=32)
    """How the target tells queries from documents (``MEMORY_EMBEDDER__ROLES`` of the new setting)."""
    query_prefix: str | None = Field(default=None, max_length=200)
    document_prefix: str | None = Field(default=None, max_length=200)
    query_params: dict[str, StrictStr | StrictInt | StrictFloat | StrictBool] | None = None
    document_params: dict[str, StrictStr | StrictInt | StrictFloat | StrictBool] | None = None

    @model_validator(mode="after")
    def _target_for_start(self) -> ReindexRequest:
        if self.action == "start" and self.to is None:
            raise ValueError("action 'start' needs 'to', the target embedder (e.g. 'fastembed:BAAI/bge-small-en-v1.5')")
        if self.action != "start" and any(getattr(self, name) is not None for name in TARGET_FIELDS):
            raise ValueError(f"only action 'start' takes a target; got action {self.action!r} with one")
        return self


TARGET_FIELDS = (
    "to",
    "path",
    "base_url",
    "dimensions",
    "roles",
    "query_prefix",
    "document_prefix",
    "query_params",
    "document_params",
)
"""The fields of a ``ReindexRequest`` that describe its target (``start`` only)."""


REINDEX_PARTS = 16
"""Parts of the point-id space a reindex copies independently (``memory_core.engine.reindex``)."""


class ReindexBatch(_Wire):
    """memory.reindex_batch: copy the next batch of one part of the store (sent by workers to themselves);
    part ``REINDEX_PARTS`` is the catch-up of the writes the new collection is owed."""

    part: StrictInt = Field(ge=0, le=REINDEX_PARTS)


class ReindexStatus(_Wire):
    """Where a store's reindex stands. ``state``: ``none`` (never started), ``building`` (copying), ``complete``
    (the new collection holds everything and mirrors every write: restart the workers with the new setting),
    ``switched`` (workers run the new embedder; the old collection stays until ``drop_old``), ``aborted``."""

    state: Literal["none", "building", "complete", "switched", "aborted"]
    source: str = ""
    """The embedder whose collection is copied (``describe()``)."""
    target: str = ""
    """The embedder it is re-embedded for (``describe()``)."""
    target_spec: str = ""
    """The ``MEMORY_EMBEDDER__MODEL`` value of the target: what the workers restart with."""
    source_collection: str = ""
    collection: str = ""
    total: int = 0
    """Points in the old collection when the reindex started (tombstones included)."""
    scanned: int = 0
    """Points read so far, over both passes (the first copies, the second checks): done at ``2 * total``, about."""
    copied: int = 0
    """Points written into the new collection by the reindex (writes mirrored by workers not counted)."""
    parts_done: int = 0
    parts: int = 0
    started_at: float | None = None
    completed_at: float | None = None
    source_dropped: bool = False
    owed: int = 0
    """Writes the new collection is owed (made while the reindex runs, caught up in the background)."""
    target_error: str = ""
    """Why the new model's endpoint failed the last batches ("" while it answers): the reindex retries, with
    backoff, and the live store is not affected."""
    target_error_since: float | None = None
    last_success_at: float | None = None
    """When a batch last embedded for the new collection."""
    restart: list[str] = Field(default_factory=list)
    """The settings the workers restart with to switch (``MEMORY_EMBEDDER__*=...``, every one the target needs)."""


class ErrorInfo(_Wire):
    """A worker-side failure, rebuilt as the same ``MemoryCoreError`` subclass in the client."""

    type: str
    message: str


class Reply(_Wire):
    """The envelope a worker pushes to a waiting client: a result or an error."""

    ok: bool
    result: dict[str, Any] | None = None
    error: ErrorInfo | None = None
