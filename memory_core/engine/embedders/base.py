"""The embedder seam."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from memory_core.core.metrics import EMBED_SECONDS, EMBEDDED_TEXTS, timed
from memory_core.core.tracing import tracer


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

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


def embed_timed(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    """``embedder.embed(texts)``, timed, counted and traced."""
    with tracer.start_as_current_span("embed", attributes={"texts": len(texts)}), timed(EMBED_SECONDS):
        vectors = embedder.embed(texts)
    EMBEDDED_TEXTS.inc(len(texts))
    return vectors
