"""What every fake remote API here shares: a JSON-over-HTTP server on a free loopback port, in a thread.

A fake subclasses ``LoopbackServer``, calls ``listen()`` once (a dataclass from ``__post_init__``), and
answers each ``POST`` in ``answer``, given the path, the decoded JSON body and the bearer key. The server
starts and stops with the ``with`` block. ``take(behaviour)`` counts down a misbehaviour's ``failures``.

    class FakeThing(LoopbackServer):
        def answer(self, path, body, key):
            return 200, {}, b'{"ok": true}'
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, Self

Answer = tuple[int, dict[str, str], bytes]
"""The status, extra headers and JSON body of a reply."""


class Misbehaviour(Protocol):
    """What a fake does with the next requests: ``failures`` of them get ``mode``, then ``"ok"``."""

    mode: str
    failures: int


class LoopbackServer:
    """The server and its thread; ``lock`` guards whatever the fake records."""

    lock: threading.Lock

    def listen(self) -> None:
        """Binds a free port on 127.0.0.1 (serving starts with the ``with`` block)."""
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str, body: Any, key: str) -> Answer:
        """The reply to ``POST path`` with ``body`` (decoded JSON, ``{}`` if empty) and bearer ``key``."""
        raise NotImplementedError

    def take(self, behaviour: Misbehaviour) -> str:
        """The mode the next request gets, counting it against ``behaviour.failures`` (hold ``lock``)."""
        mode = behaviour.mode if behaviour.failures > 0 else "ok"
        if behaviour.failures > 0 and behaviour.mode != "ok":
            behaviour.failures -= 1
        return mode


def json_body(value: Any) -> bytes:
    """``value`` as a reply body."""
    return json.dumps(value).encode()


def _handler(fake: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None  # a fake answers what a real API answers to a body that is not JSON
            key = self.headers.get("authorization", "").removeprefix("Bearer ")
            status, headers, payload = fake.answer(self.path, body, key)
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
            """Quiet: tests read what the fake recorded instead."""

    return Handler
