"""An offline, deterministic summarizer: embedding clusters and their most central sentences.

Used when no Anthropic key is configured. It groups items into at most ``limit``
clusters (farthest-point seeding, then a few k-means rounds on cosine) and builds
each summary from the sentences closest to its cluster's centre, in their
original order. No model calls, no tokens; the same input gives the same output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from memory_core.compaction.summarizer import Summary, Topic
from memory_core.embedders import Embedder
from memory_core.models import ChatMessage, CompactionConfig

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_SENTENCES_PER_SUMMARY = 3
_MAX_SUMMARY_CHARS = 1_200
_ROUNDS = 10


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
        topics = [Topic(summary=self._summary(texts, group, cache), item_indices=tuple(group)) for group in groups]
        return Summary(topics=topics, model="extractive")

    def _vectors(self, texts: list[str], cache: dict[str, np.ndarray]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in cache]
        if missing:
            cache.update(zip(missing, np.asarray(self._embedder.embed(missing), dtype=np.float32), strict=True))
        return np.stack([cache[t] for t in texts])

    def _summary(self, texts: list[str], group: list[int], cache: dict[str, np.ndarray]) -> str:
        sentences = [(i, s.strip()) for i in group for s in _SENTENCE_END.split(texts[i]) if s.strip()]
        unique = list(dict.fromkeys(s for _, s in sentences))
        vectors = self._vectors(unique, cache)
        centre = vectors.mean(axis=0)
        ranked = np.argsort(-(vectors @ centre), kind="stable")[:_SENTENCES_PER_SUMMARY]
        chosen = sorted(int(r) for r in ranked)  # keep the order they were said in
        return " ".join(unique[r] for r in chosen)[:_MAX_SUMMARY_CHARS]
