"""Corrections from the console: each asks for confirmation, is written through the queue, lands, and is audited;
none without the session's CSRF token or a sign-in that may correct."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from memory_core import MemoryClient
from memory_core.core.models import ChatMessage, MemorySetItem, utcnow
from memory_core.core.settings import Settings
from memory_core.servers.console import audit
from memory_core.servers.console.access import COOKIE

from .viewing import HOSTILE, ORIGIN, assert_inert, console_settings, open_console, sign_in


@pytest.fixture
def other() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def writable(settings: Settings, worker: object, namespace: str, other: str) -> Iterator[tuple[TestClient, str]]:
    """A console where namespace tokens may correct, signed in with the namespace's token; and its CSRF token."""
    with open_console(console_settings(settings, [namespace, other], corrections="all")) as http:
        yield http, sign_in(http, f"tok-{namespace}")


@pytest.fixture
def note(client: MemoryClient, namespace: str) -> MemorySetItem:
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes", ttl_seconds=86_400)
    expires = (utcnow() + timedelta(days=5)).replace(microsecond=0)
    memory.add("notes", ["Ana likes tea"], ids=["n/1"], metadatas=[{"topic": "drinks"}], importance=0.7,
               source="chat", expires_at=expires)  # fmt: skip
    return memory.get("notes", ["n/1"])[0]


def edit_path(namespace: str, item_id: str = "n/1") -> str:
    return f"/ui/ns/{namespace}/keys/ana/sets/notes/items/{quote(item_id, safe='')}/edit"


def hidden_fields(page: str) -> dict[str, str]:
    """The hidden fields of the confirmation step's form."""
    return {
        html.unescape(name): html.unescape(value)
        for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page)
    }


def correct(http: TestClient, namespace: str, form: dict[str, str], item_id: str = "n/1") -> str:
    """Sends a correction, checks it asks for confirmation, confirms it; returns where it redirects."""
    asked = http.post(edit_path(namespace, item_id), data=form, headers={"origin": ORIGIN})
    assert asked.status_code == 200, asked.text
    carried = hidden_fields(asked.text)
    assert carried["confirm"] == "yes"
    assert carried["csrf"] == form["csrf"]
    done = http.post(edit_path(namespace, item_id), data=carried, headers={"origin": ORIGIN})
    assert done.status_code == 303, done.text
    return done.headers["location"]


def test_a_value_correction_asks_first_then_lands_keeping_the_other_fields_and_is_audited(
    writable: tuple[TestClient, str], client: MemoryClient, namespace: str, note: MemorySetItem
):
    http, csrf = writable
    form = {"csrf": csrf, "action": "value", "version": str(note.seq), "value": "Ana likes green tea\r\nand scones"}
    asked = http.post(edit_path(namespace), data=form, headers={"origin": ORIGIN})
    assert "Change the value of n/1?" in asked.text
    assert "Ana likes tea" in asked.text
    assert "Ana likes green tea" in asked.text
    assert client.long_term(namespace, "ana").get("notes", ["n/1"])[0].value == "Ana likes tea"  # not yet
    location = correct(http, namespace, form)
    assert location == f"/ui/ns/{namespace}/keys/ana/sets/notes/items/n%2F1"
    now = client.long_term(namespace, "ana").get("notes", ["n/1"])[0]
    assert now.value == "Ana likes green tea\nand scones"
    assert (now.additional_metadata, now.importance, now.source) == ({"topic": "drinks"}, 0.7, "chat")
    assert now.expires_at == note.expires_at  # its own expiry, not the set's default from now
    audit = http.get(f"/ui/ns/{namespace}/audit")
    assert audit.status_code == 200
    row = re.search(
        r"<tr>\s*<td[^>]*>[^<]*</td>\s*<td>token [0-9a-f]{12}</td>\s*<td>value</td>(.*?)</tr>", audit.text, re.DOTALL
    )
    assert row is not None, audit.text
    assert "Ana likes tea</pre>" in row.group(1)
    assert "Ana likes green tea\nand scones</pre>" in row.group(1)
    item_page = http.get(location)
    assert "Ana likes green tea" in item_page.text
    assert "token " in item_page.text


@pytest.mark.parametrize(
    ("form", "check"),
    [
        ({"action": "metadata", "metadata": '{"topic": "food", "n": 2}'}, lambda i: i.additional_metadata == {"topic": "food", "n": 2}),
        ({"action": "pin", "pinned": "yes"}, lambda i: i.pinned),
        ({"action": "importance", "importance": "0.25"}, lambda i: i.importance == 0.25),
        ({"action": "expiry", "expires_at": "2031-02-03T04:05:06"}, lambda i: i.expires_at == datetime(2031, 2, 3, 4, 5, 6, tzinfo=UTC)),
    ],
    ids=["metadata", "pin", "importance", "expiry"],
)  # fmt: skip
def test_each_correction_lands_and_keeps_the_rest(
    writable: tuple[TestClient, str], client: MemoryClient, namespace: str, note: MemorySetItem, form, check
):
    http, csrf = writable
    correct(http, namespace, {"csrf": csrf, "version": str(note.seq), **form})
    now = client.long_term(namespace, "ana").get("notes", ["n/1"])[0]
    assert check(now)
    assert now.value == "Ana likes tea"
    kept = {"metadata": now.additional_metadata == {"topic": "drinks"}, "importance": now.importance == 0.7}
    kept |= {"expiry": now.expires_at == note.expires_at, "pin": not now.pinned}
    assert all(held for name, held in kept.items() if name != form["action"])
    assert now.source == "chat"
    audit = http.get(f"/ui/ns/{namespace}/audit").text
    assert f"<td>{form['action']}</td>" in audit


def test_delete_asks_first_then_removes_the_item_and_the_audit_keeps_what_it_held(
    writable: tuple[TestClient, str], client: MemoryClient, namespace: str, note: MemorySetItem
):
    http, csrf = writable
    item_page = http.get(f"/ui/ns/{namespace}/keys/ana/sets/notes/items/n%2F1")
    assert 'name="action" value="delete"' in item_page.text  # the button is there for a sign-in that may write
    location = correct(http, namespace, {"csrf": csrf, "action": "delete", "version": str(note.seq)})
    assert location == f"/ui/ns/{namespace}/keys/ana/sets/notes"
    assert client.long_term(namespace, "ana").get("notes", ["n/1"]) == []
    audit = http.get(f"/ui/ns/{namespace}/audit").text
    assert "<td>delete</td>" in audit
    assert "Ana likes tea" in audit


def test_a_correction_of_an_item_written_since_the_form_was_shown_is_refused(
    writable: tuple[TestClient, str], client: MemoryClient, namespace: str, note: MemorySetItem
):
    http, csrf = writable
    client.long_term(namespace, "ana").add("notes", ["Ana likes coffee"], ids=["n/1"])
    form = {"csrf": csrf, "action": "importance", "version": str(note.seq), "importance": "0.1", "confirm": "yes"}
    stale = http.post(edit_path(namespace), data=form, headers={"origin": ORIGIN})
    assert stale.status_code == 409
    assert "Ana likes coffee" in stale.text  # the form again, with what the item holds now
    assert client.long_term(namespace, "ana").get("notes", ["n/1"])[0].importance == 0.5


def test_a_summary_is_only_deleted(writable: tuple[TestClient, str], client: MemoryClient, namespace: str):
    http, csrf = writable
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("notes")
    memory.add("notes", ["Ana likes tea", "Ana has a cat"])
    memory.compact("notes")
    summary = memory.get("notes")[0]
    assert summary.compacted
    form = {"csrf": csrf, "action": "value", "version": str(summary.seq), "value": "rewritten"}
    refused = http.post(edit_path(namespace, summary.id), data=form, headers={"origin": ORIGIN})
    assert refused.status_code == 400
    assert "only deletes it" in refused.text
    assert memory.get("notes", [summary.id])[0].value == summary.value


def test_without_the_csrf_token_a_correction_is_refused(
    writable: tuple[TestClient, str], client: MemoryClient, namespace: str, note: MemorySetItem
):
    http, _csrf = writable
    form = {"action": "delete", "version": str(note.seq), "confirm": "yes"}
    for sent in (form, {**form, "csrf": "forged"}):
        refused = http.post(edit_path(namespace), data=sent, headers={"origin": ORIGIN})
        assert refused.status_code == 403
    assert client.long_term(namespace, "ana").get("notes", ["n/1"]) != []
    assert http.get(f"/ui/ns/{namespace}/audit").text.count("<td>delete</td>") == 0


def test_without_corrections_allowed_there_are_no_buttons_and_posts_are_refused(
    settings: Settings, worker: object, client: MemoryClient, namespace: str, note: MemorySetItem
):
    with open_console(console_settings(settings, [namespace], corrections="off")) as http:
        csrf = sign_in(http, f"tok-{namespace}")
        page = http.get(f"/ui/ns/{namespace}/keys/ana/sets/notes/items/n%2F1")
        assert page.status_code == 200
        assert "/edit" not in page.text
        assert 'value="delete"' not in page.text
        assert http.get(edit_path(namespace)).status_code == 403
        form = {"csrf": csrf, "action": "delete", "version": str(note.seq), "confirm": "yes"}
        assert http.post(edit_path(namespace), data=form, headers={"origin": ORIGIN}).status_code == 403
    assert client.long_term(namespace, "ana").get("notes", ["n/1"]) != []


def test_another_namespaces_item_cannot_be_corrected(
    writable: tuple[TestClient, str], client: MemoryClient, namespace: str, other: str
):
    http, csrf = writable
    memory = client.long_term(other, "ana")
    memory.get_or_create_memory_set("notes")
    memory.add("notes", ["theirs"], ids=["n/1"])
    seq = memory.get("notes", ["n/1"])[0].seq
    form = {"csrf": csrf, "action": "delete", "version": str(seq), "confirm": "yes"}
    assert http.post(edit_path(other), data=form, headers={"origin": ORIGIN}).status_code == 403
    assert http.get(edit_path(other)).status_code == 403
    assert memory.get("notes", ["n/1"]) != []


def test_stored_markup_renders_as_text_in_the_confirmation_and_the_audit_log(
    writable: tuple[TestClient, str], namespace: str, note: MemorySetItem
):
    http, csrf = writable
    form = {"csrf": csrf, "action": "value", "version": str(note.seq), "value": HOSTILE}
    asked = http.post(edit_path(namespace), data=form, headers={"origin": ORIGIN})
    assert_inert(asked.text)
    correct(http, namespace, form)
    edited = http.get(f"/ui/ns/{namespace}/keys/ana/sets/notes/items/n%2F1")
    assert_inert(edited.text)
    seq = re.search(r'name="version" value="(\d+)"', http.get(edit_path(namespace)).text)
    assert seq is not None
    metadata = '{"link": "javascript:alert(1)", "note": "' + HOSTILE + '"}'
    correct(http, namespace, {"csrf": csrf, "action": "metadata", "version": seq.group(1), "metadata": metadata})
    audit = http.get(f"/ui/ns/{namespace}/audit")
    assert_inert(audit.text)
    assert "javascript:alert(1)" in audit.text


def test_a_chat_messages_role_and_content_are_corrected_and_its_tool_calls_kept(
    writable: tuple[TestClient, str], client: MemoryClient, namespace: str
):
    http, csrf = writable
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("chat", item_type=ChatMessage)
    calls = [{"name": "weather", "arguments": {"city": "Lisbon"}}]
    memory.add("chat", [ChatMessage(role="user", content="wether in Lisbon?", tool_calls=calls)], ids=["m1"])
    seq = memory.get("chat", ["m1"])[0].seq
    form = http.get(f"/ui/ns/{namespace}/keys/ana/sets/chat/items/m1/edit")
    assert '<option value="user" selected>' in form.text
    assert "wether in Lisbon?</textarea>" in form.text
    fields = {"csrf": csrf, "action": "value", "version": str(seq), "role": "assistant", "value": "weather in Lisbon?"}
    asked = http.post(f"/ui/ns/{namespace}/keys/ana/sets/chat/items/m1/edit", data=fields, headers={"origin": ORIGIN})
    carried = hidden_fields(asked.text)
    done = http.post(f"/ui/ns/{namespace}/keys/ana/sets/chat/items/m1/edit", data=carried, headers={"origin": ORIGIN})
    assert done.status_code == 303, done.text
    now = memory.get("chat", ["m1"])[0].value
    assert now == ChatMessage(role="assistant", content="weather in Lisbon?", tool_calls=calls)
    page = http.get(done.headers["location"])
    assert '<span class="badge">assistant</span>' in page.text
    assert "Lisbon" in page.text


def test_the_audit_log_pages_newest_first_and_keeps_the_newest_ten_thousand(
    writable: tuple[TestClient, str], namespace: str
):
    http, _ = writable
    console = http.app.state.console  # type: ignore[attr-defined]  # the app's console state
    principal = console.session(http.cookies.get(COOKIE))
    for n in range(60):
        audit.record(console, namespace, principal, "importance", {"key": "ana", "set": "notes", "id": f"i{n}"}, 0.5, n)
    first = http.get(f"/ui/ns/{namespace}/audit")
    ids = re.findall(r'/items/(i\d+)"', first.text)
    assert ids == [f"i{n}" for n in range(59, 9, -1)]  # 50, newest first
    older = re.search(r'<a href="([^"]+)">older</a>', first.text)
    assert older is not None
    second = http.get(html.unescape(older.group(1)))
    assert re.findall(r'/items/(i\d+)"', second.text) == [f"i{n}" for n in range(9, -1, -1)]
    assert ">newer</a>" in second.text
    assert ">older</a>" not in second.text
    name = console.keys.console_audit(namespace)
    console.redis.rpush(name, *["{}"] * (audit.KEPT - 60))
    audit.record(console, namespace, principal, "pin", {"key": "ana", "set": "notes", "id": "last"}, False, True)
    assert console.redis.llen(name) == audit.KEPT
    assert audit.read(console, namespace, 0, 1)[0][0].target["id"] == "last"  # type: ignore[union-attr]
    assert audit.read(console, namespace, audit.KEPT - 1, 1)[0] == [None]  # the oldest kept: not one of ours
