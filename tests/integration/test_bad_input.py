"""Bad input is refused by the client with a clear error, before anything is enqueued."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from memory_core import AsyncMemoryClient, ChatMessage, InvalidRequestError, MemoryClient, MemorySet
from memory_core.client.admin import Admin
from memory_core.core.validation import MAX_TTL_SECONDS, short_repr

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


def test_bad_session_task_arguments_are_typed_errors_before_anything_is_enqueued(idle_client: MemoryClient):
    session = idle_client.session("tenant", "s")
    calls = {
        "model": lambda: session.fold(100, model="m" * 201, wait=False),
        "human_prefix": lambda: session.fold(100, prefixes=("h" * 65, "AI"), wait=False),
        "first": lambda: session.extract_entities(None, "0-1", wait=False),  # type: ignore[arg-type]
    }
    for field, call in calls.items():
        with pytest.raises(InvalidRequestError, match=field):
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


# -- every numeric argument of the client and the tiers -------------------------------------------------------------

NAN, INF = float("nan"), float("inf")
COUNT_BAD = [-1, 2**63, True, 2.5, NAN]
"""Out of range for any count: below every minimum, past every maximum (and int64), a bool, a float."""
SECONDS_BAD = [0, -1, 2**63, 10**400, True, NAN, INF, -INF, "5"]
"""Out of range for any duration: none, negative, past every maximum, past float range, a bool, not finite."""

Call = Callable[[Any], object]
"""Calls the API with the value under test as the argument under test."""


def _capacity(client: MemoryClient) -> Call:
    return lambda v: client.long_term("tenant", "k").get_or_create_memory_set("ok", capacity=v)


def _context_window(client: MemoryClient) -> Call:
    return lambda v: client.long_term("tenant", "k").get_or_create_memory_set("ok", context_window=v)


def _dedup_threshold(client: MemoryClient) -> Call:
    return lambda v: client.long_term("tenant", "k").get_or_create_memory_set("ok", dedup_threshold=v)


def _ttl_seconds(client: MemoryClient) -> Call:
    return lambda v: client.long_term("tenant", "k").get_or_create_memory_set("ok", ttl_seconds=v)


def _importance(client: MemoryClient) -> Call:
    return lambda v: client.long_term("tenant", "k").add(TEXT_SET, ["x"], importance=v)


def _item_ttl(client: MemoryClient) -> Call:
    return lambda v: client.long_term("tenant", "k").add(TEXT_SET, ["x"], ttl=v)


def _search_limit(client: MemoryClient) -> Call:
    return lambda v: client.long_term("tenant", "k").search(TEXT_SET, "q", limit=v)


def _compact_timeout(client: MemoryClient) -> Call:
    return lambda v: client.long_term("tenant", "k").compact(TEXT_SET, timeout=v)


def _receipt_timeout(client: MemoryClient) -> Call:
    receipt = client.long_term("tenant", "k").submit(TEXT_SET, ["x"])  # one task, queued before the snapshot
    return lambda v: receipt.wait(timeout=v)


def _recall_limit(client: MemoryClient) -> Call:
    return lambda v: client.recall("tenant", "k", "q", limit=v)


def _recall_token_budget(client: MemoryClient) -> Call:
    return lambda v: client.recall("tenant", "k", "q", token_budget=v)


def _short_term_ttl(client: MemoryClient) -> Call:
    return lambda v: client.short_term("tenant", "run", ttl=v)


def _short_term_path_ttl(client: MemoryClient) -> Call:
    def call(v: Any) -> None:
        # A clean exit persists what was buffered: a refused set must have buffered nothing, its parents
        # included, or they would be written now.
        with client.short_term("tenant", "run") as state, pytest.raises(InvalidRequestError) as raised:
            state.set("a.b", 1, ttl=v)
        raise raised.value

    return call


def _session_ttl(client: MemoryClient) -> Call:
    return lambda v: client.session("tenant", "s", ttl=v)


def _session_max_messages(client: MemoryClient) -> Call:
    return lambda v: client.session("tenant", "s", max_messages=v)


def _strategy(name: str) -> Callable[[MemoryClient], Call]:
    def prepare(client: MemoryClient) -> Call:
        return lambda v: getattr(client.session("tenant", "s"), name)(v)

    return prepare


def _fold_max_tokens(client: MemoryClient) -> Call:
    return lambda v: client.session("tenant", "s").fold(v)


def _history_last(client: MemoryClient) -> Call:
    return lambda v: client.session("tenant", "s").history.entries(last=v)


def _checkpoint_limit(client: MemoryClient) -> Call:
    return lambda v: client.checkpoints("tenant").list("t", limit=v)


def _backup_timeout(client: MemoryClient) -> Call:
    return lambda v: Admin(client).backup("b1", timeout=v)


NUMERIC_ARGUMENTS: list[tuple[str, str, Callable[[MemoryClient], Call], list[object]]] = [
    ("capacity", "capacity", _capacity, [0, *COUNT_BAD, 1_000_001]),
    ("context_window", "context_window", _context_window, [*COUNT_BAD, 17]),
    ("dedup_threshold", "dedup_threshold", _dedup_threshold, [0, -1, 2**63, 1.01, True, NAN, INF]),
    ("ttl_seconds", "ttl_seconds", _ttl_seconds, [0, *COUNT_BAD, MAX_TTL_SECONDS + 1]),
    ("add-importance", "importance", _importance, [-1, 2**63, 1.01, True, NAN, INF]),
    ("add-ttl", "ttl", _item_ttl, [0, *COUNT_BAD, MAX_TTL_SECONDS + 1]),
    ("search-limit", "limit", _search_limit, [0, *COUNT_BAD, 101]),
    ("compact-timeout", "timeout", _compact_timeout, SECONDS_BAD),
    ("receipt-timeout", "timeout", _receipt_timeout, SECONDS_BAD),
    ("recall-limit", "limit", _recall_limit, [0, *COUNT_BAD, 101]),
    ("recall-token_budget", "token_budget", _recall_token_budget, [0, *COUNT_BAD, 10_000_001]),
    ("short_term-ttl", "ttl", _short_term_ttl, [*COUNT_BAD, MAX_TTL_SECONDS + 1]),
    ("short_term-set-ttl", "ttl", _short_term_path_ttl, [*SECONDS_BAD, MAX_TTL_SECONDS + 1]),
    ("session-ttl", "ttl", _session_ttl, [*COUNT_BAD, MAX_TTL_SECONDS + 1]),
    ("session-max_messages", "max_messages", _session_max_messages, [0, 1, *COUNT_BAD, 1_000_001]),
    ("window-k", "k", _strategy("window"), [*COUNT_BAD, 500_001]),
    ("entity-k", "k", _strategy("entity"), [*COUNT_BAD, 500_001]),
    ("vector-k", "k", _strategy("vector"), [0, *COUNT_BAD, 101]),
    ("token_buffer-max_tokens", "max_tokens", _strategy("token_buffer"), [0, *COUNT_BAD, 10_000_001]),
    ("summary-max_tokens", "max_tokens", _strategy("summary"), [0, *COUNT_BAD, 10_000_001]),
    ("fold-max_tokens", "max_tokens", _fold_max_tokens, [*COUNT_BAD, 10_000_001]),
    ("history-last", "last", _history_last, [*COUNT_BAD, 1_000_001]),
    ("checkpoints-limit", "limit", _checkpoint_limit, [0, *COUNT_BAD, 1_000_001]),
    ("backup-timeout", "timeout", _backup_timeout, SECONDS_BAD),
]


def _value_id(value: object) -> str:
    return "huge-int" if isinstance(value, int) and value.bit_length() > 64 else repr(value)


def _written(client: MemoryClient) -> set[bytes]:
    """The idle deployment's keys in Redis (caches, state, queues), but the phantom worker's heartbeats."""
    keys = client.dispatcher_redis.scan_iter(match=f"{client.settings.redis.key_prefix}*", count=1000)
    return {key for key in keys if b"!ops" not in key}


def _names_it(raised: pytest.ExceptionInfo[InvalidRequestError], argument: str, value: object) -> None:
    message = str(raised.value)
    assert argument in message.replace(":", " ").split() or f"{argument} " in message, message
    assert short_repr(value) in message, message


@pytest.mark.parametrize(
    ("argument", "prepare", "value"),
    [
        pytest.param(argument, prepare, value, id=f"{case}-{_value_id(value)}")
        for case, argument, prepare, values in NUMERIC_ARGUMENTS
        for value in values
    ],
)
def test_every_numeric_argument_out_of_range_is_refused_naming_it_with_nothing_written_or_sent(
    idle_client: MemoryClient, argument: str, prepare: Callable[[MemoryClient], Call], value: object
):
    call = prepare(idle_client)
    written, queued = _written(idle_client), _queued(idle_client)
    with pytest.raises(InvalidRequestError) as raised:
        call(value)
    _names_it(raised, argument, value)
    assert _written(idle_client) == written
    assert _queued(idle_client) == queued


def test_the_numeric_argument_checks_see_what_is_written_and_sent(idle_client: MemoryClient):
    # Guards the test above: an accepted value of the same calls shows up in the key and task counts.
    written, queued = _written(idle_client), _queued(idle_client)
    with idle_client.short_term("tenant", "run") as state:
        state.set("a.b", 1, ttl=60)
    idle_client.long_term("tenant", "k").add(TEXT_SET, ["x"], importance=1, ttl=60, wait=False)
    assert len(_written(idle_client)) > len(written)
    assert _queued(idle_client) == queued + 1


def test_the_asyncio_client_runs_the_same_checks(idle_client: MemoryClient):
    async def scenario() -> list[str]:
        async with AsyncMemoryClient(idle_client.settings) as client:
            memory = client.long_term("tenant", "k")
            receipt = await memory.submit(TEXT_SET, ["x"])
            calls: list[Callable[[], Any]] = [
                lambda: memory.get_or_create_memory_set("ok", capacity=2**63),
                lambda: memory.get_or_create_memory_set("ok", ttl_seconds=MAX_TTL_SECONDS + 1),
                lambda: memory.search(TEXT_SET, "q", limit=True),
                lambda: memory.compact(TEXT_SET, timeout=NAN),
                lambda: receipt.wait(timeout=-1),
                lambda: client.recall("tenant", "k", "q", token_budget=2**63),
                lambda: client.session("tenant", "s").entries(last=-1),
                lambda: client.session("tenant", "s").fold(True),
                lambda: client.checkpoints("tenant").list("t", limit=0),
            ]
            messages = []
            for call in calls:
                with pytest.raises(InvalidRequestError) as raised:
                    await call()
                messages.append(str(raised.value))
            return messages

    def state() -> set[bytes]:  # the deployment's keys but its queues (the submit's task is in one)
        return {key for key in _written(idle_client) if key.startswith(b"mcidle:")}

    queued, written = _queued(idle_client), state()
    messages = asyncio.run(scenario())
    expected = ["capacity", "ttl_seconds", "limit", "timeout", "timeout", "token_budget", "last", "max_tokens", "limit"]
    assert all(name in message for name, message in zip(expected, messages, strict=True)), messages
    assert state() == written
    assert _queued(idle_client) == queued + 1  # the submit above, and nothing else
