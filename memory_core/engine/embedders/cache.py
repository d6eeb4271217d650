"""Embeddings cached in Redis by (namespace, embedder fingerprint, query or document, text hash): a repeated
text is never embedded twice, and a vector of one model, or a query's vector, is never served for another."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence

import numpy as np
import redis

from memory_core.core.keys import Keys
from memory_core.core.metrics import CACHE
from memory_core.engine.embedders import Embedder
from memory_core.engine.embedders.base import embed_timed
from memory_core.engine.embedders.metering import charging


def encode_vector(vector: Sequence[float]) -> str:
    """A vector as a JSON object holding its float32 little-endian bytes in base64.

    Exact for a float32 model, a quarter of the size of a JSON list of floats, and about ten
    times faster to write: on a write of new texts, printing floats as decimal text took ~3% of
    the worker's CPU (profiled).
    """
    data = np.asarray(vector, dtype="<f4").tobytes()
    return json.dumps({"f32": base64.b64encode(data).decode("ascii")})


def decode_vector(raw: bytes | str) -> list[float] | None:
    """The vector of a cached value; None (a miss) for anything that is not one."""
    try:
        value = json.loads(raw)
        if isinstance(value, list):  # written before vectors were packed
            return [float(x) for x in value]
        if isinstance(value, dict) and isinstance(value.get("f32"), str):
            packed: list[float] = np.frombuffer(base64.b64decode(value["f32"], validate=True), dtype="<f4").tolist()
            return packed
    except (ValueError, TypeError, binascii.Error):
        pass
    return None


class EmbeddingCache:
    """Wraps an embedder; values are packed vectors (``encode_vector``) with a time to live.

    ``ttl`` is for texts that search with (queries, recall candidates); ``write_ttl`` for texts being
    written, which rarely come back after a retry window but would otherwise fill Redis with one entry
    per item written.
    """

    def __init__(
        self, embedder: Embedder, client: redis.Redis, keys: Keys, *, ttl: int, write_ttl: int | None = None
    ) -> None:
        self.embedder = embedder
        self._client = client
        self._keys = keys
        self._ttl = ttl
        self._write_ttl = ttl if write_ttl is None else write_ttl
        self.hits = 0
        self.misses = 0

    def embed(
        self, namespace: str, texts: Sequence[str], *, written: bool = False, queries: bool = False
    ) -> list[list[float]]:
        """Vectors for ``texts``, from the cache where present; the rest embedded in one batch and stored."""
        return self.embed_many([(namespace, text) for text in texts], written=written, queries=queries)

    def embed_many(
        self, pairs: Sequence[tuple[str, str]], *, written: bool = False, queries: bool = False
    ) -> list[list[float]]:
        """Vectors for ``(namespace, text)`` pairs of any namespaces: one MGET, one embedder call for the misses.

        Entries are cached per namespace (no cross-tenant timing hints); a text needed by several
        namespaces is embedded once. ``queries``: the texts are search queries (``embed_queries``), cached
        apart from documents, since a model with a query prefix embeds the same text differently as one.
        A remote embedder's tokens are charged to the namespaces whose texts missed (``metering.charging``).
        """
        if not pairs:
            return []
        # The fingerprint's id, not the model's name: two revisions or prefixes of one model never share entries.
        model = f"{self.embedder.fingerprint.id}.{'query' if queries else 'document'}"
        keys = [
            self._keys.cached_embedding(namespace, model, hashlib.sha256(text.encode("utf-8")).hexdigest()[:40])
            for namespace, text in pairs
        ]
        try:
            cached = self._client.mget(keys)
        except redis.RedisError:
            cached = [None] * len(pairs)  # the cache is an optimization; embedding still works without it
        vectors: list[list[float] | None] = [decode_vector(c) if c else None for c in cached]
        missing = [i for i, v in enumerate(vectors) if v is None]
        unique = list(dict.fromkeys(pairs[i][1] for i in missing))
        self.hits += len(pairs) - len(missing)
        self.misses += len(unique)
        CACHE.labels("embedding", "hit").inc(len(pairs) - len(missing))
        CACHE.labels("embedding", "miss").inc(len(unique))
        if unique:
            with charging(dict.fromkeys(pairs[i] for i in missing)):
                fresh = dict(zip(unique, embed_timed(self.embedder, unique, queries=queries), strict=True))
            for i in missing:
                vectors[i] = fresh[pairs[i][1]]
            ttl = self._write_ttl if written else self._ttl
            try:
                with self._client.pipeline(transaction=False) as pipe:
                    for i in dict.fromkeys(missing):
                        pipe.set(keys[i], encode_vector(fresh[pairs[i][1]]), ex=ttl)
                    pipe.execute()
            except redis.RedisError:
                pass
        return [v for v in vectors if v is not None]
