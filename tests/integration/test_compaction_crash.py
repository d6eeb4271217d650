"""A compaction that dies between writing its summaries and deleting their sources loses and duplicates nothing.

The compactor runs here without a worker, on the real embedded engine and a real Redis,
with a store that fails once right after the summaries are written (as a killed worker would stop).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
import redis

from memory_core.core.errors import TransientStoreError
from memory_core.core.keys import Keys
from memory_core.core.messages import CompactRequest
from memory_core.core.models import MemorySet, MemorySetItem, Scope, utcnow
from memory_core.core.settings import CompactionSettings
from memory_core.engine.compaction import Compactor
from memory_core.engine.compaction.extractive import ExtractiveSummarizer
from memory_core.engine.embedders.hashing import HashingEmbedder
from memory_core.engine.stores import ItemRecord
from memory_core.engine.stores.edge import EdgeVectorStore

EMBEDDER = HashingEmbedder(dimension=64)
SCOPE = Scope("crash", "u", "notes")


class CrashingStore(EdgeVectorStore):
    """Fails the first delete, i.e. right after a compaction has written its summaries."""

    crashes_left = 1

    def delete(self, scope: Scope, versions: Mapping[str, int]) -> None:
        if self.crashes_left:
            self.crashes_left -= 1
            raise TransientStoreError("killed between the summary write and the source delete")
        super().delete(scope, versions)


@pytest.fixture
def store(tmp_path: Path):
    s = CrashingStore(tmp_path, collection="c", dimension=EMBEDDER.dimension)
    yield s
    s.close()


def _compactor(store: EdgeVectorStore, raw_redis: redis.Redis) -> Compactor:
    return Compactor(
        store=store,
        embedder=EMBEDDER,
        summarizer=ExtractiveSummarizer(EMBEDDER),
        redis_client=raw_redis,
        keys=Keys("mctest"),
        settings=CompactionSettings(),
    )


def test_a_retry_after_a_crash_finishes_the_fold_without_loss_or_duplicates(store: CrashingStore, raw_redis):
    store.put_set(*SCOPE[:2], MemorySet(name="notes", capacity=4))
    texts = ["tea in the morning", "tea after lunch", "flight to tokyo", "flight back home"]
    now = utcnow()
    store.upsert(
        SCOPE,
        [
            ItemRecord(
                item=MemorySetItem(
                    memory_set_name="notes", id=f"i{n}", value=t, created_time=now, last_accessed_time=now
                ),
                seq=n,
                vector=EMBEDDER.embed([t])[0],
            )
            for n, t in enumerate(texts)
        ],
    )
    compactor = _compactor(store, raw_redis)
    request = CompactRequest(namespace=SCOPE.namespace, key=SCOPE.key, set_name=SCOPE.set_name).model_dump(mode="json")

    with pytest.raises(TransientStoreError):
        compactor.compact(request)
    after_crash = store.list_items(SCOPE)
    assert {i.id for i in after_crash if not i.compacted} == {"i0", "i1", "i2", "i3"}  # nothing lost
    assert sum(i.compacted for i in after_crash) == 1  # the summary of the first batch was written

    report = compactor.compact(request)  # the task's retry
    assert report.recovered == 4
    items = store.list_items(SCOPE)
    assert all(i.compacted for i in items)
    covered = [source for i in items for source in i.compacted_from]
    assert sorted(covered) == ["i0", "i1", "i2", "i3"]  # every source covered exactly once
    assert len({i.id for i in items}) == len(items)


def test_a_source_rewritten_during_a_compaction_is_kept(store: CrashingStore, raw_redis):
    store.crashes_left = 0
    store.put_set(*SCOPE[:2], MemorySet(name="notes", capacity=2))
    now = utcnow()

    def record(item_id: str, text: str, seq: int) -> ItemRecord:
        item = MemorySetItem(
            memory_set_name="notes", id=item_id, value=text, created_time=utcnow(), last_accessed_time=now
        )
        return ItemRecord(item=item, seq=seq, vector=EMBEDDER.embed([text])[0])

    store.upsert(SCOPE, [record("a", "old a", 1), record("b", "old b", 2)])

    class RewritingSummarizer(ExtractiveSummarizer):
        def summarize(self, items, config):
            store.upsert(SCOPE, [record("a", "new a, written meanwhile", 3)])  # a write lands mid-compaction
            return super().summarize(items, config)

    compactor = _compactor(store, raw_redis)
    compactor.summarizer = RewritingSummarizer(EMBEDDER)
    compactor.compact(CompactRequest(namespace="crash", key="u", set_name="notes", force=True).model_dump(mode="json"))
    values = {str(i.value) for i in store.list_items(SCOPE) if not i.compacted}
    assert values == {"new a, written meanwhile"}
