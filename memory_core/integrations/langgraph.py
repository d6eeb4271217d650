"""LangGraph's checkpointer and long-term store over memory-core (``pip install 'memory-core[langgraph]'``).

    saver = MemoryCoreSaver("acme", client=client)          # aclient= for ainvoke/astream
    store = MemoryCoreStore("acme", client=client)
    graph = builder.compile(checkpointer=saver, store=store)

``MemoryCoreSaver`` keeps LangGraph's checkpoints in the checkpoint tier (Redis, JSON only):

* A LangGraph thread is a checkpoint thread of the saver's namespace (``thread_key``). A thread id that is
  not a memory-core key (letters, digits, ``_ . -``, at most 128) is stored as ``b64.`` + its URL-safe
  base64, and so is one that already starts with ``b64.``, so no two thread ids share a key.
* Each checkpoint is one tier snapshot: the checkpoint, each channel value and the metadata, each
  serialized by the saver's ``serde`` and kept as ``[type, base64]`` pairs in the snapshot's JSON (a
  ``pickle`` type is refused both ways). Every snapshot holds the whole state: no shared channel blobs
  that trimming or a TTL could take from a checkpoint still kept.
* The writes of checkpoint ``c`` in ``checkpoint_ns`` ``ns`` are snapshots of their own, one per
  ``(task_id, idx)``, in the checkpoint namespace ``ns + "\\x00writes\\x00" + c`` of the same thread
  (LangGraph never puts a NUL in a checkpoint namespace), so ``delete_thread`` and the tier's TTL and
  ``client.forget(namespace, key=thread)`` cover them too.
* ``list`` filters metadata in the client, after the tier's newest-first listing and ``before`` cursor.

``MemoryCoreStore`` keeps LangGraph's items in long-term memory sets of the store's namespace:

* A LangGraph namespace (a tuple of labels) is the memory-core key made of its labels joined by ``.``
  (labels never hold one), each label escaped to ``[A-Za-z0-9_-]``: ``_`` is ``__`` and any other
  character ``_xHH``, ``_uHHHH`` or ``_UHHHHHHHH`` (its code point): ``("users", "a@b")`` is
  ``users.a_x40b``. Reversible (``namespace_of``) and unambiguous. Its items are the set ``langgraph``.
* An item's id is the LangGraph key. Its value dict is the item metadata ``lg_value``; its text, which is
  what search indexes, is the text of the ``fields`` (``["$"]``: the value as JSON) or of ``PutOp.index``.
* ``list_namespaces`` and prefix searches read a registry: the set ``namespaces`` of the key ``langgraph``
  (a namespace LangGraph refuses to write to), one item per namespace ever written.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import logging
import math
import random
import re
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
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
from memory_core.core import steps
from memory_core.core.errors import ConfigurationError, InvalidRequestError, MemorySetNotFound
from memory_core.core.models import MemorySetItem, SearchMode
from memory_core.tiers.checkpoints import Checkpoint as Snapshot

logger = logging.getLogger(__name__)

T = TypeVar("T")

# -- running one logic blocking or awaited ---------------------------------------------------------------------

_RAISE: Any = object()


class _Call(NamedTuple):
    """``method`` of the long-term handle of ``key`` (of the saver's tier: None); ``missing``, when given, is
    its result if the memory set does not exist (instead of ``MemorySetNotFound``)."""

    key: str | None
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = MappingProxyType({})
    missing: Any = _RAISE


# A logic yields calls (a list of them runs concurrently when awaited) and gets their results back, or the
# memory-core error a call raised; the same logic serves the blocking and the async methods.
_Logic = Generator[_Call | builtins.list[_Call], Any, T]


class _Runner:
    """Performs a logic on handles of a ``MemoryClient`` (blocking) or of an ``AsyncMemoryClient`` (awaited)."""

    def __init__(
        self, owner: str, blocking: Callable[[str | None], Any] | None, awaited: Callable[[str | None], Any] | None
    ) -> None:
        if blocking is None and awaited is None:
            raise ConfigurationError(f"{owner} needs client= (a MemoryClient), aclient= (an AsyncMemoryClient) or both")
        self._owner, self._blocking, self._awaited = owner, blocking, awaited

    def run(self, logic: _Logic[T]) -> T:
        if self._blocking is None:
            raise ConfigurationError(f"this {self._owner} has no client=: pass a MemoryClient for the blocking methods")
        handle = self._blocking

        def one(call: _Call) -> Any:
            try:
                return getattr(handle(call.key), call.method)(*call.args, **call.kwargs)
            except MemorySetNotFound:
                if call.missing is _RAISE:
                    raise
                return call.missing

        def perform(step: _Call | builtins.list[_Call]) -> Any:
            calls = step if isinstance(step, builtins.list) else [step]
            results = [one(c) for c in calls]
            return results if calls is step else results[0]

        return steps.run(logic, perform)

    async def arun(self, logic: _Logic[T]) -> T:
        if self._awaited is None:
            raise ConfigurationError(f"this {self._owner} has no aclient=: pass an AsyncMemoryClient for async methods")
        handle = self._awaited

        async def one(call: _Call) -> Any:
            try:
                return await getattr(handle(call.key), call.method)(*call.args, **call.kwargs)
            except MemorySetNotFound:
                if call.missing is _RAISE:
                    raise
                return call.missing

        async def perform(step: _Call | builtins.list[_Call]) -> Any:
            calls = step if isinstance(step, builtins.list) else [step]
            results = builtins.list(await asyncio.gather(*map(one, calls)))
            return results if calls is step else results[0]

        return await steps.run_async(logic, perform)


# -- the checkpointer --------------------------------------------------------------------------------------------

_FORMAT = 1
"""The layout version of the snapshots the saver writes."""

_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_ENCODED = "b64."
_WRITES = "\x00writes\x00"
_PAGE = 100
"""Checkpoints read per tier call while a metadata filter is applied."""


def thread_key(thread_id: object) -> str:
    """The memory-core key a LangGraph thread id is stored under (see the module docstring)."""
    text = str(thread_id)
    if _KEY.fullmatch(text) and text.strip(".") and not text.startswith(_ENCODED):
        return text
    return _ENCODED + base64.urlsafe_b64encode(text.encode()).decode("ascii").rstrip("=")


def _pack(serde: SerializerProtocol, value: Any) -> builtins.list[str]:
    kind, data = serde.dumps_typed(value)
    if kind == "pickle":
        raise InvalidRequestError(f"the saver's serde pickled a {type(value).__name__}; memory-core stores no pickle")
    return [kind, base64.b64encode(data).decode("ascii")]


def _unpack(serde: SerializerProtocol, packed: Sequence[str]) -> Any:
    kind, data = packed
    if kind == "pickle":  # never written by this saver: unpickling what Redis holds would run its code
        raise InvalidRequestError("a stored checkpoint value is a pickle; memory-core never loads one")
    return serde.loads_typed((kind, base64.b64decode(data)))


def _writes_ns(checkpoint_ns: str, checkpoint_id: str) -> str:
    return f"{checkpoint_ns}{_WRITES}{checkpoint_id}"


class MemoryCoreSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer over the checkpoint tier of ``namespace``.

    Give ``client`` for the blocking methods (``invoke``, ``stream``), ``aclient`` for the ``a``-prefixed ones,
    or both. Checkpoints expire ``MEMORY_CHECKPOINTS__TTL`` seconds after their thread's last write, and past
    ``MEMORY_CHECKPOINTS__MAX_PER_THREAD`` per thread and checkpoint namespace the oldest go. A snapshot may
    hold ``4 * MEMORY_LIMITS__MAX_VALUE_CHARS`` bytes of JSON (serialized values grow by a third in base64).

    Listing needs a thread id (the tier lists per thread), and a config without ``checkpoint_ns`` lists the
    root namespace. Newest first means last written first.
    """

    def __init__(
        self,
        namespace: str,
        *,
        client: MemoryClient | None = None,
        aclient: AsyncMemoryClient | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.namespace = namespace
        tier = client.checkpoints(namespace) if client is not None else None
        atier = aclient.checkpoints(namespace) if aclient is not None else None
        blocking = None if tier is None else lambda _: tier
        self._runner = _Runner("MemoryCoreSaver", blocking, None if atier is None else lambda _: atier)

    # -- blocking ----------------------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` (its ``checkpoint_id``, else the newest), with its pending writes."""
        return self._runner.run(self._get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The thread's checkpoints, newest first; ``filter`` matches metadata values exactly."""
        yield from self._runner.run(self._list(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Stores the checkpoint; its parent is the ``checkpoint_id`` of ``config``."""
        return self._runner.run(self._put(config, checkpoint, metadata))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Stores a task's writes for the checkpoint of ``config``; a write already stored is kept as it is."""
        self._runner.run(self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Deletes every checkpoint and write of the thread, in every checkpoint namespace."""
        self._runner.run(self._delete_thread(thread_id))

    # -- async -------------------------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """See ``get_tuple``."""
        return await self._runner.arun(self._get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """See ``list``."""
        for found in await self._runner.arun(self._list(config, filter, before, limit)):
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """See ``put``."""
        return await self._runner.arun(self._put(config, checkpoint, metadata))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """See ``put_writes``."""
        await self._runner.arun(self._put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """See ``delete_thread``."""
        await self._runner.arun(self._delete_thread(thread_id))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A version greater than ``current``: a zero-padded counter and a random fraction, as LangGraph's own."""
        number = 0 if current is None else current if isinstance(current, int) else int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"  # a tiebreak between forks, not a secret

    # -- logic -------------------------------------------------------------------------------------------------

    @staticmethod
    def _where(config: RunnableConfig | None) -> tuple[str, str, str]:
        """The thread id as given, its memory-core key, and the checkpoint namespace of ``config``."""
        configurable = (config or {}).get("configurable") or {}
        if (thread_id := configurable.get("thread_id")) is None:
            raise InvalidRequestError("MemoryCoreSaver needs configurable.thread_id: checkpoints are listed per thread")
        return thread_id, thread_key(thread_id), configurable.get("checkpoint_ns") or ""

    def _put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> _Logic[RunnableConfig]:
        thread_id, thread, ns = self._where(config)
        parent = get_checkpoint_id(config)
        body: dict[str, Any] = dict(checkpoint)
        values = body.pop("channel_values", None) or {}
        full = get_checkpoint_metadata(config, metadata)
        snapshot = {
            "format": _FORMAT,
            # Given no parent, the tier would link the thread's newest checkpoint: LangGraph's own is kept here.
            "parent_id": parent,
            "checkpoint": _pack(self.serde, body),
            "channel_values": {name: _pack(self.serde, value) for name, value in values.items()},
            "metadata": _pack(self.serde, full),
        }
        # The tier's own metadata shows a little of it, to people and tools that read the tier directly.
        shown = {k: v for k, v in full.items() if k in ("source", "step", "run_id") and isinstance(v, str | int)}
        options = {"checkpoint_ns": ns, "checkpoint_id": checkpoint["id"], "parent_id": parent, "metadata": shown}
        yield _Call(None, "put", (thread, snapshot), options)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> _Logic[None]:
        _, thread, ns = self._where(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            raise InvalidRequestError("put_writes needs a config with configurable.checkpoint_id")
        where = _writes_ns(ns, checkpoint_id)
        stored: builtins.list[Snapshot] = yield _Call(None, "list", (thread,), {"checkpoint_ns": where})
        have = {s.id for s in stored}
        calls = []
        for position, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, position)
            write_id = f"{task_id}.{idx}"
            if idx >= 0 and write_id in have:
                continue  # a retried task: its first writes stand (special channels are replaced)
            write = {"task_id": task_id, "idx": idx, "channel": channel, "task_path": task_path}
            write["value"] = _pack(self.serde, value)
            options = {"checkpoint_ns": where, "checkpoint_id": write_id, "parent_id": checkpoint_id}
            calls.append(_Call(None, "put", (thread, write), options))
        if calls:
            yield calls

    def _delete_thread(self, thread_id: str) -> _Logic[None]:
        yield _Call(None, "delete_thread", (thread_key(thread_id),))

    def _get_tuple(self, config: RunnableConfig) -> _Logic[CheckpointTuple | None]:
        thread_id, thread, ns = self._where(config)
        saved: Snapshot | None = yield _Call(None, "get", (thread, get_checkpoint_id(config)), {"checkpoint_ns": ns})
        if saved is None:
            return None
        writes = yield self._writes_call(thread, ns, saved.id)
        return self._tuple(thread_id, saved, self._metadata(saved), writes)

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> _Logic[builtins.list[CheckpointTuple]]:
        thread_id, thread, ns = self._where(config)
        if limit is not None and limit <= 0:
            return []
        cursor = get_checkpoint_id(before) if before else None
        only = get_checkpoint_id(config) if config else None
        if only is not None:
            saved = yield _Call(None, "get", (thread, only), {"checkpoint_ns": ns})
            page = [saved] if saved is not None and (cursor is None or saved.id < cursor) else []
            found = [(s, self._metadata(s)) for s in page]
        else:
            found = yield from self._newest(thread, ns, cursor, filter, limit)
        found = [(s, m) for s, m in found if _matches_metadata(m, filter)][:limit]
        writes = yield [self._writes_call(thread, ns, s.id) for s, _ in found]
        return [self._tuple(thread_id, s, m, w) for (s, m), w in zip(found, writes, strict=True)]

    def _newest(
        self, thread: str, ns: str, cursor: str | None, filter: dict[str, Any] | None, limit: int | None
    ) -> _Logic[builtins.list[tuple[Snapshot, dict[str, Any]]]]:
        """Checkpoints after ``cursor``, newest first, until ``limit`` of them match ``filter``."""
        found: builtins.list[tuple[Snapshot, dict[str, Any]]] = []
        matched = 0
        while limit is None or matched < limit:
            want = _PAGE if filter else limit
            page: builtins.list[Snapshot] = yield _Call(
                None, "list", (thread,), {"checkpoint_ns": ns, "limit": want, "before": cursor}
            )
            if not page and cursor is not None and not found:
                known = yield _Call(None, "get", (thread, cursor), {"checkpoint_ns": ns})
                if known is None:
                    # A cursor the tier does not know (trimmed, or from elsewhere): ids order checkpoints too.
                    everything: builtins.list[Snapshot] = yield _Call(None, "list", (thread,), {"checkpoint_ns": ns})
                    return [(s, self._metadata(s)) for s in everything if s.id < cursor]
            for saved in page:
                metadata = self._metadata(saved)
                found.append((saved, metadata))
                matched += _matches_metadata(metadata, filter)
            if want is None or len(page) < want:
                break
            cursor = page[-1].id
        return found

    @staticmethod
    def _writes_call(thread: str, ns: str, checkpoint_id: str) -> _Call:
        return _Call(None, "list", (thread,), {"checkpoint_ns": _writes_ns(ns, checkpoint_id)})

    def _metadata(self, saved: Snapshot) -> dict[str, Any]:
        if saved.checkpoint.get("format") != _FORMAT:
            raise InvalidRequestError(
                f"checkpoint {saved.id!r} of thread {saved.thread_id!r} was not written by MemoryCoreSaver "
                f"(format {saved.checkpoint.get('format')!r}, expected {_FORMAT})"
            )
        metadata: dict[str, Any] = _unpack(self.serde, saved.checkpoint["metadata"])
        return metadata

    def _tuple(
        self, thread_id: Any, saved: Snapshot, metadata: dict[str, Any], writes: Iterable[Snapshot]
    ) -> CheckpointTuple:
        snapshot = saved.checkpoint
        checkpoint = _unpack(self.serde, snapshot["checkpoint"])
        checkpoint["channel_values"] = {k: _unpack(self.serde, v) for k, v in snapshot["channel_values"].items()}
        where = {"thread_id": thread_id, "checkpoint_ns": saved.checkpoint_ns}
        parent = snapshot.get("parent_id")
        pending = sorted(
            (w.checkpoint for w in writes), key=lambda w: writes_sort_key(w["task_path"], w["task_id"], w["idx"])
        )
        return CheckpointTuple(
            config={"configurable": {**where, "checkpoint_id": saved.id}},
            checkpoint=checkpoint,
            metadata=cast(CheckpointMetadata, metadata),
            parent_config={"configurable": {**where, "checkpoint_id": parent}} if parent else None,
            pending_writes=[(w["task_id"], w["channel"], _unpack(self.serde, w["value"])) for w in pending],
        )


def _matches_metadata(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(metadata.get(k) == v for k, v in filter.items())


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
        self._runner = _Runner(
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

    def _batch(self, ops: builtins.list[Op]) -> _Logic[builtins.list[Result]]:
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

    def _get(self, gets: builtins.list[GetOp]) -> _Logic[dict[tuple[tuple[str, ...], str], Item]]:
        keys: dict[tuple[str, ...], builtins.list[str]] = {}
        for op in gets:
            if op.namespace:
                keys.setdefault(op.namespace, []).append(op.key)
        if not keys:
            return {}
        calls = [_Call(self._key(ns), "get", (_SET, ids), missing=[]) for ns, ids in keys.items()]
        fetched: builtins.list[builtins.list[MemorySetItem]] = yield calls
        return {(ns, i.id): _item(ns, i) for ns, items in zip(keys, fetched, strict=True) for i in items}

    def _write(self, namespace: tuple[str, ...], puts: builtins.list[PutOp]) -> _Logic[None]:
        key = self._key(namespace)
        deleted = [op.key for op in puts if op.value is None]
        kept = [op for op in puts if op.value is not None]
        if deleted:
            yield _Call(key, "delete", (_SET, deleted), missing=0)
        if not kept:
            return
        items, metadatas = [], []
        for op in kept:
            text = self._index_text(op)
            items.append(text or op.key)  # an item needs text; one left out of search gets its key
            metadatas.append(self._metadata(op, indexed=text is not None))
        ttls = [None if op.ttl is None else max(1, math.ceil(op.ttl * 60)) for op in kept]
        add = _Call(key, "add", (_SET, items, [op.key for op in kept], metadatas), {"ttl": ttls})
        created = yield from self._add_creating(add)
        if created or key not in self._registered:  # a set made anew may follow a forget(), which empties the registry
            entry = [{"namespace": builtins.list(namespace)}]
            yield from self._add_creating(_Call(_REGISTRY_KEY, "add", (_REGISTRY_SET, [key], [key], entry)))
            self._registered.add(key)

    def _add_creating(self, add: _Call) -> _Logic[bool]:
        """Adds, creating the set first if it does not exist yet; True if it had to be created."""
        try:
            yield add
        except MemorySetNotFound:
            yield _Call(add.key, "get_or_create_memory_set", (add.args[0],), self._definition())
            yield add
            return True
        return False

    def _definition(self) -> dict[str, Any]:
        # Items are independent documents: never merged (dedup), never indexed with their neighbours.
        return {"capacity": self.capacity, "dedup": "none", "context_window": 0}

    def _search(self, op: SearchOp) -> _Logic[builtins.list[SearchItem]]:
        if op.limit <= 0:
            return []
        prefix = tuple(op.namespace_prefix)
        spaces = [ns for ns in (yield from self._namespaces()) if ns[: len(prefix)] == prefix]
        if not spaces:
            return []
        calls = [_Call(self._key(ns), "get", (_SET,), missing=[]) for ns in spaces]
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

    def _list_namespaces(self, op: ListNamespacesOp) -> _Logic[builtins.list[tuple[str, ...]]]:
        spaces = yield from self._namespaces()
        spaces = [ns for ns in spaces if all(_matches_condition(c, ns) for c in op.match_conditions or ())]
        # The registry keeps every namespace ever written to; list those that still hold items.
        sizes = yield [_Call(self._key(ns), "size", (_SET,), missing=0) for ns in spaces]
        spaces = [ns for ns, size in zip(spaces, sizes, strict=True) if size > 0]
        if op.max_depth is not None:
            spaces = [ns[: op.max_depth] for ns in spaces]
        return sorted(set(spaces))[op.offset : op.offset + op.limit]

    def _namespaces(self) -> _Logic[builtins.list[tuple[str, ...]]]:
        entries: builtins.list[MemorySetItem] = yield _Call(_REGISTRY_KEY, "get", (_REGISTRY_SET,), missing=[])
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
