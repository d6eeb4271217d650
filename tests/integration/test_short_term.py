"""Short-term and sensory memory on real Redis: Flink Agents' MemoryObject cases, write-back, TTLs.

The first group follows Apache Flink Agents' own short-term memory tests case by case.
"""

from __future__ import annotations

import enum
import math
import re
import time
import uuid

import pytest
import redis

from memory_core import InvalidRequestError, MemoryClient
from memory_core.core.validation import MAX_TTL_SECONDS
from memory_core.tiers.short_term import NESTED_OBJECT, MemoryObject


@pytest.fixture
def stm(client: MemoryClient, namespace: str):
    return client.short_term(namespace, "run-1")


def test_basic_types_round_trip(stm: MemoryObject):
    stm.set("int", 1)
    assert stm.get_field_names() == ["int"]
    assert stm.get_fields()["int"] == 1
    values = {"float": 3.14, "str": "hello", "list": ["a", "b"], "dict": {"x": 10}, "none": None, "bool": False}
    values |= {"bytes": b"\x00\xffraw", "nested": [1, "a", [2, 3], {"k": [4, None, b"y"]}], "nan": math.inf}
    for path, value in values.items():
        stm.set(path, value)
    for path, value in values.items():
        assert stm.get(path) == value
        assert type(stm.get(path)) is type(value)


def test_nested_paths_create_objects_and_read_back_at_every_level(stm: MemoryObject):
    stm.set("a.b.c", True)
    inner = stm.get("a.b")
    assert isinstance(inner, MemoryObject)
    inner.set("tmp", 10)
    assert stm.get("a.b.tmp") == 10
    assert "tmp" in stm.get("a.b").get_field_names()
    assert stm.get("a").get("b").get("c") is True
    assert stm.get("a").get_fields()["b"] == NESTED_OBJECT == "NestedObject"
    assert stm.get("a.b.c") is True
    assert stm.get("missing") is None
    assert stm.get("a.missing.c") is None


def test_new_object_creates_its_parents(stm: MemoryObject):
    stm.new_object("foo.bar")
    assert stm.is_exist("foo")
    assert stm.is_exist("foo.bar")
    assert stm.get("foo").get_fields()["bar"] == "NestedObject"
    stm.new_object("x.y.z")
    assert stm.is_exist("x.y.z")
    assert stm.get_fields()["x"] == "NestedObject"


def test_new_object_over_a_value_needs_overwrite(stm: MemoryObject):
    stm.set("profile", "active")
    with pytest.raises(ValueError, match="overwrite=True"):
        stm.new_object("profile")
    assert stm.get("profile") == "active"
    stm.new_object("profile", overwrite=True).set("status", "ok")
    assert stm.get("profile.status") == "ok"


def test_a_value_cannot_replace_an_object(stm: MemoryObject):
    stm.new_object("obj")
    with pytest.raises(ValueError, match="is an object"):
        stm.set("obj", 123)
    stm.set("leaf", 1)
    with pytest.raises(ValueError, match="holds a value"):
        stm.set("leaf.child", 2)  # a value cannot become an object implicitly either


def test_new_object_on_an_existing_object_keeps_it_unless_overwritten(stm: MemoryObject):
    stm.set("o.keep", 1)
    assert stm.new_object("o").get("keep") == 1
    stm.new_object("o", overwrite=True)
    assert stm.get("o").get_fields() == {}
    assert not stm.is_exist("o.keep")


class _Colour(enum.StrEnum):
    RED = "red"


class _Bytes(bytes):
    pass


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ((1, 2), r"list\(value\)"),
        ({1, 2}, r"list\(value\)"),
        (uuid.uuid4(), r"str\(value\)"),
        (_Colour.RED, "plain str"),
        (bytearray(b"x"), "plain str"),
        (_Bytes(b"x"), "plain str"),
        (object(), "holds None, bool"),
    ],
)
def test_values_it_cannot_hold_raise_type_error_naming_path_and_type(stm: MemoryObject, value: object, hint: str):
    with pytest.raises(TypeError, match=rf"'deep.path' is of type {type(value).__name__}.*{hint}"):
        stm.set("deep.path", value)
    assert not stm.is_exist("deep")  # nothing was created on the way


def test_nested_bad_values_and_bad_keys_name_their_place(stm: MemoryObject):
    with pytest.raises(TypeError, match=r"\"p\[2\]\['bad'\]\" is of type object"):
        stm.set("p", [1, 2, {"bad": object()}])
    with pytest.raises(TypeError, match="non-str key 1"):
        stm.set("p", {1: "v"})
    with pytest.raises(TypeError, match="new_object"):
        stm.set("p", stm.new_object("q"))
    for bad in ("", "a..b", ".a", "a."):
        with pytest.raises(ValueError, match="not valid"):
            stm.set(bad, 1)


def test_writes_stay_local_until_persist(client: MemoryClient, namespace: str, raw_redis: redis.Redis):
    stm = client.short_term(namespace, "run-2")
    stm.set("plan.step", 1)
    other = client.short_term(namespace, "run-2")
    assert other.get("plan.step") is None  # another process (or object) does not see unpersisted writes
    assert stm.dirty
    stm.persist()
    assert not stm.dirty
    assert client.short_term(namespace, "run-2").get("plan.step") == 1
    assert raw_redis.hexists(client.keys.short_term(namespace, "run-2"), "plan.step")


def test_a_with_block_persists_on_success_and_discards_on_exception(client: MemoryClient, namespace: str):
    with client.short_term(namespace, "run-3") as stm:
        stm.set("done", ["step one"])

    def failing_action() -> None:
        with client.short_term(namespace, "run-3") as stm:
            stm.set("done", ["step one", "step two"])
            stm.set("scratch", "half-finished")
            raise RuntimeError("the action failed")

    with pytest.raises(RuntimeError):
        failing_action()
    fresh = client.short_term(namespace, "run-3")
    assert fresh.get("done") == ["step one"]
    assert not fresh.is_exist("scratch")


def test_clear_empties_both_tiers_at_once(client: MemoryClient, namespace: str, raw_redis: redis.Redis):
    with client.short_term(namespace, "run-4") as stm:
        stm.set("a.b", 1)
    stm = client.short_term(namespace, "run-4")
    stm.set("c", 2)
    stm.clear()
    assert stm.get_field_names() == []
    assert not raw_redis.exists(client.keys.short_term(namespace, "run-4"))
    assert client.short_term(namespace, "run-4").get_field_names() == []


def test_a_path_ttl_hides_the_path_and_everything_under_it(client: MemoryClient, namespace: str):
    with client.short_term(namespace, "run-5") as stm:
        stm.set("token", "abc", ttl=1.5)
        stm.new_object("cache", ttl=1.5).set("page", "<html>")
        stm.set("kept", 1)
    fresh = client.short_term(namespace, "run-5")
    assert fresh.get("token") == "abc"
    assert fresh.get("cache.page") == "<html>"
    time.sleep(1.7)
    later = client.short_term(namespace, "run-5")
    assert later.get("token") is None
    assert not later.is_exist("cache.page")
    assert later.get_field_names() == ["kept"]
    with pytest.raises(InvalidRequestError, match="positive number of seconds"):
        later.set("x", 1, ttl=-1)


def test_the_object_ttl_expires_the_whole_state_in_redis(client: MemoryClient, namespace: str, raw_redis: redis.Redis):
    with client.short_term(namespace, "run-6", ttl=1) as stm:
        stm.set("a", 1)
    assert 0 < raw_redis.ttl(client.keys.short_term(namespace, "run-6")) <= 1
    time.sleep(1.3)
    assert client.short_term(namespace, "run-6").get("a") is None


def test_sensory_memory_is_cleared_at_the_end_of_each_run(client: MemoryClient, namespace: str):
    with client.sensory(namespace, "run-7") as sensory:
        sensory.set("last_observation", "door opened")
        sensory.persist()  # visible to other processes during the run
        assert client.sensory(namespace, "run-7").get("last_observation") == "door opened"
    assert client.sensory(namespace, "run-7").get_field_names() == []

    def failing_run() -> None:
        with client.sensory(namespace, "run-7") as sensory:
            sensory.set("x", 1)
            sensory.persist()
            raise KeyError("a failed run is cleared too")

    with pytest.raises(KeyError):
        failing_run()
    assert client.sensory(namespace, "run-7").get_field_names() == []
    with client.short_term(namespace, "run-7") as stm:  # a different tier under the same key
        stm.set("x", 1)
    assert client.sensory(namespace, "run-7").get("x") is None


def test_short_term_state_is_scoped_by_namespace_and_key(client: MemoryClient, namespace: str):
    with client.short_term(namespace, "shared-key") as stm:
        stm.set("secret", "mine")
    assert client.short_term(f"{namespace}-other", "shared-key").get("secret") is None
    assert client.short_term(namespace, "other-key").get("secret") is None
    for bad in ("a:b", "*", ".."):
        with pytest.raises(InvalidRequestError):
            client.short_term(bad, "k")
        with pytest.raises(InvalidRequestError):
            client.short_term(namespace, bad)


def test_a_path_that_is_not_utf8_is_refused_at_set_and_the_run_still_persists(
    client: MemoryClient, namespace: str, raw_redis: redis.Redis
):
    stm = client.short_term(namespace, "run-8")
    stm.set("plan.good", 1)
    for bad in ("plan.bad\ud800", "\udfff", "plan.\ud800.x"):
        with pytest.raises(InvalidRequestError, match=rf"path {re.escape(repr(bad))} is not valid UTF-8"):
            stm.set(bad, 1)
        with pytest.raises(InvalidRequestError, match="not valid UTF-8"):
            stm.new_object(bad)
    stm.persist()  # nothing of the refused writes was buffered
    assert not stm.dirty
    assert sorted(raw_redis.hkeys(client.keys.short_term(namespace, "run-8"))) == [b"plan", b"plan.good"]
    assert client.short_term(namespace, "run-8").get("plan").get_fields() == {"good": 1}


def test_values_and_ttls_that_persist_could_not_handle_are_refused_at_set(client: MemoryClient, namespace: str):
    stm = client.short_term(namespace, "run-9")
    with pytest.raises(InvalidRequestError, match=r"'big' is an int of 16610 bits"):
        stm.set("big", 10**5000)
    for ttl in (10**400, MAX_TTL_SECONDS + 1, math.inf, math.nan):
        with pytest.raises(InvalidRequestError, match="ttl for 'x' must be a positive number of seconds up to"):
            stm.set("x", 1, ttl=ttl)
    stm.set("x", 10**600, ttl=MAX_TTL_SECONDS)
    stm.persist()
    assert client.short_term(namespace, "run-9").get_fields() == {"x": 10**600}


def test_a_value_past_the_size_limit_is_refused_and_nothing_is_written(client: MemoryClient, namespace: str, raw_redis):
    stm = client.short_term(namespace, "big")
    limit = client.settings.short_term.max_value_bytes
    with pytest.raises(InvalidRequestError, match=r"value at 'big' is 10,000,002 bytes as stored; at most 1,048,576"):
        stm.set("big", "x" * 10_000_000)
    stm.set("fits", "x" * (limit - 2))  # a JSON string: the text and its two quotes
    stm.persist()
    assert raw_redis.hkeys(client.keys.short_term(namespace, "big")) == [b"fits"]
