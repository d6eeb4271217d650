"""Hybrid search fused inside one query of the embedded engine: the oracle for ``fused_hybrid``.

Hybrid search used to be this one engine query: a dense ranker and, for each lexical ranker, its candidates
rescored BM25 + ``TIE_BREAK`` x cosine by an engine formula, all fused by the engine's DBSF. The formula
needs the lexical candidates twice (for their BM25 scores, and inside the dense stage that gives their
cosines), so the engine scanned each lexical ranker's posting lists twice. The stores now fetch each
ranking once and fuse in Python (``memory_core.engine.stores.base.fused_hybrid``); the tests hold that to
the engine's own answer, and ``ops/bench --hybrid-scale`` measures the two side by side.
"""

from __future__ import annotations

import time
from typing import Any

import qdrant_edge as qe

from memory_core.core.models import Scope
from memory_core.engine.stores import edge
from memory_core.engine.stores.base import LEXICAL, LEXICAL_FLOOR, PREFETCH, SPARSE_NAMES, TIE_BREAK

_TIE_BROKEN = qe.Formula(
    qe.Expression.Sum(
        [
            qe.Expression.Variable("$score[0]"),  # BM25: the first prefetch's score
            qe.Expression.Mult([qe.Expression.Constant(TIE_BREAK), qe.Expression.Variable("$score[1]")]),
        ]
    ),
    defaults={"$score[0]": 0.0, "$score[1]": 0.0},
)


def one_query_hybrid(store: edge.EdgeVectorStore, scope: Scope, vector: list[float], text: str, limit: int) -> Any:
    """The engine's fused hybrid search of ``scope``: its scored points, best first (fused scores, not means)."""
    visible = qe.Filter(must=list(edge._scope_filter(*scope)), must_not=[edge._expired(time.time())])
    dense = qe.Query.Nearest(vector, using="dense")
    words = edge._sparse(LEXICAL.query(text))
    depth = max(PREFETCH, limit)
    tie_broken = []
    for name in SPARSE_NAMES:
        candidates = qe.Prefetch(
            limit=depth, query=qe.Query.Nearest(words, using=name), filter=visible, score_threshold=LEXICAL_FLOOR
        )
        cosine = qe.Prefetch(limit=depth, prefetches=[candidates], query=dense)
        tie_broken.append(qe.Prefetch(limit=depth, prefetches=[candidates, cosine], query=_TIE_BROKEN))
    request = qe.QueryRequest(
        limit=limit,
        prefetches=[qe.Prefetch(limit=depth, query=dense, filter=visible), *tie_broken],
        query=qe.Fusion.Dbsf(),  # type: ignore[arg-type]  # the stubs type Fusion's variants as nested classes
        filter=visible,
        with_payload=True,
    )
    return store._items.query(request)
