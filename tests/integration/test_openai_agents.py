"""MemoryCoreSession under the OpenAI Agents SDK's own Runner, against a real worker (no network).

The SDK ships no fake model, so ``EchoModel`` implements its ``Model`` interface: it answers with how
many user messages it was given and the first one, which shows what the session fed it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from memory_core import AsyncMemoryClient, MemoryClient
from memory_core.integrations.openai_agents import MemoryCoreSession


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
