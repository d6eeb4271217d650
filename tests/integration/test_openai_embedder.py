"""A worker that embeds through an OpenAI-compatible endpoint (a fake one on loopback, through the real SDK):
a 429 is retried by the task, no sooner than its Retry-After; a write rides out an outage of the endpoint for
``MEMORY_EMBEDDER__OUTAGE_RETRY`` minutes and lands, its caller told after the usual retries that it goes on;
past that window it is dead-lettered, and its caller told so; a search fails after the usual retries; the tokens
it uses are in the usage ledger of the namespace that asked (a reindex's, the operator's)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core import EmbedderError, MemoryClient, TransientEmbedderError
from memory_core.client.admin import Admin
from memory_core.client.deadletters import DeadLetters
from memory_core.core.models import EmbeddingUsage
from memory_core.testing.fake_openai import VALID_KEY, FakeOpenAI
from memory_core.workers import services
from memory_core.workers.app import create_app
from tests.integration.conftest import make_settings
from tests.integration.in_thread import in_thread_worker
from tests.integration.processes import CLI, client_env
from tests.integration.waiting import wait_for
from tests.reindexing import follow

MODEL = "openai:text-embedding-3-small"


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(dimension=16) as fake:
        yield fake


@contextlib.contextmanager
def _deployment(
    redis_url: str, data: Path, endpoint: FakeOpenAI, *, max_retries: int = 2, **embedder: Any
) -> Iterator[MemoryClient]:
    """A worker in a thread embedding through ``endpoint``, and a client of it."""
    settings = make_settings(
        redis_url,
        data,
        redis={"url": redis_url, "key_prefix": "mcopenai"},
        embedder={"model": MODEL, "base_url": endpoint.url, "api_key": VALID_KEY, **embedder},
        celery={"concurrency": 2, "max_retries": max_retries, "retry_backoff_max": 5},
    )
    app = create_app(settings)
    with in_thread_worker(app, concurrency=2), MemoryClient(settings) as memory:
        yield memory
    services.close(app)


@pytest.fixture
def client(redis_url: str, tmp_path: Path, endpoint: FakeOpenAI) -> Iterator[MemoryClient]:
    with _deployment(redis_url, tmp_path / "qdrant", endpoint) as memory:
        yield memory


def _embedding_requests(endpoint: FakeOpenAI, text: str) -> int:
    return sum(1 for body in endpoint.requests if text in body.get("input", []))


@pytest.mark.timeout(120)
def test_a_rate_limited_write_is_retried_after_the_endpoints_retry_after(client: MemoryClient, endpoint: FakeOpenAI):
    notes = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
    endpoint.behave("http_429", failures=1, retry_after="2")
    started = time.monotonic()
    notes.add(["the launch moved to Friday"], ids=["launch"])
    assert time.monotonic() - started >= 2  # the retry waited for the Retry-After (backoff alone starts at ~1 s)
    assert _embedding_requests(endpoint, "the launch moved to Friday") == 2
    (hit,) = notes.search("when is the launch?", limit=1)
    assert hit.id == "launch"


@pytest.mark.timeout(180)
def test_a_write_rides_out_an_outage_longer_than_its_retries_and_lands(
    client: MemoryClient, endpoint: FakeOpenAI, raw_redis
):
    notes = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
    # Six failed tries: twice the usual retries (max_retries=2), which dead-lettered the write before.
    endpoint.behave("http_500", failures=6, retry_after=None)
    receipt = notes.submit(["landed after the outage"], ids=["outage"])
    told = (
        r"the embedding endpoint is unavailable \(the embeddings endpoint at localhost .*\(HTTP 500\)\); this call "
        r"stops waiting, but the write is kept and goes on retrying until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(5 min after its "
        r"first failure, MEMORY_EMBEDDER__OUTAGE_RETRY\), then it is dead-lettered \(replay with `memory-core "
        r"dead-letters replay --namespace acme`\)"
    )
    with pytest.raises(TransientEmbedderError, match=told):
        receipt.wait()
    wait_for(lambda: [item.id for item in notes.get(["outage"])] == ["outage"], timeout=150, interval=0.5)
    assert _embedding_requests(endpoint, "landed after the outage") == 7
    assert receipt.wait() == ["outage"]  # the write's own outcome replaced what its caller was told
    assert DeadLetters(raw_redis, client.keys, client.dispatcher).namespaces() == []


@pytest.mark.timeout(180)
def test_a_write_past_its_outage_window_is_dead_lettered_and_its_caller_told_so(
    redis_url: str, tmp_path: Path, endpoint: FakeOpenAI, raw_redis
):
    # No usual retries: the caller is told at the first failure; the window is 6 seconds.
    with _deployment(redis_url, tmp_path / "qdrant", endpoint, max_retries=0, outage_retry=0.1) as client:
        notes = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
        endpoint.behave("http_500", retry_after=None)
        receipt = notes.submit(["kept for later"], ids=["later"])
        with pytest.raises(TransientEmbedderError, match=r"goes on retrying until .* \(0\.1 min after its first"):
            receipt.wait()
        letters = DeadLetters(raw_redis, client.keys, client.dispatcher)
        wait_for(lambda: "acme" in letters.namespaces(), timeout=60, interval=0.2)
        dead = (
            r"the embedding endpoint is unavailable \(.*\(HTTP 500\)\); the write was retried for 0\.1 min "
            r"\(MEMORY_EMBEDDER__OUTAGE_RETRY\) and is dead-lettered: replay it with `memory-core dead-letters "
            r"replay --namespace acme` once the endpoint answers"
        )
        with pytest.raises(TransientEmbedderError, match=dead):
            receipt.wait()
        assert _embedding_requests(endpoint, "kept for later") >= 2  # retried through the window, not once
        (letter,) = letters.entries("acme")
        assert "is dead-lettered" in letter.error["message"]

        endpoint.behave("ok")
        letters.replay("acme")
        wait_for(lambda: [item.id for item in notes.get(["later"])] == ["later"], timeout=60, interval=0.2)


@pytest.mark.timeout(120)
def test_a_search_during_an_outage_fails_after_the_usual_retries_and_says_so(
    client: MemoryClient, endpoint: FakeOpenAI
):
    notes = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
    endpoint.behave("http_500", retry_after=None)
    with pytest.raises(TransientEmbedderError, match=r"\(HTTP 500\); tried 3 times: try again once it answers"):
        notes.search("what moved to Friday?")
    assert _embedding_requests(endpoint, "what moved to Friday?") == 3  # the first try and max_retries=2


def _fake_tokens(texts: list[str]) -> int:
    """What the fake endpoint reports for ``texts`` (a quarter of the characters, at least 1 each)."""
    return sum(max(1, len(text) // 4) for text in texts)


def _reported(endpoint: FakeOpenAI) -> tuple[int, int]:
    """Tokens and texts of every request the endpoint answered."""
    inputs = [list(body["input"]) for body in endpoint.requests]
    return sum(_fake_tokens(texts) for texts in inputs), sum(len(texts) for texts in inputs)


@pytest.mark.timeout(120)
def test_each_namespace_is_charged_the_embedding_tokens_of_its_own_texts(client: MemoryClient, endpoint: FakeOpenAI):
    acme_texts = ["the launch moved to Friday", "Alice owns the rollout plan", "budget review is on the 12th"]
    globex_texts = ["the plant in Lyon ships on Tuesdays", "Bob prefers green tea"]
    query = "when is the launch?"
    acme = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
    acme.add(acme_texts)
    acme.search(query, limit=1)
    assert client.usage("acme").embeddings == {
        MODEL: EmbeddingUsage(tokens=_fake_tokens([*acme_texts, query]), texts=4)
    }
    assert client.usage("globex").embeddings == {}  # nothing acme embedded is globex's
    globex = client.long_term("globex", "u").get_or_create_memory_set("notes", dedup="none")
    globex.add(globex_texts)
    globex.search(query, limit=1)  # the same query: embedded again for globex (caches are per namespace)
    globex.search(query, limit=1)  # cached: no new tokens
    assert client.usage("globex").embeddings == {
        MODEL: EmbeddingUsage(tokens=_fake_tokens([*globex_texts, query]), texts=3)
    }
    assert client.usage("acme").embeddings[MODEL].tokens == _fake_tokens([*acme_texts, query])  # unchanged
    assert client.usage("acme").tokens == {}  # no summarizer ran: its tokens stay apart

    # The rest (the endpoint asked for its vector length as the worker started) is the operator's, so every
    # token the endpoint reported is in exactly one ledger.
    operator = Admin(client).operator_usage().embeddings[MODEL]
    charged = sum(client.usage(ns).embeddings[MODEL].tokens for ns in ("acme", "globex")) + operator.tokens
    assert charged == _reported(endpoint)[0]

    env = client_env(client.settings)
    listed = subprocess.run([CLI, "usage", "--json"], env=env, capture_output=True, text=True, timeout=60, check=True)
    by_namespace = {report["namespace"]: report for report in json.loads(listed.stdout)}
    assert by_namespace["acme"]["embeddings"] == {MODEL: {"tokens": _fake_tokens([*acme_texts, query]), "texts": 4}}
    assert by_namespace["!ops"]["embeddings"][MODEL]["tokens"] == operator.tokens
    text = subprocess.run([CLI, "usage", "globex"], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert f"{_fake_tokens([*globex_texts, query]):>10,} embedding tokens" in text.stdout
    assert MODEL in text.stdout


@pytest.mark.timeout(120)
def test_calls_shared_by_namespaces_charge_every_token_once(client: MemoryClient, endpoint: FakeOpenAI):
    names = [f"tenant{i}" for i in range(4)]
    sets = {ns: client.long_term(ns, "u").get_or_create_memory_set("notes", dedup="none") for ns in names}
    texts = {ns: [f"{ns} note {i}: " + "x" * (10 * i + len(ns)) for i in range(6)] for ns in names}

    def add(ns: str) -> None:
        for text in texts[ns]:  # many small adds at once: the worker embeds them together, across namespaces
            sets[ns].add([text])

    threads = [threading.Thread(target=add, args=(ns,)) for ns in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    usage = {ns: client.usage(ns).embeddings[MODEL] for ns in names}
    assert {ns: u.texts for ns, u in usage.items()} == {ns: 6 for ns in names}
    operator = Admin(client).operator_usage().embeddings[MODEL]
    assert sum(u.tokens for u in usage.values()) + operator.tokens == _reported(endpoint)[0]
    for ns in names:  # a shared call is split by characters, so each share is near its texts' own tokens
        assert usage[ns].tokens == pytest.approx(_fake_tokens(texts[ns]), abs=6)


@pytest.mark.timeout(180)
def test_a_reindexs_embeddings_are_the_operators_not_the_tenants(redis_url: str, tmp_path: Path, endpoint: FakeOpenAI):
    settings = make_settings(
        redis_url,
        tmp_path / "qdrant",
        redis={"url": redis_url, "key_prefix": "mcopenreindex"},
        embedder={"model": "hashing", "api_key": VALID_KEY},  # the key a reindex to openai: uses
        reindex={"batch_size": 16, "refresh": 0.5},
    )
    app = create_app(settings)
    with in_thread_worker(app, concurrency=2), MemoryClient(settings) as client:
        notes = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
        notes.add([f"note {i} about the harbour" for i in range(40)])
        admin = Admin(client)
        assert admin.reindex("start", to=MODEL, base_url=endpoint.url).state == "building"
        notes.add(["written during the reindex: mirrored into the new collection"])
        assert follow(admin, timeout=120).state == "complete"
        tokens, texts = _reported(endpoint)
        assert admin.operator_usage().embeddings == {MODEL: EmbeddingUsage(tokens=tokens, texts=texts)}
        assert client.usage("acme").embeddings == {}  # acme's own embedder is local; the copies are not its
    services.close(app)


FOUR_TEXTS = ["the launch moved to Friday", "Alice owns the rollout plan", "budget review is on the 12th", "tea at 4"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("duplicate_indices", "answered indices [0, 1, 0, 1] for 4 texts; expected each of 0..3 once"),
        ("out_of_range", "answered indices [1, 2, 3, 4] for 4 texts"),
        ("other_model", "answered as model 'other-model', but"),
    ],
)
def test_a_write_the_endpoint_answers_wrongly_fails_typed_and_stores_nothing(
    client: MemoryClient, endpoint: FakeOpenAI, mode: str, problem: str
):
    notes = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
    endpoint.behave(mode)
    with pytest.raises(EmbedderError) as refused:
        notes.add(FOUR_TEXTS, ids=["a", "b", "c", "d"])
    assert problem in str(refused.value)
    assert _embedding_requests(endpoint, FOUR_TEXTS[0]) == 1  # a retry would get the same answer: none is made
    endpoint.behave("ok")
    assert notes.size() == 0
    assert notes.get() == []
    notes.add(FOUR_TEXTS, ids=["a", "b", "c", "d"])  # the same write, answered rightly, lands
    for item_id, text in zip("abcd", FOUR_TEXTS, strict=True):  # each vector is its own text's (the fake's are)
        (hit,) = notes.search(text, limit=1)
        assert hit.id == item_id


@pytest.mark.timeout(120)
def test_an_asymmetric_model_gets_its_roles_items_as_documents_and_searches_as_queries(
    redis_url: str, tmp_path: Path, endpoint: FakeOpenAI
):
    with _deployment(redis_url, tmp_path, endpoint, roles="input-type", document_prefix="passage: ") as memory:
        notes = memory.long_term("roles", "u").get_or_create_memory_set("notes", capacity=100, dedup="none")
        endpoint.behave("ok")
        notes.add(["the harbour opens at dawn"])
        (written,) = [r for r in endpoint.requests if "passage: the harbour opens at dawn" in r["input"]]
        assert written["input_type"] == "passage"
        endpoint.behave("ok")
        notes.search("when does the harbour open?", limit=1)
        (asked,) = [r for r in endpoint.requests if "when does the harbour open?" in r["input"]]
        assert asked["input_type"] == "query"
        assert asked["input"] == ["when does the harbour open?"]  # no document prefix on a query
