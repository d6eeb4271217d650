"""An offline, deterministic summarizer: embedding clusters and their most central sentences.

Used when no Anthropic key is configured. It groups items into at most ``limit``
clusters (farthest-point seeding, then a few k-means rounds on cosine) and builds
each summary from every item's sentence closest to its cluster's centre, in their
original order: a summary covers each item it replaces, and an item that does not
fit stays as it is. No model calls, no tokens; the same input gives the same output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from memory_core.core.models import ChatMessage, CompactionConfig
from memory_core.engine.compaction.summarizer import Summary, Topic
from memory_core.engine.embedders import Embedder

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# One sentence of every item it replaces: room for a few hundred short facts, well within an item's size.
_MAX_SUMMARY_CHARS = 8_000
_ROUNDS = 10
MODEL = "extractive"
"""The name the offline summarizer reports as its model."""


def _cluster(vectors: np.ndarray, k: int) -> list[list[int]]:
    count = len(vectors)
    mean = vectors.mean(axis=0)
    seeds = [int(np.argmax(vectors @ mean))]
    while len(seeds) < k:
        closest = np.max(vectors @ vectors[seeds].T, axis=1)
        seeds.append(int(np.argmin(closest)))
    centres = vectors[seeds]
    labels = np.zeros(count, dtype=int)
    for _ in range(_ROUNDS):
        labels = np.argmax(vectors @ centres.T, axis=1)
        for c in range(k):
            members = vectors[labels == c]
            if len(members):
                centre = members.mean(axis=0)
                centres[c] = centre / (np.linalg.norm(centre) or 1.0)
    groups = [[i for i in range(count) if labels[i] == c] for c in range(k)]
    return sorted((g for g in groups if g), key=lambda g: g[0])


class ExtractiveSummarizer:
    """Clusters items by embedding and keeps each cluster's most central sentences."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    def summarize(self, items: Sequence[str | ChatMessage], config: CompactionConfig) -> Summary:
        texts = [str(item) for item in items]
        if not texts:
            return Summary(topics=[], model="extractive")
        # One embedding per distinct text for the whole call: a one-sentence item is its own sentence.
        cache: dict[str, np.ndarray] = {}
        vectors = self._vectors(texts, cache)
        groups = _cluster(vectors, min(config.limit, len(texts)))
        topics = []
        for group in groups:
            summary, covered = self._summary(texts, group, cache)
            if covered:
                topics.append(Topic(summary=summary, item_indices=covered))
        return Summary(topics=topics, model=MODEL)

    def _vectors(self, texts: list[str], cache: dict[str, np.ndarray]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in cache]
        if missing:
            cache.update(zip(missing, np.asarray(self._embedder.embed(missing), dtype=np.float32), strict=True))
        return np.stack([cache[t] for t in texts])

    def _summary(self, texts: list[str], group: list[int], cache: dict[str, np.ndarray]) -> tuple[str, tuple[int, ...]]:
        """Each item's sentence closest to the cluster's centre, in the order they were said, and the items
        that made it into the summary: an item whose sentence does not fit is left out, and stays as it is."""
        per_item = {i: [s.strip() for s in _SENTENCE_END.split(texts[i]) if s.strip()] or [texts[i]] for i in group}
        unique = list(dict.fromkeys(s for sentences in per_item.values() for s in sentences))
        vectors = dict(zip(unique, self._vectors(unique, cache), strict=True))
        centre = np.mean([vectors[s] for s in unique], axis=0)
        chosen: list[str] = []
        covered: list[int] = []
        used = 0
        for i in group:  # oldest first: what fits the summary is the oldest of the cluster
            best = max(per_item[i], key=lambda s: float(vectors[s] @ centre))
            cost = 0 if best in chosen else len(best) + (1 if chosen else 0)
            if used + cost > _MAX_SUMMARY_CHARS:
                continue
            if best not in chosen:
                chosen.append(best)
                used += cost
            covered.append(i)
        return " ".join(chosen), tuple(covered)
