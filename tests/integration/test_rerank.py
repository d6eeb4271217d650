"""Reranking through a real worker and Redis, by a rerank endpoint (a fake one on loopback): the order is the
reranker's, a search can turn it off, the read cache keeps the two apart, and a failing endpoint reaches the
caller as a typed error at once (the search is not retried), as does a refused key, also at worker start."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from memory_core import InvalidRequestError, MemoryClient, RerankerError, TransientRerankerError
from memory_core.core.models import MemorySet
from memory_core.core.settings import Settings
from memory_core.testing.fake_rerank import VALID_KEY, FakeRerankEndpoint
from memory_core.workers import services
from memory_core.workers.app import create_app
from tests.integration.conftest import REDIS_URL, make_settings
from tests.integration.in_thread import in_thread_worker
from tests.integration.processes import CELERY, ROOT

FACTS = {
    "tea": "Alice prefers green tea",
    "peanuts": "Alice is allergic to peanuts",
    "lyon": "Bob runs the Lyon office",
    "launch": "the launch moved to Friday",
}
QUERY = "what does Alice like to drink?"


def _launch_first(query: str, document: str) -> float:
    """A reranker with its own idea of relevance: the launch fact, which no fused ranking puts first here."""
    return 1.0 if "launch" in document else 0.5 if "tea" in document else 0.0


@pytest.fixture(scope="module")
def endpoint() -> Iterator[FakeRerankEndpoint]:
    with FakeRerankEndpoint(scorer=_launch_first) as fake:
        yield fake


@pytest.fixture(scope="module")
def rerank_settings(redis_url: str, tmp_path_factory: pytest.TempPathFactory, endpoint: FakeRerankEndpoint) -> Settings:
    return make_settings(
        redis_url,
        tmp_path_factory.mktemp("rerank") / "qdrant",
        redis={"url": redis_url, "key_prefix": "mcrerank"},
        rerank={"model": f"http:{endpoint.url}", "api_key": VALID_KEY, "timeout": 1, "candidates": 10},
    )


@pytest.fixture(scope="module")
def rerank_worker(rerank_settings: Settings) -> Iterator[Celery]:
    app = create_app(rerank_settings)
    with in_thread_worker(app, concurrency=2):
        yield app
    services.close(app)


@pytest.fixture
def notes(
    rerank_settings: Settings, rerank_worker: Celery, endpoint: FakeRerankEndpoint, namespace: str
) -> Iterator[MemorySet]:
    with MemoryClient(rerank_settings) as memory:
        notes = memory.long_term(namespace, "alice").get_or_create_memory_set("notes", dedup="none", context_window=0)
        notes.add(list(FACTS.values()), ids=list(FACTS))
        endpoint.api_key = VALID_KEY
        endpoint.behave("ok")
        yield notes


def _ids(hits) -> list[str]:
    return [hit.id for hit in hits]


def test_the_reranker_orders_the_fused_candidates_in_one_request(notes: MemorySet, endpoint: FakeRerankEndpoint):
    fused = notes.search(QUERY, limit=4, rerank=False)
    assert endpoint.requests == []  # turned off for that search: the endpoint is not asked
    assert fused[0].id != "launch"
    reranked = notes.search(QUERY, limit=2)
    assert _ids(reranked) == ["launch", "tea"]
    assert [hit.score for hit in reranked] == [1.0, 0.5]  # the reranker's scores replace the fused ones
    (sent,) = endpoint.requests
    # Every candidate (4 items, under MEMORY_RERANK__CANDIDATES=10) in the fused order, in one request, each
    # to be scored (top_n: all of them), so the answer is checked in full; the best 2 are kept.
    assert sent == {"query": QUERY, "documents": [hit.value for hit in fused], "top_n": 4}


def test_the_read_cache_never_serves_one_switch_the_others_result(notes: MemorySet, endpoint: FakeRerankEndpoint):
    reranked = _ids(notes.search(QUERY, limit=2))
    assert _ids(notes.search(QUERY, limit=2, rerank=False)) != reranked
    assert _ids(notes.search(QUERY, limit=2)) == reranked  # from the cache: the endpoint is not asked again
    assert len(endpoint.requests) == 1
    assert _ids(notes.search(QUERY, limit=2, rerank=True)) == reranked


def test_a_failing_endpoint_reaches_the_caller_at_once_and_the_search_can_go_without(
    notes: MemorySet, endpoint: FakeRerankEndpoint
):
    endpoint.behave("http_500")
    with pytest.raises(TransientRerankerError, match=r"failing \(HTTP 500\).*rerank=False"):
        notes.search("who runs Lyon?", limit=1)
    assert len(endpoint.requests) == 1  # not retried: the caller is told, and decides
    assert _ids(notes.search("who runs Lyon?", limit=1, rerank=False)) == ["lyon"]


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("short", r"answered 3 scores for the 4 documents sent"),
        ("repeated", r"answered indices \[\d, \d, \d, \d\] for 4 documents; expected each of 0 to 3 once"),
        ("nan", r"not a ranking \(results\.0\.relevance_score: Input should be a finite number\)"),
    ],
)
def test_an_answer_that_scores_fewer_or_other_documents_fails_the_search_and_is_never_cached(
    notes: MemorySet, endpoint: FakeRerankEndpoint, mode: str, said: str
):
    endpoint.behave(mode)
    with pytest.raises(RerankerError, match=said) as caught:
        notes.search(QUERY, limit=4)
    assert not isinstance(caught.value, TransientRerankerError)
    endpoint.behave("ok")  # the endpoint recovers: the search is answered by it, in full, not from a cache
    assert len(notes.search(QUERY, limit=4)) == 4
    assert len(endpoint.requests) == 1


def test_an_endpoint_past_its_timeout_is_a_typed_error_not_a_hang(notes: MemorySet, endpoint: FakeRerankEndpoint):
    endpoint.behave("stall", stall_seconds=3)
    with pytest.raises(TransientRerankerError, match=r"did not answer within 1s"):
        notes.search("when is the launch?", limit=1)


def test_a_refused_key_is_told_to_the_caller_without_the_key(notes: MemorySet, endpoint: FakeRerankEndpoint):
    endpoint.api_key = "a-rotated-key"
    with pytest.raises(RerankerError, match=r"refused the API key \(HTTP 401\)") as caught:
        notes.search("what is Alice allergic to?", limit=1)
    assert not isinstance(caught.value, TransientRerankerError)
    assert VALID_KEY not in str(caught.value)


def test_the_switch_takes_true_false_or_none_only(notes: MemorySet):
    with pytest.raises(InvalidRequestError, match="rerank must be True, False or None, got 'yes'"):
        notes.search(QUERY, rerank="yes")  # type: ignore[arg-type]  # what an untyped caller may pass


def test_asking_for_reranking_from_workers_without_a_reranker_is_refused(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    with pytest.raises(InvalidRequestError, match=r"rerank=True.*MEMORY_RERANK__MODEL"):
        notes.search(QUERY, rerank=True)
    assert notes.search(QUERY, rerank=False) == []


@pytest.mark.slow
def test_a_worker_whose_reranker_refuses_its_key_exits_at_start_saying_why(
    endpoint: FakeRerankEndpoint, tmp_path: Path
):
    env = {
        "MEMORY_REDIS__URL": REDIS_URL,
        "MEMORY_REDIS__KEY_PREFIX": "mcrerankstart",
        "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"),
        "MEMORY_METRICS__PORT": "0",
        "MEMORY_RERANK__MODEL": f"http:{endpoint.url}",
        "MEMORY_RERANK__API_KEY": "rk-not-the-right-one",
    }
    done = subprocess.run(
        [CELERY, "-A", "memory_core.workers.app", "worker", "-l", "WARNING"],
        check=False,
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    last = [line for line in done.stderr.splitlines() if line.strip()][-1]
    assert done.returncode != 0
    assert last.startswith(f"memory-core worker cannot start: the rerank endpoint at {endpoint.url} refused the API")
    assert "MEMORY_RERANK__API_KEY" in last
    assert "rk-not-the-right-one" not in done.stderr
    assert not (tmp_path / "qdrant").exists()  # refused before the store was opened
