"""The reranker seam."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from memory_core.core.errors import RerankerError
from memory_core.core.metrics import RERANK_SECONDS, timed
from memory_core.core.tracing import tracer

Ranking = list[tuple[int, float]]
"""(index into the documents, score), best first; each index at most once."""


class Reranker(Protocol):
    """Scores documents against a query, each pair read together (a cross-encoder): higher = more relevant.

    Scores are the model's own: comparable between the documents of one call, not across models."""

    @property
    def model_name(self) -> str:
        """What selects it (``MEMORY_RERANK__MODEL``, without credentials): for logs and errors."""
        ...

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> Ranking:
        """The best ``top_n`` of ``documents`` (all of them when fewer), best first."""
        ...

    def close(self) -> None:
        """Releases what it holds (connections); called when the worker's services close."""
        ...


def rerank_timed(reranker: Reranker, query: str, documents: list[str], top_n: int) -> Ranking:
    """``reranker.rerank(...)``, timed and traced, its answer checked (no fewer than ``top_n`` of the documents,
    every index once and in range, scores finite) and put best first.

    The providers check their model's or endpoint's answer in full; this holds any ``Reranker`` to the
    Protocol, so a short ranking never silently shortens a search (nor is cached as its result)."""
    with tracer.start_as_current_span("rerank", attributes={"documents": len(documents)}), timed(RERANK_SECONDS):
        ranking = reranker.rerank(query, documents, top_n)
    if len(ranking) < min(top_n, len(documents)):
        raise RerankerError(
            f"reranker {reranker.model_name} ranked {len(ranking)} of {len(documents)} documents, asked for the "
            f"best {top_n}"
        )
    indices = [index for index, _ in ranking]
    if len(set(indices)) != len(indices) or not all(0 <= index < len(documents) for index in indices):
        raise RerankerError(
            f"reranker {reranker.model_name} answered indices {sorted(indices)!r:.200} for {len(documents)} documents"
        )
    if not all(math.isfinite(score) for _, score in ranking):
        raise RerankerError(f"reranker {reranker.model_name} answered a score that is not a finite number")
    return sorted(ranking, key=lambda pair: pair[1], reverse=True)[:top_n]
