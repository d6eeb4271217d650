"""Embeddings cached in Redis by (namespace, model, text hash): a repeated text is never embedded twice."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import redis

from memory_core.embedders import Embedder
from memory_core.keys import Keys


class EmbeddingCache:
    """Wraps an embedder; values are JSON lists of floats with a time to live."""

    def __init__(self, embedder: Embedder, client: redis.Redis, keys: Keys, *, ttl: int) -> None:
        self.embedder = embedder
        self._client = client
        self._keys = keys
        self._ttl = ttl
        self.hits = 0
        self.misses = 0

    def embed(self, namespace: str, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for ``texts``, from the cache where present; the rest embedded in one batch and stored."""
        if not texts:
            return []
        model = self.embedder.model_name
        keys = [
            self._keys.cached_embedding(namespace, model, hashlib.sha256(t.encode("utf-8")).hexdigest()[:40])
            for t in texts
        ]
        try:
            cached = self._client.mget(keys)
        except redis.RedisError:
            cached = [None] * len(texts)  # the cache is an optimization; embedding still works without it
        vectors: list[list[float] | None] = [json.loads(c) if c else None for c in cached]
        missing = [i for i, v in enumerate(vectors) if v is None]
        first_key = {texts[i]: keys[i] for i in reversed(missing)}
        unique = list(dict.fromkeys(texts[i] for i in missing))
        self.hits += len(texts) - len(missing)
        self.misses += len(unique)
        if unique:
            fresh = dict(zip(unique, self.embedder.embed(unique), strict=True))
            for i in missing:
                vectors[i] = fresh[texts[i]]
            try:
                with self._client.pipeline(transaction=False) as pipe:
                    for text, vector in fresh.items():
                        pipe.set(first_key[text], json.dumps(vector), ex=self._ttl)
                    pipe.execute()
            except redis.RedisError:
                pass
        return [v for v in vectors if v is not None]
