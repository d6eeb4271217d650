"""memory-core mcp as assistants reach it: the MCP SDK's own client spawns it over stdio, or connects over
streamable HTTP with bearer tokens, against a real worker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import httpx2
from celery import Celery
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from memory_core import MemoryClient
from memory_core.core.settings import Settings
from memory_core.servers.mcp import TOOLS

from .processes import CLI, client_env, free_port


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def _failure(result: Any) -> str:
    assert result.is_error, result.structured_content
    return json.dumps([c.model_dump() for c in result.content])


def test_over_stdio_an_assistant_stores_finds_and_keeps_working_memory(
    settings: Settings, worker: Celery, namespace: str, tmp_path: Path
):
    env = client_env(settings, MEMORY_MCP__NAMESPACE=namespace, MEMORY_MCP__KEY="alice")

    async def conversation() -> None:
        params = StdioServerParameters(command=CLI, args=["mcp"], env=env, cwd=str(tmp_path))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            started = await session.initialize()
            assert started.server_info.version == version("memory-core")
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(listed) == set(TOOLS)
            hints = {}
            for tool in listed.values():
                assert tool.description, tool.name  # a one-line description the model acts on
                assert "namespace" not in json.dumps(tool.input_schema)  # no argument reaches another tenant
                assert tool.annotations is not None, tool.name
                hints[tool.name] = tool.annotations
            # Clients ask the user before a call that changes or deletes memory.
            reading = {"search_memory", "get_memories", "recall", "list_memory_sets", "get_working_memory"}
            reading |= {"memory_status", "memory_operation"}
            assert {name for name, hint in hints.items() if hint.read_only_hint} == reading
            assert {name for name, hint in hints.items() if hint.destructive_hint} == {
                "delete_memory",
                "set_working_memory",
            }
            assert hints["add_memory"].read_only_hint is False
            assert all(hint.open_world_hint is False for hint in hints.values())
            # Before the first add the default set does not exist: nothing is remembered yet, not an error.
            assert _data(await session.call_tool("search_memory", {"query": "anything"})) == {"memories": []}
            assert _data(await session.call_tool("get_memories", {})) == {"memories": []}
            stored = _data(await session.call_tool("add_memory", {"texts": ["Alice is allergic to peanuts."]}))
            assert len(stored["ids"]) == 1
            await session.call_tool("add_memory", {"texts": ["Alice likes hiking in the Alps."], "importance": 0.9})
            found = _data(await session.call_tool("search_memory", {"query": "what food must Alice avoid?"}))
            assert found["memories"][0]["text"] == "Alice is allergic to peanuts."
            assert found["memories"][0]["id"] == stored["ids"][0]
            everything = _data(await session.call_tool("get_memories", {}))
            assert everything["memories"][0]["text"] == "Alice is allergic to peanuts."
            sets = _data(await session.call_tool("list_memory_sets", {}))
            assert sets["sets"] == [{"name": "memories", "size": 2, "capacity": 1000}]
            recalled = _data(await session.call_tool("recall", {"query": "plan dinner for Alice"}))
            assert "peanuts" in recalled["context"]
            _data(await session.call_tool("set_working_memory", {"path": "plan.step", "value": 2}))
            _data(await session.call_tool("set_working_memory", {"path": "plan.guests.count", "value": 4}))
            state = _data(await session.call_tool("get_working_memory", {"path": "plan"}))
            assert state["value"] == {"guests": {"count": 4}, "step": 2}
            whole = _data(await session.call_tool("get_working_memory", {}))
            assert whole == {"path": None, "value": {"plan": {"guests": {"count": 4}, "step": 2}}}
            status = _data(await session.call_tool("memory_status", {}))
            assert status["namespace"] == namespace
            assert status["key"] == "alice"
            assert all(count >= 1 for count in status["queues"].values())
            gone = _data(await session.call_tool("delete_memory", {"ids": stored["ids"]}))
            assert gone == {"deleted": 1}
            # Bad input: a tool error naming what was wrong, and the server serves on.
            bad = await session.call_tool("search_memory", {"query": "x", "limit": 1000})
            assert bad.is_error
            assert "limit" in json.dumps([c.model_dump() for c in bad.content])
            # The rerank switch reaches the worker, which has no reranker here and says so.
            assert "MEMORY_RERANK__MODEL" in _failure(
                await session.call_tool("search_memory", {"query": "x", "rerank": True})
            )
            budget = _failure(await session.call_tool("recall", {"query": "x", "token_budget": 2**63}))
            assert "token_budget" in budget
            # A set the model names must exist, for every tool that takes one: a wrong name is an error.
            named: list[tuple[str, dict[str, Any]]] = [
                ("add_memory", {"texts": ["x"]}),
                ("search_memory", {"query": "x"}),
                ("get_memories", {}),
                ("delete_memory", {"ids": ["x"]}),
            ]
            for name, arguments in named:
                missing = _failure(await session.call_tool(name, {**arguments, "set_name": "nope"}))
                assert "MemorySetNotFound" in missing, name
                assert "'nope' not found" in missing, name
            assert _data(await session.call_tool("search_memory", {"query": "Alps"}))["memories"]

    asyncio.run(conversation())


def test_over_stdio_an_assistant_hands_a_conversation_to_remember_and_checks_the_operation(
    settings: Settings, worker: Celery, namespace: str, tmp_path: Path, fake_anthropic
):
    env = client_env(settings, MEMORY_MCP__NAMESPACE=namespace, MEMORY_MCP__KEY="alice")
    conversation = [
        {"role": "user", "content": "I live in Lisbon"},
        {"role": "assistant", "content": "Lisbon is lovely!"},
        {"role": "user", "content": "I like green tea"},
    ]

    async def conversing() -> None:
        params = StdioServerParameters(command=CLI, args=["mcp"], env=env, cwd=str(tmp_path))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            hints = listed["remember"].annotations
            assert hints is not None
            assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (False, False, True)
            assert "background" in (listed["remember"].description or "")
            assert "as given" in (listed["add_memory"].description or "")
            # Before the first formation the facts set does not exist: nothing is remembered yet, not an error.
            assert _data(await session.call_tool("search_memory", {"query": "x", "set_name": "facts"})) == {
                "memories": []
            }

            receipt = _data(await session.call_tool("remember", {"messages": conversation}))
            assert (receipt["status"], receipt["set_name"], receipt["decisions"]) == ("pending", "facts", [])
            again = _data(await session.call_tool("remember", {"messages": conversation}))
            assert again["op_id"] == receipt["op_id"]  # the same call is the same operation
            deadline = time.monotonic() + 60
            while (done := _data(await session.call_tool("memory_operation", {"op_id": receipt["op_id"]})))[
                "status"
            ] != "done":
                assert done["status"] in ("pending", "running"), done
                assert time.monotonic() < deadline, done
                await asyncio.sleep(0.1)
            assert [(d["decision"], d["text"]) for d in done["decisions"]] == [
                ("add", "I live in Lisbon"),
                ("add", "I like green tea"),
            ]
            found = _data(
                await session.call_tool("search_memory", {"query": "what does she drink", "set_name": "facts"})
            )
            assert "I like green tea" in [m["text"] for m in found["memories"]]
            assert "tea" in _data(await session.call_tool("recall", {"query": "what does she drink"}))["context"]
            # The verbatim set is untouched: formed facts live in their own set.
            assert _data(await session.call_tool("get_memories", {})) == {"memories": []}

            robot = _failure(await session.call_tool("remember", {"messages": [{"role": "robot", "content": "x"}]}))
            assert "role" in robot
            assert "robot" in robot
            assert "messages" in _failure(await session.call_tool("remember", {"messages": []}))
            assert "op_id" in _failure(await session.call_tool("memory_operation", {"op_id": "nope"}))
            unknown = _failure(await session.call_tool("memory_operation", {"op_id": "0" * 32}))
            assert "NotFoundError" in unknown, unknown

    asyncio.run(conversing())


def test_without_a_namespace_or_tokens_it_refuses_to_start(settings: Settings, tmp_path: Path):
    stdio = subprocess.run(
        [CLI, "mcp"], env=client_env(settings), cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert stdio.returncode == 2
    assert "needs MEMORY_MCP__NAMESPACE" in stdio.stderr
    http = subprocess.run(
        [CLI, "mcp", "--http"],
        env=client_env(settings),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert http.returncode == 2
    assert "needs MEMORY_AUTH__TOKENS" in http.stderr
    exposed = subprocess.run(
        [CLI, "mcp", "--http", "--dev", "--host", "0.0.0.0"],
        env=client_env(settings, MEMORY_MCP__NAMESPACE="acme"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert exposed.returncode == 2
    assert "loopback only" in exposed.stderr


@contextmanager
def _http_server(settings: Settings, tmp_path: Path, *args: str, **env: str) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "mcp.log").open("wb")
    process = subprocess.Popen(
        [CLI, "mcp", "--http", "--port", str(port), *args],
        env=client_env(settings, **env),
        cwd=tmp_path,
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, (tmp_path / "mcp.log").read_text()
                assert time.monotonic() < deadline, (tmp_path / "mcp.log").read_text()
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


async def _call(url: str, token: str | None, tool: str, arguments: dict[str, Any]) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return _data(await session.call_tool(tool, arguments))


def test_over_http_each_token_reaches_its_own_namespace_only(
    settings: Settings, worker: Celery, namespace: str, tmp_path: Path
):
    other = namespace + "-b"
    tokens = {"tok-a": namespace, "tok-b": other}
    # The server maps each token to its namespace and acts with that token (the workers check it again when
    # they know the tokens; this session's worker does not, so what is proven here is the server's own map).
    with _http_server(settings, tmp_path, MEMORY_AUTH__TOKENS=json.dumps(tokens)) as url:
        refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, timeout=10)
        assert refused.status_code == 401
        wrong = httpx.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
            headers={"Authorization": "Bearer tok-nobody"},
            timeout=10,
        )
        assert wrong.status_code == 401
        asyncio.run(_call(url, "tok-a", "add_memory", {"texts": ["The launch code is 0000."]}))
        mine = asyncio.run(_call(url, "tok-a", "search_memory", {"query": "launch code"}))
        assert [m["text"] for m in mine["memories"]] == ["The launch code is 0000."]
        theirs = asyncio.run(_call(url, "tok-b", "search_memory", {"query": "launch code"}))
        assert theirs["memories"] == []
        assert asyncio.run(_call(url, "tok-b", "get_memories", {}))["memories"] == []
        assert asyncio.run(_call(url, "tok-b", "memory_status", {}))["namespace"] == other
        assert asyncio.run(_call(url, "tok-a", "memory_status", {}))["namespace"] == namespace
        # The SDK's warnings about settings it would have us choose are answered: none at start.
        assert "Warning" not in (tmp_path / "mcp.log").read_text()


def test_over_http_in_dev_mode_it_answers_only_its_own_address(
    settings: Settings, worker: Celery, namespace: str, tmp_path: Path
):
    with _http_server(settings, tmp_path, "--dev", MEMORY_MCP__NAMESPACE=namespace) as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "set_working_memory", "arguments": {"path": "plan", "value": "planted"}},
        }
        accept = {"accept": "application/json, text/event-stream"}
        # A page that rebinds its own name to 127.0.0.1 sends that name; another port is another server.
        for host in ("rebound.example", f"rebound.example:{port}", "127.0.0.1:1"):
            assert httpx.post(url, json=call, headers={**accept, "host": host}, timeout=10).status_code == 421, host
        cross_site = httpx.post(url, json=call, headers={**accept, "origin": "http://evil.example"}, timeout=10)
        assert cross_site.status_code == 403
        assert asyncio.run(_call(url, None, "get_working_memory", {})) == {"path": None, "value": {}}
    with MemoryClient(settings) as client:
        assert client.short_term(namespace, "default").get("plan") is None  # nothing was written


def test_non_finite_numbers_in_any_argument_are_a_typed_tool_error(
    settings: Settings, worker: Celery, namespace: str, tmp_path: Path
):
    # The SDK's client turns NaN into null before sending; another client may send the literal, which the
    # server's JSON parser takes. So this talks JSON-RPC over stdio itself.
    env = client_env(settings, MEMORY_MCP__NAMESPACE=namespace)
    process = subprocess.Popen(
        [CLI, "mcp"], env=env, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None
    assert stdout is not None
    requests = iter(range(1, 100))

    def call(method: str, params: str) -> dict[str, Any]:
        number = next(requests)
        stdin.write(f'{{"jsonrpc": "2.0", "id": {number}, "method": "{method}", "params": {params}}}\n'.encode())
        stdin.flush()
        reply = json.loads(stdout.readline())
        assert reply["id"] == number, reply
        result: dict[str, Any] = reply["result"]
        return result

    try:
        hello = '{"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}'
        call("initialize", hello)
        stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        for value in ("NaN", '[1, {"deep": Infinity}]', "-Infinity", "1e999"):
            arguments = f'{{"path": "plan.step", "value": {value}}}'
            refused = call("tools/call", f'{{"name": "set_working_memory", "arguments": {arguments}}}')
            assert refused["isError"] is True, value
            text = refused["content"][0]["text"]
            assert text.startswith("InvalidRequestError: value"), text
            assert "only finite numbers" in text
        for tool, arguments in (
            ("add_memory", '{"texts": ["x"], "importance": NaN}'),
            ("recall", '{"query": "x", "limit": Infinity}'),
        ):
            refused = call("tools/call", f'{{"name": "{tool}", "arguments": {arguments}}}')
            assert "InvalidRequestError" in refused["content"][0]["text"], tool
        state = call("tools/call", '{"name": "get_working_memory", "arguments": {}}')
        assert state["structuredContent"] == {"path": None, "value": {}}  # nothing was written
    finally:
        stdin.close()
        process.wait(timeout=30)
        stdout.close()
