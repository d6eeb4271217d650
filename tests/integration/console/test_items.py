"""An item's page: value, metadata, fields, a summary's folded items, a fact's provenance, its corrections."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import quote

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


def item_path(namespace: str, key: str, set_name: str, item_id: str) -> str:
    return f"/ui/ns/{namespace}/keys/{key}/sets/{set_name}/items/{quote(item_id, safe='')}"


def test_the_item_page_shows_its_value_metadata_and_fields(console: TestClient, client: MemoryClient, namespace: str):
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes", capacity=100)
    expires = utcnow() + timedelta(days=3)
    metadata = {"topic": "travel", "count": 3}
    memory.add("notes", ["Ana flies to Porto in May"], ids=["n/1"], metadatas=[metadata], importance=0.8,
               source="chat-7", expires_at=expires)  # fmt: skip
    page = console.get(item_path(namespace, "ana", "notes", "n/1"))
    assert page.status_code == 200, page.text
    text = page.text
    assert "Ana flies to Porto in May" in text
    assert "<code>topic</code>" in text
    assert "travel" in text
    assert "<code>count</code>" in text
    assert "0.8" in text
    assert "chat-7" in text
    assert expires.strftime("%Y-%m-%d %H:%M:%S UTC") in text
    assert "in 2 d 23 h" in text or "in 3 d" in text
    assert "The store keeps only the current version" in text
    assert "/edit" not in text


def test_a_missing_item_is_not_found_and_another_namespaces_item_is_refused(
    console: TestClient, client: MemoryClient, namespace: str, other: str
):
    memory = client.long_term(other, "ana")
    memory.get_or_create_memory_set("notes")
    memory.add("notes", ["the other tenant's secret"], ids=["s1"])
    refused = console.get(item_path(other, "ana", "notes", "s1"))
    assert refused.status_code == 403
    assert "secret" not in refused.text
    client.long_term(namespace, "ana").get_or_create_memory_set("notes")
    assert console.get(item_path(namespace, "ana", "notes", "nope")).status_code == 404


def test_a_summary_lists_what_it_folded_away(console: TestClient, client: MemoryClient, namespace: str):
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("log", capacity=100)
    ids = memory.add("log", ["Ana likes tea", "Ana lives in Lisbon", "Ana has a cat"], ids=["a", "b", "c"])
    assert memory.compact("log").status == "compacted"
    summary = next(item for item in memory.get("log") if item.compacted)
    assert sorted(summary.compacted_from) == sorted(ids)
    page = console.get(item_path(namespace, "ana", "log", summary.id))
    assert page.status_code == 200, page.text
    assert "This summary folded 3 items" in page.text
    assert page.text.count("folded away") == 3
    for folded in ids:
        assert f"<code>{folded}</code>" in page.text


def test_a_fact_shows_its_provenance_and_links_to_its_history(
    console: TestClient, client: MemoryClient, namespace: str, fake_anthropic
):
    memory = client.long_term(namespace, "ana")
    receipt = memory.remember([{"role": "user", "content": "I like green tea", "id": "m3"}], wait=True)
    fact = memory.get("facts", receipt.facts)[0]
    page = console.get(item_path(namespace, "ana", "facts", fact.id))
    assert page.status_code == 200, page.text
    assert "Fact provenance" in page.text
    assert "<code>m3</code>" in page.text
    assert receipt.op_id in page.text
    assert f'href="/ui/ns/{namespace}/keys/ana/facts/{quote(fact.id, safe="")}/history?set=facts"' in page.text


def test_stored_markup_renders_as_text_on_the_item_page(console: TestClient, client: MemoryClient, namespace: str):
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes")
    metadata = {"link": "javascript:alert(1)", "note": HOSTILE, HOSTILE: "as a key", "site": "https://example.com"}
    memory.add("notes", [HOSTILE], ids=[HOSTILE], metadatas=[metadata], source=HOSTILE[:200])
    page = console.get(item_path(namespace, "ana", "notes", HOSTILE))
    assert page.status_code == 200, page.text
    assert_inert(page.text)
    assert "javascript:alert(1)" in page.text
    assert not re.search(r"<a[^>]*example\.com", page.text)  # a URL in metadata is text, never a link
    assert "https://example.com" in page.text
