"""The console's views of the Redis tiers through the ASGI test client: a session's messages, summary and
entities; short-term state, sensory memory and profile; a thread's checkpoints."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from html import unescape
from urllib.parse import quote

import pytest
import redis
from fastapi.testclient import TestClient

from memory_core import MemoryClient
from memory_core.core.models import ChatMessage, MessageRole
from memory_core.core.settings import Settings

from .viewing import HOSTILE, assert_inert, console_settings, open_console, sign_in


@pytest.fixture
def other() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def http(settings: Settings, worker: object, namespace: str, other: str) -> Iterator[TestClient]:
    with open_console(console_settings(settings, [namespace, other])) as console:
        sign_in(console, f"tok-{namespace}")
        yield console


def _contents(page: str) -> list[str]:
    return [unescape(text) for text in re.findall(r'<td class="value">([^<]*)', page)]


def _link(page: str, label: str) -> str:
    found = re.search(rf'<a href="([^"]+)">{label}</a>', page)
    assert found is not None, label
    return unescape(found.group(1))


def test_a_sessions_messages_are_paged_newest_last_beside_its_summary_and_entities(
    client: MemoryClient, namespace: str, http: TestClient, raw_redis: redis.Redis
):
    session = client.session(namespace, "chat-1", key="ana", promote="none")
    for start in range(0, 120, 40):
        session.add_messages(
            [ChatMessage(role=MessageRole.USER, content=f"message {i}") for i in range(start, start + 40)]
        )
    raw_redis.hset(
        session.keys.state, mapping={"summary": "Ana talked about numbers.", "folded_messages": 3, "folded_tokens": 9}
    )
    raw_redis.hset(session.keys.entities, mapping={"Ana": "a person who counts"})
    here = f"/ui/ns/{namespace}/keys/ana/sessions/chat-1"

    newest = http.get(here)
    assert newest.status_code == 200, newest.text
    assert _contents(newest.text) == [f"message {i}" for i in range(70, 120)]
    assert "120 message(s)" in newest.text
    assert "Ana talked about numbers." in newest.text
    assert "a person who counts" in newest.text
    assert ">newer</a>" not in newest.text

    middle = http.get(_link(newest.text, "older")).text
    assert _contents(middle) == [f"message {i}" for i in range(20, 70)]
    oldest = http.get(_link(middle, "older")).text
    assert _contents(oldest) == [f"message {i}" for i in range(20)]
    assert ">older</a>" not in oldest
    assert _contents(http.get(_link(oldest, "newer")).text) == [f"message {i}" for i in range(20, 70)]
    assert http.get(f"{here}?before=not-a-cursor").status_code == 400


def test_short_term_state_sensory_memory_and_profile_are_shown_as_data(
    client: MemoryClient, namespace: str, http: TestClient
):
    state = client.short_term(namespace, "ana")
    state.set("plan.step", 2)
    state.set("plan.done", ["a", "b"])
    state.set("blob", b"\x00\x01")
    for i in range(150):
        state.set(f"many.k{i:03d}", i)
    state.persist()
    sensory = client.sensory(namespace, "ana")
    sensory.set("seen", "a red door")
    sensory.persist()
    client.profile(namespace, "ana").update({"city": "Lisbon"})
    base = f"/ui/ns/{namespace}/keys/ana"

    first = http.get(f"{base}/state")
    assert first.status_code == 200, first.text
    assert "155 path(s)" in first.text  # two objects, 153 values
    assert "<code>blob</code>" in first.text
    assert "&lt;2 bytes&gt;" in first.text
    assert "<code>many.k000</code>" in first.text
    second = http.get(_link(first.text, "next")).text
    assert "<code>plan.step</code>" in second
    assert "<code>plan.done</code>" in second
    assert "<code>many.k000</code>" not in second
    assert "a red door" in http.get(f"{base}/state?kind=sensory").text
    profile = http.get(f"{base}/profile")
    assert profile.status_code == 200
    assert "&#34;city&#34;: &#34;Lisbon&#34;" in profile.text
    assert "No profile." in http.get(f"/ui/ns/{namespace}/keys/bob/profile").text


def test_a_threads_checkpoints_are_listed_newest_first_with_their_metadata_as_data(
    client: MemoryClient, namespace: str, http: TestClient
):
    saver = client.checkpoints(namespace)
    for i in range(25):
        saver.put("run-1", {"step": i}, checkpoint_id=f"c{i:02d}", metadata={"source": "loop", "step": i})
    saver.put("run-1", {"step": "sub"}, checkpoint_ns="inner|tool", checkpoint_id="s1")
    here = f"/ui/ns/{namespace}/threads/run-1"

    newest = http.get(here)
    assert newest.status_code == 200, newest.text
    ids = re.findall(r"<h2><a [^>]+><code>([^<]+)</code>", newest.text)
    assert ids == [f"c{i:02d}" for i in range(24, 4, -1)]
    assert "&#34;source&#34;: &#34;loop&#34;" in newest.text
    assert "inner|tool" in newest.text
    older = http.get(_link(newest.text, "older")).text
    assert re.findall(r"<h2><a [^>]+><code>([^<]+)</code>", older) == [f"c{i:02d}" for i in range(4, -1, -1)]
    one = http.get(f"{here}?id=c03")
    assert "&#34;step&#34;: 3" in one.text
    inner = http.get(f"{here}?cns=inner%7Ctool").text
    assert re.findall(r"<h2><a [^>]+><code>([^<]+)</code>", inner) == ["s1"]
    assert http.get(f"{here}?id=nope").status_code == 404


def test_another_namespaces_tiers_are_refused(client: MemoryClient, other: str, http: TestClient):
    client.session(other, "chat-1", key="ana", promote="none").add_messages(
        [ChatMessage(role=MessageRole.USER, content="a secret")]
    )
    state = client.short_term(other, "ana")
    state.set("secret", "a secret")
    state.persist()
    client.checkpoints(other).put("run-1", {"secret": "a secret"})
    for path in (
        f"/ui/ns/{other}/keys/ana/sessions/chat-1",
        f"/ui/ns/{other}/keys/ana/messages?id=x",
        f"/ui/ns/{other}/keys/ana/state",
        f"/ui/ns/{other}/keys/ana/state?kind=sensory",
        f"/ui/ns/{other}/keys/ana/profile",
        f"/ui/ns/{other}/threads/run-1",
    ):
        refused = http.get(path)
        assert refused.status_code == 403, path
        assert "a secret" not in refused.text


def test_stored_hostile_text_is_inert_on_every_tier_page(
    client: MemoryClient, namespace: str, http: TestClient, raw_redis: redis.Redis
):
    session = client.session(namespace, "chat-1", key="ana", promote="none")
    session.add_messages([ChatMessage(role=MessageRole.USER, content=HOSTILE, extra_args={"link": HOSTILE})])
    raw_redis.hset(session.keys.state, mapping={"summary": HOSTILE, "folded_messages": 1})
    raw_redis.hset(session.keys.entities, mapping={HOSTILE: HOSTILE})
    state = client.short_term(namespace, "ana")
    state.set(HOSTILE, HOSTILE)
    state.persist()
    client.profile(namespace, "ana").update({HOSTILE: HOSTILE})
    client.checkpoints(namespace).put(
        "run-1", {"state": HOSTILE}, checkpoint_ns=HOSTILE, checkpoint_id=HOSTILE, metadata={HOSTILE: HOSTILE}
    )
    base = f"/ui/ns/{namespace}/keys/ana"
    thread = f"/ui/ns/{namespace}/threads/run-1"
    for path in (
        f"{base}/sessions/chat-1",
        f"{base}/state",
        f"{base}/profile",
        f"{thread}?cns={quote(HOSTILE, safe='')}",
    ):
        page = http.get(path)
        assert page.status_code == 200, (path, page.text)
        assert_inert(page.text)
    listing = http.get(thread).text  # the checkpoint namespace's name, as a link's text and query
    assert_inert(listing)
