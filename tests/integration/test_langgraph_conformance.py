"""MemoryCoreSaver against LangGraph's own conformance suite (langgraph-checkpoint-conformance), on a real Redis.

The suite drives the async methods. It runs twice: once over an ``AsyncMemoryClient`` (``aput``, ``alist``...),
and once with the async methods sent to the blocking ones in a thread, so ``put``, ``list``... on a
``MemoryClient`` pass the same tests. Checkpoints are Redis only: no worker is needed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport, ProgressCallbacks
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from memory_core import AsyncMemoryClient, ConfigurationError, InvalidRequestError, MemoryClient
from memory_core.core.settings import Settings
from memory_core.integrations.langgraph import MemoryCoreSaver, thread_key

BASE = {"put", "put_writes", "get_tuple", "list", "delete_thread"}
# No tier call deletes one checkpoint, lists a thread's checkpoint namespaces or lists threads, which
# delete_for_runs, prune and copy_thread need: MemoryCoreSaver does not claim them, and the suite skips them.
NOT_CLAIMED = {"delete_for_runs", "copy_thread", "prune"}


class BlockingDrivenSaver(MemoryCoreSaver):
    """The async methods the suite calls, each sent to its blocking twin on a worker thread."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, **options: Any) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: list(self.list(config, **options)))
        for one in found:
            yield one

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)


def _check(report: CapabilityReport) -> None:
    report.print_report()
    results = report.to_dict()["results"]
    for name, result in results.items():
        print(f"{name}: {result}")
    for name in BASE:
        assert results[name]["passed"] is True, f"{name}: {results[name]['failures']}"
        assert results[name]["tests_failed"] == 0
    for name in NOT_CLAIMED:
        assert results[name]["detected"] is False
    assert report.passed_all()
    assert report.conformance_level() == "FULL"


def test_the_async_methods_pass_the_conformance_suite(settings: Settings, namespace: str):
    async def saver() -> AsyncIterator[MemoryCoreSaver]:
        async with AsyncMemoryClient(settings) as aclient:
            yield MemoryCoreSaver(namespace, aclient=aclient)

    registered = checkpointer_test(name="MemoryCoreSaver")(saver)
    _check(asyncio.run(validate(registered, progress=ProgressCallbacks.verbose())))


def test_the_blocking_methods_pass_the_conformance_suite(settings: Settings, namespace: str):
    async def saver() -> AsyncIterator[MemoryCoreSaver]:
        with MemoryClient(settings) as client:
            yield BlockingDrivenSaver(namespace, client=client)

    registered = checkpointer_test(name="MemoryCoreSaver (blocking)")(saver)
    _check(asyncio.run(validate(registered, progress=ProgressCallbacks.verbose())))


def test_each_side_names_the_client_it_lacks(settings: Settings, namespace: str):
    with MemoryClient(settings) as client:
        saver = MemoryCoreSaver(namespace, client=client)
        config: RunnableConfig = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
        with pytest.raises(ConfigurationError, match="no aclient="):
            asyncio.run(saver.aget_tuple(config))
        assert saver.get_tuple(config) is None
    with pytest.raises(ConfigurationError, match="client="):
        MemoryCoreSaver(namespace)

    async def blocking_missing() -> None:
        async with AsyncMemoryClient(settings) as aclient:
            with pytest.raises(ConfigurationError, match="no client="):
                MemoryCoreSaver(namespace, aclient=aclient).get_tuple(config)

    asyncio.run(blocking_missing())


def test_thread_ids_that_are_not_keys_are_stored_apart(settings: Settings, namespace: str):
    ids = ["user:42/chat", "b64.dXNlcg", "dXNlcg", "..", "naïve thread", uuid.UUID(int=7)]
    assert len({thread_key(i) for i in ids}) == len(ids)
    assert thread_key("thread-1") == "thread-1"
    with MemoryClient(settings) as client:
        saver = MemoryCoreSaver(namespace, client=client)
        for i, thread_id in enumerate(ids):
            config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            checkpoint: Checkpoint = {
                "v": 1,
                "id": f"1ef-{i}",
                "ts": "2026-01-01T00:00:00+00:00",
                "channel_values": {"who": str(thread_id)},
                "channel_versions": {"who": saver.get_next_version(None, None)},
                "versions_seen": {},
                "updated_channels": None,
            }
            saved = saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
            assert saved["configurable"]["thread_id"] == thread_id
        for thread_id in ids:
            found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
            assert found is not None
            assert found.checkpoint["channel_values"] == {"who": str(thread_id)}
            assert found.config["configurable"]["thread_id"] == thread_id
        with pytest.raises(InvalidRequestError, match="thread_id"):
            list(saver.list(None))


def test_what_is_stored_is_json_and_a_namespace_sees_only_its_own(settings: Settings, namespace: str):
    with MemoryClient(settings) as client:
        saver_a = MemoryCoreSaver(namespace, client=client)
        saver_b = MemoryCoreSaver(namespace + "-b", client=client)
        config: RunnableConfig = {"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}
        checkpoint: Checkpoint = {
            "v": 1,
            "id": "1ef-a",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"secret": b"\x00bytes", "n": 1},
            "channel_versions": {"secret": "1", "n": "1"},
            "versions_seen": {},
            "updated_channels": None,
        }
        stored = saver_a.put(config, checkpoint, {"source": "loop", "step": 0}, {})
        saver_a.put_writes(stored, [("n", 2)], "task-1")
        assert saver_b.get_tuple(config) is None
        assert list(saver_b.list(config)) == []
        raw = client.checkpoints(namespace).get("shared")
        assert raw is not None
        assert raw.metadata == {"source": "loop", "step": 0}
        assert raw.checkpoint["format"] == 1
        assert set(raw.checkpoint["channel_values"]) == {"secret", "n"}
        found = saver_a.get_tuple(config)
        assert found is not None
        assert found.checkpoint["channel_values"] == {"secret": b"\x00bytes", "n": 1}
        assert found.pending_writes == [("task-1", "n", 2)]


class Opaque:
    """An object msgpack cannot encode: a serializer with a pickle fallback would pickle it."""

    __slots__ = ("x",)

    def __init__(self) -> None:
        self.x = 1


def test_a_serde_that_pickles_is_refused(settings: Settings, namespace: str):
    with MemoryClient(settings) as client:
        saver = MemoryCoreSaver(namespace, client=client, serde=JsonPlusSerializer(pickle_fallback=True))
        config: RunnableConfig = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
        checkpoint: Checkpoint = {
            "v": 1,
            "id": "1ef-p",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"opaque": Opaque()},
            "channel_versions": {"opaque": "1"},
            "versions_seen": {},
            "updated_channels": None,
        }
        with pytest.raises(InvalidRequestError, match="pickle"):
            saver.put(config, checkpoint, {"source": "loop", "step": 0}, {})
        assert saver.get_tuple(config) is None


def test_a_stored_value_of_a_code_running_type_is_never_loaded(settings: Settings, namespace: str):
    with MemoryClient(settings) as client:
        saver = MemoryCoreSaver(namespace, client=client)
        config: RunnableConfig = {"configurable": {"thread_id": "t-2", "checkpoint_ns": ""}}
        checkpoint: Checkpoint = {
            "v": 1,
            "id": "1ef-q",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"n": 1},
            "channel_versions": {"n": "1"},
            "versions_seen": {},
            "updated_channels": None,
        }
        saver.put(config, checkpoint, {"source": "loop", "step": 0}, {})
        # Someone with write access to Redis plants a value of another serializer type in the snapshot.
        stored = client.checkpoints(namespace).get(thread_key("t-2"), checkpoint_id="1ef-q")
        assert stored is not None
        planted = {**stored.checkpoint, "channel_values": {"n": ["pickle", "gASVAAAAAAAAAAAu"]}}
        client.checkpoints(namespace).put(thread_key("t-2"), planted, checkpoint_id="1ef-q")
        with pytest.raises(InvalidRequestError, match="'pickle'"):
            saver.get_tuple(config)
