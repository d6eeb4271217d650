"""The embedded engine's filters: a scope, what reads may see, metadata matches, and a browse's query."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import qdrant_edge as qe

from memory_core.core.messages import BrowseQuery, contained_words
from memory_core.core.models import Scope
from memory_core.engine.stores.paging import EARLIEST, TEXT_INDEX_FIELDS, Bound


def scope_filter(namespace: str, key: str, set_name: str | None = None) -> list[qe.FieldCondition]:
    """The conditions of one key of a namespace, or of one set of it."""
    conditions = [
        qe.FieldCondition(key="namespace", match=qe.MatchValue(namespace)),
        qe.FieldCondition(key="key", match=qe.MatchValue(key)),
    ]
    if set_name is not None:
        conditions.append(qe.FieldCondition(key="set", match=qe.MatchValue(set_name)))
    return conditions


def expired(now: float) -> qe.Filter:
    """Matches items past their expiry that are not pinned; reads put it in ``must_not``."""
    return qe.Filter(
        must=[
            qe.FieldCondition(key="expires_at", range=qe.RangeFloat(lt=now)),
            qe.FieldCondition(key="pinned", match=qe.MatchValue(0)),
        ]
    )


TOMBSTONE = qe.FieldCondition(key="tombstone", match=qe.MatchValue(1))
SUPERSEDED = qe.FieldCondition(key="superseded", match=qe.MatchValue(1))
OWED = qe.Filter(must=[qe.FieldCondition(key="owed", match=qe.MatchValue(1))])


def sweepable(now: float) -> qe.Filter:
    """What the TTL sweep deletes: expired, unpinned items, and tombstones past ``keep_until``."""
    return qe.Filter(must=[expired(now)], must_not=[qe.FieldCondition(key="keep_until", range=qe.RangeFloat(gte=now))])


def visible_in(namespace: str, key: str, set_name: str) -> qe.Filter:
    """The items of a set that reads may see (tombstones look expired)."""
    return qe.Filter(must=list(scope_filter(namespace, key, set_name)), must_not=[expired(time.time())])


def metadata_conditions(filters: Mapping[str, Any]) -> list[qe.FieldCondition | qe.Filter]:
    """Exact matches of metadata keys, a list of values matching any of them (not indexed: read point by point)."""
    conditions: list[qe.FieldCondition | qe.Filter] = []
    for name, expected in filters.items():
        values = expected if isinstance(expected, list) else [expected]
        alternatives = [qe.FieldCondition(key=f"metadata.{name}", match=qe.MatchValue(v)) for v in values]
        conditions.append(alternatives[0] if len(alternatives) == 1 else qe.Filter(should=list(alternatives)))
    return conditions


def searched(scope: Scope, filters: Mapping[str, Any], include_superseded: bool) -> qe.Filter:
    """What a search ranks: the set's visible items that match ``filters``, superseded facts only if asked."""
    hidden: list[Any] = [expired(time.time())] + ([] if include_superseded else [SUPERSEDED])
    return qe.Filter(must=[*scope_filter(*scope), *metadata_conditions(filters)], must_not=hidden)


def bound(condition: Bound) -> qe.FieldCondition:
    """A paging bound as the engine's range condition."""
    limits = qe.RangeFloat(gte=condition.gte, gt=condition.gt, lte=condition.lte, lt=condition.lt)
    return qe.FieldCondition(key=condition.field, range=limits)


def browse_filters(namespace: str, key: str, set_name: str, query: BrowseQuery, now: float) -> list[qe.Filter]:
    """The visible items of a set that ``query`` lists (superseded facts included), every field but metadata
    answered from a payload index: one filter, or with ``contains`` one per text field (an item's text is in one
    of them), each read alone. The engine plans a ``should`` over two text indexes as a walk of the whole set:
    4.5 ms at 100k items where each alone takes 0.2 ms."""
    must: list[Any] = [*scope_filter(namespace, key, set_name), *metadata_conditions(query.metadata)]
    must_not: list[Any] = [expired(now)]
    if query.created_after is not None or query.created_before is not None:
        after = None if query.created_after is None else query.created_after.timestamp()
        before = None if query.created_before is None else query.created_before.timestamp()
        must.append(qe.FieldCondition(key="created_start", range=qe.RangeFloat(gte=after, lt=before)))
    if query.pinned is not None:
        must.append(qe.FieldCondition(key="pinned", match=qe.MatchValue(int(query.pinned))))
    if query.min_importance is not None or query.max_importance is not None:
        weight = qe.RangeFloat(gte=query.min_importance, lte=query.max_importance)
        must.append(qe.FieldCondition(key="importance", range=weight))
    if query.compacted is not None:  # summaries by their sources: the engine cannot match the ``compacted`` bool
        (must_not if query.compacted else must).append(qe.IsEmptyCondition("compacted_from"))
    if query.expiring or query.sort == "expires":  # items without an expiry have no place in its order
        must.append(qe.FieldCondition(key="expires_at", range=qe.RangeFloat(gte=EARLIEST)))
    if query.expiring is False:
        must.append(qe.IsEmptyCondition("expires_at"))
    if query.contains is None:
        return [qe.Filter(must=must, must_not=must_not)]
    words = " ".join(contained_words(query.contains))
    texts = [qe.FieldCondition(key=field, match=qe.MatchText(words)) for field in TEXT_INDEX_FIELDS]
    return [qe.Filter(must=[*must, text], must_not=must_not) for text in texts]
