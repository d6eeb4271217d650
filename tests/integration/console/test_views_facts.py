"""The console's formation views through the ASGI test client: facts, their history and sources, operations,
and the retry of a failed one; with the real worker and the fake Messages API."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from html import unescape

import pytest
import redis
from fastapi.testclient import TestClient

from memory_core import LongTermMemory, MemoryClient
from memory_core.core.errors import FormationError, MemorySetNotFound
from memory_core.core.models import ChatMessage, MessageRole
from memory_core.core.settings import Settings
from memory_core.servers.console import facts
from memory_core.servers.console.access import token_id
from memory_core.testing.fake_anthropic import FakeAnthropic
from tests.integration.waiting import wait_for

from .viewing import HOSTILE, ORIGIN, assert_inert, console_settings, open_console, sign_in

Consoles = Callable[..., TestClient]


@pytest.fixture
def other() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def consoles(settings: Settings, worker: object, namespace: str, other: str) -> Iterator[Consoles]:
    """Opens consoles over ``namespace`` and ``other`` (``corrections`` as given), closed after the test."""
    with ExitStack() as stack:

        def opened(corrections: str = "off") -> TestClient:
            return stack.enter_context(
                open_console(console_settings(settings, [namespace, other], corrections=corrections))
            )

        yield opened


def _failed(client: MemoryClient, namespace: str, fake: FakeAnthropic, content: str = "I was born in Porto") -> str:
    """A formation operation that failed (two unusable replies); returns its op id."""
    fake.formation.push("<script>alert(1)</script> not json", {"facts": [{"text": HOSTILE, "sources": "one"}]})
    memory = client.long_term(namespace, "ana")
    with pytest.raises(FormationError):
        memory.remember([{"role": "user", "content": content, "id": "born"}], wait=True)
    pattern = client.keys.formation_operation(namespace, "ana", "*")
    names = list(client.dispatcher_redis.scan_iter(pattern))
    records = [json.loads(raw) for raw in client.dispatcher_redis.mget(names) if raw is not None]
    failed = [record["report"]["op_id"] for record in records if record["report"]["status"] == "failed"]
    assert len(failed) == 1
    return str(failed[0])


def test_the_facts_page_shows_live_and_superseded_facts_with_their_history(
    client: MemoryClient, namespace: str, consoles: Consoles, fake_anthropic: FakeAnthropic
):
    memory = client.long_term(namespace, "ana")
    first = memory.remember([{"role": "user", "content": "I like coffee", "id": "m1"}], wait=True)
    second = memory.remember([{"role": "user", "content": "I do not like coffee", "id": "m2"}], wait=True)
    http = consoles()
    sign_in(http, f"tok-{namespace}")
    base = f"/ui/ns/{namespace}/keys/ana"

    assert f'href="{base}/facts?set=facts"' in http.get(base).text  # linked from the key's page
    page = http.get(f"{base}/facts?set=facts")
    assert page.status_code == 200, page.text
    assert _facts(page.text) == ["I like coffee", "I do not like coffee"]
    assert page.text.count('class="badge superseded"') == 1
    assert "2 done" in page.text
    assert _facts(http.get(f"{base}/facts?set=facts&show=live").text) == ["I do not like coffee"]
    assert _facts(http.get(f"{base}/facts?set=facts&show=superseded").text) == ["I like coffee"]

    history = http.get(f"{base}/facts/{first.facts[0]}/history?set=facts")
    assert history.status_code == 200, history.text
    assert history.text.index("I like coffee") < history.text.index("I do not like coffee")
    assert second.op_id in history.text
    assert "contradict" in history.text

    listing = http.get(f"{base}/operations").text
    assert first.op_id in listing
    assert second.op_id in listing
    operation = http.get(f"{base}/operations/{second.op_id}")
    assert operation.status_code == 200, operation.text
    assert "contradict" in operation.text
    assert "I do not like coffee" in operation.text
    assert http.get(f"{base}/operations/{'0' * 32}").status_code == 404
    assert http.get(f"{base}/facts/no-such-fact/history?set=facts").status_code in (404,)


def test_a_facts_source_in_a_session_links_to_that_message_in_its_session(
    client: MemoryClient, namespace: str, consoles: Consoles, fake_anthropic: FakeAnthropic
):
    session = client.session(
        namespace, "chat-1", key="ana", promote="none", form_into="facts", debounce=0.1, max_wait=1
    )
    saved = session.add_messages([ChatMessage(role=MessageRole.USER, content="My cat is called Miso")])
    memory = client.long_term(namespace, "ana")
    wait_for(lambda: _size(memory) == 1)
    http = consoles()
    sign_in(http, f"tok-{namespace}")
    base = f"/ui/ns/{namespace}/keys/ana"
    page = http.get(f"{base}/facts").text
    links = re.findall(r'class="source" href="([^"]+)"', page)
    assert [unescape(link) for link in links] == [f"{base}/messages?id={saved[0].id}"]
    found = http.get(unescape(links[0]))
    assert found.status_code == 303
    assert found.headers["location"] == f"{base}/sessions/chat-1?at={saved[0].cursor}#m-{saved[0].cursor}"
    shown = http.get(found.headers["location"].split("#")[0])
    assert f'id="m-{saved[0].cursor}"' in shown.text
    assert "My cat is called Miso" in shown.text

    memory.remember([{"role": "user", "content": "I swim on Sundays", "id": "given-directly"}], wait=True)
    assert http.get(f"{base}/messages?id=given-directly").status_code == 404


def _facts(page: str) -> list[str]:
    """The texts of the facts a facts page lists."""
    return [unescape(text).strip() for text in re.findall(r'<td class="value">([^<]*)', page)]


def _size(memory: LongTermMemory) -> int:
    try:
        return memory.size("facts")
    except MemorySetNotFound:  # until the first formation made it
        return 0


def test_another_namespaces_formation_pages_are_refused(
    client: MemoryClient, namespace: str, other: str, consoles: Consoles, fake_anthropic: FakeAnthropic
):
    receipt = client.long_term(other, "ana").remember([{"role": "user", "content": "I like tea"}], wait=True)
    http = consoles("all")
    csrf = sign_in(http, f"tok-{namespace}")
    base = f"/ui/ns/{other}/keys/ana"
    for path in (
        f"{base}/facts",
        f"{base}/facts/{receipt.facts[0]}/history?set=facts",
        f"{base}/operations",
        f"{base}/operations/{receipt.op_id}",
        f"{base}/operations/{receipt.op_id}/retry",
        f"{base}/messages?id=x",
    ):
        refused = http.get(path)
        assert refused.status_code == 403, path
        assert "I like tea" not in refused.text
    retry = http.post(f"{base}/operations/{receipt.op_id}/retry", data={"csrf": csrf, "confirmed": "yes"})
    assert retry.status_code == 403


def test_stored_hostile_text_is_inert_on_every_formation_page(
    client: MemoryClient, namespace: str, consoles: Consoles, fake_anthropic: FakeAnthropic
):
    memory = client.long_term(namespace, "ana")
    receipt = memory.remember([{"role": "user", "content": HOSTILE, "id": HOSTILE}], wait=True)
    failed = _failed(client, namespace, fake_anthropic, content=f"also {HOSTILE}")
    http = consoles()
    sign_in(http, f"tok-{namespace}")
    base = f"/ui/ns/{namespace}/keys/ana"
    pages = {
        "facts": http.get(f"{base}/facts"),
        "history": http.get(f"{base}/facts/{receipt.facts[0]}/history?set=facts"),
        "operations": http.get(f"{base}/operations"),
        "operation": http.get(f"{base}/operations/{receipt.op_id}"),
        "failed": http.get(f"{base}/operations/{failed}"),
    }
    for name, page in pages.items():
        assert page.status_code == 200, (name, page.text)
        if name != "operations":  # the listing shows no memory text
            assert_inert(page.text)
    assert_inert(pages["failed"].text.split("Replies that failed validation")[1])  # the model's reply, as data
    # The hostile message id is a source: a link to the console's own search for it, the id quoted in its query.
    assert f'href="{base}/messages?id=%3Cscript%3E' in pages["facts"].text


def test_a_failed_formation_is_retried_only_with_csrf_and_corrections_and_the_retry_is_audited(
    client: MemoryClient,
    namespace: str,
    consoles: Consoles,
    fake_anthropic: FakeAnthropic,
    raw_redis: redis.Redis,
):
    op_id = _failed(client, namespace, fake_anthropic)
    memory = client.long_term(namespace, "ana")
    assert memory.operation(op_id).status == "failed"
    retry = f"/ui/ns/{namespace}/keys/ana/operations/{op_id}/retry"

    reader = consoles("off")
    csrf = sign_in(reader, f"tok-{namespace}")
    page = reader.get(f"/ui/ns/{namespace}/keys/ana/operations/{op_id}").text
    assert "failed" in page
    assert "retry…" not in page
    assert reader.get(retry).status_code == 403
    assert reader.post(retry, data={"csrf": csrf, "confirmed": "yes"}).status_code == 403

    writer = consoles("all")
    csrf = sign_in(writer, f"tok-{namespace}")
    assert "retry…" in writer.get(f"/ui/ns/{namespace}/keys/ana/operations/{op_id}").text
    confirm = writer.get(retry)
    assert confirm.status_code == 200
    assert 'name="confirmed" value="yes"' in confirm.text
    assert writer.post(retry, data={"confirmed": "yes"}).status_code == 403  # no CSRF token
    assert writer.post(retry, data={"csrf": "forged", "confirmed": "yes"}).status_code == 403
    cross = writer.post(retry, data={"csrf": csrf, "confirmed": "yes"}, headers={"origin": "https://evil.example"})
    assert cross.status_code == 403
    assert writer.post(retry, data={"csrf": csrf}).status_code == 400  # not through the confirmation
    assert memory.operation(op_id).status == "failed"
    assert raw_redis.llen(client.keys.console_audit(namespace)) == 0

    sent = writer.post(retry, data={"csrf": csrf, "confirmed": "yes"}, headers={"origin": ORIGIN})
    assert sent.status_code == 303
    assert sent.headers["location"].endswith(f"/operations/{op_id}?retried=1")
    wait_for(lambda: memory.operation(op_id).status == "done")
    assert [str(f.value) for f in memory.get("facts")] == ["I was born in Porto"]
    entries = [json.loads(raw) for raw in raw_redis.lrange(client.keys.console_audit(namespace), 0, -1)]
    assert len(entries) == 1
    assert entries[0]["who"] == f"token {token_id(f'tok-{namespace}')}"
    assert entries[0]["what"] == "formation.retry"
    assert entries[0]["target"] == {"key": "ana", "set": "facts", "op_id": op_id}
    assert entries[0]["before"]["status"] == "failed"
    assert entries[0]["after"]["status"] == "sent"
    # Done now: nothing left to retry.
    assert writer.post(retry, data={"csrf": csrf, "confirmed": "yes"}).status_code == 409


def test_a_set_past_the_limit_shows_its_first_items_and_says_so(
    client: MemoryClient, namespace: str, consoles: Consoles, monkeypatch: pytest.MonkeyPatch
):
    memory = client.long_term(namespace, "ana")
    memory.get_or_create_memory_set("facts", capacity=1000, context_window=0)
    memory.add("facts", [f"note {i}" for i in range(5)])
    monkeypatch.setattr(facts, "FACTS_LIMIT", 3)
    http = consoles()
    sign_in(http, f"tok-{namespace}")
    page = http.get(f"/ui/ns/{namespace}/keys/ana/facts").text
    assert "Showing the first 3 of 5 items." in page
    assert re.findall(r'<td class="value">([^<]*)', page) == ["note 0", "note 1", "note 2"]
    assert page.count("not formed (written by add)") == 3
