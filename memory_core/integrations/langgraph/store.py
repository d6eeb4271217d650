"""``MemoryCoreStore``: LangGraph's long-term store over memory-core's long-term sets (see the package docstring)."""

from __future__ import annotations

import builtins
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
    validate_op_namespace,
)

from memory_core.client import MemoryClient
from memory_core.client.aio import AsyncMemoryClient
from memory_core.core.errors import InvalidRequestError, MemorySetNotFound
from memory_core.core.models import MemorySetItem, SearchMode
from memory_core.integrations.langgraph.runner import Call, Logic, Runner

# -- the store ---------------------------------------------------------------------------------------------------

_SET = "langgraph"
_REGISTRY_KEY = "langgraph"
_REGISTRY_SET = "namespaces"
_PLAIN = re.compile(r"[A-Za-z0-9-]")
_FIELD = re.compile(r"[A-Za-z0-9_-]{1,62}")
_ESCAPED = re.compile(r"_(?:(_)|x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")
_INT64 = (-(2**63), 2**63 - 1)
_SHORT = 256
"""The longest str value copied into a filterable metadata field."""


def _escape(char: str) -> str:
    if _PLAIN.fullmatch(char):
        return char
    if char == "_":
        return "__"
    point = ord(char)
    mark, width = ("x", 2) if point < 0x100 else ("u", 4) if point < 0x10000 else ("U", 8)
    return f"_{mark}{point:0{width}x}"


def namespace_key(namespace: tuple[str, ...]) -> str:
    """The memory-core key of a LangGraph namespace (see the module docstring); ``namespace_of`` reverses it."""
    return ".".join("".join(_escape(char) for char in label) for label in namespace)


def namespace_of(key: str) -> tuple[str, ...]:
    """The LangGraph namespace whose key is ``key``."""

    def unescape(match: re.Match[str]) -> str:
        underscore, *points = match.groups()
        return "_" if underscore else chr(int(next(p for p in points if p), 16))

    return tuple(_ESCAPED.sub(unescape, label) for label in key.split("."))


def _filterable(value: object) -> str | int | None:
    """The metadata field a top-level value field is copied into, if search can filter on it (str or int)."""
    if isinstance(value, bool):
        return int(value)  # True == 1 in a LangGraph filter, so a filter on 1 must find it
    if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        return value
    if isinstance(value, float) and value.is_integer() and _INT64[0] <= value <= _INT64[1]:
        return int(value)
    if isinstance(value, str) and len(value) <= _SHORT:
        return value
    return None


def _pushed_down(filter: Mapping[str, Any] | None) -> tuple[dict[str, str | int], bool]:
    """The filters search can apply in the worker, and whether the rest needs checking in the client."""
    pushed: dict[str, str | int] = {}
    rest = False
    for name, wanted in (filter or {}).items():
        if isinstance(wanted, dict) and set(wanted) == {"$eq"}:
            wanted = wanted["$eq"]
        copied = _filterable(wanted)  # compared as the stored copies are: 1, 1.0 and True are equal, as in Python
        if copied is not None and _FIELD.fullmatch(name):
            pushed[f"f_{name}"] = copied
        else:
            rest = True
    return pushed, rest


def _compare(found: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics: exact match, nested dicts and lists, ``$eq $ne $gt $gte $lt $lte``."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(found, op, operand) for op, operand in wanted.items())
        return isinstance(found, dict) and all(_compare(found.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(found, list | tuple)
            and len(found) == len(wanted)
            and all(_compare(f, w) for f, w in zip(found, wanted, strict=True))
        )
    return bool(found == wanted)


_ORDER: dict[str, Callable[[float, float], bool]] = {"$gt": float.__gt__, "$gte": float.__ge__}
_ORDER |= {"$lt": float.__lt__, "$lte": float.__le__}


def _operator(found: Any, op: str, operand: Any) -> bool:
    if op in ("$eq", "$ne"):
        return bool(found == operand) == (op == "$eq")
    if op not in _ORDER:
        raise InvalidRequestError(f"filter operator {op!r} is not one of $eq, $ne, $gt, $gte, $lt, $lte")
    try:
        return _ORDER[op](float(found), float(operand))
    except (TypeError, ValueError):
        return False


def _matches_condition(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    # Compare from the start (prefix) or the end (suffix); the namespace may be longer than the path.
    labels = namespace if condition.match_type == "prefix" else namespace[::-1]
    wanted = path if condition.match_type == "prefix" else path[::-1]
    return all(w in ("*", label) for label, w in zip(labels[: len(wanted)], wanted, strict=True))


def _when(item: MemorySetItem) -> datetime:
    return item.created_time if isinstance(item.created_time, datetime) else item.created_time.end


class MemoryCoreStore(BaseStore):
    """A LangGraph ``BaseStore`` over long-term memory sets of ``namespace`` (see the module docstring).

    Give ``client`` for ``batch`` (and ``get``, ``put``, ``search``...), ``aclient`` for ``abatch``, or both.

    Args:
        fields: the paths whose text is indexed when a put gives no ``index`` (``["$"]``: the whole value as
            JSON). ``index=False`` stores an item that search by query leaves out; filters still find it.
        ttl: LangGraph's ``TTLConfig``; ``default_ttl`` (minutes) applies to puts without ``ttl``. An item
            expires ``ttl`` minutes after its last put: reads do not extend it (``refresh_ttl`` has no
            effect) and expired items are never returned.
        mode: how a query searches (``hybrid``: dense and BM25 fused; ``dense``; ``lexical``). A query over
            several namespaces merges their hits by score.
        capacity: the memory sets' capacity; memory-core compacts a set that reaches it (folding items into
            summaries), so it is set far above any namespace's size.

    A value is item metadata: it must fit ``MEMORY_LIMITS__MAX_METADATA_BYTES`` as JSON and nest at most
    ``MEMORY_LIMITS__MAX_METADATA_DEPTH - 1`` levels.
    """

    supports_ttl = True

    def __init__(
        self,
        namespace: str,
        *,
        client: MemoryClient | None = None,
        aclient: AsyncMemoryClient | None = None,
        fields: Sequence[str] = ("$",),
        ttl: TTLConfig | None = None,
        mode: SearchMode = "hybrid",
        capacity: int = 1_000_000,
    ) -> None:
        self.namespace = namespace
        self.fields = builtins.list(fields)
        self.ttl_config = ttl
        self.mode: SearchMode = mode
        self.capacity = capacity
        source = client if client is not None else aclient
        limits = source.settings.limits if source is not None else None
        self._max_chars = limits.max_value_chars if limits is not None else 32_000
        self._max_limit = limits.max_search_limit if limits is not None else 100
        self._runner = Runner(
            "MemoryCoreStore",
            None if client is None else lambda key: client.long_term(namespace, cast(str, key)),
            None if aclient is None else lambda key: aclient.long_term(namespace, cast(str, key)),
        )
        self._registered: set[str] = set()

    def batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """Runs the operations: reads first, in order, then the writes (the last put of a key wins)."""
        return self._runner.run(self._batch(builtins.list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """See ``batch``."""
        return await self._runner.arun(self._batch(builtins.list(ops)))

    # -- logic -------------------------------------------------------------------------------------------------

    def _batch(self, ops: builtins.list[Op]) -> Logic[builtins.list[Result]]:
        results: builtins.list[Result] = []
        writes: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, PutOp) and (not op.namespace or op.namespace[0] == "langgraph"):
                raise InvalidNamespaceError(f"cannot write to namespace {op.namespace!r}: empty, or under 'langgraph'")
            if isinstance(op, PutOp):
                writes[(op.namespace, op.key)] = op
        found = yield from self._get([op for op in ops if isinstance(op, GetOp)])
        for op in ops:
            if isinstance(op, GetOp):
                results.append(found.get((op.namespace, op.key)))
            elif isinstance(op, SearchOp):
                results.append((yield from self._search(op)))
            elif isinstance(op, ListNamespacesOp):
                results.append((yield from self._list_namespaces(op)))
            elif isinstance(op, PutOp):
                results.append(None)
            else:
                raise InvalidRequestError(f"unknown LangGraph store operation {type(op).__name__}")
        by_namespace: dict[tuple[str, ...], builtins.list[PutOp]] = {}
        for (namespace, _), op in writes.items():
            by_namespace.setdefault(namespace, []).append(op)
        for namespace, puts in by_namespace.items():
            yield from self._write(namespace, puts)
        return results

    def _get(self, gets: builtins.list[GetOp]) -> Logic[dict[tuple[tuple[str, ...], str], Item]]:
        keys: dict[tuple[str, ...], builtins.list[str]] = {}
        for op in gets:
            if op.namespace:
                keys.setdefault(op.namespace, []).append(op.key)
        if not keys:
            return {}
        calls = [Call(self._key(ns), "get", (_SET, ids), missing=[]) for ns, ids in keys.items()]
        fetched: builtins.list[builtins.list[MemorySetItem]] = yield calls
        return {(ns, i.id): _item(ns, i) for ns, items in zip(keys, fetched, strict=True) for i in items}

    def _write(self, namespace: tuple[str, ...], puts: builtins.list[PutOp]) -> Logic[None]:
        key = self._key(namespace)
        deleted = [op.key for op in puts if op.value is None]
        kept = [op for op in puts if op.value is not None]
        if deleted:
            yield Call(key, "delete", (_SET, deleted), missing=0)
        if not kept:
            return
        items, metadatas = [], []
        for op in kept:
            text = self._index_text(op)
            items.append(text or op.key)  # an item needs text; one left out of search gets its key
            metadatas.append(self._metadata(op, indexed=text is not None))
        ttls = [None if op.ttl is None else max(1, math.ceil(op.ttl * 60)) for op in kept]
        add = Call(key, "add", (_SET, items, [op.key for op in kept], metadatas), {"ttl": ttls})
        created = yield from self._add_creating(add)
        if created or key not in self._registered:  # a set made anew may follow a forget(), which empties the registry
            entry = [{"namespace": builtins.list(namespace)}]
            yield from self._add_creating(Call(_REGISTRY_KEY, "add", (_REGISTRY_SET, [key], [key], entry)))
            self._registered.add(key)

    def _add_creating(self, add: Call) -> Logic[bool]:
        """Adds, creating the set first if it does not exist yet; True if it had to be created."""
        try:
            yield add
        except MemorySetNotFound:
            yield Call(add.key, "get_or_create_memory_set", (add.args[0],), self._definition())
            yield add
            return True
        return False

    def _definition(self) -> dict[str, Any]:
        # Items are independent documents: never merged (dedup), never indexed with their neighbours.
        return {"capacity": self.capacity, "dedup": "none", "context_window": 0}

    def _search(self, op: SearchOp) -> Logic[builtins.list[SearchItem]]:
        if op.limit <= 0:
            return []
        prefix = tuple(op.namespace_prefix)
        spaces = [ns for ns in (yield from self._namespaces()) if ns[: len(prefix)] == prefix]
        if not spaces:
            return []
        calls = [Call(self._key(ns), "get", (_SET,), missing=[]) for ns in spaces]
        if op.query:
            pushed, rest = _pushed_down(op.filter)
            fetch = self._max_limit if rest else min(self._max_limit, op.offset + op.limit)
            args = (_SET, op.query, fetch, {"lg_indexed": 1, **pushed})
            calls = [c._replace(method="search", args=args, kwargs={"mode": self.mode}) for c in calls]
        fetched: builtins.list[builtins.list[MemorySetItem]] = yield calls
        hits = [(ns, item) for ns, items in zip(spaces, fetched, strict=True) for item in items]
        if op.query:
            hits.sort(key=lambda hit: -(hit[1].score or 0.0))
        else:  # newest first, as LangGraph's SQL stores list
            hits.sort(key=lambda hit: (_when(hit[1]), hit[1].seq or 0), reverse=True)
        chosen = [(ns, item) for ns, item in hits if self._matches(item, op.filter)]
        return [_search_item(ns, item) for ns, item in chosen[op.offset : op.offset + op.limit]]

    def _list_namespaces(self, op: ListNamespacesOp) -> Logic[builtins.list[tuple[str, ...]]]:
        spaces = yield from self._namespaces()
        spaces = [ns for ns in spaces if all(_matches_condition(c, ns) for c in op.match_conditions or ())]
        # The registry keeps every namespace ever written to; list those that still hold items.
        sizes = yield [Call(self._key(ns), "size", (_SET,), missing=0) for ns in spaces]
        spaces = [ns for ns, size in zip(spaces, sizes, strict=True) if size > 0]
        if op.max_depth is not None:
            spaces = [ns[: op.max_depth] for ns in spaces]
        return sorted(set(spaces))[op.offset : op.offset + op.limit]

    def _namespaces(self) -> Logic[builtins.list[tuple[str, ...]]]:
        entries: builtins.list[MemorySetItem] = yield Call(_REGISTRY_KEY, "get", (_REGISTRY_SET,), missing=[])
        return [tuple(entry.additional_metadata["namespace"]) for entry in entries]

    # -- items -------------------------------------------------------------------------------------------------

    def _key(self, namespace: tuple[str, ...]) -> str:
        key = namespace_key(namespace)
        if len(key) > 128:
            raise InvalidRequestError(
                f"namespace {namespace!r} is {len(key)} characters as a memory-core key; at most 128 are allowed"
            )
        return key

    def _index_text(self, op: PutOp) -> str | None:
        if op.index is False:
            return None
        value = dict(op.value or {})
        texts = [t for path in (self.fields if op.index is None else op.index) for t in get_text_at_path(value, path)]
        text = "\n".join(t for t in texts if t.strip())[: self._max_chars]
        return text if text.strip() else None

    def _metadata(self, op: PutOp, *, indexed: bool) -> dict[str, Any]:
        assert op.value is not None
        metadata: dict[str, Any] = {"lg_value": dict(op.value), "lg_indexed": int(indexed)}
        for name, value in op.value.items():
            copied = _filterable(value)
            if copied is not None and isinstance(name, str) and _FIELD.fullmatch(name):
                metadata[f"f_{name}"] = copied  # what search filters on in the worker
        return metadata

    @staticmethod
    def _matches(item: MemorySetItem, filter: Mapping[str, Any] | None) -> bool:
        value = item.additional_metadata.get("lg_value") or {}
        return not filter or all(_compare(value.get(k), wanted) for k, wanted in filter.items())


def _item(namespace: tuple[str, ...], item: MemorySetItem) -> Item:
    when = _when(item)
    value = dict(item.additional_metadata.get("lg_value") or {})
    return Item(value=value, key=item.id, namespace=namespace, created_at=when, updated_at=when)


def _search_item(namespace: tuple[str, ...], item: MemorySetItem) -> SearchItem:
    when = _when(item)
    value = dict(item.additional_metadata.get("lg_value") or {})
    return SearchItem(namespace, item.id, value, when, when, score=item.score)
