"""An in-process vector store: exact search over dicts. For unit tests and experiments; not durable.

It is the reference double of the engine: dense search is exact cosine, lexical search is
BM25 with IDF over every point it holds (as the engine's ``Idf`` modifier does over a shard),
and hybrid search fuses the rankers' top candidates as the other stores do (``fused_hybrid``: DBSF, its
lexical rankers' BM25 near-ties broken by cosine).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.core.errors import ConfigurationError
from memory_core.core.messages import BrowseQuery, Explained
from memory_core.core.models import MemorySet, MemorySetItem, Scope, SearchMode
from memory_core.engine.embedders.base import EmbedderFingerprint
from memory_core.engine.stores.base import (
    HYBRID_RANKERS,
    LEXICAL,
    LEXICAL_FLOOR,
    PREFETCH,
    SPARSE_CONTEXT,
    SPARSE_TEXT,
    TOMBSTONE_TTL,
    ItemRecord,
    SparseVector,
    dbsf,
    due,
    from_payload,
    fused_hybrid,
    is_superseded,
    is_visible,
    newest_records,
    oldest_by_hash,
    previous_texts,
    set_from_payload,
    set_to_payload,
    sort_by_seq,
    to_payload,
    with_context,
)
from memory_core.engine.stores.paging import (
    browse_page,
    exact_page,
    explained,
    explained_dense,
    hybrid_parts,
    lexical_parts,
    matches,
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


_SPARSE = "__sparse"  # where this store keeps a point's BM25 vectors (from_payload ignores it)


def _same(actual: object, expected: object) -> bool:
    # bool is an int in Python but not in Qdrant's keyword/integer matching.
    return type(actual) is type(expected) and actual == expected


class InMemoryVectorStore:
    """Keeps points in dicts keyed by scope, tombstones (``seq``, ``keep_until``) beside them; thread-safe."""

    def __init__(self, *, tombstone_ttl: float = TOMBSTONE_TTL, fingerprint: EmbedderFingerprint | None = None) -> None:
        """``fingerprint``: the embedder's, recorded at once (the store starts empty, so nothing can differ)."""
        self._items: dict[Scope, dict[str, tuple[dict[str, Any], np.ndarray]]] = {}
        self._tombstones: dict[Scope, dict[str, tuple[int, float]]] = {}
        self._sets: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._tombstone_ttl = tombstone_ttl
        self._fingerprint = fingerprint

    def recorded_fingerprint(self) -> EmbedderFingerprint | None:
        return self._fingerprint

    def record_fingerprint(self, fingerprint: EmbedderFingerprint) -> None:
        self._fingerprint = fingerprint

    def _due(self, scope: Scope, wanted: Mapping[str, int], *, deleting: bool) -> set[str]:
        """The item ids whose write applies over what is stored (``due``); call with the lock held."""
        stored = {i: (p["seq"], False) for i, (p, _) in self._items.get(scope, {}).items() if i in wanted}
        stored.update((i, (seq, True)) for i, (seq, _) in self._tombstones.get(scope, {}).items() if i in wanted)
        return set(due(stored, wanted, deleting=deleting))

    @property
    def location(self) -> str:
        return "memory (this process only)"

    def upsert(self, scope: Scope, records: Sequence[ItemRecord], *, context_window: int = 0) -> None:
        records = newest_records(records)
        if not records:
            return
        with self._lock:
            points = self._items.setdefault(scope, {})
            before = previous_texts([p for p, _ in points.values()], min(r.seq for r in records), context_window)
            applied = self._due(scope, {r.item.id: r.seq for r in records}, deleting=False)
            for record, previous in with_context(records, before, context_window):
                if record.item.id not in applied:
                    continue  # something as new or newer is stored: a replayed or late write changes nothing
                self._tombstones.get(scope, {}).pop(record.item.id, None)
                vector = np.asarray(record.vector, dtype=np.float32)
                norm = float(np.linalg.norm(vector)) or 1.0
                payload = to_payload(scope, record)
                payload[_SPARSE] = LEXICAL.item_vectors(str(record.item.value), previous)
                points[record.item.id] = (payload, vector / norm)

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
        self,
        scope: Scope,
        vector: Sequence[float],
        limit: int,
        filters: Mapping[str, Any],
        *,
        text: str | None = None,
        mode: SearchMode = "dense",
        include_superseded: bool = False,
    ) -> list[MemorySetItem]:
        by_id, dense, lexical = self._rankings(scope, vector, limit, filters, text, include_superseded)
        if mode == "dense" or not text or not text.strip():
            return [from_payload(by_id[i], score=s) for i, s in dense[:limit]]
        if mode == "hybrid":  # BM25 near-ties go to the item closest in meaning, as the stores' fusion does
            best = fused_hybrid(dense, lexical, dict(dense), limit)
            return [from_payload(by_id[i], score=min(1.0, s / HYBRID_RANKERS)) for i, s in best]
        best = dbsf(lexical)[:limit]
        return [from_payload(by_id[i], score=min(1.0, s / len(lexical))) for i, s in best]

    def explain(
        self,
        scope: Scope,
        vector: Sequence[float],
        limit: int,
        filters: Mapping[str, Any],
        *,
        text: str,
        mode: SearchMode = "hybrid",
        include_superseded: bool = False,
    ) -> list[Explained]:
        if mode == "dense" or not text.strip():
            return explained_dense(self.search(scope, vector, limit, filters, include_superseded=include_superseded))
        by_id, dense, lexical = self._rankings(scope, vector, limit, filters, text, include_superseded)
        best = hybrid_parts(dense, lexical, dict(dense), limit) if mode == "hybrid" else lexical_parts(lexical, limit)
        return explained(best, by_id)

    def _rankings(
        self,
        scope: Scope,
        vector: Sequence[float],
        limit: int,
        filters: Mapping[str, Any],
        text: str | None,
        include_superseded: bool,
    ) -> tuple[dict[str, dict[str, Any]], list[tuple[str, float]], list[list[tuple[str, float]]]]:
        """The candidates by id, the dense ranking (every candidate, by cosine) and, with ``text``, each lexical
        ranker's best ``max(PREFETCH, limit)`` by BM25."""
        query = np.asarray(vector, dtype=np.float32)
        query = query / (float(np.linalg.norm(query)) or 1.0)
        candidates = [
            (p, v)
            for p, v in self._visible(scope)
            if _matches(p["metadata"], filters) and (include_superseded or not is_superseded(p))
        ]
        dense = sorted(((p["item_id"], float(v @ query)) for p, v in candidates), key=lambda ranked: -ranked[1])
        by_id = {p["item_id"]: p for p, _ in candidates}
        if not text or not text.strip():
            return by_id, dense, []
        words = LEXICAL.query(text)
        rankings = [self._bm25(words, [p for p, _ in candidates], name) for name in (SPARSE_TEXT, SPARSE_CONTEXT)]
        depth = max(PREFETCH, limit)
        return by_id, dense, [[(i, s) for s, i in ranking[:depth]] for ranking in rankings]

    def page_items(
        self, scope: Scope, query: BrowseQuery, cursor: str | None, limit: int
    ) -> tuple[list[MemorySetItem], str | None]:
        matching = self._matching(scope, query)
        return browse_page(
            scope,
            query,
            cursor,
            limit,
            lambda field, after, count: exact_page(matching, field, query.descending, after, count),
        )

    def count_matching(self, scope: Scope, query: BrowseQuery) -> int:
        return len(self._matching(scope, query))

    def _matching(self, scope: Scope, query: BrowseQuery) -> list[dict[str, Any]]:
        return [p for p, _ in self._visible(scope) if _matches(p["metadata"], query.metadata) and matches(p, query)]

    def _bm25(self, words: SparseVector, payloads: list[dict[str, Any]], name: str) -> list[tuple[float, str]]:
        """BM25 of ``words`` over ``payloads``, with IDF over every point of the store (as the engine does)."""
        with self._lock:
            every = [p[_SPARSE][name] for points in self._items.values() for p, _ in points.values()]
        total = len(every)
        ranked = []
        wanted = set(words.indices)
        frequency = {t: sum(1 for v in every if t in v.indices) for t in wanted}
        idf = {t: float(np.log(1 + (total - n + 0.5) / (n + 0.5))) for t, n in frequency.items()}
        for payload in payloads:
            weights = dict(zip(payload[_SPARSE][name].indices, payload[_SPARSE][name].values, strict=True))
            score = sum(idf[t] * weights[t] for t in wanted if t in weights)
            if score >= LEXICAL_FLOOR:
                ranked.append((score, payload["item_id"]))
        return sorted(ranked, key=lambda si: -si[0])

    def count(self, scope: Scope) -> int:
        return len(self._visible(scope))

    def delete(self, scope: Scope, versions: Mapping[str, int]) -> None:
        keep_until = time.time() + self._tombstone_ttl
        with self._lock:
            for item_id in self._due(scope, versions, deleting=True):  # an item rewritten since stays
                seq = versions[item_id]
                self._items.get(scope, {}).pop(item_id, None)
                self._tombstones.setdefault(scope, {})[item_id] = (seq, keep_until)

    def item_versions(self, scope: Scope) -> dict[str, int]:
        with self._lock:
            return {item_id: payload["seq"] for item_id, (payload, _) in self._items.get(scope, {}).items()}

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

    def namespace_counts(self, limit: int) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self._lock:
            for scope, points in self._items.items():
                counts[scope.namespace] = counts.get(scope.namespace, 0) + len(points)
        return dict(sorted(counts.items(), key=lambda pair: -pair[1])[:limit])

    def item_vectors(self, scope: Scope, item_ids: Sequence[str]) -> dict[str, list[float]]:
        with self._lock:
            points = self._items.get(scope, {})
            return {i: [float(x) for x in points[i][1]] for i in dict.fromkeys(item_ids) if i in points}

    def snapshot(self, target: Path) -> list[str]:
        raise ConfigurationError("the in-memory store keeps nothing to snapshot")

    def optimize(self) -> bool:
        return False  # exact search: there is no index to build

    def set_fields(
        self, scope: Scope, item_ids: Sequence[str], fields: Mapping[str, Any], *, seq: int | None = None
    ) -> None:
        with self._lock:
            points = self._items.get(scope, {})
            for item_id in item_ids:
                if item_id in points and (seq is None or points[item_id][0]["seq"] == seq):
                    points[item_id][0].update(fields)

    def find_by_text_hash(self, scope: Scope, hashes: Sequence[str]) -> dict[str, MemorySetItem]:
        wanted = set(hashes)
        return oldest_by_hash(p for p, _ in self._visible(scope) if p["text_hash"] in wanted)

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
            for scope in [s for s in self._tombstones if mine(s.namespace, s.key)]:
                del self._tombstones[scope]
            sets = [slot for slot in self._sets if mine(slot[0], slot[1])]
            for slot in sets:
                del self._sets[slot]
        return items, [f"{k}:{name}" for _, k, name in sets]

    def delete_expired(self, now: float, limit: int) -> int:
        doomed = self.expired(now, limit)
        with self._lock:
            for scope, item_id in doomed:
                self._items.get(scope, {}).pop(item_id, None)
            swept = 0
            for tombstones in self._tombstones.values():
                for item_id in [i for i, (_, keep_until) in tombstones.items() if keep_until < now]:
                    if len(doomed) + swept >= limit:
                        break
                    del tombstones[item_id]
                    swept += 1
        return len(doomed) + swept

    def close(self) -> None:
        """Nothing to release."""
