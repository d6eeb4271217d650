"""Checkpoints are data: whatever is planted in the checkpoint tier, MemoryCoreSaver builds no object it was not
told to and calls nothing, and fails that one read with InvalidRequestError. On a real Redis, through the
Python client's checkpoint tier (the same tier the HTTP and MCP doors write), with real LangGraph graphs.

LangGraph's msgpack format names a (module, name) and its arguments for any object msgpack cannot hold, and
LangGraph's default reader calls ``module.name(*args)``: the planted values below would make it create a
directory and call a tripwire of this module.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import json
import operator
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import ormsgpack
import pydantic
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, Send, interrupt

from memory_core import InvalidRequestError, MemoryClient
from memory_core.core.settings import Settings
from memory_core.integrations.langgraph import MemoryCoreSaver, thread_key

TRIPPED: list[Any] = []


def tripwire(*args: Any, **kwargs: Any) -> str:
    """What a planted value names: reading a checkpoint must never call it."""
    TRIPPED.append((args, kwargs))
    return "tripped"


# LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus).
SINGLE_ARG, POSITIONAL, KEYWORDS, METHOD, PYDANTIC_V1, PYDANTIC_V2 = range(6)


def _ext(code: int, *parts: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb(list(parts)))


def _planted_values(target: Path) -> dict[str, ormsgpack.Ext]:
    """One value per way LangGraph's format calls something, each with an effect a test can see."""
    here = __name__
    return {
        "positional os.mkdir": _ext(POSITIONAL, "os", "mkdir", [str(target / "positional")]),
        "single os.mkdir": _ext(SINGLE_ARG, "os", "mkdir", str(target / "single")),
        "keywords tripwire": _ext(KEYWORDS, here, "tripwire", {"by": "keywords"}),
        "pydantic tripwire": _ext(PYDANTIC_V2, here, "tripwire", {"by": "pydantic"}, "model_validate_json"),
        "pydantic v1 tripwire": _ext(PYDANTIC_V1, here, "tripwire", {"by": "pydantic v1"}),
        "method on a safe type": _ext(METHOD, "pathlib", "Path", str(target / "method"), "mkdir"),
        "method on os": _ext(METHOD, "os", "path", str(target / "method-os"), "exists"),
        # Inside a type the saver does rebuild: the inner value is refused before anything is built.
        "nested in a message": _ext(
            PYDANTIC_V2,
            "langchain_core.messages.human",
            "HumanMessage",
            {"content": "hi", "additional_kwargs": {"x": _ext(POSITIONAL, here, "tripwire", ["nested"])}},
            "model_validate_json",
        ),
        "nested in a set": _ext(
            SINGLE_ARG, "builtins", "set", [_ext(POSITIONAL, "os", "mkdir", [str(target / "set")])]
        ),
    }


def _packed(value: Any) -> list[str]:
    return ["msgpack", base64.b64encode(ormsgpack.packb(value)).decode("ascii")]


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _checkpoint(checkpoint_id: str, values: dict[str, Any]) -> Checkpoint:
    return {
        "v": 1,
        "id": checkpoint_id,
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": dict.fromkeys(values, "1"),
        "versions_seen": {},
        "updated_channels": None,
    }


@pytest.fixture
def client(settings: Settings) -> Iterator[MemoryClient]:
    with MemoryClient(settings) as client:  # checkpoints are Redis only: no worker is needed
        yield client


@pytest.fixture(autouse=True)
def untripped() -> Iterator[None]:
    TRIPPED.clear()
    yield
    TRIPPED.clear()


def _nothing_ran(target: Path) -> None:
    assert TRIPPED == []
    assert list(target.iterdir()) == []


def test_a_planted_call_in_any_stored_part_is_refused_and_never_run(
    client: MemoryClient, namespace: str, tmp_path: Path
):
    saver = MemoryCoreSaver(namespace, client=client)
    tier = client.checkpoints(namespace)
    thread = thread_key("t-1")
    saved = saver.put(_config("t-1"), _checkpoint("1ef-1", {"n": 1}), {"source": "loop", "step": 0}, {})
    saver.put_writes(saved, [("n", 2)], "task-1")
    stored = tier.get(thread, "1ef-1")
    assert stored is not None
    writes_ns = "\x00writes\x001ef-1"
    [write] = tier.list(thread, checkpoint_ns=writes_ns)
    for label, planted in _planted_values(tmp_path).items():
        places = {
            "channel value": {**stored.checkpoint, "channel_values": {"n": _packed(planted)}},
            "metadata": {**stored.checkpoint, "metadata": _packed({"source": planted})},
            "checkpoint": {**stored.checkpoint, "checkpoint": _packed({"id": "1ef-1", "v": planted})},
        }
        for place, snapshot in places.items():
            tier.put(thread, snapshot, checkpoint_id="1ef-1")
            with pytest.raises(InvalidRequestError, match="does not rebuild|builds only datetimes") as refused:
                saver.get_tuple(_config("t-1"))
            assert "stored checkpoint value" in str(refused.value), (label, place)
            with pytest.raises(InvalidRequestError):
                list(saver.list(_config("t-1")))
        tier.put(thread, stored.checkpoint, checkpoint_id="1ef-1")
        tier.put(
            thread, {**write.checkpoint, "value": _packed(planted)}, checkpoint_ns=writes_ns, checkpoint_id=write.id
        )
        with pytest.raises(InvalidRequestError, match="does not rebuild|builds only datetimes"):
            saver.get_tuple(_config("t-1"))
        tier.put(thread, write.checkpoint, checkpoint_ns=writes_ns, checkpoint_id=write.id)
    _nothing_ran(tmp_path)
    found = saver.get_tuple(_config("t-1"))  # restored, the thread reads again: one refused read harmed nothing
    assert found is not None
    assert found.checkpoint["channel_values"] == {"n": 1}
    assert found.pending_writes == [("task-1", "n", 2)]


class Counter(TypedDict):
    count: int


def _counting_graph(saver: MemoryCoreSaver) -> Any:
    builder = StateGraph(Counter)
    builder.add_node("add", lambda state: {"count": state["count"] + 1})
    builder.add_edge(START, "add")
    return builder.compile(checkpointer=saver)


def test_a_graph_resuming_a_planted_thread_fails_typed_and_runs_nothing(
    client: MemoryClient, namespace: str, tmp_path: Path
):
    saver = MemoryCoreSaver(namespace, client=client)
    graph = _counting_graph(saver)
    assert graph.invoke({"count": 1}, _config("t-1"))["count"] == 2
    tier = client.checkpoints(namespace)
    newest = tier.get(thread_key("t-1"))
    assert newest is not None
    planted = _ext(POSITIONAL, "os", "mkdir", [str(tmp_path / "resumed")])
    channels = {**newest.checkpoint["channel_values"], "count": _packed(planted)}
    tier.put(thread_key("t-1"), {**newest.checkpoint, "channel_values": channels}, checkpoint_id=newest.id)
    with pytest.raises(InvalidRequestError, match="'os.mkdir'"):
        graph.invoke({"count": 5}, _config("t-1"))
    with pytest.raises(InvalidRequestError, match="'os.mkdir'"):
        graph.get_state(_config("t-1"))
    _nothing_ran(tmp_path)
    assert graph.invoke({"count": 5}, _config("t-2"))["count"] == 6  # other threads run on


def test_stored_parts_of_the_wrong_shape_fail_one_read_typed(client: MemoryClient, namespace: str):
    saver = MemoryCoreSaver(namespace, client=client)
    tier = client.checkpoints(namespace)
    saved = saver.put(_config("t-1"), _checkpoint("1ef-1", {"n": 1}), {"source": "loop", "step": 0}, {})
    saver.put_writes(saved, [("n", 2)], "task-1")
    stored = tier.get(thread_key("t-1"), "1ef-1")
    assert stored is not None
    lc_constructor = {"lc": 1, "type": "constructor", "id": ["os", "mkdir"], "kwargs": {}}
    planted = {
        "metadata not a pair": {**stored.checkpoint, "metadata": "gA=="},
        "metadata not base64": {**stored.checkpoint, "metadata": ["msgpack", "%%%"]},
        "metadata not a mapping": {**stored.checkpoint, "metadata": _packed(7)},
        "checkpoint not a mapping": {**stored.checkpoint, "checkpoint": _packed([1, 2])},
        "channel values not a mapping": {**stored.checkpoint, "channel_values": ["n"]},
        "not msgpack": {**stored.checkpoint, "channel_values": {"n": ["msgpack", "wQ=="]}},
        "an unknown extension": {**stored.checkpoint, "channel_values": {"n": _packed(ormsgpack.Ext(42, b""))}},
        "LangChain's json loader": {
            **stored.checkpoint,
            "metadata": ["json", base64.b64encode(json.dumps(lc_constructor).encode()).decode()],
        },
    }
    for label, snapshot in planted.items():
        tier.put(thread_key("t-1"), snapshot, checkpoint_id="1ef-1")
        try:
            saver.get_tuple(_config("t-1"))
        except InvalidRequestError:
            continue
        pytest.fail(f"{label}: read without an error")
    tier.put(thread_key("t-1"), stored.checkpoint, checkpoint_id="1ef-1")
    writes_ns = "\x00writes\x001ef-1"
    [write] = tier.list(thread_key("t-1"), checkpoint_ns=writes_ns)
    tier.put(thread_key("t-1"), {**write.checkpoint, "idx": "0"}, checkpoint_ns=writes_ns, checkpoint_id=write.id)
    with pytest.raises(InvalidRequestError, match="not a pending write"):
        saver.get_tuple(_config("t-1"))


# -- what LangGraph puts in checkpoints reads back ---------------------------------------------------------------


@dataclasses.dataclass
class Visit:
    place: str
    at: datetime.datetime


class Mood(enum.Enum):
    CALM = "calm"
    BUSY = "busy"


class Profile(pydantic.BaseModel):
    name: str
    tags: set[str]
    mood: Mood


class Journey(MessagesState):
    visits: Annotated[list[Visit], operator.add]
    profile: Profile | None
    seen: set[uuid.UUID]
    when: datetime.datetime
    done: Annotated[list[str], operator.add]


class Place(TypedDict):
    place: str


def _journey_graph(saver: MemoryCoreSaver) -> Any:
    def plan(state: Journey) -> dict[str, Any]:
        return {"messages": [AIMessage("planning", tool_calls=[{"name": "go", "args": {"to": "x"}, "id": "c1"}])]}

    def fan_out(state: Journey) -> list[Send]:
        return [Send("visit", {"place": place}) for place in ("Oslo", "Lima")]

    def visit(state: Place) -> dict[str, Any]:
        at = datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC)
        return {"visits": [Visit(state["place"], at)], "done": [state["place"]]}

    def ask(state: Journey) -> dict[str, Any]:
        answer = interrupt({"question": "who?", "asked_at": state["when"]})
        profile = Profile(name=answer, tags={"a", "b"}, mood=Mood.CALM)
        return {"profile": profile, "messages": [ToolMessage("went", tool_call_id="c1")]}

    builder = StateGraph(Journey)
    builder.add_node("plan", plan)
    builder.add_node("visit", visit)
    builder.add_node("ask", ask)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["visit"])
    builder.add_edge("visit", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def test_what_langgraph_checkpoints_reads_back_with_the_state_s_types_allowed(client: MemoryClient, namespace: str):
    saver = MemoryCoreSaver(namespace, client=client, allowed_types=[Visit, Profile, Mood])
    graph = _journey_graph(saver)
    when = datetime.datetime(2026, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    seen = {uuid.UUID(int=1), uuid.UUID(int=2)}
    start = {"messages": [HumanMessage("go")], "visits": [], "profile": None, "seen": seen, "when": when, "done": []}
    paused = graph.invoke(start, _config("t-1"))
    [asked] = paused["__interrupt__"]
    assert asked.value == {"question": "who?", "asked_at": when}
    # A second saver (another process resuming the thread) reads the pause: Send, Interrupt and the state.
    resumed = _journey_graph(MemoryCoreSaver(namespace, client=client, allowed_types=[Visit, Profile, Mood]))
    state = resumed.get_state(_config("t-1"))
    assert state.next == ("ask",)
    assert state.values["seen"] == seen
    assert state.values["when"] == when
    assert sorted(v.place for v in state.values["visits"]) == ["Lima", "Oslo"]
    assert all(isinstance(v, Visit) for v in state.values["visits"])
    final = resumed.invoke(Command(resume="Ada"), _config("t-1"))
    assert final["profile"] == Profile(name="Ada", tags={"a", "b"}, mood=Mood.CALM)
    assert [type(m).__name__ for m in final["messages"]] == ["HumanMessage", "AIMessage", "ToolMessage"]
    assert final["messages"][1].tool_calls[0]["args"] == {"to": "x"}
    history = list(resumed.get_state_history(_config("t-1")))
    assert any(task.name == "visit" for snapshot in history for task in snapshot.tasks)


def test_a_state_type_not_allowed_is_refused_when_written_and_nothing_is_stored(client: MemoryClient, namespace: str):
    saver = MemoryCoreSaver(namespace, client=client)
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    checkpoint = _checkpoint("1ef-1", {"visit": Visit("Oslo", at)})
    with pytest.raises(InvalidRequestError, match=rf"'{__name__}.Visit'.*allowed_types"):
        saver.put(_config("t-1"), checkpoint, {"source": "loop", "step": 0}, {})
    assert saver.get_tuple(_config("t-1")) is None
    # LangGraph hands a graph's state types to with_allowlist when it compiles in its strict mode.
    allowing = saver.with_allowlist({(Visit.__module__, Visit.__name__)})
    allowing.put(_config("t-1"), checkpoint, {"source": "loop", "step": 0}, {})
    found = allowing.get_tuple(_config("t-1"))
    assert found is not None
    assert found.checkpoint["channel_values"] == {"visit": Visit("Oslo", at)}
    with pytest.raises(InvalidRequestError, match="does not rebuild"):
        saver.get_tuple(_config("t-1"))  # the saver it was copied from still refuses it
