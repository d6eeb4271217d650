from datetime import UTC, datetime, timedelta

from memory_core.core.models import MemorySetItem
from memory_core.engine.maintenance import eviction_order

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _item(item_id: str, accessed: int, importance: float = 0.5, pinned: bool = False) -> MemorySetItem:
    return MemorySetItem(
        memory_set_name="s",
        id=item_id,
        value=item_id,
        created_time=T0,
        last_accessed_time=T0 + timedelta(seconds=accessed),
        importance=importance,
        pinned=pinned,
        seq=accessed,
    )


def test_lru_goes_by_last_read_and_skips_pinned():
    items = [_item("old", 1), _item("pinned", 0, pinned=True), _item("new", 5), _item("mid", 3)]
    assert [i.id for i in eviction_order(items, "lru")] == ["old", "mid", "new"]


def test_importance_goes_lowest_first_then_least_recently_read():
    items = [_item("a", 1, 0.9), _item("b", 2, 0.1), _item("c", 0, 0.1), _item("p", 0, 0.0, pinned=True)]
    assert [i.id for i in eviction_order(items, "importance")] == ["c", "b", "a"]
