"""The decision every store makes before a write: is what it holds older than the write?"""

from __future__ import annotations

from memory_core.engine.stores.base import due

T = 1_795_493_355_592_605_503  # a real seq: nanoseconds since the epoch, beyond a float's precision


def test_an_upsert_applies_over_nothing_and_over_anything_older_only():
    stored = {"older": (T - 1, False), "same": (T, False), "newer": (T + 1, False), "old tomb": (T - 1, True)}
    wanted = dict.fromkeys(["absent", "older", "same", "newer", "old tomb"], T)
    assert due(stored, wanted, deleting=False) == ["absent", "older", "old tomb"]


def test_an_upsert_as_old_as_a_tombstone_is_refused():
    assert due({"a": (T, True)}, {"a": T}, deleting=False) == []
    assert due({"a": (T, True)}, {"a": T + 1}, deleting=False) == ["a"]


def test_a_delete_takes_the_version_it_read_but_not_a_newer_one_and_a_replay_changes_nothing():
    stored = {"read": (T, False), "rewritten": (T + 1, False), "replayed": (T, True), "older tomb": (T - 1, True)}
    wanted = dict.fromkeys(["read", "rewritten", "replayed", "older tomb", "never written"], T)
    assert due(stored, wanted, deleting=True) == ["read", "older tomb", "never written"]
