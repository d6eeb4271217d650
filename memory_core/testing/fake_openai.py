"""A fake OpenAI embeddings API on loopback, for tests of the real ``openai`` SDK against ``/v1/embeddings``.

It answers ``POST /v1/embeddings`` as OpenAI does (``{"object": "list", "data": [{"object": "embedding",
"index": i, "embedding": [...]}], "model": ..., "usage": {...}}``), with a vector that is a stable function of
the text (equal texts, equal vectors; not unit length, as some servers' are not), records every request, and
can be told to misbehave: 429 with a Retry-After, 500, a stall past the client's timeout, vectors of another
length, a refused key (401; ``echo_key``: refused with the whole key quoted, as careless servers do), a body
that is not JSON; or answer wrongly, as a faulty server or a proxy that splits and re-joins batches does:
indices repeated or out of range, another model's name (or the right one with an org and a tag), the requested
``dimensions`` ignored, vectors longer than any store holds, empty vectors, NaN values.

    with FakeOpenAI() as fake:
        settings.embedder.base_url = fake.url
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from memory_core.testing.loopback import Answer, LoopbackServer

VALID_KEY = "sk-fake-valid-key"
"""The one key the fake accepts; any other gets a 401."""


@dataclass
class Behaviour:
    """What the fake does with the next requests. ``failures`` requests fail with ``mode`` first, then ``ok``."""

    mode: str = "ok"
    """``ok``, ``http_429``, ``http_500``, ``stall``, ``wrong_dimension``, ``garbage``, ``echo_key``, or a wrong
    answer: ``duplicate_indices`` (index ``i % 2``: 0,1,0,1), ``out_of_range`` (index ``i + 1``),
    ``other_model`` (named ``other-model``), ``org_model`` (named ``acme/<model>:latest``), ``ignore_dimensions``
    (the fake's own ``dimension`` whatever was asked), ``huge_dimension`` (65,537 values), ``zero_dimension``
    (empty vectors), ``non_finite`` (a NaN in the last vector)."""
    failures: int = 1_000_000
    retry_after: str | None = "7"
    stall_seconds: float = 5.0


@dataclass
class FakeOpenAI(LoopbackServer):
    """The server; ``requests`` holds every decoded request body in order, ``keys`` the bearer keys sent."""

    dimension: int = 8
    behaviour: Behaviour = field(default_factory=Behaviour)
    requests: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    gate: threading.Event | None = None
    """When set, an embeddings request waits until the event is set (a test's freeze of an embedding mid-batch);
    ``waiting`` tells that a request is held at it."""
    waiting: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.listen()

    @property
    def url(self) -> str:
        """The base URL to give the SDK (``.../v1``)."""
        return f"{self.origin}/v1"

    def behave(
        self, mode: str = "ok", *, failures: int = 1_000_000, retry_after: str | None = "7", stall_seconds: float = 5.0
    ) -> None:
        """Sets the behaviour of the following requests, and forgets the ones recorded so far."""
        with self.lock:
            self.behaviour = Behaviour(
                mode=mode, failures=failures, retry_after=retry_after, stall_seconds=stall_seconds
            )
            self.requests.clear()
            self.keys.clear()

    def answer(self, path: str, body: Any, key: str) -> Answer:
        if not path.endswith("/v1/embeddings"):
            return 404, {}, _error(f"no route {path}", "not_found")
        return self.respond(body if isinstance(body, dict) else {}, key)

    def respond(self, body: dict[str, Any], key: str) -> Answer:
        """The status, extra headers and body of the reply to one request."""
        with self.lock:
            self.requests.append(body)
            self.keys.append(key)
            behaviour = self.behaviour
            mode = self.take(behaviour)
        if mode == "echo_key":  # a careless server: its 401 quotes the whole key it was given
            return 401, {}, _error(f"Incorrect API key provided: {key}", "invalid_api_key")
        if self.gate is not None:
            self.waiting.set()
            self.gate.wait(60)
        if key != VALID_KEY:
            return 401, {}, _error("Incorrect API key provided: sk-f***", "invalid_api_key")
        if mode == "http_429":
            headers = {"retry-after": behaviour.retry_after} if behaviour.retry_after is not None else {}
            return 429, headers, _error("Rate limit reached", "rate_limit_exceeded")
        if mode == "http_500":
            return 500, {}, _error("The server had an error", "server_error")
        if mode == "stall":
            time.sleep(behaviour.stall_seconds)
        if mode == "garbage":
            return 200, {}, b"<html>not json</html>"
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        tokens = sum(max(1, len(t) // 4) for t in texts)
        reply = {
            "object": "list",
            "data": _rows(texts, self._dimension(body, mode), mode),
            "model": _model(str(body.get("model", "fake")), mode),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return 200, {}, json.dumps(reply).encode()

    def _dimension(self, body: dict[str, Any], mode: str) -> int:
        asked = int(body.get("dimensions") or self.dimension)
        return {
            "wrong_dimension": asked + 1,
            "ignore_dimensions": self.dimension,
            "huge_dimension": 65_537,
            "zero_dimension": 0,
        }.get(mode, asked)


def _rows(texts: list[str], dimension: int, mode: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"object": "embedding", "index": i, "embedding": vector(t, dimension)} for i, t in enumerate(texts)
    ]
    if mode == "duplicate_indices":
        for i, row in enumerate(rows):
            row["index"] = i % 2
    elif mode == "out_of_range":
        for row in rows:
            row["index"] += 1
    elif mode == "non_finite" and rows:
        rows[-1]["embedding"][0] = math.nan  # json.dumps writes NaN, as some servers do
    return rows


def _model(asked: str, mode: str) -> str:
    if mode == "other_model":
        return "other-model"
    if mode == "org_model":
        return f"acme/{asked}:latest"
    return asked


def vector(text: str, dimension: int) -> list[float]:
    """A stable vector for ``text``, deliberately not unit length: the client must normalize."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(digest[i % len(digest)] - 127.5) / 10 for i in range(dimension)]


def _error(message: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": code}}).encode()
