"""An in-process vector store: exact cosine search over dicts. For unit tests and experiments; not durable."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from memory_core.models import MemorySet, MemorySetItem, Scope
from memory_core.stores.base import (
    ItemRecord,
    from_payload,
    is_visible,
    set_from_payload,
    set_to_payload,
    sort_by_seq,
    to_payload,
)


def _matches(metadata: Mapping[str, Any], filters: Mapping[str, Any]) -> bool:
    for name, expected in filters.items():
        actual = metadata.get(name)
        allowed = expected if isinstance(expected, list) else [expected]
        if isinstance(actual, list):
            # Qdrant matches an array field when any element matches; so does this store.
            if not any(_same(a, e) for a in actual for e in allowed):
                return False
        elif not any(_same(actual, e) for e in allowed):
            return False
    return True


def _same(actual: object, expected: object) -> bool:
    # bool is an int in Python but not in Qdrant's keyword/integer matching.
    return type(actual) is type(expected) and actual == expected


class InMemoryVectorStore:
    """Keeps points in dicts keyed by scope; thread-safe."""

    def __init__(self) -> None:
        self._items: dict[Scope, dict[str, tuple[dict[str, Any], np.ndarray]]] = {}
        self._sets: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()

    @property
    def location(self) -> str:
        return "memory (this process only)"

    def upsert(self, scope: Scope, records: Sequence[ItemRecord]) -> None:
        with self._lock:
            points = self._items.setdefault(scope, {})
            for record in records:
                vector = np.asarray(record.vector, dtype=np.float32)
                norm = float(np.linalg.norm(vector)) or 1.0
                points[record.item.id] = (to_payload(scope, record), vector / norm)

    def retrieve(self, scope: Scope, item_ids: Sequence[str]) -> list[MemorySetItem]:
        now = time.time()
        with self._lock:
            points = self._items.get(scope, {})
            found = [points[i][0] for i in dict.fromkeys(item_ids) if i in points]
        return sort_by_seq([(p["seq"], from_payload(p)) for p in found if is_visible(p, now)])

    def _visible(self, scope: Scope) -> list[tuple[dict[str, Any], np.ndarray]]:
        now = time.time()
        with self._lock:
            return [(p, v) for p, v in self._items.get(scope, {}).values() if is_visible(p, now)]

    def list_items(self, scope: Scope) -> list[MemorySetItem]:
        return sort_by_seq([(p["seq"], from_payload(p)) for p, _ in self._visible(scope)])

    def search(
        self, scope: Scope, vector: Sequence[float], limit: int, filters: Mapping[str, Any]
    ) -> list[MemorySetItem]:
        query = np.asarray(vector, dtype=np.float32)
        query = query / (float(np.linalg.norm(query)) or 1.0)
        candidates = [(p, v) for p, v in self._visible(scope) if _matches(p["metadata"], filters)]
        scored = sorted(((float(v @ query), p) for p, v in candidates), key=lambda sp: -sp[0])
        return [from_payload(p, score=s) for s, p in scored[:limit]]

    def count(self, scope: Scope) -> int:
        return len(self._visible(scope))

    def delete(self, scope: Scope, item_ids: Sequence[str] | None) -> None:
        with self._lock:
            if item_ids is None:
                self._items.pop(scope, None)
                return
            points = self._items.get(scope, {})
            for item_id in item_ids:
                points.pop(item_id, None)

    def put_set(self, namespace: str, key: str, definition: MemorySet) -> None:
        with self._lock:
            self._sets[(namespace, key, definition.name)] = set_to_payload(namespace, key, definition)

    def get_set(self, namespace: str, key: str, set_name: str) -> MemorySet | None:
        with self._lock:
            payload = self._sets.get((namespace, key, set_name))
        return None if payload is None else set_from_payload(payload)

    def delete_set(self, namespace: str, key: str, set_name: str) -> bool:
        with self._lock:
            return self._sets.pop((namespace, key, set_name), None) is not None

    def list_sets(self, limit: int) -> list[tuple[str, str, MemorySet]]:
        with self._lock:
            payloads = list(self._sets.values())[:limit]
        return [(p["namespace"], p["key"], set_from_payload(p)) for p in payloads]

    def sets_of(self, namespace: str, key: str) -> list[MemorySet]:
        with self._lock:
            payloads = [p for p in self._sets.values() if p["namespace"] == namespace and p["key"] == key]
        return sorted((set_from_payload(p) for p in payloads), key=lambda d: d.name)

    def set_fields(self, scope: Scope, item_ids: Sequence[str], fields: Mapping[str, Any]) -> None:
        with self._lock:
            points = self._items.get(scope, {})
            for item_id in item_ids:
                if item_id in points:
                    points[item_id][0].update(fields)

    def find_by_text_hash(self, scope: Scope, hashes: Sequence[str]) -> dict[str, MemorySetItem]:
        wanted = set(hashes)
        return {p["text_hash"]: from_payload(p) for p, _ in self._visible(scope) if p["text_hash"] in wanted}

    def expired(self, now: float, limit: int) -> list[tuple[Scope, str]]:
        with self._lock:
            found = [
                (scope, item_id)
                for scope, points in self._items.items()
                for item_id, (payload, _) in points.items()
                if not is_visible(payload, now)
            ]
        return found[:limit]

    def forget(self, namespace: str, key: str | None) -> tuple[int, list[str]]:
        def mine(ns: str, k: str) -> bool:
            return ns == namespace and (key is None or k == key)

        with self._lock:
            scopes = [s for s in self._items if mine(s.namespace, s.key)]
            items = sum(len(self._items.pop(s)) for s in scopes)
            sets = [slot for slot in self._sets if mine(slot[0], slot[1])]
            for slot in sets:
                del self._sets[slot]
        return items, [f"{k}:{name}" for _, k, name in sets]

    def delete_expired(self, now: float, limit: int) -> int:
        doomed = self.expired(now, limit)
        with self._lock:
            for scope, item_id in doomed:
                self._items.get(scope, {}).pop(item_id, None)
        return len(doomed)

    def close(self) -> None:
        """Nothing to release."""
