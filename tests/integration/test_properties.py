"""Property-based bad input: over the public API (nothing enqueued on error) and raw broker messages (the
worker survives, answers or keeps them, and no other tenant is touched)."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memory_core import InvalidRequestError, LongTermMemory, MemoryClient, MemorySet, ReplyTimeout
from memory_core.core import routing
from memory_core.core.validation import MAX_TTL_SECONDS

from .conftest import make_settings
from .rawbroker import publish_raw
from .waiting import phantom_worker, queued_tasks, wait_for

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40)
)
json_like = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)
values = st.one_of(st.text(max_size=200), st.integers(), st.floats(), st.binary(max_size=20), st.none(), json_like)


@pytest.fixture(scope="module")
def idle(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryClient]:
    """A client whose broker has no worker, so anything it enqueues stays countable.

    Same test DB, but a key prefix no worker consumes (its queues are ``mcidle/...``), so no other DB is
    touched. A call that gets through waits for no one: a short timeout makes that fail fast.
    """
    overrides: dict[str, object] = {"redis": {"url": redis_url, "key_prefix": "mcidle"}, "client": {"timeout": 0.1}}
    settings = make_settings(redis_url, tmp_path_factory.mktemp("idle"), **overrides)
    with MemoryClient(settings) as client, phantom_worker(settings):
        yield client


def _queued(client: MemoryClient) -> int:
    return queued_tasks(redis.Redis.from_url(client.settings.broker_url), client.settings)


def _finite(value: object) -> bool:
    """Whether every number in ``value`` is one the stores keep exactly: a finite float, a 64-bit int."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return -(2**63) <= value < 2**63
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


@PROPERTY
@given(namespace=st.text(max_size=80), key=st.text(max_size=140))
def test_any_namespace_and_key_is_accepted_or_refused_cleanly(idle: MemoryClient, namespace: str, key: str):
    try:
        ltm = idle.long_term(namespace, key)
    except InvalidRequestError:
        return
    assert ":" not in ltm.namespace + ltm.key
    assert "*" not in ltm.namespace + ltm.key
    assert ltm.namespace.strip(".")


@PROPERTY
@given(items=st.lists(values, max_size=5), metadata=st.lists(json_like, max_size=5))
def test_any_add_is_accepted_or_refused_with_nothing_enqueued(
    idle: MemoryClient, items: list[Any], metadata: list[Any]
):
    before = _queued(idle)
    metadatas = metadata if len(metadata) == len(items) else None
    try:
        idle.long_term("tenant", "k").add(MemorySet(name="notes"), items, metadatas=metadatas, wait=False)
    except InvalidRequestError:
        assert _queued(idle) == before
        return
    assert all(isinstance(i, str) for i in items)
    assert metadatas is None or all(isinstance(m, dict) and _finite(m) for m in metadatas)
    assert _queued(idle) == before + (1 if items else 0)


raw_requests = st.one_of(
    json_like,
    st.fixed_dictionaries(
        {"v": st.sampled_from([1, 2, "1", None]), "namespace": st.text(max_size=10), "key": st.text(max_size=10)},
        optional={"set_name": st.text(max_size=10), "items": json_like},
    ),
)


@PROPERTY
@given(request=raw_requests)
def test_raw_add_messages_never_write_and_never_stop_the_worker(client: MemoryClient, namespace: str, request):
    try:
        json.dumps(request, allow_nan=False)
    except ValueError:
        return  # not JSON at all: kombu refuses to serialize it before it reaches the broker
    probe = client.long_term(namespace, "probe").get_or_create_memory_set("probe", dedup="none")
    before = probe.get()
    publish_raw(client.settings, routing.ADD, {"request": request})
    probe.add(["alive"])  # the worker still answers on the same queue
    after = probe.get()
    assert after[: len(before)] == before
    assert [i.value for i in after[len(before) :]] == ["alive"]  # and nothing of the junk landed here


def test_after_a_flood_of_raw_junk_the_worker_serves_and_the_bystander_is_untouched(
    client: MemoryClient, namespace: str, raw_redis
):
    bystander = client.long_term(namespace, "bystander").get_or_create_memory_set("notes")
    bystander.add(["untouched"], ids=["b"])
    junk: list[dict[str, Any]] = [
        {"request": None},
        {"request": {"namespace": namespace, "key": "bystander", "set_name": "notes", "v": 2, "items": []}},
        {"request": {"namespace": namespace, "key": "bystander", "set_name": "notes", "v": 1, "items": [{"id": "x"}]}},
        {"request": {"namespace": "*", "key": "bystander", "set_name": "notes", "v": 1, "items": []}},
        {"request": {"namespace": namespace, "key": "../bystander", "set_name": "notes", "v": 1, "items": []}},
        {"unexpected": "argument"},
    ]
    for kwargs in junk:
        publish_raw(client.settings, routing.ADD, kwargs)
    bystander.add(["still served"], ids=["c"])  # behind the junk on the same queue
    assert [i.value for i in bystander.get()] == ["untouched", "still served"]

    def letters() -> int:
        routable = raw_redis.llen(client.keys.dead_letters(namespace))
        return int(routable) + int(raw_redis.llen(client.keys.unroutable_dead_letters()))

    # Kept for inspection: what is not our message's shape, what names no namespace to answer to, and a
    # schema version this worker does not know (replayable after an upgrade). A request that names this
    # namespace but fails validation is its caller's mistake, told to the caller: never a dead letter.
    wait_for(lambda: letters() == 4)
    assert raw_redis.llen(client.keys.dead_letters(namespace)) == 1  # the newer schema version


# -- the public add/get/search round trip ---------------------------------------------------------------------
# Through the real client and worker: whatever add() accepts is stored and returned exactly (same types all the
# way down), and whatever it refuses raises InvalidRequestError with nothing enqueued (counted on the idle
# client, which validates the same way but whose queue no worker drains). Valid input is drawn most of the
# time, so both sides of the invariant get examples.

ROUND_TRIP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FROM_METADATA = "<filter on a stored metadata value>"


def _mostly(good: st.SearchStrategy[Any], *bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` five times in six, else one of ``bad`` (one_of(good, good, ...) would not weigh: it deduplicates)."""
    return st.integers(0, 5).flatmap(lambda pick: good if pick else st.one_of(*bad))


good_text = st.text(max_size=12)  # hypothesis leaves out lone surrogates unless asked
surrogate_text = st.tuples(good_text, st.characters(categories=["Cs"]), good_text).map("".join)
int64s = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([2**63 - 1, -(2**63), 0])
wide_ints = st.integers(2**63, 2**65) | st.integers(-(2**65), -(2**63) - 1) | st.sampled_from([10**30, -(10**30)])


def _json(leaves: st.SearchStrategy[Any], keys: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    values = st.recursive(
        leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3), max_leaves=6
    )
    return st.dictionaries(keys, values, max_size=4)


# Floats of at most 15 significant digits: the embedded engine returns about one float in ten with more digits
# 1 ULP off (see test_metadata_floats_come_back_bit_for_bit), which is not what this property is about.
short_floats = st.builds(lambda m, k: m / 10**k, st.integers(-(10**15), 10**15), st.integers(0, 15))
good_leaves = st.one_of(st.none(), st.booleans(), int64s, short_floats, st.sampled_from([-0.0, 1e308]), good_text)
bad_leaves = st.one_of(wide_ints, st.sampled_from([math.nan, math.inf, -math.inf]), surrogate_text)
meta_keys = st.sampled_from(["n", "tag", "k\n", ""]) | good_text
good_metadatas = _json(good_leaves, meta_keys)
metadatas = _mostly(
    good_metadatas,
    # one bad value (at the top, or nested) or one bad key in otherwise good metadata
    st.builds(lambda m, k, v: {**m, k: v}, good_metadatas, meta_keys, bad_leaves | st.lists(bad_leaves, min_size=1)),
    st.builds(lambda m, k, v: {**m, "nested": [{k: v}]}, good_metadatas, meta_keys, bad_leaves),
    st.builds(lambda m, k, v: {**m, k: v}, good_metadatas, surrogate_text, good_leaves),
)

offsets = st.integers(60, MAX_TTL_SECONDS - 3600) | st.integers(-(MAX_TTL_SECONDS - 3600), -60)
far_offsets = st.integers(MAX_TTL_SECONDS + 3600, 3 * MAX_TTL_SECONDS).map(lambda s: s * (1 if s % 2 else -1))
zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])


def _expiry(seconds: int, zone: timezone | None) -> datetime:
    moment = datetime.now(UTC) + timedelta(seconds=seconds)
    return moment.astimezone(zone) if zone is not None else moment.replace(tzinfo=None)


ttls = _mostly(st.integers(3600, MAX_TTL_SECONDS), st.sampled_from([0, -1, True, 60.0, MAX_TTL_SECONDS + 1, 10**12]))
expiries = _mostly(
    st.builds(_expiry, offsets, zones),
    st.builds(_expiry, far_offsets, zones),
    st.builds(_expiry, offsets, st.none()),
    st.sampled_from(["2030-01-01", 1_900_000_000]),
)
lifecycle_options = st.builds(
    lambda options, expiry: {**options, **expiry},
    st.fixed_dictionaries(
        {},
        optional={
            "importance": _mostly(
                # 15 significant digits at most, as for metadata floats (the engine's 1-ULP rounding)
                st.integers(0, 10**15).map(lambda m: m / 10**15) | st.sampled_from([0, 1]),
                st.sampled_from([-0.5, 1.5, True, "0.5", math.nan]),
            ),
            "pinned": _mostly(st.booleans(), st.sampled_from(["yes", 1])),
            "source": _mostly(good_text | st.just("s" * 200), surrogate_text, st.sampled_from(["s" * 201, 5])),
        },
    ),
    _mostly(
        st.just({}) | st.fixed_dictionaries({"ttl": ttls}) | st.fixed_dictionaries({"expires_at": expiries}),
        st.fixed_dictionaries({"ttl": ttls, "expires_at": expiries}),  # both: refused
    ),
)
good_filter_values = st.one_of(int64s, good_text, st.lists(int64s | good_text, min_size=1, max_size=2))
filter_keys = st.sampled_from(["n", "tag", "x" * 64]) | st.from_regex(r"[A-Za-z0-9_-]{1,8}", fullmatch=True)
filter_sets = _mostly(
    st.just(FROM_METADATA) | st.dictionaries(filter_keys, good_filter_values, max_size=2),
    st.dictionaries(st.sampled_from(["source\n", "a.b", "x" * 65, ""]), good_filter_values, min_size=1, max_size=1),
    st.dictionaries(
        filter_keys, st.one_of(wide_ints, surrogate_text, st.booleans(), st.floats(), st.just([])), min_size=1
    ),
    st.sampled_from(["source", [("n", 1)]]),
)


def _exact(got: object, sent: object) -> bool:
    """Equal, and of the same type at every level (``1 == 1.0 == True`` is not enough)."""
    if type(got) is not type(sent):
        return False
    if isinstance(sent, dict):
        assert isinstance(got, dict)
        return got.keys() == sent.keys() and all(_exact(got[k], v) for k, v in sent.items())
    if isinstance(sent, list):
        assert isinstance(got, list)
        return len(got) == len(sent) and all(_exact(g, v) for g, v in zip(got, sent, strict=True))
    return got == sent


def _matches(metadata: dict[str, Any], filters: dict[str, Any]) -> bool:
    for name, wanted in filters.items():
        options = wanted if isinstance(wanted, list) else [wanted]
        if not any(_exact(metadata.get(name), option) for option in options):
            return False
    return True


def _filter_on(metadata: dict[str, Any]) -> dict[str, Any]:
    """A filter that the given metadata matches, when it has a str or int at a filterable key."""
    for name, value in metadata.items():
        if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) and type(value) in (str, int):
            return {name: value}
    return {}


def _check_stored(ltm: LongTermMemory, notes: MemorySet, ids: list[str], items: list[Any], call: dict[str, Any]):
    """Every item is returned exactly as sent, unless its (accepted) expiry has already passed."""
    got = {item.id: item for item in ltm.get(notes, ids)}
    now = datetime.now(UTC)
    pinned, expires_at = call.get("pinned", False), call.get("expires_at")
    visible = pinned or expires_at is None or expires_at > now
    assert set(got) == (set(ids) if visible else set())
    for item_id, value in zip(ids, items, strict=True) if visible else ():
        item = got[item_id]
        assert _exact(item.value, value)
        assert _exact(item.additional_metadata, call["metadatas"][0])
        assert item.importance == call.get("importance", 0.5)
        assert item.pinned is pinned
        assert item.source == call.get("source")
        if "ttl" in call:
            assert isinstance(item.created_time, datetime)  # a range only for compaction summaries
            assert item.expires_at == item.created_time + timedelta(seconds=call["ttl"])
        else:
            assert item.expires_at == expires_at
    return visible


@ROUND_TRIP
@given(
    items=_mostly(st.lists(good_text, min_size=1, max_size=3), st.lists(surrogate_text | st.just(42), min_size=1)),
    metadata=metadatas,
    lifecycle=lifecycle_options,
    filters=filter_sets,
)
def test_add_stores_exactly_what_it_accepts_and_enqueues_nothing_it_refuses(
    client: MemoryClient, idle: MemoryClient, namespace: str, items, metadata, lifecycle, filters
):
    ltm, idle_ltm = client.long_term(namespace, "k"), idle.long_term(namespace, "k")
    notes = ltm.get_or_create_memory_set("notes", dedup="none")
    ids = [str(uuid.uuid4()) for _ in items]
    call = {"ids": ids, "metadatas": [metadata] * len(items), **lifecycle}
    if filters == FROM_METADATA:
        filters = _filter_on(metadata)

    before = _queued(idle)
    try:
        idle_ltm.add(notes, items, wait=False, **call)
    except InvalidRequestError:
        event("add refused")
        assert _queued(idle) == before
        with pytest.raises(InvalidRequestError):  # the real client refuses it too: no worker ever sees it
            ltm.add(notes, items, **call)
        visible = False
    else:
        event("add accepted")
        assert _queued(idle) == before + 1
        assert ltm.add(notes, items, **call) == ids  # a worker-side failure raises here and fails the test
        visible = _check_stored(ltm, notes, ids, items, call)

    before = _queued(idle)
    try:
        with pytest.raises(ReplyTimeout):  # it got through, and waits for a worker the idle client has not
            idle_ltm.search(notes, "query", limit=5, filters=filters)
    except InvalidRequestError:
        event("search refused")
        assert _queued(idle) == before
        with pytest.raises(InvalidRequestError):
            ltm.search(notes, "query", limit=5, filters=filters)
    else:
        event("search accepted")
        assert _queued(idle) == before + 1
        found = ltm.search(notes, "query", limit=5, filters=filters)
        assert all(_matches(item.additional_metadata, filters) for item in found)
        if visible and _matches(metadata, filters):
            event("search found what was just added")
            assert found  # a filter the new items match finds at least one item


@pytest.mark.xfail(
    strict=True,
    reason="qdrant-edge-py returns about 1 float in 10 of 16-17 significant digits 1 ULP off "
    "(0.22725964048891834 -> 0.2272596404889183); the fix belongs in the store, not the client",
)
def test_metadata_floats_come_back_bit_for_bit(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "k").get_or_create_memory_set("notes", dedup="none")
    floats = [0.22725964048891834, -949651.9361145797, 8411551875687036.0]
    notes.add(["x"], ids=["x"], metadatas=[{"f": floats}])
    assert notes.get(["x"])[0].additional_metadata["f"] == floats
