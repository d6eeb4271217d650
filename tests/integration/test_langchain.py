"""MemoryCoreChatMessageHistory under LangChain's own runnables and fake chat model, against a real worker."""

from __future__ import annotations

import asyncio
import time

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from memory_core import AsyncMemoryClient, MemoryClient
from memory_core.integrations.langchain import MemoryCoreChatMessageHistory

# LangChain 1.x deprecates RunnableWithMessageHistory for LangGraph's persistence (memory_core.integrations.langgraph);
# it is still how chains use a BaseChatMessageHistory, so it is what these tests drive.
legacy_runnable = pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")


def _chain(seen: list[list[BaseMessage]], replies: list[str]) -> object:
    def record(prompt: PromptValue) -> PromptValue:
        seen.append(prompt.to_messages())
        return prompt

    model = GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{input}")])
    return prompt | RunnableLambda(record) | model


@legacy_runnable
def test_a_chain_remembers_the_conversation(client: MemoryClient, namespace: str) -> None:
    seen: list[list[BaseMessage]] = []
    chain = RunnableWithMessageHistory(
        _chain(seen, ["Noted: green tea.", "You like green tea."]),  # type: ignore[arg-type]
        lambda session_id: MemoryCoreChatMessageHistory(namespace, session_id, client=client, key="alice"),
        input_messages_key="input",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": "chat-1"}}
    chain.invoke({"input": "I like green tea"}, config=config)  # type: ignore[arg-type]
    answer = chain.invoke({"input": "What do I like?"}, config=config)  # type: ignore[arg-type]
    assert answer.content == "You like green tea."
    assert [m.content for m in seen[1]] == ["I like green tea", "Noted: green tea.", "What do I like?"]
    history = MemoryCoreChatMessageHistory(namespace, "chat-1", client=client, key="alice")
    assert [type(m) for m in history.messages] == [HumanMessage, AIMessage, HumanMessage, AIMessage]
    # Promoted: long-term search finds what was said after the session is gone.
    history.clear()
    assert history.messages == []
    chats = client.long_term(namespace, "alice")
    deadline = time.monotonic() + 20
    while chats.size(client.settings.session.promotion_set) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    hits = chats.search(client.settings.session.promotion_set, "which tea does she like?", limit=1)
    assert "green tea" in str(hits[0].value)


@legacy_runnable
def test_an_async_chain_remembers_the_conversation(client: MemoryClient, namespace: str) -> None:
    seen: list[list[BaseMessage]] = []

    async def scenario() -> None:
        async with AsyncMemoryClient(client.settings) as aclient:
            chain = RunnableWithMessageHistory(
                _chain(seen, ["Hello Bob.", "Your name is Bob."]),  # type: ignore[arg-type]
                lambda session_id: MemoryCoreChatMessageHistory(namespace, session_id, aclient=aclient),
                input_messages_key="input",
                history_messages_key="history",
            )
            config = {"configurable": {"session_id": "chat-2"}}
            await chain.ainvoke({"input": "I am Bob"}, config=config)  # type: ignore[arg-type]
            await chain.ainvoke({"input": "What is my name?"}, config=config)  # type: ignore[arg-type]

    asyncio.run(scenario())
    assert [m.content for m in seen[1]] == ["I am Bob", "Hello Bob.", "What is my name?"]
    blocking = MemoryCoreChatMessageHistory(namespace, "chat-2", client=client)
    assert [m.content for m in blocking.messages][-1] == "Your name is Bob."


def test_messages_come_back_as_they_went_in(client: MemoryClient, namespace: str) -> None:
    history = MemoryCoreChatMessageHistory(namespace, "chat-3", client=client, promote="none")
    sent: list[BaseMessage] = [
        SystemMessage("Be brief."),
        HumanMessage("Weather in Lyon?", id="m1"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Lyon"}, "id": "call-1"}]),
        ToolMessage("12 C, rain", tool_call_id="call-1"),
        AIMessage("Rainy, 12 C.", response_metadata={"model": "fake"}),
    ]
    history.add_messages(sent)
    assert history.messages == sent


def test_one_namespace_never_sees_another(client: MemoryClient, namespace: str) -> None:
    mine = MemoryCoreChatMessageHistory(f"{namespace}-a", "chat", client=client, promote="none")
    theirs = MemoryCoreChatMessageHistory(f"{namespace}-b", "chat", client=client, promote="none")
    mine.add_messages([HumanMessage("my secret")])
    assert theirs.messages == []
    theirs.clear()
    assert [m.content for m in mine.messages] == ["my secret"]


@pytest.mark.parametrize(
    "planted",
    ["not json", "[" * 5000 + "]" * 5000, '{"type": "no-such-type", "data": {}}', '{"data": 1}', "[1, 2]"],
    ids=["not-json", "deep", "unknown-type", "no-type", "a-list"],
)
def test_a_planted_message_fails_one_read_typed(client: MemoryClient, namespace: str, planted: str) -> None:
    from memory_core import ChatMessage
    from memory_core.core.errors import CorruptDataError

    session = client.session(namespace, "chat-planted", key="alice", promote="none")
    session.add_messages([ChatMessage(content="hi", extra_args={"langchain": planted})])
    history = MemoryCoreChatMessageHistory(namespace, "chat-planted", client=client, key="alice", promote="none")
    with pytest.raises(CorruptDataError, match="stored LangChain user message"):
        history.messages  # noqa: B018  # the property is the read under test
    other = MemoryCoreChatMessageHistory(namespace, "chat-clean", client=client, key="alice", promote="none")
    other.add_messages([HumanMessage("still fine")])
    assert [m.content for m in other.messages] == ["still fine"]
