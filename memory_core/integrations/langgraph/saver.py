"""``MemoryCoreSaver``: LangGraph's checkpointer over memory-core's checkpoint tier (see the package docstring)."""

from __future__ import annotations

import base64
import binascii
import builtins
import copy
import random
import re
from collections.abc import AsyncIterator, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

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

from memory_core.client import MemoryClient
from memory_core.client.aio import AsyncMemoryClient
from memory_core.core.errors import InvalidRequestError
from memory_core.integrations.langgraph.runner import Call, Logic, Runner
from memory_core.integrations.langgraph.serde import DataOnlySerializer, TypeKey
from memory_core.tiers.checkpoints import Checkpoint as Snapshot

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
    return [kind, base64.b64encode(data).decode("ascii")]


def _unpack(serde: SerializerProtocol, packed: Any, what: str) -> Any:
    """The value of a stored ``[type, base64]`` pair; anything else in its place fails the read, typed."""
    if not (isinstance(packed, list) and len(packed) == 2 and all(isinstance(part, str) for part in packed)):
        raise InvalidRequestError(f"the stored {what} is {packed!r:.200}, not a [type, base64] pair of strings")
    kind, data = packed
    try:
        raw = base64.b64decode(data, validate=True)
    except binascii.Error as exc:
        raise InvalidRequestError(f"the stored {what} is not base64: {data!r:.200}") from exc
    return serde.loads_typed((kind, raw))


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

    Stored values are read back as data only (``DataOnlySerializer``): LangGraph's own types (messages,
    ``Send``, datetimes, UUIDs, sets...) and the ``allowed_types`` of the app's state (its pydantic models,
    dataclasses, enums); a stored value of any other type fails the read, and a value of such a type is
    refused when it is written. ``serde`` encodes (LangGraph's ``JsonPlusSerializer`` by default); what it
    writes must read back under these rules.
    """

    def __init__(
        self,
        namespace: str,
        *,
        client: MemoryClient | None = None,
        aclient: AsyncMemoryClient | None = None,
        allowed_types: Iterable[type | TypeKey] = (),
        serde: SerializerProtocol | None = None,
    ) -> None:
        if isinstance(serde, DataOnlySerializer):
            self._data = serde.with_types(allowed_types)
        else:
            self._data = DataOnlySerializer(allowed_types=allowed_types, encoder=serde)
        super().__init__(serde=self._data)
        self.namespace = namespace
        tier = client.checkpoints(namespace) if client is not None else None
        atier = aclient.checkpoints(namespace) if aclient is not None else None
        blocking = None if tier is None else lambda _: tier
        self._runner = Runner("MemoryCoreSaver", blocking, None if atier is None else lambda _: atier)

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

    def with_allowlist(self, extra_allowlist: Collection[TypeKey]) -> MemoryCoreSaver:
        """A copy that also rebuilds ``extra_allowlist``: LangGraph passes the types of a graph's state schema
        here when it compiles with ``LANGGRAPH_STRICT_MSGPACK=true``."""
        clone = copy.copy(self)
        clone._data = self._data.with_types(extra_allowlist)
        clone.serde = clone._data
        return clone

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
    ) -> Logic[RunnableConfig]:
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
        yield Call(None, "put", (thread, snapshot), options)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> Logic[None]:
        _, thread, ns = self._where(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            raise InvalidRequestError("put_writes needs a config with configurable.checkpoint_id")
        where = _writes_ns(ns, checkpoint_id)
        stored: builtins.list[Snapshot] = yield Call(None, "list", (thread,), {"checkpoint_ns": where})
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
            calls.append(Call(None, "put", (thread, write), options))
        if calls:
            yield calls

    def _delete_thread(self, thread_id: str) -> Logic[None]:
        yield Call(None, "delete_thread", (thread_key(thread_id),))

    def _get_tuple(self, config: RunnableConfig) -> Logic[CheckpointTuple | None]:
        thread_id, thread, ns = self._where(config)
        saved: Snapshot | None = yield Call(None, "get", (thread, get_checkpoint_id(config)), {"checkpoint_ns": ns})
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
    ) -> Logic[builtins.list[CheckpointTuple]]:
        thread_id, thread, ns = self._where(config)
        if limit is not None and limit <= 0:
            return []
        cursor = get_checkpoint_id(before) if before else None
        only = get_checkpoint_id(config) if config else None
        if only is not None:
            saved = yield Call(None, "get", (thread, only), {"checkpoint_ns": ns})
            page = [saved] if saved is not None and (cursor is None or saved.id < cursor) else []
            found = [(s, self._metadata(s)) for s in page]
        else:
            found = yield from self._newest(thread, ns, cursor, filter, limit)
        found = [(s, m) for s, m in found if _matches_metadata(m, filter)][:limit]
        writes = yield [self._writes_call(thread, ns, s.id) for s, _ in found]
        return [self._tuple(thread_id, s, m, w) for (s, m), w in zip(found, writes, strict=True)]

    def _newest(
        self, thread: str, ns: str, cursor: str | None, filter: dict[str, Any] | None, limit: int | None
    ) -> Logic[builtins.list[tuple[Snapshot, dict[str, Any]]]]:
        """Checkpoints after ``cursor``, newest first, until ``limit`` of them match ``filter``."""
        found: builtins.list[tuple[Snapshot, dict[str, Any]]] = []
        matched = 0
        while limit is None or matched < limit:
            want = _PAGE if filter else limit
            page: builtins.list[Snapshot] = yield Call(
                None, "list", (thread,), {"checkpoint_ns": ns, "limit": want, "before": cursor}
            )
            if not page and cursor is not None and not found:
                known = yield Call(None, "get", (thread, cursor), {"checkpoint_ns": ns})
                if known is None:
                    # A cursor the tier does not know (trimmed, or from elsewhere): ids order checkpoints too.
                    everything: builtins.list[Snapshot] = yield Call(None, "list", (thread,), {"checkpoint_ns": ns})
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
    def _writes_call(thread: str, ns: str, checkpoint_id: str) -> Call:
        return Call(None, "list", (thread,), {"checkpoint_ns": _writes_ns(ns, checkpoint_id)})

    def _metadata(self, saved: Snapshot) -> dict[str, Any]:
        if saved.checkpoint.get("format") != _FORMAT:
            raise InvalidRequestError(
                f"checkpoint {saved.id!r} of thread {saved.thread_id!r} was not written by MemoryCoreSaver "
                f"(format {saved.checkpoint.get('format')!r}, expected {_FORMAT})"
            )
        return _mapping(_unpack(self.serde, saved.checkpoint.get("metadata"), "metadata"), "metadata", saved)

    def _tuple(
        self, thread_id: Any, saved: Snapshot, metadata: dict[str, Any], writes: Iterable[Snapshot]
    ) -> CheckpointTuple:
        snapshot = saved.checkpoint
        checkpoint = _mapping(_unpack(self.serde, snapshot.get("checkpoint"), "checkpoint"), "checkpoint", saved)
        values = _mapping(snapshot.get("channel_values"), "channel values", saved)
        checkpoint["channel_values"] = {k: _unpack(self.serde, v, f"channel value {k!r}") for k, v in values.items()}
        where = {"thread_id": thread_id, "checkpoint_ns": saved.checkpoint_ns}
        parent = snapshot.get("parent_id")
        pending = sorted((self._write(w) for w in writes), key=lambda w: writes_sort_key(w[3], w[0], w[4]))
        return CheckpointTuple(
            config={"configurable": {**where, "checkpoint_id": saved.id}},
            checkpoint=cast(Checkpoint, checkpoint),
            metadata=cast(CheckpointMetadata, metadata),
            parent_config={"configurable": {**where, "checkpoint_id": parent}}
            if isinstance(parent, str) and parent
            else None,
            pending_writes=[(task_id, channel, value) for task_id, channel, value, _, _ in pending],
        )

    def _write(self, stored: Snapshot) -> tuple[str, str, Any, str, int]:
        """A stored pending write as ``(task_id, channel, value, task_path, idx)``."""
        write = stored.checkpoint
        task_id, channel, task_path, idx = (write.get(k) for k in ("task_id", "channel", "task_path", "idx"))
        if not (isinstance(task_id, str) and isinstance(channel, str) and isinstance(task_path, str)) or (
            type(idx) is not int
        ):
            raise InvalidRequestError(
                f"the stored write {stored.id!r} of thread {stored.thread_id!r} is not a pending write: "
                f"task_id {task_id!r}, channel {channel!r}, task_path {task_path!r}, idx {idx!r}"
            )
        return task_id, channel, _unpack(self.serde, write.get("value"), f"write {stored.id!r}"), task_path, idx


def _mapping(value: Any, what: str, saved: Snapshot) -> dict[str, Any]:
    if not (isinstance(value, dict) and all(isinstance(key, str) for key in value)):
        raise InvalidRequestError(
            f"the stored {what} of checkpoint {saved.id!r} of thread {saved.thread_id!r} is {value!r:.200}, "
            "not a mapping with string keys"
        )
    return value


def _matches_metadata(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(metadata.get(k) == v for k, v in filter.items())
