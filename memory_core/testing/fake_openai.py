"""A fake OpenAI embeddings API on loopback, for tests of the real ``openai`` SDK against ``/v1/embeddings``.

It answers ``POST /v1/embeddings`` as OpenAI does (``{"object": "list", "data": [{"object": "embedding",
"index": i, "embedding": [...]}], "model": ..., "usage": {...}}``), with a vector that is a stable function of
the text (equal texts, equal vectors; not unit length, as some servers' are not), records every request, and
can be told to misbehave: 429 with a Retry-After, 500, a stall past the client's timeout, vectors of another
length, a refused key (401), a body that is not JSON.

    with FakeOpenAI() as fake:
        settings.embedder.base_url = fake.url
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

VALID_KEY = "sk-fake-valid-key"
"""The one key the fake accepts; any other gets a 401."""


@dataclass
class Behaviour:
    """What the fake does with the next requests. ``failures`` requests fail with ``mode`` first, then ``ok``."""

    mode: str = "ok"  # ok | http_429 | http_500 | stall | wrong_dimension | garbage
    failures: int = 1_000_000
    retry_after: str | None = "7"
    stall_seconds: float = 5.0


@dataclass
class FakeOpenAI:
    """The server; ``requests`` holds every decoded request body in order, ``keys`` the bearer keys sent."""

    dimension: int = 8
    behaviour: Behaviour = field(default_factory=Behaviour)
    requests: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL to give the SDK (``.../v1``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def behave(
        self, mode: str = "ok", *, failures: int = 1_000_000, retry_after: str | None = "7", stall_seconds: float = 5.0
    ) -> None:
        """Sets the behaviour of the following requests, and forgets the ones recorded so far."""
        with self._lock:
            self.behaviour = Behaviour(
                mode=mode, failures=failures, retry_after=retry_after, stall_seconds=stall_seconds
            )
            self.requests.clear()
            self.keys.clear()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def respond(self, body: dict[str, Any], key: str) -> tuple[int, dict[str, str], bytes]:
        """The status, extra headers and body of the reply to one request."""
        with self._lock:
            self.requests.append(body)
            self.keys.append(key)
            behaviour = self.behaviour
            mode = behaviour.mode if behaviour.failures > 0 else "ok"
            if behaviour.failures > 0 and behaviour.mode != "ok":
                behaviour.failures -= 1
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
        dimension = int(body.get("dimensions") or self.dimension) + (1 if mode == "wrong_dimension" else 0)
        data = [{"object": "embedding", "index": i, "embedding": vector(t, dimension)} for i, t in enumerate(texts)]
        tokens = sum(max(1, len(t) // 4) for t in texts)
        answer = {
            "object": "list",
            "data": data,
            "model": body.get("model", "fake"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return 200, {}, json.dumps(answer).encode()


def vector(text: str, dimension: int) -> list[float]:
    """A stable vector for ``text``, deliberately not unit length: the client must normalize."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(digest[i % len(digest)] - 127.5) / 10 for i in range(dimension)]


def _error(message: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": code}}).encode()


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}") if self.path.endswith("/embeddings") else {}
            key = self.headers.get("authorization", "").removeprefix("Bearer ")
            headers: dict[str, str]
            if not self.path.endswith("/v1/embeddings"):
                status, headers, payload = 404, {}, _error(f"no route {self.path}", "not_found")
            else:
                status, headers, payload = fake.respond(body, key)
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a stall past its timeout): nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read ``requests`` instead."""

    return Handler
