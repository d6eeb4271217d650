"""MemoryCoreSession under the OpenAI Agents SDK's own Runner, against a real worker (no network).

The SDK ships no fake model, so ``EchoModel`` implements its ``Model`` interface: it answers with how
many user messages it was given and the first one, which shows what the session fed it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from memory_core import AsyncMemoryClient, LongTermMemory, MemoryClient
from memory_core.core.errors import InvalidRequestError, MemorySetNotFound
from memory_core.core.models import MemorySetItem
from memory_core.integrations.openai_agents import MemoryCoreSession
from memory_core.testing.fake_anthropic import FakeAnthropic
from memory_core.testing.formation_script import tagged_lines
from tests.integration.waiting import wait_for


class EchoModel(Model):
    def __init__(self) -> None:
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        self.inputs.append(input)
        said = [i["content"] for i in input if isinstance(i, dict) and i.get("role") == "user"]
        text = f"{len(said)} user messages; the first: {said[0]}"
        message = ResponseOutputMessage(
            id="msg-1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_an_agent_keeps_its_conversation(client: MemoryClient, namespace: str) -> None:
    set_tracing_disabled(True)
    model = EchoModel()
    agent = Agent(name="assistant", instructions="Be brief.", model=model)

    async def scenario() -> list[Any]:
        async with AsyncMemoryClient(client.settings) as aclient:
            session = MemoryCoreSession("chat-1", aclient=aclient, namespace=namespace, key="alice")
            first = await Runner.run(agent, "I ordered a blue bike", session=session)
            second = await Runner.run(agent, "What did I order?", session=session)
            items = await session.get_items()
            newest = await session.get_items(limit=1)
            popped = await session.pop_item()
            after_pop = len(await session.get_items())
            return [first.final_output, second.final_output, items, newest, popped, after_pop]

    first, second, items, newest, popped, after_pop = asyncio.run(scenario())
    assert first == "1 user messages; the first: I ordered a blue bike"
    assert second == "2 user messages; the first: I ordered a blue bike"
    assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
    assert items[2]["content"] == "What did I order?"
    assert newest == items[-1:]
    assert popped == items[-1]
    assert after_pop == 3
    # The blocking client reads the same session.
    assert len(client.session(namespace, "chat-1", key="alice").history.messages) == 3


def test_one_namespace_never_sees_another(client: MemoryClient, namespace: str) -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        async with AsyncMemoryClient(client.settings) as aclient:
            mine = MemoryCoreSession("chat", aclient=aclient, namespace=f"{namespace}-a", promote="none")
            theirs = MemoryCoreSession("chat", aclient=aclient, namespace=f"{namespace}-b", promote="none")
            await mine.add_items([{"role": "user", "content": "my secret"}])
            seen = await theirs.get_items()
            await theirs.clear_session()
            return seen, await mine.get_items()

    seen, kept = asyncio.run(scenario())
    assert seen == []
    assert kept == [{"role": "user", "content": "my secret"}]


def test_a_planted_item_fails_one_read_typed(client: MemoryClient, namespace: str) -> None:
    from memory_core import ChatMessage
    from memory_core.core.errors import CorruptDataError

    client.session(namespace, "chat", promote="none").add_messages(
        [ChatMessage(content="hi", extra_args={"openai_agents_item": "[" * 5000 + "]" * 5000})]
    )

    async def scenario() -> None:
        async with AsyncMemoryClient(client.settings) as aclient:
            planted = MemoryCoreSession("chat", aclient=aclient, namespace=namespace, promote="none")
            with pytest.raises(CorruptDataError, match="stored OpenAI Agents user item"):
                await planted.get_items()
            clean = MemoryCoreSession("other", aclient=aclient, namespace=namespace, promote="none")
            await clean.add_items([{"role": "user", "content": "still fine"}])
            assert await clean.get_items() == [{"role": "user", "content": "still fine"}]

    asyncio.run(scenario())


def _formed_messages(fake: FakeAnthropic) -> list[tuple[str, str]]:
    """The (role, content) of every message the workers sent to be formed into facts."""
    sent = []
    for request in fake.requests:
        if request.get("tool_choice", {}).get("name") != "record_memories":
            continue
        prompt = "\n".join(m["content"] for m in request["messages"] if isinstance(m.get("content"), str))
        sent += [(line["role"], line["content"]) for line in tagged_lines(prompt, "messages")]
    return sent


def _facts(memory: LongTermMemory) -> list[MemorySetItem]:
    try:
        return memory.get("facts")
    except MemorySetNotFound:  # made by the first formation
        return []


def test_a_session_with_form_into_forms_facts_from_what_the_user_and_the_assistant_said(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic, raw_redis: redis.Redis
) -> None:
    set_tracing_disabled(True)
    agent = Agent(name="assistant", instructions="Be brief.", model=EchoModel())
    told = "1 user messages; the first: I ordered a blue bike"
    picture = [{"type": "input_text", "text": "My bike is blue"}, {"type": "input_image", "image_url": "x"}]
    added: list[Any] = [
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "bike"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "The bike ships on Monday"},
        {"role": "developer", "content": "Answer in English"},
        {"role": "user", "content": picture},
    ]

    async def scenario() -> None:
        async with AsyncMemoryClient(client.settings) as aclient:
            forming = MemoryCoreSession("chat-1", aclient=aclient, namespace=namespace, key="alice", form_into="facts")
            await Runner.run(agent, "I ordered a blue bike", session=forming)
            await forming.add_items(added)
            plain = MemoryCoreSession("chat-2", aclient=aclient, namespace=namespace, key="bob")
            await plain.add_items([{"role": "user", "content": "I own a red car"}])
            with pytest.raises(InvalidRequestError, match="form_into set name 'no spaces'"):
                MemoryCoreSession("chat-3", aclient=aclient, namespace=namespace, form_into="no spaces")

    asyncio.run(scenario())
    # A session without form_into sends nothing to formation: remember records its operation before it returns.
    assert list(raw_redis.scan_iter(match=client.keys.formation_operation(namespace, "bob", "*"))) == []
    alice = client.long_term(namespace, "alice")
    # Three operations: the run's input, its output (apart: the SDK adds them in two calls), the items added after.
    wait_for(lambda: len(_formed_messages(fake_anthropic)) == 3 and len(_facts(alice)) == 2, timeout=60)
    assert sorted(str(fact.value) for fact in _facts(alice)) == ["I ordered a blue bike", "My bike is blue"]
    # Only messages went, as text, each with its session message id: tool calls, outputs and instructions did not.
    assert sorted(_formed_messages(fake_anthropic)) == [
        ("assistant", told),
        ("user", "I ordered a blue bike"),
        ("user", "My bike is blue"),
    ]
    entries = {e.content: e.id for e in client.session(namespace, "chat-1", key="alice").history.entries()}
    for fact in _facts(alice):
        assert fact.fact is not None
        assert fact.fact.sources == [entries[str(fact.value)]]
