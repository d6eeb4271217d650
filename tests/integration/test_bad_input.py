"""Bad input is refused by the client with a clear error, before anything is enqueued."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from memory_core import ChatMessage, InvalidRequestError, MemoryClient, MemorySet
from memory_core.core.validation import MAX_TTL_SECONDS

from .conftest import make_settings
from .waiting import phantom_worker, queued_tasks


@pytest.fixture
def idle_client(redis_url: str, tmp_path: Path) -> Iterator[MemoryClient]:
    """A client whose broker has no worker, so queued messages stay countable.

    It shares the test Redis DB (flushed before each test) under a key prefix no worker consumes: its
    queues are ``mcidle/...``, apart from the session worker's, and no other DB is touched.
    """
    overrides: dict[str, object] = {
        "redis": {"url": redis_url, "key_prefix": "mcidle"},
        "limits": {"max_items_per_call": 10},
        "client": {"timeout": 1},  # a call that gets through waits for no worker: fail fast, not in 30 s
    }
    settings = make_settings(redis_url, tmp_path, **overrides)
    with MemoryClient(settings) as client, phantom_worker(settings):
        yield client


def _queued(client: MemoryClient) -> int:
    return queued_tasks(redis.Redis.from_url(client.settings.broker_url), client.settings)


TEXT_SET = MemorySet(name="notes", item_type=str)
CHAT_SET = MemorySet(name="chat", item_type=ChatMessage)

BAD_ADDS = [
    pytest.param(TEXT_SET, "just a string", {}, "list of values", id="items-is-a-str"),
    pytest.param(TEXT_SET, ["x"] * 11, {}, "at most 10", id="too-many-items"),
    pytest.param(TEXT_SET, [""], {}, "item 0 is '': empty or only whitespace", id="empty-item"),
    pytest.param(TEXT_SET, ["ok", " \n\t "], {}, "item 1 is .*: empty or only whitespace", id="blank-item"),
    pytest.param(CHAT_SET, [ChatMessage(content="  ")], {}, "item 0 has no content and no tool calls", id="blank-chat"),
    pytest.param(TEXT_SET, ["x" * 32_001], {}, "32001 characters", id="oversize-value"),
    pytest.param(TEXT_SET, [42], {}, "int 42", id="int-value"),
    pytest.param(TEXT_SET, ["bad \ud800 surrogate"], {}, "UTF-8", id="lone-surrogate"),
    pytest.param(CHAT_SET, ["plain"], {}, "holds ChatMessage", id="str-in-chat-set"),
    pytest.param(TEXT_SET, ["a", "b"], {"ids": ["only-one"]}, "1 ids for 2 items", id="ids-wrong-length"),
    pytest.param(TEXT_SET, ["a"], {"ids": [""]}, "item id", id="empty-id"),
    pytest.param(TEXT_SET, ["a"], {"metadatas": [{}, {}]}, "2 metadatas for 1 items", id="metadatas-wrong-length"),
    pytest.param(TEXT_SET, ["a"], {"metadatas": [{"x": float("nan")}]}, "finite", id="nan-metadata"),
    pytest.param(TEXT_SET, ["a"], {"metadatas": [{"x": float("inf")}]}, "finite", id="inf-metadata"),
    pytest.param(TEXT_SET, ["a"], {"metadatas": [{1: "x"}]}, "keys must be str", id="int-metadata-key"),
    pytest.param(TEXT_SET, ["a"], {"metadatas": [{"x": object()}]}, "JSON value", id="object-metadata"),
    pytest.param(
        TEXT_SET, ["a"], {"metadatas": [{"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}]}, "deeper", id="deep-metadata"
    ),
    pytest.param(TEXT_SET, ["a"], {"metadatas": [{"x": "y" * 20_000}]}, "bytes as JSON", id="huge-metadata"),
    pytest.param(TEXT_SET, ["a"], {"metadatas": [{"n": 10**30}]}, r"metadatas\[0\]\.n is 10{30}; ints", id="huge-int"),
    pytest.param(TEXT_SET, ["a"], {"metadatas": [{"a": [{"b": -(2**63) - 1}]}]}, r"\.a\[0\]\.b is -9", id="deep-int"),
    pytest.param(TEXT_SET, ["a"], {"ttl": 10**12}, "ttl of item 0 is 1000000000000; expected an int", id="huge-ttl"),
    pytest.param(TEXT_SET, ["a"], {"ttl": MAX_TTL_SECONDS + 1}, f"from 1 to {MAX_TTL_SECONDS}", id="ttl-past-max"),
    pytest.param(TEXT_SET, ["a", "b"], {"ttl": [60, 10**12]}, "ttl of item 1 is 1000000000000", id="huge-ttl-list"),
    pytest.param(TEXT_SET, ["a"], {"ttl": 0}, "ttl of item 0 is 0", id="zero-ttl"),
    pytest.param(TEXT_SET, ["a"], {"ttl": True}, "ttl of item 0 is True", id="bool-ttl"),
    pytest.param(TEXT_SET, ["a"], {"ttl": 60.0}, "ttl of item 0 is 60.0", id="float-ttl"),
    pytest.param(TEXT_SET, ["a"], {"importance": True}, "importance of item 0 is True", id="bool-importance"),
    pytest.param(TEXT_SET, ["a"], {"importance": "0.5"}, "importance of item 0 is '0.5'", id="str-importance"),
    pytest.param(TEXT_SET, ["a"], {"importance": float("nan")}, "importance of item 0 is nan", id="nan-importance"),
    pytest.param(TEXT_SET, ["a"], {"importance": 1.5}, "importance of item 0 is 1.5", id="importance-above-1"),
    pytest.param(TEXT_SET, ["a"], {"pinned": "yes"}, "pinned of item 0 is 'yes'; expected a bool", id="str-pinned"),
    pytest.param(TEXT_SET, ["a"], {"pinned": 1}, "pinned of item 0 is 1", id="int-pinned"),
    pytest.param(TEXT_SET, ["a"], {"source": 5}, "source of item 0 is 5; expected a str", id="int-source"),
    pytest.param(TEXT_SET, ["a"], {"source": "x\ud800"}, "source of item 0 is not valid UTF-8", id="surrogate-source"),
    pytest.param(TEXT_SET, ["a"], {"source": "s" * 201}, "at most 200", id="long-source"),
    pytest.param(
        TEXT_SET, ["a"], {"expires_at": datetime(2100, 1, 1)}, "expires_at of item 0 .* has no timezone", id="naive"
    ),
    pytest.param(
        TEXT_SET,
        ["a"],
        {"expires_at": datetime.max.replace(tzinfo=UTC)},
        "expires_at of item 0 is 9999-12-31.*; expected at most",
        id="expires-at-max",
    ),
    pytest.param(TEXT_SET, ["a"], {"expires_at": "2030-01-01"}, "expected an aware datetime", id="str-expires-at"),
    pytest.param(TEXT_SET, ["a"], {"ttl": 60, "expires_at": datetime.now(UTC)}, "both ttl and expires_at", id="both"),
]


@pytest.mark.parametrize(("memory_set", "items", "extra", "message"), BAD_ADDS)
def test_bad_adds_raise_before_anything_is_enqueued(idle_client: MemoryClient, memory_set, items, extra, message):
    ltm = idle_client.long_term("tenant", "k")
    with pytest.raises(InvalidRequestError, match=message):
        ltm.add(memory_set, items, **extra)
    assert _queued(idle_client) == 0


BAD_SEARCHES = [
    pytest.param("", 5, None, "non-empty", id="empty-query"),
    pytest.param("q", 0, None, "limit", id="zero-limit"),
    pytest.param("q", 101, None, "limit", id="limit-too-high"),
    pytest.param("q", True, None, "limit", id="bool-limit"),
    pytest.param("q" * 4001, 5, None, "4001 characters", id="oversize-query"),
    pytest.param("q", 5, {"a.b": "x"}, "filter key", id="dotted-filter-key"),
    pytest.param("q", 5, {"a": 1.5}, "not a str or int", id="float-filter"),
    pytest.param("q", 5, {"a": True}, "bool filters are not supported", id="bool-filter"),
    pytest.param("q", 5, {"a": []}, "empty list", id="empty-filter-list"),
    pytest.param("q", 5, {"source\n": "x"}, r"filter key 'source\\n'", id="newline-filter-key"),
    pytest.param("q", 5, {"source": "x\ud800"}, r"'x\\ud800' is not valid UTF-8", id="surrogate-filter"),
    pytest.param("q", 5, {"n": 10**30}, "outside the signed 64-bit range", id="huge-int-filter"),
    pytest.param("q", 5, "source", "filters is str 'source'; expected a dict", id="filters-is-a-str"),
    pytest.param("q", 5, [("a", "b")], "filters is list", id="filters-is-a-list"),
]


@pytest.mark.parametrize(("query", "limit", "filters", "message"), BAD_SEARCHES)
def test_bad_searches_raise_before_anything_is_enqueued(idle_client: MemoryClient, query, limit, filters, message):
    with pytest.raises(InvalidRequestError, match=message):
        idle_client.long_term("tenant", "k").search("notes", query, limit=limit, filters=filters)
    assert _queued(idle_client) == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "a:b"}, "memory set name"),
        ({"name": "ok", "capacity": 0}, "capacity"),
        ({"name": "ok", "item_type": int}, "item_type"),
        # One rule at the public boundary: numbers are never read from strings, nor cut from floats.
        ({"name": "ok", "capacity": "10"}, r"capacity: Input should be a valid integer \(got '10'\)"),
        ({"name": "ok", "capacity": 10.0}, r"capacity: Input should be a valid integer \(got 10.0\)"),
        ({"name": "ok", "capacity": True}, "capacity"),
        ({"name": "ok", "ttl_seconds": "60"}, "ttl_seconds"),
        ({"name": "ok", "dedup_threshold": "0.9"}, "dedup_threshold"),
        ({"name": "ok", "context_window": "2"}, "context_window"),
    ],
)
def test_bad_set_definitions_raise_before_anything_is_enqueued(idle_client: MemoryClient, kwargs, message):
    with pytest.raises(InvalidRequestError, match=message):
        idle_client.long_term("tenant", "k").get_or_create_memory_set(**kwargs)
    assert _queued(idle_client) == 0


def test_bad_ids_in_get_and_delete_raise_before_anything_is_enqueued(idle_client: MemoryClient):
    ltm = idle_client.long_term("tenant", "k")
    for call in (lambda: ltm.get("notes", "abc"), lambda: ltm.delete("notes", ["x" * 129])):
        with pytest.raises(InvalidRequestError):
            call()
    assert _queued(idle_client) == 0


def test_the_idle_client_counts_what_it_enqueues(idle_client: MemoryClient):
    # Guards every "nothing enqueued" above: a valid add must show up in the count, so it is not drained.
    idle_client.long_term("tenant", "k").add(TEXT_SET, ["fine"], wait=False)
    assert _queued(idle_client) == 1


@pytest.mark.parametrize("ttl", [10**17, MAX_TTL_SECONDS + 1, -1, True, 1.5])
def test_bad_short_term_and_session_ttls_are_refused_naming_the_value(idle_client: MemoryClient, ttl):
    with pytest.raises(InvalidRequestError, match=rf"ttl must be an int of seconds from 0 to {MAX_TTL_SECONDS}"):
        idle_client.short_term("tenant", "run", ttl=ttl)
    with pytest.raises(InvalidRequestError, match=rf"ttl must be an int of seconds from 0 to {MAX_TTL_SECONDS}"):
        idle_client.session("tenant", "s", ttl=ttl)
    assert _queued(idle_client) == 0


def test_values_at_the_edges_of_every_bound_are_stored_and_returned_exactly(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "k").get_or_create_memory_set("notes", dedup="none")
    latest = datetime.now(UTC) + timedelta(seconds=MAX_TTL_SECONDS - 60)
    metadata = {"hi": 2**63 - 1, "lo": -(2**63), "nested": [{"n": 2**62}], "f": 1e308}
    ids = notes.add(["a", "b", "c"], ids=["a", "b", "c"], metadatas=[metadata, {}, {}])
    notes.add(["b"], ids=["b"], ttl=MAX_TTL_SECONDS, importance=1, pinned=True, source="s" * 200)
    notes.add(["c"], ids=["c"], expires_at=latest, importance=0.0)
    got = {item.id: item for item in notes.get(ids)}
    assert got["a"].additional_metadata == metadata
    created = got["b"].created_time
    assert isinstance(created, datetime)  # a range only for compaction summaries
    assert got["b"].expires_at == created + timedelta(seconds=MAX_TTL_SECONDS)
    assert (got["b"].importance, got["b"].pinned, got["b"].source) == (1.0, True, "s" * 200)
    assert got["c"].expires_at == latest
    assert [i.id for i in notes.search("a", filters={"hi": 2**63 - 1})] == ["a"]
    assert [i.id for i in notes.search("a", filters={"lo": [-(2**63), 5]})] == ["a"]
