"""L1: a per-process LRU with a time to live, bounded in entries and in bytes."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class LocalCache:
    """Evicts least recently used entries past ``max_entries`` or ``max_bytes``; larger single values are not kept.

    Like Flink Agents' fixed memory budget for its cache: the budget holds whatever is stored.
    """

    def __init__(self, *, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def size_bytes(self) -> int:
        """Bytes held (keys and values)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> bytes | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= time.monotonic():
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def set(self, key: str, value: bytes, ttl: float) -> None:
        cost = len(key) + len(value)
        if ttl <= 0 or self.max_entries == 0 or cost > self.max_bytes:
            return
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = (time.monotonic() + ttl, value)
            self._bytes += cost
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def delete(self, *keys: str) -> None:
        with self._lock:
            for key in keys:
                if key in self._entries:
                    self._drop(key)

    def delete_where(self, predicate: Callable[[str], bool]) -> int:
        """Removes every key the predicate accepts; returns how many."""
        with self._lock:
            doomed = [k for k in self._entries if predicate(k)]
            for key in doomed:
                self._drop(key)
        return len(doomed)

    def _drop(self, key: str) -> None:
        _, value = self._entries.pop(key)
        self._bytes -= len(key) + len(value)
