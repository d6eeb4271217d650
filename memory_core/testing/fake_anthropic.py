"""A fake Anthropic Messages API on loopback, for tests and benchmarks of the real ``anthropic`` SDK.

It answers ``POST /v1/messages`` like the real API answers a forced tool call,
records every request, and can be told to misbehave: return HTTP errors, stall
past the client's timeout, send malformed or garbage bodies, out-of-range
indices, or more topics than asked. The grouping it returns is decided by
``grouping`` (a function of the item count and the limit), so tests can assert
that the indices were honoured.

    with FakeAnthropic() as fake:
        settings.anthropic.base_url = fake.url
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memory_core.testing.formation_script import FormationScript
from memory_core.testing.loopback import Answer, LoopbackServer

Grouping = Callable[[int, int], list[list[int]]]

_INDEX = re.compile(r'^\{"index": (\d+)', re.MULTILINE)


def contiguous(count: int, limit: int) -> list[list[int]]:
    """Splits ``count`` items into ``limit`` runs of consecutive indices (the default grouping)."""
    groups = min(limit, count)
    size = -(-count // groups) if groups else 0
    return [list(range(start, min(start + size, count))) for start in range(0, count, size)] if count else []


@dataclass
class Behaviour:
    """What the fake does with the next requests. ``failures`` requests fail with ``mode`` first, then ``ok``."""

    mode: str = (
        "ok"  # ok | http_500 | http_429 | http_529 | stall | malformed | garbage | out_of_range | too_many | no_tool
    )
    failures: int = 1_000_000
    grouping: Grouping = contiguous
    stall_seconds: float = 5.0


@dataclass
class FakeAnthropic(LoopbackServer):
    """The server; ``requests`` holds every decoded request body in order."""

    behaviour: Behaviour = field(default_factory=Behaviour)
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    # (model, started, ended) of every request, monotonic seconds: shows which calls overlapped.
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    formation: FormationScript = field(default_factory=FormationScript)
    """What formation requests (the ``record_memories`` tool) are answered with."""
    latency: tuple[float, float] | None = None
    """Seconds every answer takes, drawn uniformly from this range (a model's think time); None: at once."""

    def __post_init__(self) -> None:
        self.listen()

    @property
    def url(self) -> str:
        """The base URL to give the SDK."""
        return self.origin

    def behave(
        self,
        mode: str = "ok",
        *,
        failures: int = 1_000_000,
        grouping: Grouping = contiguous,
        stall_seconds: float = 5.0,
    ) -> None:
        """Sets the behaviour of the following requests, and forgets the ones recorded so far."""
        with self.lock:
            self.behaviour = Behaviour(mode=mode, failures=failures, grouping=grouping, stall_seconds=stall_seconds)
            self.requests.clear()
            self.spans.clear()
            self.max_in_flight = self.in_flight

    def answer(self, path: str, body: Any, key: str) -> Answer:
        body = body if isinstance(body, dict) else {}
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        started = time.monotonic()
        if self.latency is not None:
            time.sleep(random.uniform(*self.latency))  # a think time, not a secret
        try:
            status, payload = self.respond(body)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.spans.append((str(body.get("model")), started, time.monotonic()))
        busy = status in {429, 529}  # as the real API does: say how long to wait
        return status, {"retry-after": "1"} if busy else {}, payload

    def respond(self, body: dict[str, Any]) -> tuple[int, bytes]:
        """The status and body of the reply to one request."""
        with self.lock:
            self.requests.append(body)
            behaviour = self.behaviour
            mode = self.take(behaviour)
        text = "\n".join(m["content"] for m in body.get("messages", []) if isinstance(m.get("content"), str))
        if body.get("tool_choice", {}).get("name") == "record_memories" and mode in {"ok", "malformed", "no_tool"}:
            return self._formation(body, text, mode)
        if body.get("tool_choice", {}).get("name") == "record_entities" and mode == "ok":
            return 200, json.dumps(_message(body, _entities(text), tool=True, input_chars=len(text))).encode()
        count = len(_INDEX.findall(text))
        limit = _limit(body)
        if mode in {"http_500", "http_429", "http_529"}:
            return int(mode[-3:]), json.dumps(
                {"type": "error", "error": {"type": "api_error", "message": mode}}
            ).encode()
        if mode == "stall":
            time.sleep(behaviour.stall_seconds)
        if mode == "garbage":
            return 200, b"<html>not json</html>"
        groups = behaviour.grouping(count, limit)
        if mode == "out_of_range":
            groups = [[*groups[0], count + 7]] + groups[1:]
        if mode == "too_many":
            groups = [[i] for i in range(count)]
        topics: Any = [
            {"summary": f"Summary of items {', '.join(map(str, g))}.", "item_indices": g} for g in groups if g
        ]
        if mode == "malformed":
            topics = {"not": "a list"}
        return 200, json.dumps(
            _message(body, {"topics": topics}, tool=mode != "no_tool", input_chars=len(text))
        ).encode()

    def _formation(self, body: dict[str, Any], text: str, mode: str) -> tuple[int, bytes]:
        reply: Any = self.formation.next(text)
        if mode == "malformed":
            reply = {"facts": "not a list"}
        if mode == "no_tool" or reply == "no_tool":
            return 200, json.dumps(_message(body, {}, tool=False, input_chars=len(text))).encode()
        if isinstance(reply, str):
            return 200, reply.encode()
        return 200, json.dumps(_message(body, reply, tool=True, input_chars=len(text))).encode()


def _entities(text: str) -> dict[str, Any]:
    """What the fake "model" answers for record_entities: the offline extractor run on the tagged data."""
    from memory_core.core.models import ChatMessage
    from memory_core.engine.session.entities import OfflineEntityExtractor

    def lines(tag: str) -> list[dict[str, Any]]:
        found = re.search(rf"<{tag}>\n(.*?)</{tag}>", text, flags=re.DOTALL)
        return [json.loads(line) for line in (found.group(1).splitlines() if found else []) if line.strip()]

    known = {e["name"]: e["summary"] for e in lines("known")}
    messages = [ChatMessage.model_validate(m) for m in lines("conversation")]
    updates = OfflineEntityExtractor().update(messages, known)
    return {"entities": [{"name": n, "summary": s} for n, s in updates.items()]}


def _limit(body: dict[str, Any]) -> int:
    found = re.search(r"at most (\d+) topics", json.dumps(body.get("messages", "")))
    return int(found.group(1)) if found else 1


def _message(request: dict[str, Any], tool_input: dict[str, Any], *, tool: bool, input_chars: int) -> dict[str, Any]:
    block: dict[str, Any] = (
        {"type": "tool_use", "id": "toolu_fake_1", "name": _tool_name(request), "input": tool_input}
        if tool
        else {"type": "text", "text": "I would rather chat."}
    )
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "fake"),
        "content": [block],
        "stop_reason": "tool_use" if tool else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_chars // 4 + 200, "output_tokens": len(json.dumps(tool_input)) // 4},
    }


def _tool_name(request: dict[str, Any]) -> str:
    name = request.get("tool_choice", {}).get("name")
    return name if isinstance(name, str) else "record_topics"
