"""Checkpoints on real Redis: ordering, parents, listing with limit and before, TTL, deletion, JSON only."""

from __future__ import annotations

import json
import time

import pytest
import redis

from memory_core import InvalidRequestError, MemoryClient
from memory_core.core.settings import Settings


def test_the_newest_checkpoint_comes_first_and_links_to_its_parent(client: MemoryClient, namespace: str):
    saver = client.checkpoints(namespace)
    first = saver.put("thread-1", {"step": 1}, metadata={"source": "input"})
    second = saver.put("thread-1", {"step": 2, "messages": ["hi"]}, metadata={"source": "loop"})
    third = saver.put("thread-1", {"step": 3}, checkpoint_id="custom-id")
    assert first.parent_id is None
    assert second.parent_id == first.id
    assert third.parent_id == second.id
    assert third.id == "custom-id"
    latest = saver.get("thread-1")
    assert latest == third
    assert saver.get("thread-1", second.id) == second
    assert saver.get("thread-1", "no-such-id") is None
    assert saver.get("thread-2") is None
    assert [c.id for c in saver.list("thread-1")] == [third.id, second.id, first.id]
    assert [c.checkpoint["step"] for c in saver.list("thread-1", limit=2)] == [3, 2]
    assert [c.id for c in saver.list("thread-1", before=second.id)] == [first.id]
    assert saver.list("thread-1", before="unknown") == []


def test_checkpoint_namespaces_are_separate_and_may_hold_any_text(client: MemoryClient, namespace: str):
    saver = client.checkpoints(namespace)
    saver.put("t", {"who": "root"})
    saver.put("t", {"who": "child"}, checkpoint_ns="agent:tools|3")
    root = saver.get("t")
    assert root is not None
    assert root.checkpoint == {"who": "root"}
    child = saver.get("t", checkpoint_ns="agent:tools|3")
    assert child is not None
    assert child.checkpoint == {"who": "child"}
    assert child.checkpoint_ns == "agent:tools|3"
    assert len(saver.list("t")) == 1


def test_put_with_an_existing_id_replaces_it(client: MemoryClient, namespace: str):
    saver = client.checkpoints(namespace)
    saver.put("t", {"v": 1}, checkpoint_id="c1")
    saver.put("t", {"v": 2}, checkpoint_id="c1")
    assert [c.checkpoint for c in saver.list("t")] == [{"v": 2}]


def test_delete_thread_removes_every_checkpoint_namespace_of_that_thread_only(
    client: MemoryClient, namespace: str, raw_redis: redis.Redis
):
    saver = client.checkpoints(namespace)
    for i in range(3):
        saver.put("doomed", {"i": i})
    saver.put("doomed", {"i": 9}, checkpoint_ns="sub")
    saver.put("kept", {"i": 0})
    assert saver.delete_thread("doomed") == 4
    assert saver.list("doomed") == []
    assert saver.get("doomed", checkpoint_ns="sub") is None
    assert not list(raw_redis.scan_iter(client.keys.checkpoint_pattern(namespace, "doomed")))
    assert len(saver.list("kept")) == 1


def test_snapshots_are_stored_as_json_and_bad_ones_are_refused(
    client: MemoryClient, namespace: str, raw_redis: redis.Redis
):
    saver = client.checkpoints(namespace)
    saved = saver.put("t", {"nested": {"list": [1, 2.5, None, True]}})
    pattern = client.keys.checkpoint_pattern(namespace, "t")
    stored = [json.loads(v) for k in raw_redis.scan_iter(pattern) if k.endswith(b":data") for v in raw_redis.hvals(k)]
    assert [s["checkpoint"] for s in stored] == [saved.checkpoint]
    for bad in ({"x": float("nan")}, {"x": object()}, {1: "non-str key"}, "not a dict"):
        with pytest.raises(InvalidRequestError):
            saver.put("t", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError):
        saver.put("a:b", {})
    assert len(saver.list("t")) == 1


def test_a_thread_expires_after_its_ttl_and_keeps_at_most_max_per_thread(settings: Settings, worker, namespace: str):
    tuned = settings.model_copy(
        update={"checkpoints": settings.checkpoints.model_copy(update={"ttl": 1, "max_per_thread": 3})}
    )
    with MemoryClient(tuned) as client:
        saver = client.checkpoints(namespace)
        for i in range(5):
            saver.put("t", {"i": i})
        assert [c.checkpoint["i"] for c in saver.list("t")] == [4, 3, 2]
        time.sleep(1.3)
        assert saver.list("t") == []
        assert saver.get("t") is None


def test_checkpoints_are_scoped_by_namespace(client: MemoryClient, namespace: str):
    client.checkpoints(namespace).put("t", {"secret": 1})
    assert client.checkpoints(f"{namespace}-other").get("t") is None
    assert client.checkpoints(f"{namespace}-other").list("t") == []
    assert client.checkpoints(f"{namespace}-other").delete_thread("t") == 0
    assert client.checkpoints(namespace).get("t") is not None


def test_listing_before_a_checkpoint_object_is_a_type_error_named_as_such(client: MemoryClient, namespace: str):
    saver = client.checkpoints(namespace)
    first = saver.put("thread-1", {"step": 1})
    with pytest.raises(InvalidRequestError, match="before must be a checkpoint id .* got Checkpoint .*pass its .id"):
        saver.list("thread-1", before=first)  # type: ignore[arg-type]  # the mistake under test
    assert [c.id for c in saver.list("thread-1", before=saver.put("thread-1", {"step": 2}).id)] == [first.id]
