"""Tenant isolation: two namespaces and two keys with the same set name never see each other's items."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import redis

from memory_core import MemoryClient, MemorySet, MemorySetNotFound
from memory_core.core import routing

from .conftest import make_settings


def test_namespaces_and_keys_never_see_each_others_items(client: MemoryClient, namespace: str, raw_redis):
    scopes = [(f"{namespace}-a", "k1"), (f"{namespace}-a", "k2"), (f"{namespace}-b", "k1")]
    sets = {}
    for ns, key in scopes:
        notes = client.long_term(ns, key).get_or_create_memory_set("notes")
        # The same item ids in every scope: isolation must not depend on ids being unique.
        notes.add([f"secret of {ns}/{key} about tea", f"other secret of {ns}/{key}"], ids=["1", "2"])
        sets[(ns, key)] = notes

    for (ns, key), notes in sets.items():
        mine = f"secret of {ns}/{key} about tea"
        assert notes.size() == 2
        assert [i.value for i in notes.get()] == [mine, f"other secret of {ns}/{key}"]
        assert [i.value for i in notes.get(["1"])] == [mine]
        assert {h.value for h in notes.search("secret about tea", limit=10)} <= {mine, f"other secret of {ns}/{key}"}

    # Deleting in one scope leaves the others whole.
    first, *others = scopes
    assert sets[first].delete(["1"]) == 1
    assert client.long_term(*first).delete_memory_set("notes") is True
    for scope in others:
        assert sets[scope].size() == 2

    # Every Redis key memory-core wrote names the namespace it belongs to.
    for raw_key in raw_redis.scan_iter("mctest:*"):
        key_text = raw_key.decode()
        assert any(key_text.startswith(f"mctest:{ns}:") for ns, _ in scopes) or ":!ops:" in key_text


def test_a_set_of_one_namespace_is_not_found_from_another(client: MemoryClient, namespace: str):
    client.long_term(f"{namespace}-a", "k").get_or_create_memory_set("private").add(["x"])
    other = client.long_term(f"{namespace}-b", "k")
    for call in (
        lambda: other.get_memory_set("private"),
        lambda: other.size("private"),
        lambda: other.get("private"),
        lambda: other.search("private", "x"),
        lambda: other.delete("private"),
    ):
        with pytest.raises(MemorySetNotFound):
            call()
    assert other.delete_memory_set("private") is False
    assert client.long_term(f"{namespace}-a", "k").size("private") == 1


@pytest.mark.parametrize(("ns", "key"), list(itertools.product(["a:b", "*", "..", "a/b", "", "x" * 65], ["k"])))
def test_names_that_could_reach_other_keys_are_refused(client: MemoryClient, ns: str, key: str):
    from memory_core import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="namespace"):
        client.long_term(ns, key)


def test_a_deployment_on_the_same_redis_db_never_takes_this_ones_tasks(
    client: MemoryClient, namespace: str, redis_url: str, tmp_path: Path
):
    # Another deployment (its own key prefix, no worker running) shares the session worker's Redis DB.
    other = make_settings(redis_url, tmp_path, redis={"url": redis_url, "key_prefix": "mcother"})
    broker = redis.Redis.from_url(redis_url)
    try:
        with MemoryClient(other) as theirs:
            receipt = theirs.long_term(namespace, "k").submit(
                MemorySet(name="notes"), ["queued for the other deployment"]
            )
            # Ours goes through the running worker meanwhile; theirs stays queued under their prefix.
            ours = client.long_term(namespace, "k").get_or_create_memory_set("notes")
            ours.add(["handled by this deployment's worker"])
            assert [i.value for i in ours.get()] == ["handled by this deployment's worker"]
            queued = broker.lrange("mcother/" + routing.WRITE_QUEUE, 0, -1)
            assert [json.loads(m)["headers"]["id"] for m in queued] == [receipt.task_id]
            assert not broker.exists(routing.WRITE_QUEUE)  # no unprefixed queue at all
    finally:
        for key in broker.scan_iter("mcother*"):
            broker.delete(key)
        broker.close()
