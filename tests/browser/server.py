"""``memory-core serve`` in a thread: uvicorn serving the HTTP API's app (console included) on a free loopback
port, as the command does, until the block ends."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI


@contextlib.contextmanager
def serving(app: FastAPI, *, host: str = "127.0.0.1", timeout: float = 30.0) -> Iterator[str]:
    """Serves ``app`` on a port the system picks; yields its origin (``http://127.0.0.1:PORT``)."""
    config = uvicorn.Config(app, host=host, port=0, log_level="warning", ws="none", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="console-server", daemon=True)
    thread.start()  # uvicorn installs no signal handlers off the main thread
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start serving the console on {host} within {timeout} s")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
