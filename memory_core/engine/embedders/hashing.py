"""A deterministic bag-of-words hashing embedder, for unit tests only.

It knows no semantics (only shared words make texts similar); it exists so unit
tests run without the model. It is never a silent default: it must be chosen
with ``MEMORY_EMBEDDER__MODEL=hashing``.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

from memory_core.engine.embedders.base import EmbedderFingerprint

_WORD = re.compile(r"\w+")


class HashingEmbedder:
    """Hashes lower-cased words into ``dimension`` buckets with a sign, then L2-normalizes."""

    def __init__(self, dimension: int = 384) -> None:
        self._dimension = dimension

    @property
    def model_name(self) -> str:
        return f"hashing-{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def fingerprint(self) -> EmbedderFingerprint:
        return hashing_fingerprint(self._dimension)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._one(text) for text in texts]

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed(texts)

    def _one(self, text: str) -> list[float]:
        vector = [0.0] * self._dimension
        for word in _WORD.findall(text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self._dimension
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]


def hashing_fingerprint(dimension: int) -> EmbedderFingerprint:
    """The fingerprint of ``HashingEmbedder(dimension)`` (no weights: no revision; word counts, not pooled)."""
    return EmbedderFingerprint(provider="hashing", model=f"hashing-{dimension}", dimension=dimension, pooling="none")
