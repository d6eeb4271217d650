"""Bad input is refused by the client with a clear error, before anything is enqueued."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memory_core import ChatMessage, InvalidRequestError, MemoryClient, MemorySet

from .conftest import make_settings
from .waiting import queued_tasks


@pytest.fixture
def idle_client(redis_url: str, tmp_path: Path) -> Iterator[MemoryClient]:
    """A client whose broker has no worker (another Redis DB), so queued messages stay countable."""
    idle_url = redis_url.rsplit("/", 1)[0] + "/14"
    redis.Redis.from_url(idle_url).flushdb()
    with MemoryClient(make_settings(idle_url, tmp_path, limits={"max_items_per_call": 10})) as client:
        yield client
    redis.Redis.from_url(idle_url).flushdb()


def _queued(client: MemoryClient) -> int:
    return queued_tasks(redis.Redis.from_url(client.settings.broker_url), client.settings)


TEXT_SET = MemorySet(name="notes", item_type=str)
CHAT_SET = MemorySet(name="chat", item_type=ChatMessage)

BAD_ADDS = [
    pytest.param(TEXT_SET, "just a string", {}, "list of values", id="items-is-a-str"),
    pytest.param(TEXT_SET, ["x"] * 11, {}, "at most 10", id="too-many-items"),
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
