"""Embedder fingerprints end to end: a real ``celery worker`` refuses a store filled by another embedder, the
embedding cache never serves one fingerprint's vectors for another's, and heartbeats publish the embedder."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis

from memory_core.core.keys import Keys
from memory_core.core.liveness import WorkerInfo
from memory_core.core.settings import QdrantSettings
from memory_core.engine.embedders.base import EmbedderFingerprint
from memory_core.engine.embedders.cache import EmbeddingCache
from memory_core.engine.embedders.hashing import HashingEmbedder, hashing_fingerprint
from memory_core.engine.embedders.minilm import minilm_fingerprint
from memory_core.engine.stores import collection_name, meta_collection_name
from memory_core.engine.stores.edge import EdgeVectorStore

from .conftest import REDIS_URL
from .processes import CELERY, ROOT

pytestmark = pytest.mark.slow

URL = REDIS_URL.rsplit("/", 1)[0] + "/8"  # a DB of its own: no worker of the session consumes it
MINILM = "all-MiniLM-L6-v2"


def _start(env: dict[str, str], timeout: float = 90) -> tuple[int, str]:
    """Runs ``celery worker`` until it exits; its exit code and its stderr's last line."""
    done = subprocess.run(
        [CELERY, "-A", "memory_core.workers.app", "worker", "-l", "WARNING"],
        check=False,
        cwd=ROOT,
        env={**os.environ, "MEMORY_REDIS__URL": URL, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return done.returncode, lines[-1] if lines else ""


def _plant(path: Path, model: str, fingerprint: EmbedderFingerprint | None) -> None:
    """A store whose items collection is ``model``'s, holding one point, with ``fingerprint`` recorded (or none,
    as every store made before fingerprints)."""
    settings = QdrantSettings(path=path)
    store = EdgeVectorStore(
        path, collection=collection_name(settings, model), dimension=384, meta=meta_collection_name(settings)
    )
    try:
        from memory_core.engine.stores.base import ItemRecord

        from .stores.test_contract import SCOPE, _record

        store.upsert(SCOPE, [ItemRecord(item=_record("a", "a fact", 1).item, seq=1, vector=[1.0] + [0.0] * 383)])
        if fingerprint is not None:
            store.record_fingerprint(fingerprint)
    finally:
        store.close()


def _assert_refused(code: int, last: str, recorded: EmbedderFingerprint, wanted: EmbedderFingerprint, path: Path):
    assert code == 1
    assert last.startswith(f"memory-core worker cannot start: the store at {path.resolve()} holds vectors of ")
    assert recorded.describe() in last
    assert wanted.describe() in last
    assert f"memory-core reindex --to {wanted.spec}" in last
    assert f"MEMORY_EMBEDDER__MODEL back to {recorded.spec!r}" in last


def test_a_hashing_worker_on_a_store_filled_before_fingerprints_by_minilm_exits_naming_both(tmp_path: Path):
    path = tmp_path / "store"
    _plant(path, MINILM, None)
    code, last = _start({"MEMORY_QDRANT__PATH": str(path), "MEMORY_EMBEDDER__MODEL": "hashing"})
    _assert_refused(code, last, minilm_fingerprint(), hashing_fingerprint(384), path)
    # Nothing made for the refused model; the store now records MiniLM's fingerprint.
    assert not (path / collection_name(QdrantSettings(path=path), "hashing-384")).exists()
    reopened = EdgeVectorStore(path, collection="probe", dimension=384, meta=meta_collection_name(QdrantSettings()))
    try:
        assert reopened.recorded_fingerprint() == minilm_fingerprint()
    finally:
        reopened.close()


def test_a_minilm_worker_on_a_store_of_the_same_dimension_but_other_weights_exits_naming_both(tmp_path: Path):
    path = tmp_path / "store"
    other_weights = minilm_fingerprint().model_copy(update={"revision": "0123456789abcdef"})
    _plant(path, MINILM, other_weights)
    code, last = _start({"MEMORY_QDRANT__PATH": str(path), "MEMORY_EMBEDDER__MODEL": MINILM})
    _assert_refused(code, last, other_weights, minilm_fingerprint(), path)


class _PrefixedEmbedder(HashingEmbedder):
    """The hashing embedder with a query prefix: another vector space of the same model name and dimension."""

    def __init__(self, prefix: str) -> None:
        super().__init__(dimension=64)
        self._prefix = prefix
        self.calls: list[list[str]] = []

    @property
    def fingerprint(self) -> EmbedderFingerprint:
        return super().fingerprint.model_copy(update={"query_prefix": self._prefix})

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return super().embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed([self._prefix + text for text in texts])


def test_the_embedding_cache_never_serves_one_fingerprints_vectors_or_a_documents_for_another(
    raw_redis: redis.Redis, namespace: str
):
    keys = Keys("mc")
    first, second = _PrefixedEmbedder("query: "), _PrefixedEmbedder("search: ")
    assert first.model_name == second.model_name  # what the cache was keyed by before
    one = EmbeddingCache(first, raw_redis, keys, ttl=60)
    two = EmbeddingCache(second, raw_redis, keys, ttl=60)
    assert one.embed(namespace, ["green tea"], queries=True) == first.embed(["query: green tea"])
    assert two.embed(namespace, ["green tea"], queries=True) == second.embed(["search: green tea"])
    assert two.misses == 1  # embedded by its own model, not served from the first one's entry
    # A document's vector is not a query's, though the text is the same.
    assert one.embed(namespace, ["green tea"]) == first.embed(["green tea"])
    assert one.misses == 2
    cached = one.embed(namespace, ["green tea"], queries=True)  # float32 as stored
    assert cached[0] == pytest.approx(first.embed(["query: green tea"])[0], abs=1e-6)
    assert one.hits == 1


def test_a_heartbeat_carries_the_embedder_and_reads_back():
    info = WorkerInfo(hostname="w", queues=("memory.write",), embedder=minilm_fingerprint().describe())
    assert WorkerInfo.from_json(info.to_json()).embedder == minilm_fingerprint().describe()
    older = {k: v for k, v in json.loads(info.to_json()).items() if k != "embedder"}  # an earlier version's beat
    assert WorkerInfo.from_json(json.dumps(older)).embedder == ""
