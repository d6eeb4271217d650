"""The embedder seam."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from memory_core.core.metrics import EMBED_SECONDS, EMBEDDED_TEXTS, timed
from memory_core.core.tracing import tracer

T = TypeVar("T")

MAX_DIMENSION = 65536
"""The longest vector a store takes (Qdrant's limit): a fingerprint of more is not valid."""


class EmbedderFingerprint(BaseModel):
    """What makes two embedders' vectors comparable: two fingerprints that differ in any field mean vectors of
    two spaces, which must never be compared (or stored in one collection), even when the dimensions agree."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str = Field(min_length=1, max_length=64)
    """``minilm``, ``hashing``, ``fastembed``, ``openai``..."""
    model: str = Field(min_length=1, max_length=300)
    """The provider's model id (e.g. ``BAAI/bge-small-en-v1.5``)."""
    revision: str = Field(default="", max_length=200)
    """A revision or a hash of the model's weights file, where the provider has one; ``""`` where not."""
    dimension: int = Field(ge=1, le=MAX_DIMENSION)
    pooling: Literal["mean", "cls", "none", "remote"] = "mean"
    """How token vectors become one: ``remote`` when an endpoint does it (unknown to us, fixed by the model)."""
    normalized: bool = True
    """Whether vectors are L2-normalized before they are stored."""
    query_prefix: str = Field(default="", max_length=200)
    document_prefix: str = Field(default="", max_length=200)
    query_params: str = Field(default="", max_length=2000)
    """Extra request fields for queries (``roles``), canonical JSON; ``""``: none."""
    document_params: str = Field(default="", max_length=2000)

    @property
    def id(self) -> str:
        """A short stable digest of every field: equal ids mean the same vector space."""
        fields = self.model_dump(mode="json")
        for name in ("query_params", "document_params"):  # added later: a store recorded without them keeps its id
            if not fields[name]:
                del fields[name]
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """One line for people: ``provider:model@revision (dimension d, pooling, prefixes)``."""
        revision = f"@{self.revision[:12]}" if self.revision else ""
        prefixes = f", query prefix {self.query_prefix!r}" if self.query_prefix else ""
        prefixes += f", document prefix {self.document_prefix!r}" if self.document_prefix else ""
        prefixes += f", query fields {self.query_params}" if self.query_params else ""
        prefixes += f", document fields {self.document_params}" if self.document_params else ""
        normalized = "normalized" if self.normalized else "not normalized"
        shape = f"{self.dimension} d, {self.pooling} pooling, {normalized}{prefixes}"
        return f"{self.provider}:{self.model}{revision} ({shape})"

    @property
    def spec(self) -> str:
        """The ``MEMORY_EMBEDDER__MODEL`` value that selects this embedder's provider and model."""
        return SPEC_OF_PROVIDER.get(self.provider) or f"{self.provider}:{self.model}"


SPEC_OF_PROVIDER = {"minilm": "all-MiniLM-L6-v2", "hashing": "hashing"}
"""Providers whose setting is one fixed word; every other provider is ``<provider>:<model>``."""


UsageHook = Callable[[str, int, int], None]
"""Called by an embedder paid per token after each answered request, with (model name, tokens the endpoint
reports it used, texts sent); ``metering.EmbeddingMeter.record`` writes them to the usage ledger."""


class Embedder(Protocol):
    """Turns texts into unit-length vectors; cosine similarity between them means relatedness."""

    @property
    def model_name(self) -> str:
        """A stable name of the model; the store keeps one collection per model name."""
        ...

    @property
    def dimension(self) -> int:
        """The length of every vector."""
        ...

    @property
    def fingerprint(self) -> EmbedderFingerprint:
        """What the vectors depend on; a store records it, and a worker whose embedder differs refuses to start."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text (a document: what is stored), in order."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per search query, in order (models with a query prefix add it; others equal ``embed``)."""
        ...


TYPICAL_TOKENS = 32
"""Tokens of a typical stored text (a LoCoMo chat turn: 31, the median): ``batch_size`` times this is the padded
tokens a local model runs at once (``length_batches``), so a batch holds many short texts or a few long ones.
Measured with MiniLM on chat turns: 512 to 2,048 padded tokens a batch run alike on one thread, two threads
gain a little up to 1,024, and past 2,048 both slow down."""


def length_batches(lengths: Sequence[int], max_padded_tokens: int) -> list[list[int]]:
    """Positions of texts (``lengths`` in tokens) grouped shortest first into batches of similar length, each
    at most ``max_padded_tokens`` once padded to its longest text (one text longer than that: alone).

    A local model pads every text of a batch to the batch's longest, and the padding costs as much as text:
    batches cut in arrival order spend most of their work on it when lengths vary, as chat turns do. The
    caller runs the batches and puts each vector back at its text's position (``in_order``)."""
    batches: list[list[int]] = []
    batch: list[int] = []
    for position in sorted(range(len(lengths)), key=lengths.__getitem__):
        if batch and (len(batch) + 1) * lengths[position] > max_padded_tokens:
            batches.append(batch)
            batch = []
        batch.append(position)
    if batch:
        batches.append(batch)
    return batches


def in_order(batches: Sequence[Sequence[int]], results: Sequence[Sequence[T]]) -> list[T]:
    """The results of ``length_batches``'s batches (one sequence per batch, in its order), each at its text's
    position."""
    positions = [position for batch in batches for position in batch]
    flat = [result for batch_results in results for result in batch_results]
    return [result for _, result in sorted(zip(positions, flat, strict=True), key=itemgetter(0))]


def embed_timed(embedder: Embedder, texts: list[str], *, queries: bool = False) -> list[list[float]]:
    """``embedder.embed(texts)`` (``embed_queries`` with ``queries``), timed, counted and traced."""
    with tracer.start_as_current_span("embed", attributes={"texts": len(texts)}), timed(EMBED_SECONDS):
        vectors = embedder.embed_queries(texts) if queries else embedder.embed(texts)
    EMBEDDED_TEXTS.inc(len(texts))
    return vectors
