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

from .processes import CELERY, ROOT, PrivateRedis

pytestmark = pytest.mark.slow

MINILM = "all-MiniLM-L6-v2"


@pytest.fixture
def own_url(private_redis: PrivateRedis) -> str:
    """A Redis database of the test's own: no worker of the session consumes its queues."""
    return private_redis.database_url()


def _start(url: str, env: dict[str, str], timeout: float = 90) -> tuple[int, str]:
    """Runs ``celery worker`` on ``url`` until it exits; its exit code and its stderr's last line."""
    done = subprocess.run(
        [CELERY, "-A", "memory_core.workers.app", "worker", "-l", "WARNING"],
        check=False,
        cwd=ROOT,
        env={**os.environ, "MEMORY_REDIS__URL": url, **env},
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


def test_a_hashing_worker_on_a_store_filled_before_fingerprints_by_minilm_exits_naming_both(
    own_url: str, tmp_path: Path
):
    path = tmp_path / "store"
    _plant(path, MINILM, None)
    code, last = _start(own_url, {"MEMORY_QDRANT__PATH": str(path), "MEMORY_EMBEDDER__MODEL": "hashing"})
    _assert_refused(code, last, minilm_fingerprint(), hashing_fingerprint(384), path)
    # Nothing made for the refused model; the store now records MiniLM's fingerprint.
    assert not (path / collection_name(QdrantSettings(path=path), "hashing-384")).exists()
    reopened = EdgeVectorStore(path, collection="probe", dimension=384, meta=meta_collection_name(QdrantSettings()))
    try:
        assert reopened.recorded_fingerprint() == minilm_fingerprint()
    finally:
        reopened.close()


def test_a_minilm_worker_on_a_store_of_the_same_dimension_but_other_weights_exits_naming_both(
    own_url: str, tmp_path: Path
):
    path = tmp_path / "store"
    other_weights = minilm_fingerprint().model_copy(update={"revision": "0123456789abcdef"})
    _plant(path, MINILM, other_weights)
    code, last = _start(own_url, {"MEMORY_QDRANT__PATH": str(path), "MEMORY_EMBEDDER__MODEL": MINILM})
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


# A store whose fingerprint record was lost is refused, never taken over by whichever worker starts next.

OPENAI = "openai:text-embedding-3-small"


def _fill(kind: str, settings: QdrantSettings, collection: str, *, holding: str = "an item") -> None:
    """``collection`` of the store ``settings`` name, holding ``an item`` (and its set's definition), ``a set``
    definition only, or ``nothing``; no fingerprint recorded: what a store whose record was lost looks like."""
    from memory_core.core.models import MemorySet
    from memory_core.engine.stores.base import ItemRecord, VectorStore
    from memory_core.engine.stores.qdrant import QdrantVectorStore

    from .stores.test_contract import SCOPE, _record

    meta = meta_collection_name(settings)
    store: VectorStore
    if kind == "edge":
        store = EdgeVectorStore(settings.path, collection=collection, dimension=384, meta=meta)
    else:
        store = QdrantVectorStore.connect(
            str(settings.path), api_key=None, timeout=5, collection=collection, dimension=384, meta=meta
        )
    try:
        if holding != "nothing":
            store.put_set(SCOPE.namespace, SCOPE.key, MemorySet(name=SCOPE.set_name))
        if holding == "an item":
            store.upsert(SCOPE, [ItemRecord(item=_record("a", "a fact", 1).item, seq=1, vector=[1.0] + [0.0] * 383)])
        assert store.recorded_fingerprint() is None
    finally:
        store.close()


def test_a_worker_on_a_store_that_lost_its_fingerprint_record_exits_and_changes_nothing(own_url: str, tmp_path: Path):
    path = tmp_path / "store"
    settings = QdrantSettings(path=path)
    filled = collection_name(settings, OPENAI)
    _fill("edge", settings, filled)
    before = sorted(p.name for p in path.iterdir())
    code, last = _start(own_url, {"MEMORY_QDRANT__PATH": str(path), "MEMORY_EMBEDDER__MODEL": "hashing"}, timeout=60)
    assert code == 1
    assert last.startswith(f"memory-core worker cannot start: the store at {path.resolve()} holds data ")
    assert repr(filled) in last
    assert "no embedder fingerprint record" in last
    assert "memory-core restore" in last
    assert sorted(p.name for p in path.iterdir()) == before  # no collection made for the worker's model
    reopened = EdgeVectorStore(path, collection=filled, dimension=384, meta=meta_collection_name(settings))
    try:
        assert reopened.recorded_fingerprint() is None  # nothing recorded: the operator decides
    finally:
        reopened.close()


@pytest.mark.parametrize("kind", ["edge", "local"])
@pytest.mark.parametrize("holding", ["an item", "a set"])
def test_a_store_with_data_but_no_fingerprint_record_is_refused_even_to_the_model_it_is_named_after(
    kind: str, holding: str, tmp_path: Path
):
    from memory_core.core.errors import StoreError
    from memory_core.engine.stores import open_store

    settings = QdrantSettings(backend=kind, path=tmp_path / "store")
    filled = collection_name(settings, "hashing-64")
    _fill(kind, settings, filled, holding=holding)
    for model, dimension in (("hashing-384", 384), ("hashing-64", 64)):
        with pytest.raises(StoreError, match="no embedder fingerprint record") as refused:
            open_store(settings, model_name=model, dimension=dimension, fingerprint=hashing_fingerprint(dimension))
        assert "\n" not in str(refused.value)
        assert repr(filled if holding == "an item" else f"{filled}__sets") in str(refused.value)


@pytest.mark.parametrize("kind", ["edge", "local"])
def test_a_store_from_before_fingerprints_that_also_holds_another_models_data_is_refused(kind: str, tmp_path: Path):
    # Stores from before fingerprints held the test embedder's (or MiniLM's) collection only: one that holds
    # another too was re-embedded since, and lost its record; the old collection must not be taken for it.
    from memory_core.core.errors import StoreError
    from memory_core.engine.stores import open_store

    settings = QdrantSettings(backend=kind, path=tmp_path / "store")
    _fill(kind, settings, collection_name(settings, "hashing-384"))
    _fill(kind, settings, collection_name(settings, "hashing-64"))
    with pytest.raises(StoreError, match="no embedder fingerprint record") as refused:
        open_store(settings, model_name="hashing-384", dimension=384, fingerprint=hashing_fingerprint(384))
    assert repr(collection_name(settings, "hashing-64")) in str(refused.value)
    assert repr(collection_name(settings, "hashing-384")) not in str(refused.value)


@pytest.mark.parametrize("kind", ["edge", "local"])
def test_a_store_whose_collections_hold_no_point_records_the_fingerprint_of_its_first_worker(kind: str, tmp_path: Path):
    from memory_core.engine.stores import open_store

    settings = QdrantSettings(backend=kind, path=tmp_path / "store")
    _fill(kind, settings, collection_name(settings, OPENAI), holding="nothing")
    store = open_store(settings, model_name="hashing-384", dimension=384, fingerprint=hashing_fingerprint(384))
    try:
        assert store.recorded_fingerprint() == hashing_fingerprint(384)
    finally:
        store.close()


def test_a_new_store_beside_a_store_of_a_longer_prefix_records_its_fingerprint(tmp_path: Path):
    from memory_core.engine.stores import open_store

    other = QdrantSettings(backend="local", path=tmp_path / "store", collection_prefix="memory_core_eu")
    _fill("local", other, collection_name(other, "hashing-64"))
    ours = QdrantSettings(backend="local", path=tmp_path / "store")
    store = open_store(ours, model_name="hashing-384", dimension=384, fingerprint=hashing_fingerprint(384))
    try:
        assert store.recorded_fingerprint() == hashing_fingerprint(384)
    finally:
        store.close()
