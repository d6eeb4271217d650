"""memory-core serve as HTTP callers reach it: a real uvicorn process over a real worker, with bearer tokens."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from celery import Celery
from openapi_spec_validator import validate as validate_openapi

from memory_core.core import routing
from memory_core.core.settings import Settings
from memory_core.servers.http.errors import ERRORS, HTTP_CODES, INTERNAL_ERROR
from memory_core.testing.fake_anthropic import FakeAnthropic

from .processes import CLI, client_env, free_port, stop


@contextmanager
def _serving(settings: Settings, where: Path, *args: str, **env: str) -> Iterator[str]:
    port = free_port()
    log_path = where / f"serve-{port}.log"
    with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [CLI, "serve", "--port", str(port), *args],
            env=client_env(settings, **env),
            cwd=where,
            stdout=log,
            stderr=log,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
        yield url
    finally:
        stop(process)


@pytest.fixture(scope="module")
def tenants() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"h-{tag}-a", f"h-{tag}-b"


@pytest.fixture(scope="module")
def api(settings: Settings, worker: Celery, tenants: tuple[str, str], tmp_path_factory) -> Iterator[str]:
    tokens = {"tok-a": tenants[0], "tok-b": tenants[1]}
    with _serving(settings, tmp_path_factory.mktemp("http"), MEMORY_AUTH__TOKENS=json.dumps(tokens)) as url:
        yield url


@pytest.fixture
def as_a(api: str, tenants: tuple[str, str]) -> Iterator[httpx.Client]:
    base = f"{api}/v1/namespaces/{tenants[0]}"
    with httpx.Client(base_url=base, headers={"Authorization": "Bearer tok-a"}, timeout=60) as http:
        yield http


@pytest.fixture
def as_b(api: str, tenants: tuple[str, str]) -> Iterator[httpx.Client]:
    base = f"{api}/v1/namespaces/{tenants[1]}"
    with httpx.Client(base_url=base, headers={"Authorization": "Bearer tok-b"}, timeout=60) as http:
        yield http


@pytest.fixture
def key() -> str:
    """A key of its own for each test: the store outlives the per-test flush of Redis."""
    return f"k-{uuid.uuid4().hex[:8]}"


def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def test_long_term_sets_and_items_end_to_end(as_a: httpx.Client, key: str, fake_anthropic: FakeAnthropic):
    notes = f"/keys/{key}/sets/notes"
    definition = _ok(as_a.put(notes, json={"capacity": 50}))
    assert definition["name"] == "notes"
    assert definition["capacity"] == 50
    assert _ok(as_a.put(notes, json={"capacity": 50})) == definition  # get-or-create: the same definition
    assert _ok(as_a.get(notes)) == definition

    facts = ["Alice prefers green tea", "Alice is allergic to peanuts"]
    added = _ok(as_a.post(notes + "/items", json={"items": facts, "metadatas": [{"topic": "drink"}, {}]}))
    assert len(added["ids"]) == 2
    hits = _ok(as_a.post(notes + "/search", json={"query": "what does Alice drink?", "limit": 1}))["items"]
    assert [hit["value"] for hit in hits] == ["Alice prefers green tea"]
    assert hits[0]["score"] is not None
    filtered = _ok(as_a.post(notes + "/search", json={"query": "Alice", "filters": {"topic": "drink"}}))["items"]
    assert [hit["id"] for hit in filtered] == [added["ids"][0]]
    assert [item["value"] for item in _ok(as_a.get(notes + "/items"))["items"]] == facts
    one = _ok(as_a.get(notes + "/items", params={"id": added["ids"][1]}))["items"]
    assert [item["value"] for item in one] == [facts[1]]
    assert _ok(as_a.get(notes + f"/items/{added['ids'][0]}"))["value"] == facts[0]
    assert _ok(as_a.get(notes + "/size")) == {"size": 2}
    listed = _ok(as_a.get("/sets", params={"key": key}))["sets"]
    assert [(s["key"], s["definition"]["name"], s["size"]) for s in listed] == [(key, "notes", 2)]

    queued = as_a.post(notes + "/items", json={"items": ["Alice hikes"], "wait": False, "importance": 0.9})
    later = _ok(queued, 202)["ids"][0]
    deadline = time.monotonic() + 30
    while not _ok(as_a.get(notes + "/items", params={"id": later}))["items"]:
        assert time.monotonic() < deadline, "the enqueued add never landed"
        time.sleep(0.1)

    assert _ok(as_a.post(notes + "/compact"))["status"] == "compacted"
    assert _ok(as_a.delete(notes + "/items", params={"all": "true"}))["deleted"] >= 1
    assert _ok(as_a.get(notes + "/size")) == {"size": 0}
    assert _ok(as_a.delete(notes)) == {"deleted": True}
    assert _error(as_a.get(notes), 404)["code"] == "memory_set_not_found"


def test_a_search_carries_the_rerank_switch_to_the_workers(as_a: httpx.Client, key: str):
    notes = f"/keys/{key}/sets/notes"
    _ok(as_a.put(notes, json={"capacity": 50}))
    _ok(as_a.post(notes + "/items", json={"items": ["Alice prefers green tea"]}))
    assert len(_ok(as_a.post(notes + "/search", json={"query": "tea", "rerank": False}))["items"]) == 1
    # These workers have no reranker: asking for one is refused by them, naming the setting.
    refused = _error(as_a.post(notes + "/search", json={"query": "tea", "rerank": True}), 400)
    assert (refused["code"], "MEMORY_RERANK__MODEL" in refused["message"]) == ("invalid_request", True)
    assert _error(as_a.post(notes + "/search", json={"query": "tea", "rerank": "yes"}), 400)["field"] == "rerank"


def test_items_are_deleted_by_id(as_a: httpx.Client, key: str):
    notes = f"/keys/{key}/sets/notes"
    _ok(as_a.put(notes, json={}))
    ids = _ok(as_a.post(notes + "/items", json={"items": ["one", "two", "three"], "ids": ["a", "b", "c"]}))["ids"]
    assert ids == ["a", "b", "c"]
    assert _ok(as_a.delete(notes + "/items/a")) == {"deleted": 1}
    assert _ok(as_a.delete(notes + "/items", params=[("id", "b"), ("id", "nope")])) == {"deleted": 1}
    assert [item["id"] for item in _ok(as_a.get(notes + "/items"))["items"]] == ["c"]
    assert _error(as_a.get(notes + "/items/a"), 404)["code"] == "not_found"
    assert _error(as_a.delete(notes + "/items"), 400)["code"] == "invalid_request"  # neither ids nor all=true


def test_short_term_state_round_trip(as_a: httpx.Client, key: str):
    state = f"/keys/{key}/state"
    assert _ok(as_a.get(state)) == {"state": {}}
    assert _ok(as_a.put(state + "/plan.step", json={"value": "book a table"})) == {
        "path": "plan.step",
        "value": "book a table",
    }
    patched = _ok(as_a.patch(state, json={"values": {"plan.guests": 4, "mood": {"tone": "warm"}}}))
    assert patched == {"state": {"mood": {"tone": "warm"}, "plan": {"guests": 4, "step": "book a table"}}}
    assert _ok(as_a.get(state)) == patched
    assert _ok(as_a.get(state + "/plan")) == {"path": "plan", "value": {"guests": 4, "step": "book a table"}}
    assert _ok(as_a.get(state + "/plan.guests"))["value"] == 4
    assert _error(as_a.get(state + "/plan.nothing"), 404)["code"] == "not_found"
    # A value where an object is: refused as a conflict, and nothing of the patch is written.
    conflict = as_a.patch(state, json={"values": {"extra": 1, "plan.guests.count": 5}})
    assert _error(conflict, 409)["code"] == "conflict"
    assert "extra" not in _ok(as_a.get(state))["state"]
    assert _ok(as_a.delete(state + "/plan")) == {"deleted": True}
    assert _ok(as_a.delete(state + "/plan")) == {"deleted": False}
    assert _ok(as_a.get(state)) == {"state": {"mood": {"tone": "warm"}}}
    assert _ok(as_a.delete(state)) == {"deleted": True}
    assert _ok(as_a.get(state)) == {"state": {}}


def test_checkpoints_round_trip(as_a: httpx.Client, key: str):
    thread = f"/threads/{key}"
    first = _ok(as_a.post(thread + "/checkpoints", json={"checkpoint": {"step": 1}}), 201)
    second = _ok(
        as_a.post(thread + "/checkpoints", json={"checkpoint": {"step": 2}, "metadata": {"source": "loop"}}), 201
    )
    assert second["parent_id"] == first["id"]
    assert _ok(as_a.get(thread + "/checkpoints/latest")) == second
    assert _ok(as_a.get(thread + f"/checkpoints/{first['id']}")) == first
    listed = _ok(as_a.get(thread + "/checkpoints"))["checkpoints"]
    assert [c["id"] for c in listed] == [second["id"], first["id"]]
    older = _ok(as_a.get(thread + "/checkpoints", params={"before": second["id"], "limit": 5}))["checkpoints"]
    assert [c["id"] for c in older] == [first["id"]]
    reserved = as_a.post(thread + "/checkpoints", json={"checkpoint": {}, "checkpoint_id": "latest"})
    assert _error(reserved, 400)["code"] == "invalid_request"
    assert _ok(as_a.delete(thread)) == {"deleted": 2}
    assert _error(as_a.get(thread + "/checkpoints/latest"), 404)["code"] == "not_found"


def test_recall_usage_and_forgetting_a_key(as_a: httpx.Client, key: str, tenants: tuple[str, str]):
    notes = f"/keys/{key}/sets/notes"
    _ok(as_a.put(notes, json={}))
    _ok(as_a.post(notes + "/items", json={"items": ["Alice is allergic to peanuts"]}))
    _ok(as_a.put(f"/keys/{key}/state/plan", json={"value": "dinner on Friday"}))
    recalled = _ok(as_a.post(f"/keys/{key}/recall", json={"query": "plan dinner for Alice", "limit": 5}))
    assert "peanuts" in recalled["context"]
    assert {item["tier"] for item in recalled["items"]} >= {"long_term", "short_term"}
    assert _ok(as_a.get("/usage"))["namespace"] == tenants[0]

    receipt = _ok(as_a.delete(f"/keys/{key}"))
    assert receipt["namespace"] == tenants[0]
    assert receipt["key"] == key
    assert receipt["items"] == 1
    assert _error(as_a.get(notes), 404)["code"] == "memory_set_not_found"
    assert _ok(as_a.get(f"/keys/{key}/state")) == {"state": {}}


def test_errors_are_typed_json_with_stable_codes(api: str, as_a: httpx.Client, key: str, tenants: tuple[str, str]):
    notes = f"/keys/{key}/sets/notes"
    _ok(as_a.put(notes, json={"capacity": 10}))

    schema = _error(as_a.post(notes + "/search", json={"query": "tea", "limit": "five"}), 400)
    assert (schema["code"], schema["field"]) == ("invalid_request", "limit")
    unknown = _error(as_a.post(notes + "/items", json={"items": ["x"], "importance": "high"}), 400)
    assert unknown["field"] == "importance"
    assert (
        _error(as_a.post(notes + "/items", content=b"{", headers={"content-type": "application/json"}), 400)["field"]
        == "body"
    )
    bounds = _error(as_a.post(notes + "/search", json={"query": "tea", "limit": 1000}), 400)  # the client's check
    assert bounds["code"] == "invalid_request"
    assert "limit" in bounds["message"]

    missing = httpx.get(f"{api}/v1/namespaces/{tenants[0]}/usage")
    assert _error(missing, 401)["code"] == "unauthorized"
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = httpx.get(f"{api}/v1/namespaces/{tenants[0]}/usage", headers={"Authorization": "Bearer tok-nobody"})
    assert _error(wrong, 401)["code"] == "unauthorized"
    other = as_a.get(f"{api}/v1/namespaces/{tenants[1]}/usage")
    assert _error(other, 403)["code"] == "forbidden"

    absent = _error(as_a.post(f"/keys/{key}/sets/nope/items", json={"items": ["x"]}), 404)
    assert absent["code"] == "memory_set_not_found"
    assert "'nope'" in absent["message"]
    assert _error(as_a.get("/nothing-here"), 404)["code"] == "not_found"
    assert _error(as_a.put(notes, json={"capacity": 20}), 409)["code"] == "set_definition_conflict"

    huge = {"query": "x" * 2_000_000}
    assert _error(as_a.post(notes + "/search", json=huge), 413)["code"] == "request_too_large"
    chunks = (b"x" * 65_536 for _ in range(40))  # no Content-Length: counted as it streams
    assert _error(as_a.post(notes + "/search", content=chunks), 413)["code"] == "request_too_large"


def test_one_token_never_reaches_the_other_namespace(
    as_a: httpx.Client, as_b: httpx.Client, key: str, tenants: tuple[str, str]
):
    a, b = tenants
    notes = f"/keys/{key}/sets/notes"
    _ok(as_a.put(notes, json={}))
    _ok(as_a.post(notes + "/items", json={"items": ["The launch code is 0000."]}))
    _ok(as_a.put(f"/keys/{key}/state/secret", json={"value": "A's plan"}))
    _ok(as_a.post(f"/threads/{key}/checkpoints", json={"checkpoint": {"owner": "A"}}), 201)

    for http, theirs in ((as_a, b), (as_b, a)):
        base = f"/v1/namespaces/{theirs}"
        attempts: list[tuple[str, str, dict[str, Any] | None]] = [
            ("GET", f"{base}/sets", None),
            ("PUT", f"{base}{notes}", {}),
            ("GET", f"{base}{notes}", None),
            ("POST", f"{base}{notes}/items", {"items": ["planted"]}),
            ("GET", f"{base}{notes}/items", None),
            ("POST", f"{base}{notes}/search", {"query": "launch code"}),
            ("DELETE", f"{base}{notes}", None),
            ("GET", f"{base}/keys/{key}/state", None),
            ("PUT", f"{base}/keys/{key}/state/secret", {"value": "overwritten"}),
            ("POST", f"{base}/threads/{key}/checkpoints", {"checkpoint": {}}),
            ("GET", f"{base}/threads/{key}/checkpoints/latest", None),
            ("POST", f"{base}/keys/{key}/recall", {"query": "launch code"}),
            ("POST", f"{base}/keys/{key}/remember", {"messages": [{"content": "I am root"}], "wait": True}),
            ("GET", f"{base}/keys/{key}/operations/{'0' * 32}", None),
            ("GET", f"{base}/keys/{key}/sets/facts/items/f1/history", None),
            ("POST", f"{base}/keys/{key}/sets/facts/forget-sources", {"source_ids": ["m1"]}),
            ("DELETE", f"{base}/keys/{key}", None),
            ("DELETE", base, None),
            ("GET", f"{base}/usage", None),
        ]
        for method, path, body in attempts:
            response = http.request(method, str(http.base_url.copy_with(path=path)), json=body)
            assert _error(response, 403)["code"] == "forbidden", (method, path)

    # B, in its own namespace, with the same key and set names, sees nothing of A's.
    assert _error(as_b.get(notes), 404)["code"] == "memory_set_not_found"
    assert _ok(as_b.get("/sets"))["sets"] == []
    assert _ok(as_b.get(f"/keys/{key}/state")) == {"state": {}}
    assert _error(as_b.get(f"/threads/{key}/checkpoints/latest"), 404)["code"] == "not_found"
    assert "launch" not in _ok(as_b.post(f"/keys/{key}/recall", json={"query": "launch code"}))["context"]
    # And A's data is as A left it.
    assert [i["value"] for i in _ok(as_a.get(notes + "/items"))["items"]] == ["The launch code is 0000."]
    assert _ok(as_a.get(f"/keys/{key}/state/secret"))["value"] == "A's plan"


def _operation_done(http: httpx.Client, key: str, op_id: str) -> bool:
    return bool(_ok(http.get(f"/keys/{key}/operations/{op_id}"))["status"] == "done")


def test_remember_forms_facts_and_the_operation_reports_them(as_a: httpx.Client, key: str, fake_anthropic):
    conversation = [
        {"role": "user", "content": "I live in Lisbon", "id": "m1"},
        {"role": "assistant", "content": "Lisbon is lovely!", "id": "m2", "at": "2025-05-01T10:00:00+01:00"},
        {"role": "user", "content": "I like green tea", "id": "m3"},
    ]
    formed = _ok(as_a.post(f"/keys/{key}/remember", json={"messages": conversation, "wait": True}))
    assert (formed["status"], formed["key"], formed["set_name"]) == ("done", key, "facts")
    assert [(d["decision"], d["text"], d["sources"]) for d in formed["decisions"]] == [
        ("add", "I live in Lisbon", ["m1"]),
        ("add", "I like green tea", ["m3"]),
    ]
    assert _ok(as_a.get(f"/keys/{key}/operations/{formed['op_id']}")) == formed
    again = _ok(as_a.post(f"/keys/{key}/remember", json={"messages": conversation, "wait": True}))
    assert (again["op_id"], again["decisions"]) == (formed["op_id"], formed["decisions"])  # the same operation

    # Without waiting: 202 with the receipt at once, and the operation ends done.
    receipt = _ok(as_a.post(f"/keys/{key}/remember", json={"messages": [{"content": "I swim on Mondays"}]}), 202)
    assert (receipt["status"], receipt["decisions"]) == ("pending", [])
    deadline = time.monotonic() + 60
    while not _operation_done(as_a, key, receipt["op_id"]):
        assert time.monotonic() < deadline, "the operation never ended"
        time.sleep(0.1)
    hits = _ok(as_a.post(f"/keys/{key}/sets/facts/search", json={"query": "what does the user drink?"}))["items"]
    assert "I like green tea" in [hit["value"] for hit in hits]
    tea = next(hit for hit in hits if hit["value"] == "I like green tea")
    assert (tea["fact"]["op_id"], tea["fact"]["sources"]) == (formed["op_id"], ["m3"])

    unknown = _error(as_a.get(f"/keys/{key}/operations/{'0' * 32}"), 404)
    assert (unknown["code"], "'00000000000000000000000000000000'" in unknown["message"]) == ("not_found", True)
    malformed = _error(as_a.get(f"/keys/{key}/operations/not-an-op"), 400)
    assert (malformed["field"], "not-an-op" in malformed["message"]) == ("op_id", True)


def test_superseded_facts_show_in_history_and_in_searches_that_ask(as_a: httpx.Client, key: str, fake_anthropic):
    def remember(text: str, ident: str) -> dict[str, Any]:
        body = {"messages": [{"content": text, "id": ident}], "wait": True}
        report: dict[str, Any] = _ok(as_a.post(f"/keys/{key}/remember", json=body))
        return report

    facts = f"/keys/{key}/sets/facts"
    first = remember("I like coffee", "s1")["decisions"][0]["fact_id"]
    (changed,) = remember("I do not like coffee", "s2")["decisions"]
    assert (changed["decision"], changed["target"]) == ("contradict", first)
    live = _ok(as_a.post(facts + "/search", json={"query": "coffee"}))["items"]
    assert [hit["value"] for hit in live] == ["I do not like coffee"]
    every = _ok(as_a.post(facts + "/search", json={"query": "coffee", "include_superseded": True}))["items"]
    assert sorted(hit["value"] for hit in every) == ["I do not like coffee", "I like coffee"]
    chain = _ok(as_a.get(facts + f"/items/{changed['fact_id']}/history"))["items"]
    assert [(item["id"], item["value"]) for item in chain] == [
        (first, "I like coffee"),
        (changed["fact_id"], "I do not like coffee"),
    ]
    assert chain[0]["fact"]["superseded_by"] == changed["fact_id"]
    missing = _error(as_a.get(facts + "/items/nope/history"), 404)
    assert (missing["code"], "'nope'" in missing["message"]) == ("not_found", True)

    remember("I speak Dutch", "s3")
    assert _ok(as_a.post(facts + "/forget-sources", json={"source_ids": ["s3"]})) == {"removed": 1, "updated": 0}
    assert "I speak Dutch" not in [item["value"] for item in _ok(as_a.get(facts + "/items"))["items"]]
    empty = _error(as_a.post(facts + "/forget-sources", json={"source_ids": []}), 400)
    assert "source_ids" in empty["message"]


def test_an_operation_is_seen_only_in_its_own_namespace_and_key(
    as_a: httpx.Client, as_b: httpx.Client, key: str, tenants: tuple[str, str], fake_anthropic
):
    body = {"messages": [{"content": "My locker code is 4321"}], "wait": True}
    op_id = _ok(as_a.post(f"/keys/{key}/remember", json=body))["op_id"]
    # B's token does not grant A's namespace: refused before any call, whatever the operation.
    theirs = as_b.get(str(as_b.base_url.copy_with(path=f"/v1/namespaces/{tenants[0]}/keys/{key}/operations/{op_id}")))
    assert _error(theirs, 403)["code"] == "forbidden"
    # In B's own namespace, and in another key of A's, the id names nothing.
    assert _error(as_b.get(f"/keys/{key}/operations/{op_id}"), 404)["code"] == "not_found"
    assert _error(as_a.get(f"/keys/{key}-other/operations/{op_id}"), 404)["code"] == "not_found"
    assert _ok(as_a.get(f"/keys/{key}/operations/{op_id}"))["status"] == "done"


def test_bad_messages_are_refused_naming_the_field_and_the_value(as_a: httpx.Client, key: str):
    remember = f"/keys/{key}/remember"
    refused = [
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role", "'robot'"),
        ({"messages": [{"role": "user"}]}, "messages.0.content", "required"),
        ({"messages": [{"content": "hi", "colour": "red"}]}, "messages.0.colour", "colour"),
        ({"messages": [{"content": "hi", "at": "2025-05-01T10:00:00"}]}, "messages.0.at", "2025-05-01T10:00:00"),
        ({"messages": [{"content": "hi"}], "wait": "yes"}, "wait", "'yes'"),
        ({"messages": "hi"}, "messages", "list"),
    ]
    for body, field, named in refused:
        error = _error(as_a.post(remember, json=body), 400)
        assert (error["code"], error["field"]) == ("invalid_request", field), error
        assert named in error["message"], error
    # Refused by the client's own checks, below the schema.
    for body, named in (
        ({"messages": []}, "messages is empty"),
        ({"messages": [{"content": "  "}]}, "messages[0] content '  '"),
        ({"messages": [{"content": "hi", "id": "x" * 200}]}, "messages[0] id"),
        ({"messages": [{"content": "hi"}], "set_name": "no spaces"}, "'no spaces'"),
    ):
        error = _error(as_a.post(remember, json=body), 400)
        assert (error["code"], named in error["message"]) == ("invalid_request", True), error


def test_a_formation_that_fails_for_good_is_a_502(as_a: httpx.Client, key: str, fake_anthropic):
    fake_anthropic.formation.push("<html>not json</html>", {"facts": [{"text": "x", "sources": "one"}]})
    body = {"messages": [{"content": "I was born in Porto"}], "wait": True}
    failed = _error(as_a.post(f"/keys/{key}/remember", json=body), 502)
    assert (failed["code"], "unusable reply" in failed["message"]) == ("formation_error", True)


def test_probes_and_the_openapi_document(api: str):
    assert _ok(httpx.get(f"{api}/healthz")) == {"status": "ok"}
    ready = _ok(httpx.get(f"{api}/readyz", timeout=10))
    assert ready["ready"] is True
    assert set(ready["queues"]) == set(routing.QUEUES)
    assert all(count >= 1 for count in ready["queues"].values())

    spec = _ok(httpx.get(f"{api}/openapi.json"))
    paths = spec["paths"]
    ns, key, one = "/v1/namespaces/{namespace}", "/v1/namespaces/{namespace}/keys/{key}", "/sets/{set_name}"
    expected = {
        f"{ns}/sets": {"get"},
        f"{key}{one}": {"put", "get", "delete"},
        f"{key}{one}/items": {"post", "get", "delete"},
        f"{key}{one}/items/{{item_id}}": {"get", "delete"},
        f"{key}{one}/search": {"post"},
        f"{key}{one}/size": {"get"},
        f"{key}{one}/compact": {"post"},
        f"{key}/state": {"get", "patch", "delete"},
        f"{key}/state/{{path}}": {"get", "put", "delete"},
        f"{ns}/threads/{{thread_id}}/checkpoints": {"post", "get"},
        f"{ns}/threads/{{thread_id}}/checkpoints/latest": {"get"},
        f"{ns}/threads/{{thread_id}}/checkpoints/{{checkpoint_id}}": {"get"},
        f"{ns}/threads/{{thread_id}}": {"delete"},
        f"{key}/recall": {"post"},
        f"{key}/remember": {"post"},
        f"{key}/operations/{{op_id}}": {"get"},
        f"{key}{one}/items/{{item_id}}/history": {"get"},
        f"{key}{one}/forget-sources": {"post"},
        key: {"delete"},
        ns: {"delete"},
        f"{ns}/usage": {"get"},
    }
    for path, methods in expected.items():
        assert set(paths[path]) == methods, path
    assert not any("422" in op["responses"] for ops in paths.values() for op in ops.values())
    assert "400" in paths[f"{key}{one}/items"]["post"]["responses"]
    schemas = spec["components"]["schemas"]
    for model in (
        *("AddItems", "Search", "SetOptions", "StatePatch", "StateValue", "NewCheckpoint", "RecallQuery"),
        *("Remember", "ForgetSources"),
    ):
        assert schemas[model].get("examples"), model
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"

    validate_openapi(spec)  # a valid OpenAPI document, for the generators that read it
    ids = [op["operationId"] for ops in paths.values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    # Generated clients name their methods after these: they are a contract, like the paths.
    assert set(ids) == {
        *("list_sets", "put_set", "get_set", "delete_set", "set_size", "compact_set", "search"),
        *("add_items", "get_items", "get_item", "delete_items", "delete_item"),
        *("get_state", "patch_state", "clear_state", "get_state_path", "put_state_path", "delete_state_path"),
        *("put_checkpoint", "list_checkpoints", "latest_checkpoint", "get_checkpoint", "delete_thread"),
        *("recall", "forget_key", "forget_namespace", "get_usage", "healthz", "readyz"),
        *("remember", "get_operation", "fact_history", "forget_sources"),
    }


def _unbounded(schema: dict[str, Any], schemas: dict[str, Any], where: str, seen: set[str]) -> list[str]:
    """The numbers in ``schema`` (following references, once each) that have no minimum or no maximum."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            return []
        seen.add(name)
        return _unbounded(schemas[name], schemas, name, seen)
    found = []
    if schema.get("type") in ("integer", "number"):
        low = "minimum" in schema or "exclusiveMinimum" in schema
        high = "maximum" in schema or "exclusiveMaximum" in schema
        if not (low and high):
            found.append(where)
    for branch in (*schema.get("anyOf", ()), *schema.get("allOf", ()), *schema.get("oneOf", ())):
        found += _unbounded(branch, schemas, where, seen)
    if "items" in schema:
        found += _unbounded(schema["items"], schemas, f"{where}[]", seen)
    for name, prop in schema.get("properties", {}).items():
        found += _unbounded(prop, schemas, f"{where}.{name}", seen)
    if isinstance(schema.get("additionalProperties"), dict):
        found += _unbounded(schema["additionalProperties"], schemas, f"{where}.*", seen)
    return found


def test_every_number_a_route_takes_has_a_documented_range(api: str):
    spec = _ok(httpx.get(f"{api}/openapi.json"))
    schemas = spec["components"]["schemas"]
    unbounded = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            for param in op.get("parameters", ()):
                unbounded += _unbounded(param["schema"], schemas, f"{method} {path} ?{param['name']}", set())
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body is not None:
                unbounded += _unbounded(body, schemas, f"{method} {path} body", set())
    assert unbounded == []


def test_numbers_out_of_range_are_refused_at_the_door_naming_value_and_range(as_a: httpx.Client, key: str):
    notes = f"/keys/{key}/sets/notes"
    huge = 2**63
    listed = _error(as_a.get(f"/threads/{key}/checkpoints", params={"limit": huge}), 400)  # was a 503 from Redis
    assert listed["field"] == "limit"
    assert str(huge) in listed["message"]
    assert "1000000" in listed["message"]
    refused = [
        (as_a.put(notes, json={"capacity": 10**30}), "capacity", "1000000"),
        (as_a.put(notes, json={"context_window": 17}), "context_window", "16"),
        (as_a.put(notes, json={"eviction": {"max_items": huge}}), "eviction.max_items", "1000000000"),
        (as_a.post(notes + "/search", json={"query": "x", "filters": {"n": huge}}), "filters.n", str(2**63 - 1)),
        (as_a.post(notes + "/search", json={"query": "tea", "limit": 10**6}), "limit", "10000"),
        (as_a.post(notes + "/items", json={"items": ["x"], "ttl": huge}), "ttl", "3153600000"),
        (as_a.post(notes + "/items", json={"items": ["x"], "importance": [2]}), "importance.0", "1"),
        (as_a.put(f"/keys/{key}/state/plan", json={"value": 1, "ttl": 1e12}), "ttl", "3153600000"),
        (as_a.post(f"/keys/{key}/recall", json={"query": "x", "token_budget": huge}), "token_budget", "10000000"),
        (
            as_a.post(f"/keys/{key}/remember", json={"messages": [{"content": "x"}], "timeout": 1e9}),
            "timeout",
            "604800",
        ),
    ]
    for response, field, bound in refused:
        error = _error(response, 400)
        assert (error["code"], error["field"]) == ("invalid_request", field), error
        assert bound in error["message"], error
    assert _ok(as_a.get(f"/keys/{key}/state")) == {"state": {}}
    assert _error(as_a.get(notes), 404)["code"] == "memory_set_not_found"
    kept = _ok(as_a.put(notes, json={"eviction": {"max_items": 5, "policy": "importance"}}))  # within range
    assert kept["eviction"] == {"max_items": 5, "policy": "importance"}


def test_non_finite_numbers_are_refused_by_every_route_family(as_a: httpx.Client, key: str):
    def send(method: str, path: str, body: str) -> dict[str, Any]:
        response = as_a.request(method, path, content=body, headers={"content-type": "application/json"})
        return _error(response, 400)

    notes = f"/keys/{key}/sets/notes"
    _ok(as_a.put(notes, json={}))
    attempts = [
        ("PUT", f"/keys/{key}/sets/other", '{"dedup_threshold": NaN}', "NaN"),
        ("POST", notes + "/items", '{"items": ["x"], "metadatas": [{"score": {"deep": [Infinity]}}]}', "Infinity"),
        ("POST", notes + "/search", '{"query": "x", "filters": {"n": -Infinity}}', "-Infinity"),
        ("PUT", f"/keys/{key}/state/plan", '{"value": NaN}', "NaN"),
        ("PUT", f"/keys/{key}/state/plan", '{"value": {"a": [1, {"b": 1e999}]}}', "1e999"),
        ("PATCH", f"/keys/{key}/state", '{"values": {"plan.step": 1, "plan.score": Infinity}}', "Infinity"),
        ("POST", f"/threads/{key}/checkpoints", '{"checkpoint": {"step": [NaN]}}', "NaN"),
        ("POST", f"/keys/{key}/recall", '{"query": "x", "limit": NaN}', "NaN"),
        ("POST", f"/keys/{key}/remember", '{"messages": [{"content": "x"}], "timeout": Infinity}', "Infinity"),
    ]
    for method, path, body, token in attempts:
        error = send(method, path, body)
        assert (error["code"], error["field"]) == ("invalid_request", "body"), (path, error)
        assert token in error["message"], (path, error)
        assert "finite" in error["message"], (path, error)
    # Nothing of it was written: state was stored as null before.
    assert _ok(as_a.get(f"/keys/{key}/state")) == {"state": {}}
    assert _ok(as_a.get(notes + "/size")) == {"size": 0}
    assert _ok(as_a.get(f"/threads/{key}/checkpoints"))["checkpoints"] == []
    assert _error(as_a.get(f"/keys/{key}/sets/other"), 404)["code"] == "memory_set_not_found"


def test_the_error_table_of_the_docs_is_the_one_the_server_answers():
    doc = (Path(__file__).parents[2] / "docs" / "how-to" / "http.md").read_text()
    section = doc.split("## Errors", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| (\d{3}) \| `([a-z_]+)` \|", section, flags=re.MULTILINE))
    answered = {(str(status), code) for _, status, code in ERRORS}
    answered |= {(str(status), code) for status, code in HTTP_CODES.items()}
    answered.add((str(INTERNAL_ERROR[0]), INTERNAL_ERROR[1]))
    assert documented == answered


def test_it_refuses_to_serve_without_tokens_or_on_an_open_address_in_dev_mode(settings: Settings, tmp_path: Path):
    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        command = [CLI, "serve", *args]
        return subprocess.run(
            command, env=client_env(settings), cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )

    bare = serve()
    assert bare.returncode == 2
    assert "needs MEMORY_AUTH__TOKENS" in bare.stderr
    exposed = serve("--dev", "--host", "0.0.0.0")
    assert exposed.returncode == 2
    assert "loopback only" in exposed.stderr


def test_dev_mode_answers_only_requests_sent_to_its_own_address(settings: Settings, worker: Celery, tmp_path: Path):
    namespace = f"h-dev-{uuid.uuid4().hex[:8]}"
    state = f"/v1/namespaces/{namespace}/keys/alice/state"
    with _serving(settings, tmp_path, "--dev") as url, httpx.Client(base_url=url, timeout=60) as http:
        port = url.rsplit(":", 1)[1]
        # A page that rebinds its own name to 127.0.0.1 sends that name; another port is another server.
        for host in ("rebound.example", f"rebound.example:{port}", "127.0.0.1:1"):
            refused = http.put(state + "/plan", json={"value": "planted"}, headers={"host": host})
            error = _error(refused, 421)
            assert error["code"] == "misdirected_request"
            assert repr(host) in error["message"]
            assert _error(http.get("/healthz", headers={"host": host}), 421)["code"] == "misdirected_request"
        # A page of another origin, sending to the right address (a form posts without preflight).
        cross_site = http.put(state + "/plan", json={"value": "planted"}, headers={"origin": "http://evil.example"})
        assert _error(cross_site, 403)["code"] == "forbidden"
        assert _ok(http.get(state)) == {"state": {}}  # nothing was written
        for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
            _ok(http.get(state, headers={"host": host, "origin": f"http://{host}"}))


def test_dev_mode_serves_every_namespace_on_loopback_without_auth(settings: Settings, worker: Celery, tmp_path: Path):
    namespace = f"h-dev-{uuid.uuid4().hex[:8]}"
    with _serving(settings, tmp_path, "--dev") as url, httpx.Client(base_url=url, timeout=60) as http:
        notes = f"/v1/namespaces/{namespace}/keys/alice/sets/notes"
        _ok(http.put(notes, json={}))
        _ok(http.post(notes + "/items", json={"items": ["Alice prefers green tea"]}))
        receipt = _ok(http.delete(f"/v1/namespaces/{namespace}"))  # forget the whole namespace
        assert (receipt["namespace"], receipt["key"], receipt["items"]) == (namespace, None, 1)
        assert _error(http.get(notes), 404)["code"] == "memory_set_not_found"


def test_an_expiry_given_as_iso_text_is_taken(as_a: httpx.Client, key: str):
    notes = f"/keys/{key}/sets/notes"
    _ok(as_a.put(notes, json={}))
    at = "2099-01-02T03:04:05+00:00"
    stored = _ok(as_a.post(notes + "/items", json={"items": ["renew the lease"], "expires_at": at}))
    (item,) = _ok(as_a.get(notes + "/items", params={"id": stored["ids"][0]}))["items"]
    assert item["expires_at"].startswith("2099-01-02T03:04:05")
    naive = as_a.post(notes + "/items", json={"items": ["x"], "expires_at": "2099-01-02T03:04:05"})
    assert naive.status_code in (400, 422), naive.text
