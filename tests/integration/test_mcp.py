"""memory-core mcp as assistants reach it: the MCP SDK's own client spawns it over stdio, or connects over
streamable HTTP with bearer tokens, against a real worker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
from celery import Celery
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from memory_core.core.settings import Settings
from memory_core.servers.mcp import TOOLS

from .processes import CLI, client_env, free_port


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def test_over_stdio_an_assistant_stores_finds_and_keeps_working_memory(
    settings: Settings, worker: Celery, namespace: str, tmp_path: Path
):
    env = client_env(settings, MEMORY_MCP__NAMESPACE=namespace, MEMORY_MCP__KEY="alice")

    async def conversation() -> None:
        params = StdioServerParameters(command=CLI, args=["mcp"], env=env, cwd=str(tmp_path))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(listed) == set(TOOLS)
            for tool in listed.values():
                assert tool.description, tool.name  # a one-line description the model acts on
                assert "namespace" not in json.dumps(tool.input_schema)  # no argument reaches another tenant
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
            state = _data(await session.call_tool("get_working_memory", {"path": "plan"}))
            assert state["value"] == {"step": 2}
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
            missing = await session.call_tool("add_memory", {"texts": ["x"], "set_name": "nope"})
            assert missing.is_error
            assert "'nope' not found" in json.dumps([c.model_dump() for c in missing.content])
            assert _data(await session.call_tool("search_memory", {"query": "Alps"}))["memories"]

    asyncio.run(conversation())


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
def _http_server(settings: Settings, tmp_path: Path, **env: str) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "mcp.log").open("wb")
    process = subprocess.Popen(
        [CLI, "mcp", "--http", "--port", str(port)],
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


async def _call(url: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
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
