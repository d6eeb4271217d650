"""Hybrid search fused in Python (``fused_hybrid``) against the engine's own fusion in one query.

The stores fetch each ranker's candidates once and fuse them themselves; the embedded engine can still
fuse the same rankers in one query (``memory_core.testing.fused_query``), which is the answer to match:
the same items, in the same order, with the same scores.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core.core.models import MemorySetItem, Scope
from memory_core.engine.embedders.hashing import HashingEmbedder
from memory_core.engine.stores import ItemRecord
from memory_core.engine.stores.base import HYBRID_RANKERS, dbsf, fused_hybrid
from memory_core.engine.stores.edge import EdgeVectorStore
from memory_core.engine.stores.qdrant import QdrantVectorStore
from memory_core.testing.fused_query import one_query_hybrid

EMBEDDER = HashingEmbedder(dimension=64)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCOPE = Scope("ns", "user", "notes")
OTHER = Scope("other", "user", "notes")
# A small vocabulary, so lexical candidates share words and nearly tie on BM25: the tie break matters.
NAMES = ["Alice", "Bob", "Carol", "Dave"]
WORDS = [
    *("tea", "coffee", "lyon", "paris", "may", "june", "garden"),
    *("piano", "dentist", "report", "board", "meeting", "travel", "spring"),
]


def _texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(NAMES)} " + " ".join(rng.sample(WORDS, rng.randint(2, 6))) for _ in range(count)]


def _fill(store: EdgeVectorStore | QdrantVectorStore, scope: Scope, texts: list[str]) -> None:
    vectors = EMBEDDER.embed(texts)
    store.upsert(
        scope,
        [
            ItemRecord(
                item=MemorySetItem(
                    memory_set_name=scope.set_name, id=str(n), value=text, created_time=T0, last_accessed_time=T0
                ),
                seq=n,
                vector=vector,
            )
            for n, (text, vector) in enumerate(zip(texts, vectors, strict=True))
        ],
        context_window=2,
    )


QUERIES = [*_texts(25, seed=2), "Alice and Lyon in May", "what did Bob say about the piano", "dentist"]


@pytest.fixture
def edge_store(tmp_path: Path) -> EdgeVectorStore:
    store = EdgeVectorStore(tmp_path / "edge", collection="fusion", dimension=EMBEDDER.dimension)
    _fill(store, SCOPE, _texts(300, seed=1))
    _fill(store, OTHER, _texts(300, seed=3))  # the same words in another tenant: in the posting lists, never found
    return store


def _untied(scores: list[float], at: int) -> bool:
    neighbours = scores[max(0, at - 1) : at] + scores[at + 1 : at + 2]
    return all(abs(scores[at] - other) > 1e-5 for other in neighbours)


def test_hybrid_search_ranks_and_scores_as_the_engines_one_query_fusion(edge_store: EdgeVectorStore):
    compared = 0
    for text in QUERIES:
        vector = EMBEDDER.embed([text])[0]
        for limit in (1, 10, 40):  # under PREFETCH: one more from the engine fetches the same candidates
            ours = edge_store.search(SCOPE, vector, limit, {}, text=text, mode="hybrid")
            engine = one_query_hybrid(edge_store, SCOPE, vector, text, limit + 1)
            scores = [min(1.0, hit.score / HYBRID_RANKERS) for hit in engine]
            assert [item.score for item in ours] == pytest.approx(scores[:limit], abs=1e-5), text
            # Items of the same text tie exactly, and the engine orders a tie as it happens to (the one more
            # shows a tie across the limit): the rest match.
            untied = [at for at in range(len(ours)) if _untied(scores, at)]
            assert [ours[at].id for at in untied] == [str(engine[at].payload["item_id"]) for at in untied], text
            compared += len(untied)
    assert compared > 1_000  # the queries found plenty: the comparison is not of empty lists


def test_the_server_adapter_fuses_as_the_embedded_one(edge_store: EdgeVectorStore):
    server = QdrantVectorStore.connect(
        ":memory:", api_key=None, timeout=5, collection="fusion", dimension=EMBEDDER.dimension
    )
    _fill(server, SCOPE, _texts(300, seed=1))
    _fill(server, OTHER, _texts(300, seed=3))
    for text in QUERIES:
        vector = EMBEDDER.embed([text])[0]
        ours = server.search(SCOPE, vector, 10, {}, text=text, mode="hybrid")
        embedded = edge_store.search(SCOPE, vector, 10, {}, text=text, mode="hybrid")
        assert {item.id for item in ours[:5]} & {item.id for item in embedded[:5]}, text
        assert ours[0].id == embedded[0].id, text


def test_dbsf_scales_each_ranking_by_its_mean_and_three_sample_deviations_then_sums():
    # mean 2, sample deviation 1: scaled (s - (2 - 3)) / 6
    fused = dict(dbsf([[("a", 3.0), ("b", 2.0), ("c", 1.0)], [("c", 5.0)], []]))
    assert fused == pytest.approx({"a": 4 / 6, "b": 3 / 6, "c": 2 / 6 + 0.5})
    assert dict(dbsf([[("a", 1.0), ("b", 1.0)]])) == {"a": 0.5, "b": 0.5}  # no spread: the midpoint


def test_a_lexical_near_tie_goes_to_the_candidate_closest_in_meaning():
    lexical = [[("short", 3.02), ("close", 3.0)], [("short", 3.02), ("close", 3.0)]]
    best = fused_hybrid([("x", 0.9), ("y", 0.8)], lexical, {"short": 0.1, "close": 0.6}, limit=2)
    assert best[0][0] == "close"
    # A real lexical difference (a rare word's IDF) still outweighs the cosine gap.
    lexical = [[("rare", 8.0), ("close", 3.0)], [("rare", 8.0), ("close", 3.0)]]
    assert fused_hybrid([], lexical, {"rare": 0.1, "close": 0.6}, limit=1)[0][0] == "rare"
