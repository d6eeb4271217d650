"""The console's operations view through the ASGI test client: the operator's alone; workers, queues, dead
letters (replayed or dropped only with CSRF and corrections, and audited), reindex, usage."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
import redis
from fastapi.testclient import TestClient

from memory_core import MemoryClient
from memory_core.core.errors import FormationError
from memory_core.core.liveness import WorkerInfo
from memory_core.core.settings import Settings
from memory_core.servers.console.access import token_id
from memory_core.testing.fake_anthropic import FakeAnthropic
from tests.integration.waiting import wait_for

from .viewing import HOSTILE, OPERATOR, ORIGIN, assert_inert, console_settings, open_console, sign_in

Consoles = Callable[..., TestClient]


@pytest.fixture
def consoles(settings: Settings, worker: object, namespace: str) -> Iterator[Consoles]:
    with ExitStack() as stack:

        def opened(corrections: str = "off") -> TestClient:
            return stack.enter_context(open_console(console_settings(settings, [namespace], corrections=corrections)))

        yield opened


def _dead_letter(client: MemoryClient, namespace: str, fake: FakeAnthropic, content: str) -> None:
    """A formation that fails twice over leaves a dead letter with its messages."""
    fake.formation.push("not json", {"facts": [{"text": "x", "sources": "one"}]})
    with pytest.raises(FormationError):
        client.long_term(namespace, "ana").remember([{"role": "user", "content": content}], wait=True)


def _entries(raw_redis: redis.Redis, client: MemoryClient, namespace: str) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in raw_redis.lrange(client.keys.console_audit(namespace), 0, -1)]


def test_the_operations_pages_are_the_operators_alone(namespace: str, consoles: Consoles):
    http = consoles("all")
    csrf = sign_in(http, f"tok-{namespace}")
    for path in (
        "/ui/operations",
        "/ui/operations/reindex",
        f"/ui/operations/dead-letters/{namespace}",
        f"/ui/operations/dead-letters/{namespace}/replay",
        f"/ui/operations/dead-letters/{namespace}/drop",
    ):
        assert http.get(path).status_code == 403, path
    for action in ("replay", "drop"):
        answer = http.post(f"/ui/operations/dead-letters/{namespace}/{action}", data={"csrf": csrf, "confirmed": "yes"})
        assert answer.status_code == 403


def test_the_operations_page_shows_workers_queues_dead_letters_usage_and_reindex(
    client: MemoryClient, namespace: str, consoles: Consoles, fake_anthropic: FakeAnthropic
):
    client.long_term(namespace, "ana").remember([{"role": "user", "content": "I like tea"}], wait=True)
    _dead_letter(client, namespace, fake_anthropic, "I was born in Porto")
    http = consoles()
    sign_in(http, OPERATOR)

    page = http.get("/ui/operations")
    assert page.status_code == 200, page.text
    assert "No live worker" not in page.text
    assert "memory.formation" in page.text
    assert "s ago" in page.text
    for queue in ("memory.write", "memory.read", "memory.formation"):
        assert f"<td>{queue}</td>" in page.text
    assert f'<a href="/ui/operations/dead-letters/{namespace}">{namespace}</a></td><td>1</td>' in page.text
    row = re.search(rf'<td><a href="/ui/ns/{namespace}">{namespace}</a></td>\s*<td>(\d+)</td>', page.text)
    assert row is not None
    assert row.group(1) == "1"
    assert "memory-core flower" in page.text
    assert 'hx-get="/ui/operations/reindex"' in page.text
    reindex = http.get("/ui/operations/reindex")
    assert reindex.status_code == 200
    assert "No reindex is running" in reindex.text
    fragment = http.get("/ui/operations/reindex", headers={"hx-request": "true"}).text
    assert fragment.startswith('<section id="reindex">')

    letters = http.get(f"/ui/operations/dead-letters/{namespace}")
    assert letters.status_code == 200
    assert "memory.form" in letters.text
    assert "I was born in Porto" in letters.text
    assert "replay all" not in letters.text  # corrections are off for this sign-in


def test_dead_letters_are_replayed_or_dropped_only_with_csrf_and_corrections_and_each_is_audited(
    client: MemoryClient,
    namespace: str,
    consoles: Consoles,
    fake_anthropic: FakeAnthropic,
    raw_redis: redis.Redis,
):
    _dead_letter(client, namespace, fake_anthropic, "I was born in Porto")
    letters = client.keys.dead_letters(namespace)
    base = f"/ui/operations/dead-letters/{namespace}"

    reader = consoles("off")
    csrf = sign_in(reader, OPERATOR)
    assert reader.get(f"{base}/replay").status_code == 403
    assert reader.post(f"{base}/replay", data={"csrf": csrf, "confirmed": "yes"}).status_code == 403
    assert reader.post(f"{base}/drop", data={"csrf": csrf, "confirmed": "yes"}).status_code == 403

    writer = consoles("operators")
    csrf = sign_in(writer, OPERATOR)
    assert "replay all" in writer.get(base).text
    confirm = writer.get(f"{base}/replay")
    assert confirm.status_code == 200
    assert "1 dead letter(s)" in confirm.text
    assert writer.post(f"{base}/replay", data={"confirmed": "yes"}).status_code == 403
    assert writer.post(f"{base}/replay", data={"csrf": "forged", "confirmed": "yes"}).status_code == 403
    assert writer.post(f"{base}/replay", data={"csrf": csrf}).status_code == 400
    assert raw_redis.llen(letters) == 1
    assert _entries(raw_redis, client, namespace) == []

    replayed = writer.post(f"{base}/replay", data={"csrf": csrf, "confirmed": "yes"}, headers={"origin": ORIGIN})
    assert replayed.status_code == 303
    assert "replayed 1" in writer.get(replayed.headers["location"]).text
    assert raw_redis.llen(letters) == 0
    memory = client.long_term(namespace, "ana")
    wait_for(lambda: [str(f.value) for f in memory.get("facts")] == ["I was born in Porto"])  # formed this time
    (entry,) = _entries(raw_redis, client, namespace)
    assert entry["who"] == f"operator {token_id(OPERATOR)}"
    assert entry["what"] == "dead_letters.replay"
    assert entry["target"] == {"namespace": namespace}
    assert entry["before"]["letters"] == 1  # type: ignore[index]
    assert entry["after"]["replayed"] == 1  # type: ignore[index]

    _dead_letter(client, namespace, fake_anthropic, "I was born in Faro")
    assert raw_redis.llen(letters) == 1
    dropped = writer.post(f"{base}/drop", data={"csrf": csrf, "confirmed": "yes"})
    assert dropped.status_code == 303
    assert raw_redis.llen(letters) == 0
    newest = _entries(raw_redis, client, namespace)[0]
    assert newest["what"] == "dead_letters.drop"
    assert newest["before"]["letters"] == 1  # type: ignore[index]
    assert newest["after"]["dropped"] == 1  # type: ignore[index]
    assert (
        writer.post("/ui/operations/dead-letters/!ops/replay", data={"csrf": csrf, "confirmed": "yes"}).status_code
        == 409
    )


def test_hostile_text_is_inert_on_the_operations_pages(
    client: MemoryClient,
    namespace: str,
    consoles: Consoles,
    fake_anthropic: FakeAnthropic,
    raw_redis: redis.Redis,
):
    _dead_letter(client, namespace, fake_anthropic, HOSTILE)
    planted = WorkerInfo(
        hostname=HOSTILE, queues=("memory.maintenance",), embedder=HOSTILE, name=f"planted-{uuid.uuid4().hex}"
    )
    worker_key = client.keys.worker(planted.name)
    raw_redis.set(worker_key, planted.to_json(), px=20_000)
    raw_redis.sadd(client.keys.workers(), planted.name)
    try:
        http = consoles()
        sign_in(http, OPERATOR)
        page = http.get("/ui/operations")
        assert page.status_code == 200
        assert_inert(page.text)
        letters = http.get(f"/ui/operations/dead-letters/{namespace}")
        assert_inert(letters.text)
    finally:
        raw_redis.delete(worker_key)
        raw_redis.srem(client.keys.workers(), planted.name)
