"""Values planted in Redis under memory-core's own keys fail one call, typed, and tell the truth about why.

Anyone with access to Redis (or a bug, or a truncated write) can leave a value memory-core never
wrote; reading it back must fail that call with ``CorruptDataError``, never crash or hang the
process, and never claim Redis is unavailable (which tells callers to retry).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from celery import Celery

from memory_core import InvalidRequestError, MemoryClient
from memory_core.client.deadletters import DeadLetters
from memory_core.core.errors import BrokerUnavailable, CorruptDataError
from memory_core.core.settings import Settings

_DEEP = 100_000  # past the interpreter's recursion limit
PLANTED: dict[str, bytes] = {
    "deeply nested JSON": b"[" * _DEEP + b"]" * _DEEP,
    "nested objects past the depth bound": b'{"a":' * 300 + b"1" + b"}" * 300,
    "invalid UTF-8": b"\xff\xfe\x00garbage",
    "a number past int's digit limit": b"9" * 5000,
    "a JSON list instead of an object": b"[1, 2, 3]",
    "truncated JSON": b'{"thread_id": "t",',
}


@pytest.fixture
def client(settings: Settings) -> Iterator[MemoryClient]:
    with MemoryClient(settings) as memory_client:
        yield memory_client


@pytest.fixture
def raw_redis(settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(settings.redis.url)


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_checkpoint_fails_get_and_list_typed(client: MemoryClient, raw_redis: redis.Redis, case: str):
    saver = client.checkpoints("planted")
    saver.put("t", {"step": 1}, checkpoint_id="c1")
    data, _ = client.keys.checkpoints("planted", "t", "n")  # "" encodes to "n"
    raw_redis.hset(data, "c1", PLANTED[case])
    with pytest.raises(CorruptDataError, match="checkpoint 'c1'"):
        saver.get("t")
    with pytest.raises(CorruptDataError, match="checkpoint 'c1'"):
        saver.list("t")
    saver.put("t", {"step": 2}, checkpoint_id="c1", parent_id="c0")  # a write replaces it; the tier serves on
    assert saver.get("t", "c1").checkpoint == {"step": 2}  # type: ignore[union-attr]


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_short_term_field_fails_the_load_typed(client: MemoryClient, raw_redis: redis.Redis, case: str):
    with client.short_term("planted", "k") as state:
        state.set("a", 1)
    raw_redis.hset(client.keys.short_term("planted", "k"), "a", PLANTED[case])
    with pytest.raises(CorruptDataError, match="short-term field 'a'"), client.short_term("planted", "k") as state:
        state.get("a")


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_profile_fails_the_read_typed(client: MemoryClient, raw_redis: redis.Redis, case: str):
    raw_redis.set(client.keys.profile("planted", "u1"), PLANTED[case])
    with pytest.raises(CorruptDataError, match="profile 'u1'"):
        client.profile("planted", "u1").get()


def test_a_key_of_another_type_is_corrupt_data_not_an_outage(client: MemoryClient, raw_redis: redis.Redis):
    saver = client.checkpoints("planted")
    _, order = client.keys.checkpoints("planted", "t", "n")
    raw_redis.set(order, b"not a sorted set")
    with pytest.raises(CorruptDataError, match="another type") as raised:
        saver.list("t")
    assert not isinstance(raised.value, BrokerUnavailable)


@pytest.mark.parametrize("limit", [2**63, 10**7, 0, -1, 2.5, True])
def test_a_checkpoint_limit_out_of_range_is_bad_input(client: MemoryClient, limit: object):
    saver = client.checkpoints("planted")
    saver.put("t", {"step": 1})
    with pytest.raises(InvalidRequestError, match=rf"limit must be an int from 1 to 1000000, got {limit!r}"):
        saver.list("t", limit=limit)  # type: ignore[arg-type]  # the point of the test


@pytest.fixture
def served(settings: Settings, worker: Celery) -> Iterator[MemoryClient]:
    """A client with the session's worker behind it (for reads that fall back to the store)."""
    with MemoryClient(settings) as memory_client:
        yield memory_client


def _plant_all(raw_redis: redis.Redis, pattern: str, value: bytes) -> int:
    """Overwrites every key matching ``pattern`` with ``value``; returns how many there were."""
    keys = list(raw_redis.scan_iter(match=pattern, count=1000))
    for key in keys:
        raw_redis.set(key, value, keepttl=True)
    return len(keys)


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_session_entry_fails_the_read_typed_and_clear_recovers(
    client: MemoryClient, raw_redis: redis.Redis, case: str
):
    session = client.session("planted", "s1", promote="none")
    session.history.add_user_message("hello")
    raw_redis.xadd(session.keys.messages, {"m": PLANTED[case]})
    with pytest.raises(CorruptDataError, match="session entry '"):
        session.history.entries()
    with pytest.raises(CorruptDataError, match="session entry '"):
        session.buffer().load({"input": "x"})
    session.history.clear()  # the tier serves on once the value is gone
    session.history.add_user_message("again")
    assert [e.content for e in session.history.entries()] == ["again"]


def test_a_session_entry_without_its_message_field_fails_typed(client: MemoryClient, raw_redis: redis.Redis):
    session = client.session("planted", "s1", promote="none")
    raw_redis.xadd(session.keys.messages, {"other": b"{}"})
    with pytest.raises(CorruptDataError, match="session entry '"):
        session.history.entries()


@pytest.mark.parametrize(
    "planted",
    [{"folded_messages": b"9" * 5000}, {"folded_tokens": b"many"}, {"summary": b"\xff\xfe"}, {"cursor": b"\xc3"}],
    ids=["huge-count", "no-number", "summary-not-utf8", "cursor-not-utf8"],
)
def test_a_planted_summary_state_fails_typed(client: MemoryClient, raw_redis: redis.Redis, planted: dict[str, bytes]):
    session = client.session("planted", "s1", promote="none")
    raw_redis.hset(session.keys.state, mapping=planted)  # type: ignore[arg-type]  # bytes values are fine
    with pytest.raises(CorruptDataError, match="summary state"):
        session.summary_state()


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_cached_definition_is_a_miss_and_the_add_still_lands(
    served: MemoryClient, settings: Settings, raw_redis: redis.Redis, namespace: str, case: str
):
    served.long_term(namespace, "k").get_or_create_memory_set("notes", dedup="none")
    prefix = settings.redis.key_prefix
    assert _plant_all(raw_redis, f"{prefix}:{namespace}:setdef:*", PLANTED[case]) == 1
    with MemoryClient(settings) as fresh:  # another process: nothing in its own L1
        notes = fresh.long_term(namespace, "k")
        ids = notes.add("notes", ["Alice prefers green tea"])
        assert [item.value for item in notes.get("notes", ids)] == ["Alice prefers green tea"]
        assert fresh.definitions.get(namespace, "k", "notes") is not None  # re-cached from the worker's answer


@pytest.mark.parametrize("case", list(PLANTED))
def test_planted_cached_items_and_searches_are_misses_and_reads_answer_from_the_store(
    served: MemoryClient, settings: Settings, raw_redis: redis.Redis, namespace: str, case: str
):
    notes = served.long_term(namespace, "k").get_or_create_memory_set("notes", dedup="none")
    ids = notes.add(["Alice prefers green tea", "Bob drinks coffee"])
    expected_items = [item.value for item in notes.get(ids)]
    expected_hits = [item.id for item in notes.search("what does Alice drink?", limit=2)]
    prefix = settings.redis.key_prefix
    assert _plant_all(raw_redis, f"{prefix}:{namespace}:item:*", PLANTED[case]) == 2
    assert _plant_all(raw_redis, f"{prefix}:{namespace}:search:*", PLANTED[case]) == 1
    with MemoryClient(settings) as fresh:
        again = fresh.long_term(namespace, "k")
        assert [item.value for item in again.get("notes", ids)] == expected_items
        assert [item.id for item in again.search("notes", "what does Alice drink?", limit=2)] == expected_hits


@pytest.mark.parametrize("planted", [b"9" * 5000, b"\xff", b"1_000", b" 7 ", "٣".encode(), b"", b"1e3"])
def test_a_planted_set_version_fails_the_cached_read_typed(
    served: MemoryClient, settings: Settings, raw_redis: redis.Redis, namespace: str, planted: bytes
):
    notes = served.long_term(namespace, "k").get_or_create_memory_set("notes", dedup="none")
    ids = notes.add(["Alice prefers green tea"])
    raw_redis.set(served.keys.set_version(namespace, "k", "notes"), planted)
    with pytest.raises(CorruptDataError, match="the version of set .* not a 64-bit integer"):
        notes.get(ids)


@pytest.mark.parametrize("planted", [b"\xff", b"many", b"9" * 5000, b"1_0"])
def test_planted_usage_counters_fail_usage_typed(client: MemoryClient, raw_redis: redis.Redis, planted: bytes):
    raw_redis.hset(client.keys.usage("planted"), mapping={"input_tokens": b"5", "calls": planted})
    with pytest.raises(CorruptDataError, match="usage counters of 'planted', field 'calls'"):
        client.usage("planted")


@pytest.mark.parametrize("case", [*PLANTED, "an object of other fields"])
def test_a_malformed_dead_letter_fails_the_listing_typed_and_drop_clears_it(
    client: MemoryClient, raw_redis: redis.Redis, case: str
):
    letters = DeadLetters(client.dispatcher_redis, client.keys, client.dispatcher)
    entry = PLANTED.get(case, b'{"task": 5, "unexpected": true}')
    raw_redis.rpush(client.keys.dead_letters("planted"), entry)
    raw_redis.sadd(client.keys.dead_letter_namespaces(), "planted")
    assert letters.namespaces() == ["planted"]
    with pytest.raises(CorruptDataError, match="a dead letter of 'planted'"):
        letters.entries("planted")
    with pytest.raises(CorruptDataError, match="a dead letter of 'planted'"):
        letters.replay("planted")
    assert letters.drop("planted") == 1
    assert letters.entries("planted") == []
    assert letters.namespaces() == []
