"""The search tester (each ranker's part of every hit's score) and the recall preview (what recall hands over)."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from memory_core import MemoryClient
from memory_core.core.settings import Settings

from .viewing import HOSTILE, assert_inert, console_settings, open_console, sign_in


@pytest.fixture
def other() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def console(settings: Settings, worker: object, namespace: str, other: str) -> Iterator[TestClient]:
    with open_console(console_settings(settings, [namespace, other])) as http:
        sign_in(http, f"tok-{namespace}")
        yield http


@pytest.fixture
def notes(client: MemoryClient, namespace: str) -> None:
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes")
    texts = ["Ana likes green tea", "Ana lives in Lisbon", "Bo drinks black tea every morning", "The cat sleeps"]
    memory.add("notes", texts, ids=["tea", "home", "bo", "cat"])


def rows(page: str) -> list[list[str]]:
    """The results table's cells, row by row (text only)."""
    body = re.search(r'<table class="results">.*?<tbody>(.*?)</tbody>', page, re.DOTALL)
    assert body is not None, page
    return [
        [
            html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.DOTALL)
    ]


def test_the_search_tester_shows_the_fused_score_and_each_rankers_part(
    console: TestClient, client: MemoryClient, namespace: str, notes: None
):
    page = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes/search", params={"q": "green tea", "limit": "3"})
    assert page.status_code == 200, page.text
    assert "<th>fused</th><th>dense</th><th>BM25</th><th>context</th>" in page.text
    explained = client.long_term(namespace, "ana").explain("notes", "green tea", 3)
    shown = rows(page.text)
    assert [row[1] for row in shown] == [hit.item.id for hit in explained]
    top, hit = shown[0], explained[0]
    assert top[1] == "tea"
    assert top[3] == f"{hit.item.score:.4f}"
    assert top[4] == f"{hit.fused:.4f}"
    assert top[5] == f"{hit.dense:.4f} / {hit.dense_scaled:.4f}"
    assert top[6] == f"{hit.bm25:.4f} / {hit.bm25_scaled:.4f}"
    assert hit.context is not None
    assert top[7].startswith(f"{hit.context:.4f}")
    dense = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes/search", params={"q": "green tea", "mode": "dense"})
    first = rows(dense.text)[0]
    assert first[5]
    assert not first[4]
    assert not first[6]
    assert not first[7]


def test_the_search_tester_says_what_is_wrong_with_its_form(console: TestClient, namespace: str, notes: None):
    bad = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes/search", params={"q": "tea", "mode": "fuzzy"})
    assert bad.status_code == 400
    assert "mode &#39;fuzzy&#39; is not one of hybrid, dense, lexical" in bad.text
    empty = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes/search")
    assert empty.status_code == 200
    assert '<table class="results">' not in empty.text


def test_the_recall_preview_shows_what_recall_returns_and_its_tokens(
    console: TestClient, client: MemoryClient, namespace: str, notes: None
):
    page = console.get(f"/ui/ns/{namespace}/keys/ana/recall", params={"q": "what does Ana drink?", "limit": "2"})
    assert page.status_code == 200, page.text
    reply = client.recall(namespace, "ana", "what does Ana drink?", limit=2)
    assert reply.context
    assert reply.tokens > 0
    assert f'<pre class="value context">{escape(reply.context)}</pre>' in page.text
    assert f"· {reply.tokens} tokens" in page.text
    assert [row[2] for row in rows(page.text)] == [item.text for item in reply.items]


def test_stored_markup_renders_as_text_in_search_and_recall(console: TestClient, client: MemoryClient, namespace: str):
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes")
    memory.add("notes", [HOSTILE], ids=[HOSTILE], metadatas=[{"link": "javascript:alert(1)"}])
    found = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes/search", params={"q": "alert script"})
    assert found.status_code == 200, found.text
    assert len(rows(found.text)) == 1
    assert_inert(found.text)
    recalled = console.get(f"/ui/ns/{namespace}/keys/ana/recall", params={"q": "alert script"})
    assert recalled.status_code == 200, recalled.text
    assert_inert(recalled.text)
    asked = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes/search", params={"q": HOSTILE})
    assert_inert(asked.text)  # the query itself, shown back in the form


def test_another_namespaces_search_and_recall_are_refused(console: TestClient, client: MemoryClient, other: str):
    memory = client.long_term(other, "ana")
    memory.get_or_create_memory_set("notes")
    memory.add("notes", ["the other tenant's secret"])
    for path in (f"/ui/ns/{other}/keys/ana/sets/notes/search", f"/ui/ns/{other}/keys/ana/recall"):
        refused = console.get(path, params={"q": "secret"})
        assert refused.status_code == 403
        assert "tenant" not in refused.text
