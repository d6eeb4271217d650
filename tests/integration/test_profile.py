"""User profiles: deep merge with last_updated, searchable through long-term memory, durable beyond Redis."""

from __future__ import annotations

import threading

import pytest
import redis

from memory_core import InvalidRequestError, MemoryClient


def test_updates_deep_merge_and_none_removes_a_key(client: MemoryClient, namespace: str):
    profile = client.profile(namespace, "user-1")
    assert profile.get() == {}
    first = profile.update({"name": "Ana", "preferences": {"drink": "green tea", "seat": "window"}})
    assert first["preferences"] == {"drink": "green tea", "seat": "window"}
    second = profile.update({"preferences": {"drink": None, "food": "ramen"}, "city": "Porto"})
    assert {k: v for k, v in second.items() if k != "last_updated"} == {
        "name": "Ana",
        "preferences": {"seat": "window", "food": "ramen"},
        "city": "Porto",
    }
    assert second["last_updated"] > first["last_updated"]
    assert profile.get() == second


def test_each_update_is_searchable_in_the_users_long_term_set(client: MemoryClient, namespace: str):
    profile = client.profile(namespace, "user-2")
    profile.update({"diet": "vegetarian", "job": "nurse"})
    profile.update({"job": "surgeon"})
    items = client.long_term(namespace, "user-2").get_memory_set("profile").get()
    assert len(items) == 1  # replaced, never duplicated
    assert "job: surgeon" in str(items[0].value)
    assert "nurse" not in str(items[0].value)
    hits = client.long_term(namespace, "user-2").search("profile", "what does the user eat?", limit=1)
    assert "diet: vegetarian" in str(hits[0].value)


def test_the_durable_copy_brings_the_profile_back_when_redis_lost_it(
    client: MemoryClient, namespace: str, raw_redis: redis.Redis
):
    profile = client.profile(namespace, "user-3")
    saved = profile.update({"name": "Bo"})
    raw_redis.delete(client.keys.profile(namespace, "user-3"))  # as after a Redis restart without persistence
    assert profile.get() == saved
    assert raw_redis.exists(client.keys.profile(namespace, "user-3"))  # and Redis is refilled
    assert profile.update({"age": 40})["name"] == "Bo"


def test_concurrent_updates_lose_no_field(client: MemoryClient, namespace: str):
    profile = client.profile(namespace, "user-4")
    threads = [threading.Thread(target=profile.update, args=({f"field{i}": i},)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {k for k in profile.get() if k != "last_updated"} == {f"field{i}" for i in range(8)}


def test_delete_removes_both_copies_and_bad_updates_are_refused(client: MemoryClient, namespace: str):
    profile = client.profile(namespace, "user-5")
    profile.update({"name": "Cy"})
    assert profile.delete() is True
    assert profile.get() == {}
    assert profile.delete() is False
    for bad in ({"x": float("nan")}, {"last_updated": "now"}, {"deep": {"a": {"b": {"c": {"d": {"e": 1}}}}}}, ["list"]):
        with pytest.raises(InvalidRequestError):
            profile.update(bad)  # type: ignore[arg-type]
    assert profile.get() == {}


def test_profiles_are_scoped_by_namespace(client: MemoryClient, namespace: str):
    client.profile(namespace, "user-6").update({"secret": "mine"})
    assert client.profile(f"{namespace}-other", "user-6").get() == {}


def test_a_first_update_logs_no_error(client: MemoryClient, namespace: str, caplog: pytest.LogCaptureFixture):
    # Its read finds no profile set yet: a normal outcome, told to the caller and logged at INFO.
    with caplog.at_level("INFO"):
        client.profile(namespace, "newcomer").update({"name": "Ada"})
    assert [r.getMessage() for r in caplog.records if r.levelname in {"ERROR", "CRITICAL"}] == []
    assert any("MemorySetNotFound" in r.getMessage() for r in caplog.records)  # the read did find no set
