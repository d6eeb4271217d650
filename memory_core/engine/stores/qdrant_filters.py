"""qdrant-client's filters: a scope, what reads may see, compare-and-set clauses, metadata matches, a browse's query."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from qdrant_client import models as qm

from memory_core.core.messages import BrowseQuery, contained_words
from memory_core.core.models import Scope
from memory_core.engine.stores.paging import EARLIEST, TEXT_INDEX_FIELDS, Bound


def scope_conditions(namespace: str, key: str, set_name: str | None = None) -> list[qm.Condition]:
    """The conditions of one key of a namespace, or of one set of it."""
    fields = [("namespace", namespace), ("key", key)] + ([("set", set_name)] if set_name is not None else [])
    return [qm.FieldCondition(key=name, match=qm.MatchValue(value=value)) for name, value in fields]


def expired(now: float) -> qm.Filter:
    """Matches items past their expiry that are not pinned; reads put it in ``must_not``."""
    return qm.Filter(
        must=[
            qm.FieldCondition(key="expires_at", range=qm.Range(lt=now)),
            qm.FieldCondition(key="pinned", match=qm.MatchValue(value=0)),
        ]
    )


TOMBSTONE = qm.FieldCondition(key="tombstone", match=qm.MatchValue(value=1))
SUPERSEDED = qm.FieldCondition(key="superseded", match=qm.MatchValue(value=1))
OWED = qm.Filter(must=[qm.FieldCondition(key="owed", match=qm.MatchValue(value=1))])


def sweepable(now: float) -> qm.Filter:
    """What the TTL sweep deletes: expired, unpinned items, and tombstones past ``keep_until``."""
    return qm.Filter(must=[expired(now)], must_not=[qm.FieldCondition(key="keep_until", range=qm.Range(gte=now))])


_NEVER = qm.FieldCondition(key="seq", match=qm.MatchValue(value=-1))
"""A clause no point matches: keeps a compare-and-set filter from being an empty ``should`` (which matches all)."""


def unchanged_since(read: Mapping[str, int]) -> qm.Filter:
    """Matches a stored point only while it still holds the ``seq`` it was read with (exact integer match).

    The ``update_filter`` of a compare-and-set upsert: the server checks and applies it per point, at
    once. A point that was absent when read gets no clause: if another worker inserted it since, this
    write skips it and the caller reads again.
    """
    clauses: list[qm.Condition] = [
        qm.Filter(must=[qm.HasIdCondition(has_id=[pid]), qm.FieldCondition(key="seq", match=qm.MatchValue(value=seq))])
        for pid, seq in read.items()
    ]
    return qm.Filter(should=[_NEVER, *clauses])


def visible_in(namespace: str, key: str, set_name: str) -> qm.Filter:
    """The items of a set that reads may see (tombstones look expired)."""
    return qm.Filter(must=scope_conditions(namespace, key, set_name), must_not=[expired(time.time())])


def metadata_conditions(filters: Mapping[str, Any]) -> list[qm.Condition]:
    """Exact matches of metadata keys, a list of values matching any of them (not indexed)."""
    conditions: list[qm.Condition] = []
    for name, expected in filters.items():
        values = expected if isinstance(expected, list) else [expected]
        alternatives: list[qm.Condition] = [
            qm.FieldCondition(key=f"metadata.{name}", match=qm.MatchValue(value=v)) for v in values
        ]
        conditions.append(alternatives[0] if len(alternatives) == 1 else qm.Filter(should=alternatives))
    return conditions


def searched(scope: Scope, filters: Mapping[str, Any], include_superseded: bool) -> qm.Filter:
    """What a search ranks: the set's visible items that match ``filters``, superseded facts only if asked."""
    hidden: list[qm.Condition] = [expired(time.time())]
    if not include_superseded:
        hidden.append(SUPERSEDED)
    return qm.Filter(must=[*scope_conditions(*scope), *metadata_conditions(filters)], must_not=hidden)


def bound(condition: Bound) -> qm.FieldCondition:
    """A paging bound as a range condition."""
    limits = qm.Range(gte=condition.gte, gt=condition.gt, lte=condition.lte, lt=condition.lt)
    return qm.FieldCondition(key=condition.field, range=limits)


def _empty(field: str) -> qm.IsEmptyCondition:
    return qm.IsEmptyCondition(is_empty=qm.PayloadField(key=field))


def browse_filters(namespace: str, key: str, set_name: str, query: BrowseQuery, now: float) -> list[qm.Filter]:
    """The visible items of a set that ``query`` lists (superseded facts included), every field but metadata
    answered from a payload index (on a server; local mode reads every point): one filter, or with ``contains`` one
    per text field (an item's text is in one of them), each read alone, as the embedded engine reads them."""
    must: list[qm.Condition] = [*scope_conditions(namespace, key, set_name), *metadata_conditions(query.metadata)]
    must_not: list[qm.Condition] = [expired(now)]
    if query.created_after is not None or query.created_before is not None:
        after = None if query.created_after is None else query.created_after.timestamp()
        before = None if query.created_before is None else query.created_before.timestamp()
        must.append(qm.FieldCondition(key="created_start", range=qm.Range(gte=after, lt=before)))
    if query.pinned is not None:
        must.append(qm.FieldCondition(key="pinned", match=qm.MatchValue(value=int(query.pinned))))
    if query.min_importance is not None or query.max_importance is not None:
        weight = qm.Range(gte=query.min_importance, lte=query.max_importance)
        must.append(qm.FieldCondition(key="importance", range=weight))
    if query.compacted is not None:  # summaries by their sources, as the embedded engine tells them
        (must_not if query.compacted else must).append(_empty("compacted_from"))
    if query.expiring or query.sort == "expires":  # items without an expiry have no place in its order
        must.append(qm.FieldCondition(key="expires_at", range=qm.Range(gte=EARLIEST)))
    if query.expiring is False:
        must.append(_empty("expires_at"))
    if query.contains is None:
        return [qm.Filter(must=must, must_not=must_not)]
    words = " ".join(contained_words(query.contains))
    texts = [qm.FieldCondition(key=field, match=qm.MatchText(text=words)) for field in TEXT_INDEX_FIELDS]
    return [qm.Filter(must=[*must, text], must_not=must_not) for text in texts]
