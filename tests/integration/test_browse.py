"""Browsing a set and explaining a search end to end: client -> broker -> worker -> embedded engine.

The console reads through these: pages that walk a set exactly, filters, the search tester's parts, and
neither ever counted as an access (eviction order and ``last_accessed_time`` stay as they were).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from celery import Celery

from memory_core import AsyncMemoryClient, ChatMessage, InvalidRequestError, MemoryClient
from memory_core.core.keys import Keys
from memory_core.core.messages import Page
from memory_core.core.models import MessageRole
from memory_core.core.settings import Settings
from memory_core.testing.fake_rerank import VALID_KEY, FakeRerankEndpoint
from memory_core.workers import services
from memory_core.workers.app import create_app
from tests.integration.conftest import make_settings
from tests.integration.in_thread import in_thread_worker

PLACES = ["Lyon", "Paris", "green tea", "the dentist", "a piano lesson"]


def _fill(client: MemoryClient, namespace: str) -> list[str]:
    """One add of 130 notes (one creation time, consecutive seqs), then 5 more one by one; their ids, oldest first."""
    notes = client.long_term(namespace, "alice").get_or_create_memory_set("notes", capacity=10_000, dedup="none")
    ids = notes.add(
        [f"Note {i} about {PLACES[i % len(PLACES)]}" for i in range(130)],
        ids=[f"n{i:03d}" for i in range(130)],
        metadatas=[{"topic": PLACES[i % len(PLACES)], "n": i % 3} for i in range(130)],
        importance=[0.9 if i % 10 == 0 else 0.5 for i in range(130)],
        pinned=[i % 20 == 0 for i in range(130)],
    )
    for i in range(5):
        ids += notes.add([f"Later note {i} about Oslo"], ids=[f"late{i}"], ttl=3600)
    return ids


def _walk(client: MemoryClient, namespace: str, limit: int = 50, **options: Any) -> tuple[list[str], list[Page]]:
    memory = client.long_term(namespace, "alice")
    pages = [memory.browse("notes", limit=limit, **options)]
    while pages[-1].next_cursor is not None:
        pages.append(memory.browse("notes", limit=limit, cursor=pages[-1].next_cursor, **options))
    return [item.id for page in pages for item in page.items], pages


def test_pages_walk_the_set_newest_first_and_back(client: MemoryClient, namespace: str):
    written = _fill(client, namespace)
    newest_first, pages = _walk(client, namespace)
    assert newest_first == written[::-1]  # one creation time for the add: ties go by the last write
    assert [len(page.items) for page in pages] == [50, 50, 35]
    assert {page.total for page in pages} == {135}
    oldest_first, _ = _walk(client, namespace, limit=7, descending=False, sort="updated")
    assert oldest_first == written


def test_filters_and_sorts_reach_the_store(client: MemoryClient, namespace: str):
    _fill(client, namespace)
    memory = client.long_term(namespace, "alice")
    lyon, _ = _walk(client, namespace, limit=10, contains="LYON")
    assert lyon == [f"n{i:03d}" for i in range(125, -1, -5)]
    page = memory.browse("notes", contains="green tea", metadata={"n": 0}, pinned=False, min_importance=0.5)
    assert {item.id for item in page.items} == {f"n{i:03d}" for i in range(2, 130, 5) if i % 3 == 0 and i % 20}
    assert page.total is None  # a metadata filter is not counted: it has no index (a page stops at its limit)
    expiring = memory.browse("notes", sort="expires", descending=False)
    assert [item.id for item in expiring.items] == [f"late{i}" for i in range(5)]
    assert memory.browse("notes", expiring=False).total == 130
    important = memory.browse("notes", sort="importance", limit=13)
    assert [item.id for item in important.items] == [f"n{i:03d}" for i in range(120, -1, -10)]
    after = datetime.now(UTC) + timedelta(hours=1)
    assert memory.browse("notes", created_after=after).items == []
    assert memory.browse("notes", compacted=True).total == 0


def _accesses(settings: Settings, namespace: str) -> int:
    """How many reads of the namespace wait to be flushed as accesses."""
    with redis.Redis.from_url(settings.redis.url) as raw:
        return int(raw.hlen(Keys(settings.redis.key_prefix).access_log(namespace)))


def test_browse_and_explain_record_no_access_where_search_does(client: MemoryClient, namespace: str):
    _fill(client, namespace)
    memory = client.long_term(namespace, "alice")
    _walk(client, namespace)
    hits = memory.explain("notes", "a piano lesson", limit=5)
    assert hits
    assert _accesses(client.settings, namespace) == 0
    memory.search("notes", "a piano lesson", limit=5)
    assert _accesses(client.settings, namespace) == 5  # the same read as a search would be one


def test_explain_is_the_search_taken_apart(client: MemoryClient, namespace: str):
    memory = client.long_term(namespace, "alice")
    chat = memory.get_or_create_memory_set("chat", item_type=ChatMessage, capacity=100)
    turns = ["I moved to Lyon in May", "Do you like it there?", "Yes, and I drink green tea every morning"]
    chat.add([ChatMessage(role=MessageRole.USER, content=f"{text} ({n})") for n in range(3) for text in turns])
    for mode in ("hybrid", "dense", "lexical"):
        search = memory.search("chat", "where did I move?", limit=4, mode=mode, rerank=False)
        explained = memory.explain("chat", "where did I move?", limit=4, mode=mode)
        assert {e.item.id for e in explained} == {h.id for h in search}, mode
        scores = sorted(e.item.score or 0.0 for e in explained)
        assert scores == pytest.approx(sorted(h.score or 0.0 for h in search), abs=1e-5)
        first = explained[0]
        if mode == "dense":
            assert (first.fused, first.dense) == (None, first.item.score)
        else:
            scaled = [first.dense_scaled, first.bm25_scaled, first.context_scaled]
            rankers = 3 if mode == "hybrid" else 2
            assert first.fused == pytest.approx(min(1.0, sum(p for p in scaled if p is not None) / rankers))
            assert first.bm25 is not None  # the word "move" is in the best hit
        assert all(e.rerank is None for e in explained)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"sort": "size"}, "'size'"),
        ({"descending": "yes"}, "'yes'"),
        ({"limit": 0}, "0"),
        ({"limit": 201}, "201"),
        ({"limit": True}, "True"),
        ({"cursor": 5}, "5"),
        ({"cursor": ""}, "''"),
        ({"contains": 3}, "3"),
        ({"contains": "-- !"}, "'-- !'"),
        ({"metadata": {"n": 1.5}}, "1.5"),
        ({"metadata": {"n": True}}, "True"),
        ({"metadata": "n=1"}, "'n=1'"),
        ({"created_after": datetime(2026, 1, 1)}, "datetime.datetime(2026, 1, 1, 0, 0)"),
        (
            {"created_after": datetime(2026, 2, 1, tzinfo=UTC), "created_before": datetime(2026, 1, 1, tzinfo=UTC)},
            "2026-02-01",
        ),
        ({"min_importance": 2}, "2"),
        ({"max_importance": float("nan")}, "nan"),
        ({"min_importance": 0.8, "max_importance": 0.2}, "0.8"),
        ({"compacted": "no"}, "'no'"),
        ({"pinned": 1}, "1"),
        ({"expiring": 0}, "0"),
    ],
)
def test_every_bad_browse_argument_is_refused_naming_it(
    client: MemoryClient, namespace: str, options: dict[str, Any], named: str
):
    with pytest.raises(InvalidRequestError) as refused:
        client.long_term(namespace, "alice").browse("notes", **options)
    assert named in str(refused.value)


def test_a_damaged_or_foreign_cursor_is_refused_by_the_worker(client: MemoryClient, namespace: str):
    _fill(client, namespace)
    memory = client.long_term(namespace, "alice")
    cursor = memory.browse("notes", limit=5).next_cursor
    assert cursor is not None
    with pytest.raises(InvalidRequestError, match="not a browse cursor"):
        memory.browse("notes", cursor=cursor[:-3] + "AAA")
    with pytest.raises(InvalidRequestError, match="continues sort 'created' descending"):
        memory.browse("notes", cursor=cursor, sort="importance")
    other = client.long_term(namespace, "bob")
    other.get_or_create_memory_set("notes")
    with pytest.raises(InvalidRequestError, match="another memory set"):
        other.browse("notes", cursor=cursor)


def test_a_raw_request_is_checked_by_the_worker(
    celery_app: Celery, worker: Celery, client: MemoryClient, namespace: str
):
    _fill(client, namespace)
    browsing = services.get(celery_app).browsing
    base = {"namespace": namespace, "key": "alice", "set_name": "notes"}
    assert browsing.browse({**base, "limit": 3}).total == 135
    for bad in (
        {"limit": 500},
        {"query": {"sort": "size"}},
        {"query": {"pinned": "yes"}},
        {"query": {"metadata": {"n": True}}},
        {"query": {"created_after": "2026-01-01T00:00:00"}},  # naive
        {"query": {"contains": "x" * 501}},
        {"cursor": "x" * 600},
        {"extra": 1},
    ):
        with pytest.raises(InvalidRequestError):
            browsing.browse({**base, **bad})
    with pytest.raises(InvalidRequestError, match="limit 101 is above the maximum 100"):
        browsing.explain({**base, "query": "tea", "limit": 101})


def test_the_asyncio_client_browses_and_explains_alike(client: MemoryClient, namespace: str):
    _fill(client, namespace)
    blocking = client.long_term(namespace, "alice")

    async def scenario() -> tuple[Page, Page, list[str]]:
        async with AsyncMemoryClient(client.settings) as aclient:
            memory = aclient.long_term(namespace, "alice")
            first = await memory.browse("notes", limit=20, contains="paris")
            assert first.next_cursor is not None
            second = await memory.browse("notes", limit=20, contains="paris", cursor=first.next_cursor)
            hits = await memory.explain("notes", "Paris", limit=3, mode="lexical")
            return first, second, [hit.item.id for hit in hits]

    first, second, hits = asyncio.run(scenario())
    assert first.items + second.items == blocking.browse("notes", limit=40, contains="paris").items
    assert hits == [hit.item.id for hit in blocking.explain("notes", "Paris", limit=3, mode="lexical")]


# -- with a reranker ----------------------------------------------------------------------------------------------


def _launch_first(query: str, document: str) -> float:
    return 1.0 if "launch" in document else 0.5 if "tea" in document else 0.0


@pytest.fixture(scope="module")
def endpoint() -> Iterator[FakeRerankEndpoint]:
    with FakeRerankEndpoint(scorer=_launch_first) as fake:
        yield fake


@pytest.fixture(scope="module")
def rerank_settings(redis_url: str, tmp_path_factory: pytest.TempPathFactory, endpoint: FakeRerankEndpoint) -> Settings:
    return make_settings(
        redis_url,
        tmp_path_factory.mktemp("browse-rerank") / "qdrant",
        redis={"url": redis_url, "key_prefix": "mcbrowse"},
        rerank={"model": f"http:{endpoint.url}", "api_key": VALID_KEY, "timeout": 5, "candidates": 10},
    )


@pytest.fixture(scope="module")
def rerank_worker(rerank_settings: Settings) -> Iterator[Celery]:
    app = create_app(rerank_settings)
    with in_thread_worker(app, concurrency=2):
        yield app
    services.close(app)


def test_explain_keeps_the_fused_parts_through_reranking(
    rerank_settings: Settings, rerank_worker: Celery, endpoint: FakeRerankEndpoint, namespace: str
):
    facts = ["Alice prefers green tea", "Alice is allergic to peanuts", "Bob runs the Lyon office", "the launch moved"]
    with MemoryClient(rerank_settings) as memory:
        ltm = memory.long_term(namespace, "alice")
        ltm.get_or_create_memory_set("facts", dedup="none", context_window=0).add(
            facts, ids=["tea", "nuts", "lyon", "launch"]
        )
        fused = {e.item.id: e for e in ltm.explain("facts", "what does Alice drink?", limit=4, rerank=False)}
        reranked = ltm.explain("facts", "what does Alice drink?", limit=2)
        assert [e.item.id for e in reranked] == ["launch", "tea"]
        assert [(e.rerank, e.item.score) for e in reranked] == [(1.0, 1.0), (0.5, 0.5)]
        for e in reranked:  # the fused score and every part as the fused search had them
            assert (
                e.model_copy(update={"rerank": None, "item": e.item.model_copy(update={"score": e.fused})})
                == fused[e.item.id]
            )
        assert _accesses(rerank_settings, namespace) == 0
