import time

from memory_core.core.cache.local import LocalCache


def test_entries_beyond_the_count_evict_the_least_recently_used():
    cache = LocalCache(max_entries=2, max_bytes=10_000)
    cache.set("a", b"1", 60)
    cache.set("b", b"2", 60)
    assert cache.get("a") == b"1"  # a is now the most recent
    cache.set("c", b"3", 60)
    assert cache.get("b") is None
    assert cache.get("a") == b"1"
    assert cache.get("c") == b"3"
    assert len(cache) == 2


def test_the_byte_budget_is_respected_and_oversize_values_are_not_cached():
    cache = LocalCache(max_entries=100, max_bytes=50)
    cache.set("big", b"x" * 60, 60)
    assert cache.get("big") is None
    for i in range(10):
        cache.set(f"k{i}", b"y" * 10, 60)
        assert cache.size_bytes <= 50
    assert cache.get("k9") == b"y" * 10
    assert cache.get("k0") is None


def test_entries_expire_after_their_ttl():
    cache = LocalCache(max_entries=10, max_bytes=1000)
    cache.set("a", b"1", 0.05)
    assert cache.get("a") == b"1"
    time.sleep(0.06)
    assert cache.get("a") is None
    assert cache.size_bytes == 0


def test_overwriting_a_key_keeps_the_accounting_right():
    cache = LocalCache(max_entries=10, max_bytes=1000)
    cache.set("a", b"1234", 60)
    cache.set("a", b"12", 60)
    assert cache.size_bytes == len("a") + 2
    cache.delete("a", "missing")
    assert cache.size_bytes == 0
