"""A reindex under every kind of change, made while its copy is frozen mid-batch: the target's embedding
request is held at a gate in the fake endpoint while an item is erased, folded, pinned, deleted, swept,
evicted or rewritten in the source; when the gate opens and the reindex completes, the new collection holds
exactly what the source holds (nothing resurrected, nothing reverted). Also: the live path never waits on the
target, whose outage only delays the reindex, and a write racing an abort succeeds.

The engine's own parts (store, reindexer, mirror) with a real Redis and the real ``openai`` SDK against a
fake endpoint on loopback; the worker round trip is ``test_reindex``'s."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr

from memory_core.core.errors import ConfigurationError, InvalidRequestError
from memory_core.core.keys import Keys
from memory_core.core.messages import ReindexRequest
from memory_core.core.models import MemorySet, MemorySetItem, Scope
from memory_core.core.settings import EmbedderSettings, ReindexSettings
from memory_core.engine.embedders import open_embedder
from memory_core.engine.reindex import OWED, PARTS, Reindexer, mirroring
from memory_core.engine.stores.base import ItemRecord, VectorStore
from memory_core.engine.stores.edge import EdgeVectorStore
from memory_core.testing.fake_openai import VALID_KEY, FakeOpenAI
from tests.reindexing import points_of

SCOPE = Scope("ns", "user", "notes")
OTHER = Scope("ns", "other", "notes")
SOURCE = EmbedderSettings(model="hashing", api_key=SecretStr(VALID_KEY))


@dataclass
class Rig:
    store: EdgeVectorStore
    reindexer: Reindexer
    mirror: VectorStore
    fake: FakeOpenAI

    def run_all(self, deadline: float = 120) -> None:
        """Drives every part (and the owed catch-up) until the reindex is complete, as the tasks would."""
        end = time.monotonic() + deadline
        while self.reindexer.status()[0].state == "building":
            assert time.monotonic() < end, f"reindex still building: {self.reindexer.status()[0]}"
            for part in range(PARTS + 1):
                delay = self.reindexer.run_batch(part)
                if delay is not None and part != OWED:
                    time.sleep(min(delay, 0.02))

    def collections(self) -> tuple[dict[str, dict[str, object]], dict[str, dict[str, object]]]:
        target = self.reindexer.target(fresh=True)
        assert target is not None
        # A field set to null is stored absent by one write and null by another: alike for every read.
        return _unnulled(points_of(self.store)), _unnulled(points_of(target.store))  # type: ignore[arg-type]


def _unnulled(points: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    return {pid: {k: v for k, v in payload.items() if v is not None} for pid, payload in points.items()}


def _record(item_id: str, text: str, seq: int, **fields: object) -> ItemRecord:
    now = datetime.now(UTC)
    item = MemorySetItem(
        memory_set_name=SCOPE.set_name, id=item_id, value=text, created_time=now, last_accessed_time=now, **fields
    )
    return ItemRecord(item=item, seq=seq, vector=[])


def _reindexer(
    store: EdgeVectorStore, source: EmbedderSettings, client: redis.Redis, settings: ReindexSettings
) -> Reindexer:
    """A reindexer of ``store`` (filled by the embedder of ``source``) whose targets are named after their model."""
    return Reindexer(
        store=store,
        embedder=open_embedder(source),
        embedder_settings=source,
        settings=settings,
        redis_client=client,
        keys=Keys("mc-test-races"),
        collection_for=lambda model: "items_" + model.replace(":", "_"),
    )


@pytest.fixture
def rig(tmp_path: Path, redis_url: str) -> Iterator[Rig]:
    source = open_embedder(SOURCE)
    store = EdgeVectorStore(tmp_path, collection="items_hashing", dimension=source.dimension, meta="meta")
    client = redis.Redis.from_url(redis_url)
    with FakeOpenAI() as fake:
        reindexer = _reindexer(store, SOURCE, client, ReindexSettings(batch_size=16, refresh=0.05, lock_ttl=5, duty=1))
        mirror = mirroring(store, reindexer)
        for scope in (SCOPE, OTHER):
            mirror.put_set(scope.namespace, scope.key, MemorySet(name=scope.set_name, capacity=1000))
            records = [_record(f"i{n}", f"fact {n} of {scope.key}", 100 + n) for n in range(40)]
            vectors = source.embed([str(r.item.value) for r in records])
            mirror.upsert(scope, [ItemRecord(r.item, r.seq, v) for r, v in zip(records, vectors, strict=True)])
        reindexer.start(ReindexRequest(action="start", to="openai:fake-model", base_url=fake.url))
        yield Rig(store, reindexer, mirror, fake)
        mirror.close()
    client.close()


def _frozen_while(rig: Rig, change: Callable[[Rig], None]) -> None:
    """Runs ``change`` while the reindex's first embedding request is held at the fake's gate, then lets the
    reindex finish."""
    rig.fake.gate = threading.Event()
    worker = threading.Thread(target=rig.run_all, daemon=True)
    worker.start()
    assert rig.fake.waiting.wait(60), "the reindex never asked the target to embed"
    try:
        change(rig)
    finally:
        rig.fake.gate.set()
        rig.fake.gate = None
    worker.join(120)
    assert not worker.is_alive()


def _erase(rig: Rig) -> None:
    rig.mirror.forget("ns", "user")


def _fold(rig: Rig) -> None:
    # What a dedup fold writes: the merged metadata and pin, in place, onto the version it read.
    for n in range(40):
        fields = {"metadata": {"folded": True}, "pinned": 1, "expires_at": None}
        rig.mirror.set_fields(SCOPE, [f"i{n}"], fields, seq=100 + n)


def _delete(rig: Rig) -> None:
    rig.mirror.delete(SCOPE, {f"i{n}": 10_000 for n in range(40)})


def _sweep(rig: Rig) -> None:
    for n in range(40):
        rig.store.set_fields(SCOPE, [f"i{n}"], {"expires_at": 1.0})  # expired by a worker that knew no reindex
    rig.mirror.delete_expired(time.time(), 1000)


def _evict(rig: Rig) -> None:
    rig.mirror.delete(SCOPE, {f"i{n}": 100 + n for n in range(40)})  # eviction deletes the versions it read


def _rewrite(rig: Rig) -> None:
    source = open_embedder(SOURCE)
    records = [_record(f"i{n}", f"fact {n}, corrected", 5_000 + n) for n in range(40)]
    vectors = source.embed([str(r.item.value) for r in records])
    rig.mirror.upsert(SCOPE, [ItemRecord(r.item, r.seq, v) for r, v in zip(records, vectors, strict=True)])


@pytest.mark.parametrize("change", [_erase, _fold, _delete, _sweep, _evict, _rewrite])
def test_a_change_made_while_a_copy_is_embedding_reaches_the_new_collection(rig: Rig, change: Callable[[Rig], None]):
    _frozen_while(rig, change)
    assert rig.reindexer.status()[0].state == "complete"
    source, target = rig.collections()
    assert target == source
    if change is _erase:
        assert not [p for p in target.values() if p.get("key") == "user" and not p.get("tombstone")]
    if change is _fold:
        assert all(
            p["metadata"] == {"folded": True} and p["pinned"] == 1 for p in target.values() if p["key"] == "user"
        )


def test_live_writes_never_wait_on_the_target_whose_outage_only_delays_the_reindex(rig: Rig):
    rig.fake.behave("http_500")
    for part in range(PARTS + 1):
        delay = rig.reindexer.run_batch(part)  # fails on the endpoint: recorded, retried later, raises nothing
        assert delay is not None
        assert delay >= 1
    status = rig.reindexer.status()[0]
    assert status.state == "building"
    assert "500" in status.target_error or "unavailable" in status.target_error.lower(), status.target_error
    assert status.target_error_since is not None
    requests_before = len(rig.fake.requests)
    _rewrite(rig)  # succeeds with the target down, and asks it nothing
    assert len(rig.fake.requests) == requests_before
    assert rig.reindexer.status()[0].owed == 40
    rig.fake.behave("ok")
    rig.run_all()
    status = rig.reindexer.status()[0]
    assert (status.state, status.owed, status.target_error) == ("complete", 0, "")
    assert status.last_success_at is not None
    source, target = rig.collections()
    assert target == source


def test_an_outage_is_no_longer_reported_once_a_later_batch_succeeds_though_a_failed_part_waits_its_backoff(rig: Rig):
    """The owed catch-up failed during the outage and waits out its backoff; the copy parts succeed after the
    endpoint recovers and complete the reindex. The status must not go on saying the target is unreachable."""
    rig.fake.behave("http_500")
    _rewrite(rig)  # owed to the target: the catch-up asks the endpoint too, and fails
    for part in range(PARTS + 1):
        assert rig.reindexer.run_batch(part) is not None
    assert "500" in rig.reindexer.status()[0].target_error
    rig.fake.behave("ok")
    end = time.monotonic() + 120
    while rig.reindexer.status()[0].state == "building":  # every part but the owed catch-up, as a backoff leaves it
        assert time.monotonic() < end, f"reindex still building: {rig.reindexer.status()[0]}"
        for part in range(PARTS):
            delay = rig.reindexer.run_batch(part)
            if delay is not None:
                time.sleep(min(delay, 0.02))
    status = rig.reindexer.status()[0]
    assert (status.state, status.owed, status.target_error, status.target_error_since) == ("complete", 0, "", None)
    source, target = rig.collections()
    assert target == source


def test_writes_owed_after_the_catch_up_went_idle_send_it_on_at_the_next_status(rig: Rig):
    """Complete and owed nothing, the catch-up's chain ends; a write mirrored after that is owed, and the next
    status hands the catch-up out again at once, not a lock's lifetime later."""
    rig.run_all()
    assert rig.reindexer.run_batch(OWED) is None  # complete, nothing owed: the chain ends
    assert rig.reindexer.status()[1] == []
    _rewrite(rig)
    status, stalled = rig.reindexer.status()
    assert (status.state, status.owed, stalled) == ("complete", 40, [OWED])
    assert rig.reindexer.status()[1] == []  # handed out once
    while rig.reindexer.run_batch(OWED) is not None:
        pass
    source, target = rig.collections()
    assert (rig.reindexer.status()[0].owed, target) == (0, source)


def test_a_write_racing_an_abort_is_stored_without_an_error(rig: Rig):
    assert rig.reindexer.target(fresh=True) is not None  # this process mirrors
    rig.reindexer.abort()  # drops the collection the mirror still holds open until its next refresh
    _rewrite(rig)
    assert [i.value for i in rig.store.retrieve(SCOPE, ["i0"])] == ["fact 0, corrected"]


def test_a_stalled_part_is_handed_out_again_once_however_often_the_status_is_asked(rig: Rig):
    record = rig.store.read_record("reindex")
    assert record is not None
    rig.store.write_record("reindex", {**record, "started_at": record["started_at"] - 3600})  # every part idle
    first = rig.reindexer.status()[1]
    assert first == list(range(PARTS + 1))
    for _ in range(5):
        assert rig.reindexer.status()[1] == []


def test_after_an_abort_drop_old_says_there_is_nothing_to_drop(rig: Rig):
    rig.reindexer.abort()
    with pytest.raises(InvalidRequestError, match="aborted: its new collection is gone"):
        rig.reindexer.drop_old()


def test_a_repeated_start_without_its_flags_follows_the_running_reindex(rig: Rig):
    running = rig.reindexer.status()[0]
    again, _ = rig.reindexer.start(ReindexRequest(action="start", to="openai:fake-model"))
    assert again.collection == running.collection
    with pytest.raises(InvalidRequestError, match="abort"):
        rig.reindexer.start(ReindexRequest(action="start", to="openai:fake-model", dimensions=4))


def test_a_targets_configuration_error_names_the_reindexs_own_options(tmp_path: Path, redis_url: str):
    source = open_embedder(EmbedderSettings(model="hashing"))
    store = EdgeVectorStore(tmp_path, collection="items_hashing", dimension=source.dimension, meta="meta")
    client = redis.Redis.from_url(redis_url)
    reindexer = _reindexer(store, EmbedderSettings(model="hashing"), client, ReindexSettings())
    try:
        with pytest.raises(ConfigurationError) as refused:
            reindexer.start(ReindexRequest(action="start", to="openai:text-embedding-3-small"))
        assert "--base-url" in str(refused.value)
        assert "MEMORY_REINDEX__API_KEY" in str(refused.value)
        assert "MEMORY_EMBEDDER__BASE_URL" not in str(refused.value)  # the environment describes the source
    finally:
        store.close()
        client.close()


def test_the_target_takes_its_own_key_when_the_operator_gives_one(tmp_path: Path, redis_url: str):
    source_settings = EmbedderSettings(model="hashing", api_key=SecretStr("the-current-providers-key"))
    source = open_embedder(source_settings)
    store = EdgeVectorStore(tmp_path, collection="items_hashing", dimension=source.dimension, meta="meta")
    client = redis.Redis.from_url(redis_url)
    with FakeOpenAI() as fake:
        reindexer = _reindexer(store, source_settings, client, ReindexSettings(api_key=SecretStr(VALID_KEY)))
        try:
            reindexer.start(ReindexRequest(action="start", to="openai:fake-model", base_url=fake.url))
            assert set(fake.keys) == {VALID_KEY}
        finally:
            reindexer.close()
            store.close()
            client.close()


def test_a_worker_left_on_the_old_setting_after_the_switch_writes_real_copies_not_owed_ones(rig: Rig):
    rig.run_all()
    record = rig.store.read_record("reindex")
    assert record is not None
    rig.store.write_record("reindex", {**record, "state": "switched"})  # as the first restarted worker does
    rig.reindexer.target(fresh=True)
    _rewrite(rig)
    source, target = rig.collections()
    assert target == source  # nothing owed: no one would catch it up after the switch
