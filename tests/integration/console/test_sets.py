"""A set's page: cursor paging forwards and back, each filter, the sorts, the htmx partial, escaping, tenancy."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient

from memory_core import MemoryClient
from memory_core.core.models import utcnow
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


def listed(page: str) -> list[str]:
    """The ids of the items a set page lists, in order."""
    return [unquote(html.unescape(found)) for found in re.findall(r'<a href="[^"]+/items/([^"]+)">', page)]


def link(page: str, rel: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)"[^>]* rel="{rel}">', page)
    return html.unescape(found.group(1)) if found else None


def show(http: TestClient, namespace: str, **query: Any) -> list[str]:
    page = http.get(f"/ui/ns/{namespace}/keys/ana/sets/notes", params={"limit": "200", **query})
    assert page.status_code == 200, page.text
    return sorted(listed(page.text))


def test_paging_reaches_every_item_once_and_previous_goes_back(
    console: TestClient, client: MemoryClient, namespace: str
):
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes", capacity=1000)
    ids = [f"i{n:03d}" for n in range(120)]
    memory.add("notes", [f"note number {n}" for n in range(120)], ids=ids)
    first = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes")
    assert first.status_code == 200, first.text
    assert "120 items" in first.text
    assert link(first.text, "prev") is None
    pages, seen, url = [first.text], listed(first.text), link(first.text, "next")
    while url is not None and len(pages) < 5:  # 3 pages; a cursor that never ends fails, not hangs
        page = console.get(url)
        assert page.status_code == 200, page.text
        pages.append(page.text)
        seen += listed(page.text)
        url = link(page.text, "next")
    assert [len(listed(page)) for page in pages] == [50, 50, 20]
    assert sorted(seen) == ids  # every item once
    assert seen == sorted(ids, reverse=True)  # newest first: written in one call, ordered by their seq
    assert "page 3" in pages[2]
    back = link(pages[2], "prev")
    assert back is not None
    assert listed(console.get(back).text) == listed(pages[1])
    back_again = link(console.get(back).text, "prev")
    assert back_again is not None
    assert listed(console.get(back_again).text) == listed(pages[0])


def test_each_filter_narrows_the_list(console: TestClient, client: MemoryClient, namespace: str):
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes", capacity=1000)
    memory.add("notes", ["Ana likes green tea", "Ana lives in Lisbon"], ids=["old1", "old2"])
    memory.compact("notes")  # folds both into a summary
    summary = next(item.id for item in memory.get("notes") if item.compacted)
    between = utcnow()
    memory.add("notes", ["Bo likes black tea"], ids=["tea"], metadatas=[{"topic": "drinks", "n": 7}], importance=0.9)
    memory.add("notes", ["Bo has a dog"], ids=["dog"], metadatas=[{"topic": "pets", "n": "7"}], pinned=True)
    memory.add("notes", ["Bo is in Paris"], ids=["trip"], ttl=3_600, importance=0.2)
    fresh = ["dog", "tea", "trip"]
    items = {item.id: item for item in memory.get("notes")}
    assert sorted(items) == sorted([summary, *fresh])

    def where(predicate: Any) -> list[str]:
        return sorted(item_id for item_id, item in items.items() if predicate(item))

    assert show(console, namespace) == sorted(items)
    assert show(console, namespace, contains="tea") == ["tea"]
    assert show(console, namespace, contains="BO LIKES") == ["tea"]
    assert show(console, namespace, field="topic", value="pets") == ["dog"]
    assert show(console, namespace, field="n", value="7") == ["dog", "tea"]  # "7" and 7 both match
    assert show(console, namespace, created_from=between.isoformat()) == fresh
    assert show(console, namespace, created_to=between.isoformat()) == [summary]
    day = between.date()
    assert show(console, namespace, created_from=(day + timedelta(days=1)).isoformat()) == []
    assert show(console, namespace, created_to=day.isoformat()) == sorted(items)  # the whole day
    assert show(console, namespace, compacted="yes") == [summary]
    assert show(console, namespace, compacted="no") == fresh
    assert show(console, namespace, pinned="yes") == ["dog"]
    assert show(console, namespace, pinned="no") == where(lambda item: not item.pinned) != []
    assert show(console, namespace, min_importance="0.8") == where(lambda item: item.importance >= 0.8) == ["tea"]
    assert show(console, namespace, max_importance="0.3") == where(lambda item: item.importance <= 0.3) == ["trip"]
    middle = show(console, namespace, min_importance="0.4", max_importance="0.6")
    assert middle == where(lambda item: 0.4 <= item.importance <= 0.6)
    assert "dog" in middle
    assert show(console, namespace, expiring="yes") == where(lambda item: item.expires_at is not None) == ["trip"]
    assert show(console, namespace, expiring="no") == where(lambda item: item.expires_at is None) != []
    narrowed = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes", params={"contains": "tea"})
    assert "1 item match" in narrowed.text
    assert 'value="tea"' in narrowed.text  # the form keeps what it filtered by


def test_the_sorts_order_the_list(console: TestClient, client: MemoryClient, namespace: str):
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes")
    memory.add("notes", ["a"], ids=["low"], importance=0.1)
    memory.add("notes", ["b"], ids=["high"], importance=0.9)
    memory.add("notes", ["c"], ids=["mid"], importance=0.5)
    memory.add("notes", ["a again"], ids=["low"], importance=0.1)  # the last write

    def order(**query: str) -> list[str]:
        return listed(console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes", params=query).text)

    assert order() == ["low", "mid", "high"]
    assert order(order="asc") == ["high", "mid", "low"]
    assert order(sort="importance") == ["high", "mid", "low"]
    assert order(sort="importance", order="asc") == ["low", "mid", "high"]
    assert order(sort="updated") == ["low", "mid", "high"]
    assert order(sort="last_access")  # every item, in some order of last access
    bad = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes", params={"sort": "nope"})
    assert bad.status_code == 400
    assert "sort &#39;nope&#39; is not one of" in bad.text


def test_htmx_gets_the_items_alone_and_the_page_works_without_it(
    console: TestClient, client: MemoryClient, namespace: str
):
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes")
    memory.add("notes", ["Ana likes tea"], ids=["tea"])
    url = f"/ui/ns/{namespace}/keys/ana/sets/notes"
    full = console.get(url)
    assert "<html" in full.text
    assert '<form method="get"' in full.text
    assert 'id="items"' in full.text
    assert 'hx-get="' in full.text
    assert 'hx-push-url="true"' in full.text
    partial = console.get(url, headers={"hx-request": "true", "hx-target": "items"})
    assert partial.status_code == 200
    assert "<html" not in partial.text
    assert "<form" not in partial.text
    assert listed(partial.text) == ["tea"]


def test_stored_markup_renders_as_text_on_the_set_page(console: TestClient, client: MemoryClient, namespace: str):
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes")
    metadata = {"link": "javascript:alert(1)", "note": HOSTILE}
    memory.add("notes", [HOSTILE], ids=[HOSTILE], metadatas=[metadata])
    page = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes")
    assert page.status_code == 200, page.text
    assert_inert(page.text)
    assert listed(page.text) == [HOSTILE]
    filtered = console.get(f"/ui/ns/{namespace}/keys/ana/sets/notes", params={"contains": HOSTILE})
    assert_inert(filtered.text)


def test_another_namespaces_set_is_refused(console: TestClient, client: MemoryClient, other: str):
    memory = client.long_term(other, "ana")
    memory.get_or_create_memory_set("notes")
    memory.add("notes", ["the other tenant's secret"])
    refused = console.get(f"/ui/ns/{other}/keys/ana/sets/notes")
    assert refused.status_code == 403
    assert "secret" not in refused.text
