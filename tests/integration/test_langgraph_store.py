"""MemoryCoreStore through LangGraph's own ops and classes, and a real StateGraph with the saver and the store,
against a real worker: put, get, search, delete and list_namespaces by ``batch`` and ``abatch``."""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypedDict

import pytest
from celery import Celery
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchItem,
    SearchOp,
)

from memory_core import AsyncMemoryClient, MemoryClient
from memory_core.core.settings import Settings
from memory_core.integrations.langgraph import (
    MemoryCoreSaver,
    MemoryCoreStore,
    namespace_key,
    namespace_of,
    thread_key,
)

ALICE = ("users", "alice")
BOB = ("users", "bob")
WRITES: list[Op] = [
    PutOp(ALICE, "drink", {"text": "Alice drinks green tea every morning", "kind": "preference", "stars": 5}),
    PutOp(ALICE, "food", {"text": "Alice's favourite food is pizza", "kind": "preference", "stars": 3}),
    PutOp(ALICE, "city", {"text": "Alice lives in Lisbon", "kind": "fact", "tags": ["home"]}),
    PutOp(BOB, "drink", {"text": "Bob only drinks black coffee", "kind": "preference", "stars": 4}),
    PutOp(("teams", "blue", "notes"), "n1", {"text": "The blue team ships on Fridays"}),
]
READS: list[Op] = [
    GetOp(ALICE, "drink"),
    GetOp(BOB, "missing"),
    GetOp(("nobody",), "drink"),
    SearchOp(ALICE, query="what does Alice drink?", limit=1),
    SearchOp(("users",), filter={"kind": "preference"}, limit=10),
    SearchOp(("users",), filter={"stars": {"$gte": 4}}, limit=10),
    SearchOp(("users",), query="morning drink", filter={"kind": "preference", "stars": 4}, limit=5),
    SearchOp(ALICE, filter={"tags": ["home"]}),
    ListNamespacesOp(),
    ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("users",)),), max_depth=1),
    ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("*", "notes")),)),
]


def _check_reads(results: list[Any]) -> None:
    drink, missing, nobody, by_query, preferences, starred, combined, tagged, spaces, tops, notes = results
    assert isinstance(drink, Item)
    assert (drink.namespace, drink.key) == (ALICE, "drink")
    assert drink.value == WRITES[0].value  # type: ignore[union-attr]  # the first op is a PutOp
    assert drink.created_at == drink.updated_at
    assert (missing, nobody) == (None, None)
    assert [(i.namespace, i.key) for i in by_query] == [(ALICE, "drink")]
    assert isinstance(by_query[0], SearchItem)
    assert by_query[0].score is not None
    assert {(i.namespace, i.key) for i in preferences} == {(ALICE, "drink"), (ALICE, "food"), (BOB, "drink")}
    assert all(i.score is None for i in preferences)
    assert {(i.namespace, i.key) for i in starred} == {(ALICE, "drink"), (BOB, "drink")}
    assert [(i.namespace, i.key) for i in combined] == [(BOB, "drink")]
    assert [i.key for i in tagged] == ["city"]
    assert spaces == [("teams", "blue", "notes"), ALICE, BOB]
    assert tops == [("users",)]
    assert notes == [("teams", "blue", "notes")]


def _after_delete(results: list[Any]) -> None:
    gone, spaces, left = results
    assert gone is None
    assert spaces == [("teams", "blue", "notes"), ALICE]  # Bob's namespace is empty now
    assert [i.key for i in left] == ["city", "food"]  # without a query: newest first


DELETES: list[Op] = [PutOp(ALICE, "drink", None), PutOp(BOB, "drink", None)]
AFTER: list[Op] = [GetOp(ALICE, "drink"), ListNamespacesOp(), SearchOp(ALICE)]


def test_batch_puts_gets_searches_deletes_and_lists(client: MemoryClient, namespace: str):
    store = MemoryCoreStore(namespace, client=client)
    assert store.batch(WRITES) == [None] * len(WRITES)
    _check_reads(store.batch(READS))
    store.batch(DELETES)
    _after_delete(store.batch(AFTER))
    # BaseStore's own methods run on batch.
    store.put(("users", "carol"), "k", {"text": "Carol plays chess"})
    assert store.get(("users", "carol"), "k").value == {"text": "Carol plays chess"}  # type: ignore[union-attr]
    assert [i.key for i in store.search(("users",), query="chess", limit=1)] == ["k"]
    assert ("users", "carol") in store.list_namespaces(prefix=("users",))


def test_abatch_does_the_same_on_the_asyncio_client(settings: Settings, worker: Celery, namespace: str):
    async def scenario() -> None:
        async with AsyncMemoryClient(settings) as aclient:
            store = MemoryCoreStore(namespace, aclient=aclient)
            assert await store.abatch(WRITES) == [None] * len(WRITES)
            _check_reads(await store.abatch(READS))
            await store.abatch(DELETES)
            _after_delete(await store.abatch(AFTER))
            await store.aput(("users", "carol"), "k", {"text": "Carol plays chess"})
            found = await store.aget(("users", "carol"), "k")
            assert found is not None
            assert found.value == {"text": "Carol plays chess"}

    asyncio.run(scenario())


def test_a_put_replaces_the_value_and_a_batch_keeps_the_last_put(client: MemoryClient, namespace: str):
    store = MemoryCoreStore(namespace, client=client)
    store.batch([PutOp(ALICE, "k", {"v": 1}), PutOp(ALICE, "k", {"v": 2})])
    assert store.get(ALICE, "k").value == {"v": 2}  # type: ignore[union-attr]
    # Reads of a batch see the store as it was before the batch's writes.
    before, _ = store.batch([GetOp(ALICE, "k"), PutOp(ALICE, "k", {"v": 3})])
    assert before.value == {"v": 2}  # type: ignore[union-attr]
    assert store.get(ALICE, "k").value == {"v": 3}  # type: ignore[union-attr]
    # Identical values under two keys stay two items (no deduplication).
    store.batch([PutOp(ALICE, "a", {"same": "text"}), PutOp(ALICE, "b", {"same": "text"})])
    assert {i.key for i in store.search(ALICE, filter={"same": "text"})} == {"a", "b"}


def test_index_fields_choose_what_search_finds(client: MemoryClient, namespace: str):
    store = MemoryCoreStore(namespace, client=client, fields=["title"])
    store.put(ALICE, "paper", {"title": "Volcanoes of Iceland", "body": "a survey of lava flows"})
    store.put(ALICE, "hidden", {"title": "Volcanoes of Chile"}, index=False)
    store.put(ALICE, "body", {"title": "Gardening", "body": "volcanic soil"}, index=["body"])
    hits = store.search(ALICE, query="volcanoes", limit=5)
    assert "paper" in [i.key for i in hits]
    assert "hidden" not in [i.key for i in hits]  # not indexed: query search leaves it out
    assert [i.key for i in store.search(ALICE, filter={"title": "Volcanoes of Chile"})] == ["hidden"]


def test_namespaces_with_any_label_round_trip(client: MemoryClient, namespace: str):
    odd = ("a@b", "naïve_label", "emoji 😀", "__x41", "-")
    key = namespace_key(odd)
    assert all(c.isalnum() and c.isascii() or c in "_.-" for c in key)
    assert namespace_of(key) == odd
    assert namespace_key(("a_x40",)) != namespace_key(("a@",))
    assert namespace_key(("a", "b")) != namespace_key(("a_x2eb",))
    store = MemoryCoreStore(namespace, client=client)
    store.put(odd, "k", {"text": "odd labels"})
    assert store.get(odd, "k").value == {"text": "odd labels"}  # type: ignore[union-attr]
    assert store.list_namespaces() == [odd]
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("langgraph",), "k", {"x": 1})])
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("a.b",), "k")])


def test_ttl_expires_items_and_they_are_never_returned(client: MemoryClient, namespace: str):
    store = MemoryCoreStore(namespace, client=client, ttl={"default_ttl": 1 / 60})  # one second
    assert store.supports_ttl
    store.put(ALICE, "short", {"text": "gone soon"})
    store.put(ALICE, "long", {"text": "stays"}, ttl=None)
    assert store.get(ALICE, "short") is not None
    time.sleep(1.5)
    assert store.get(ALICE, "short") is None
    assert [i.key for i in store.search(ALICE)] == ["long"]


def test_a_store_and_a_saver_never_see_another_namespace(client: MemoryClient, namespace: str):
    other = namespace + "-other"
    mine, theirs = MemoryCoreStore(namespace, client=client), MemoryCoreStore(other, client=client)
    mine.put(ALICE, "secret", {"text": "only mine"})
    assert theirs.get(ALICE, "secret") is None
    assert theirs.search(("users",)) == []
    assert theirs.search(("users",), query="only mine") == []
    assert theirs.list_namespaces() == []
    graph = _graph(MemoryCoreSaver(namespace, client=client), mine, [], ["ok"])
    graph.invoke({"messages": [HumanMessage("hi")]}, _config("t-1"), context={"user_id": "alice"})
    config = _config("t-1")
    assert MemoryCoreSaver(namespace, client=client).get_tuple(config) is not None
    assert MemoryCoreSaver(other, client=client).get_tuple(config) is None


# -- end to end: a StateGraph with the saver as checkpointer and the store as its store ------------------------


class Context(TypedDict):
    user_id: str


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _graph(
    saver: MemoryCoreSaver, store: MemoryCoreStore, seen: list[str], replies: list[str], *, awaited: bool = False
) -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))

    def remember(state: MessagesState, runtime: Runtime[Context]) -> dict[str, Any]:
        assert runtime.store is not None
        memories = ("memories", runtime.context["user_id"])
        said = str(state["messages"][-1].content)
        if said.startswith("remember "):
            runtime.store.put(memories, f"m{len(state['messages'])}", {"fact": said.removeprefix("remember ")})
        facts = "; ".join(m.value["fact"] for m in runtime.store.search(memories, query=said, limit=3))
        seen.append(facts)
        return {"messages": [model.invoke([SystemMessage(f"Known: {facts}"), *state["messages"]])]}

    async def aremember(state: MessagesState, runtime: Runtime[Context]) -> dict[str, Any]:
        assert runtime.store is not None
        memories = ("memories", runtime.context["user_id"])
        said = str(state["messages"][-1].content)
        if said.startswith("remember "):
            await runtime.store.aput(memories, f"m{len(state['messages'])}", {"fact": said.removeprefix("remember ")})
        facts = "; ".join(m.value["fact"] for m in await runtime.store.asearch(memories, query=said, limit=3))
        seen.append(facts)
        return {"messages": [await model.ainvoke([SystemMessage(f"Known: {facts}"), *state["messages"]])]}

    builder = StateGraph(MessagesState, context_schema=Context)
    builder.add_node("remember", aremember if awaited else remember)
    builder.add_edge(START, "remember")
    return builder.compile(checkpointer=saver, store=store)


def _check_conversation(first: dict[str, Any], second: dict[str, Any], third: dict[str, Any], seen: list[str]):
    assert [m.content for m in first["messages"]] == ["remember I like green tea", "Noted."]
    # The checkpointer resumed the thread: the second turn sees the first.
    assert [m.content for m in second["messages"]] == [
        "remember I like green tea",
        "Noted.",
        "what do I like?",
        "You like green tea.",
    ]
    # The store served the memory on the second turn, and to a new thread of the same user.
    assert seen[1] == "I like green tea"
    assert [m.content for m in third["messages"]] == ["what do I like?", "Green tea."]
    assert seen[2] == "I like green tea"


def test_a_graph_resumes_its_thread_and_recalls_the_store_across_threads(client: MemoryClient, namespace: str):
    saver, store = MemoryCoreSaver(namespace, client=client), MemoryCoreStore(namespace, client=client)
    seen: list[str] = []
    graph = _graph(saver, store, seen, ["Noted.", "You like green tea.", "Green tea."])
    context: Context = {"user_id": "alice"}
    first = graph.invoke({"messages": [HumanMessage("remember I like green tea")]}, _config("t-1"), context=context)
    second = graph.invoke({"messages": [HumanMessage("what do I like?")]}, _config("t-1"), context=context)
    third = graph.invoke({"messages": [HumanMessage("what do I like?")]}, _config("t-2"), context=context)
    _check_conversation(first, second, third, seen)
    history = list(graph.get_state_history(_config("t-1")))
    assert len(history) >= 4
    assert history[0].values["messages"][-1].content == "You like green tea."
    assert store.list_namespaces() == [("memories", "alice")]
    saver.delete_thread("t-1")
    assert graph.get_state(_config("t-1")).values == {}


def test_the_same_graph_runs_on_the_asyncio_client(settings: Settings, worker: Celery, namespace: str):
    async def scenario() -> None:
        async with AsyncMemoryClient(settings) as aclient:
            saver, store = MemoryCoreSaver(namespace, aclient=aclient), MemoryCoreStore(namespace, aclient=aclient)
            seen: list[str] = []
            graph = _graph(saver, store, seen, ["Noted.", "You like green tea.", "Green tea."], awaited=True)
            context: Context = {"user_id": "alice"}
            said = {"messages": [HumanMessage("remember I like green tea")]}
            first = await graph.ainvoke(said, _config("t-1"), context=context)
            asked = {"messages": [HumanMessage("what do I like?")]}
            second = await graph.ainvoke(asked, _config("t-1"), context=context)
            third = await graph.ainvoke(asked, _config("t-2"), context=context)
            _check_conversation(first, second, third, seen)
            state = await graph.aget_state(_config("t-1"))
            assert len(state.values["messages"]) == 4

    asyncio.run(scenario())


def test_forget_erases_both_and_the_store_registers_its_namespaces_again(client: MemoryClient, namespace: str):
    store, saver = MemoryCoreStore(namespace, client=client), MemoryCoreSaver(namespace, client=client)
    graph = _graph(saver, store, [], ["Noted.", "Again."])
    graph.invoke({"messages": [HumanMessage("remember tea")]}, _config("user:7"), context={"user_id": "alice"})
    assert store.list_namespaces() == [("memories", "alice")]
    # A thread id that is not a key is stored under thread_key(); forget() takes that key.
    client.forget(namespace, key=thread_key("user:7"))
    assert saver.get_tuple(_config("user:7")) is None
    client.forget(namespace)
    assert store.list_namespaces() == []
    store.put(("memories", "alice"), "k", {"fact": "coffee now"})  # this store had registered it before
    assert store.list_namespaces() == [("memories", "alice")]
    assert [i.key for i in store.search(("memories",), query="coffee")] == ["k"]
