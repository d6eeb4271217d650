"""What crosses the broker: versioned JSON requests and replies of every task.

A request is a pydantic model dumped with ``model_dump(mode="json")``. Its ``v``
field is the schema version: a worker rejects (and dead-letters) a message of a
version it does not know instead of guessing. Replies are small JSON objects.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
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
    Decision,
    FactKind,
    ItemId,
    Key,
    MemorySet,
    MemorySetItem,
    MessageRole,
    Namespace,
    Scope,
    SearchMode,
    SetName,
)
from memory_core.core.settings import embedder_spec
from memory_core.core.validation import MAX_TTL_SECONDS

SCHEMA_VERSION = 1

FilterValue = str | int | list[str | int]
StrictFilterValue = StrictStr | StrictInt | list[StrictStr | StrictInt]
"""A filter value as given, never coerced (a JSON ``true`` is not the int 1)."""


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
    include_superseded: StrictBool = False
    """Return facts that formation superseded too (``FactInfo.valid_to`` set); by default only live ones."""

    @model_serializer(mode="wrap")
    def _defaults_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Sent only when asked: a default search stays a message that workers without the fields accept.
        dumped: dict[str, Any] = handler(self)
        if self.rerank is None:
            dumped.pop("rerank", None)
        if not self.include_superseded:
            dumped.pop("include_superseded", None)
        return dumped


BrowseSort = Literal["created", "updated", "importance", "last_access", "expires"]
"""What a browse orders by: the creation time (the start of a range), the last write (``seq``), importance, the
last access, or the expiry (items without one are left out)."""
MAX_BROWSE_LIMIT = 200
"""Items one browse page holds at most."""
MAX_CURSOR_CHARS = 2048
"""A cursor's length at most: one holds an item id (up to 128 characters, each up to 6 once escaped in JSON)."""
MAX_CONTAINS_CHARS = 500
_WORD = re.compile(r"[^\W_]+")


def contained_words(text: str) -> list[str]:
    """The words a browse's ``contains`` asks for: runs of letters and digits, lower-cased, split as the stores'
    word index splits item text."""
    return [word.lower() for word in _WORD.findall(text)]


class BrowseQuery(_Wire):
    """Which visible items a browse lists, and in which order; every field given narrows the list.

    Ties of the sort key are ordered by the last write (``seq``), then by item id, in the same direction, so a
    listing is one total order and a cursor a place in it. ``contains``: every word must be a word of the item's
    text (case-insensitive; a chat message's content). ``metadata``: exact matches, as search filters.
    ``created_after`` (inclusive) and ``created_before`` (exclusive) bound the creation time (a range's start).
    ``compacted``: summaries only (True) or none (False). ``expiring``: items with an expiry (True) or without.
    """

    sort: BrowseSort = "created"
    descending: StrictBool = True
    contains: str | None = Field(default=None, max_length=MAX_CONTAINS_CHARS)
    metadata: dict[str, StrictFilterValue] = Field(default_factory=dict)
    created_after: AwareDatetime | None = None
    created_before: AwareDatetime | None = None
    compacted: StrictBool | None = None
    pinned: StrictBool | None = None
    min_importance: StrictFloat | None = Field(default=None, ge=0.0, le=1.0)
    max_importance: StrictFloat | None = Field(default=None, ge=0.0, le=1.0)
    expiring: StrictBool | None = None

    @model_validator(mode="after")
    def _consistent(self) -> BrowseQuery:
        if self.contains is not None and not contained_words(self.contains):
            raise ValueError(f"contains {self.contains!r:.80} has no word to look for (letters or digits)")
        after, before = self.created_after, self.created_before
        if after is not None and before is not None and after >= before:
            raise ValueError(f"created_after {after.isoformat()} is not before created_before {before.isoformat()}")
        low, high = self.min_importance, self.max_importance
        if low is not None and high is not None and low > high:
            raise ValueError(f"min_importance {low} is above max_importance {high}")
        return self


class BrowseRequest(SetRequest):
    """memory.browse: one page of the set's visible items, from ``cursor`` (a page's ``next_cursor``) on."""

    query: BrowseQuery = Field(default_factory=BrowseQuery)
    cursor: str | None = Field(default=None, min_length=1, max_length=MAX_CURSOR_CHARS)
    limit: StrictInt = Field(default=50, ge=1, le=MAX_BROWSE_LIMIT)


class Page(_Wire):
    """A page of a browse: its items in order, the cursor of the next page (None after the last one), and how many
    visible items match the query in all (exact; None when the query filters on metadata, which has no index to
    count with)."""

    items: list[MemorySetItem]
    next_cursor: str | None = None
    total: int | None = None


class ExplainRequest(SearchRequest):
    """memory.explain: a search's hits, each with every ranker's part in its score; reads record no access."""


class Explained(_Wire):
    """One hit of an explained search, best first.

    ``item.score`` is the final score: the reranker's when one ranked the hits, else ``fused`` (or, in ``dense``
    mode, the cosine). ``fused`` is the score the search reports before reranking: the sum of the rankers' scaled
    parts over the number of rankers fused (3 in ``hybrid``, 2 in ``lexical``; None in ``dense`` mode), capped at 1.
    Each ranker has its raw score and its DBSF-scaled part, None when it did not return the item: ``dense`` is
    the cosine (known for every hybrid hit); ``bm25`` is BM25 of the item's text and ``context`` BM25 of its
    text with the turns before it (in ``hybrid`` mode each lexical ranker scales BM25 + ``TIE_BREAK`` x cosine).
    """

    item: MemorySetItem
    fused: float | None = None
    dense: float | None = None
    dense_scaled: float | None = None
    bm25: float | None = None
    bm25_scaled: float | None = None
    context: float | None = None
    context_scaled: float | None = None
    rerank: float | None = None


class ExplainReply(_Wire):
    """The hits of an explained search, best first."""

    hits: list[Explained]


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
    """Why the new model's endpoint failed the last batches ("" while it answers, and once any batch it
    answered followed the failure): the reindex retries, with backoff, and the live store is not affected."""
    target_error_since: float | None = None
    last_success_at: float | None = None
    """When the new model's endpoint last embedded a batch for the new collection (a batch with nothing to
    embed does not count)."""
    restart: list[str] = Field(default_factory=list)
    """The settings the workers restart with to switch (``MEMORY_EMBEDDER__*=...``, every one the target needs)."""


OperationId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
OperationStatus = Literal["pending", "running", "done", "deferred", "failed"]


class FormMessage(_Wire):
    """One message to form memories from. ``id`` is the caller's, or derived from role, content and position."""

    id: ItemId
    role: MessageRole
    content: str = Field(min_length=1)
    at: datetime | None = None
    """When it was said, if the caller knows: relative dates in it ("yesterday") are resolved against it."""


class RememberRequest(SetRequest):
    """memory.form: form facts from ``messages`` into the set, exactly once per ``op_id``.

    ``op_id`` hashes the scope, the message ids, ``prompt_version`` and ``model`` (``client.formation``); the
    worker keeps the model's reply under it before it writes anything, and a redelivery replays that reply.
    """

    op_id: OperationId
    messages: list[FormMessage] = Field(min_length=1)
    model: str = Field(min_length=1, max_length=200)
    prompt_version: str = Field(pattern=r"^[a-z0-9-]{1,40}$")
    seq: int = Field(ge=0)
    """From the client's clock when it accepted the call: orders the facts against the set's other writes."""
    received_at: datetime
    """When the call was made: relative dates in messages without a time are resolved against it."""
    replaces: list[ItemId] = Field(default_factory=list, max_length=1000)
    """Facts kept verbatim that this operation forms again (``memory-core formation replay``): they are retired
    (superseded) once its decisions are applied."""


class OperationRequest(Request):
    """memory.operation: where a formation operation of this key stands."""

    op_id: OperationId


class PlannedFact(_Wire):
    """One decision of a formation: what it writes (``add``, ``update``, ``contradict``) or confirms (``same``).

    ``fact_id`` is the new fact's id (derived from the operation), or for ``same`` the fact it confirms.
    ``target`` is the fact an ``update`` or ``contradict`` supersedes. ``note`` says why a decision was changed
    on the way (an alias the model invented, a target gone meanwhile).
    """

    decision: Decision
    fact_id: str
    text: str
    kind: FactKind = "fact"
    entities: list[str] = Field(default_factory=list)
    occurred_at: datetime | None = None
    confidence: float | None = None
    sources: list[str] = Field(default_factory=list)
    target: str | None = None
    note: str | None = None


class FormationReport(_Wire):
    """A formation operation as its caller sees it (``remember``'s receipt, ``operation``'s answer)."""

    op_id: str
    namespace: str
    key: str
    set_name: str
    status: OperationStatus
    formed_by: str | None = None
    """The model that formed the facts, or ``"verbatim"`` when no model was available (the user's own turns
    were kept as said); None until it ran."""
    decisions: list[PlannedFact] = Field(default_factory=list)
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    notes: list[str] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime

    @property
    def facts(self) -> list[str]:
        """The ids of the facts this operation wrote or confirmed."""
        return [decision.fact_id for decision in self.decisions]


class FormationRecord(_Wire):
    """What Redis keeps of one operation (``Keys.formation_operation``): the report, the request while it is not
    done, and the model's reply once it came (stored before any write, so a redelivery never calls again)."""

    report: FormationReport
    request: RememberRequest | None = None
    reply: dict[str, Any] | None = None
    """The model's tool input as it was validated (or the verbatim decisions' source), for the record."""
    raw_replies: list[str] = Field(default_factory=list)
    """Replies that failed validation, kept for whoever inspects the failure."""


class HistoryRequest(SetRequest):
    """memory.fact_history: the supersession chain of one fact, oldest first."""

    fact_id: ItemId


class ForgetSourcesRequest(SetRequest):
    """memory.forget_sources: facts resting only on these messages go; the others lose them from their evidence."""

    source_ids: list[ItemId] = Field(min_length=1, max_length=1000)
    seq: int = Field(ge=0)


class ForgetSourcesReport(_Wire):
    """What erasing source messages did to the set's facts."""

    removed: int
    updated: int


class FormationResumeRequest(NamespaceRequest):
    """memory.formation_resume: send a namespace's deferred operations again (those still over their budget
    defer again)."""


class FormationReplayRequest(SetRequest):
    """memory.formation_replay: form again, with the model, the facts kept verbatim in one set."""


class FormationAdminReport(_Wire):
    """How many operations a resume or replay sent."""

    sent: int
    left: int = 0
    notes: list[str] = Field(default_factory=list)


class ErrorInfo(_Wire):
    """A worker-side failure, rebuilt as the same ``MemoryCoreError`` subclass in the client."""

    type: str
    message: str


class Reply(_Wire):
    """The envelope a worker pushes to a waiting client: a result or an error."""

    ok: bool
    result: dict[str, Any] | None = None
    error: ErrorInfo | None = None
