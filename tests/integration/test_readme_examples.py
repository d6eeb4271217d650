"""Every Python example of the README and of every docs page runs, in order, as a reader would paste it.

The examples build their client with ``MemoryClient.from_env()``, so the test points the environment at a
deployment of its own (a Redis DB, a key prefix, a store, no API key: the offline summarizer, as a new
user has it) and serves it with a real worker.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.workers import services
from memory_core.workers.app import create_app

from .conftest import make_settings
from .in_thread import in_thread_worker
from .processes import ROOT, PrivateRedis

pytestmark = pytest.mark.slow

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """The ``python`` blocks of a Markdown page, each with the line its code starts on."""
    text = page.read_text()
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in FENCE.finditer(text)]


def test_the_examples_are_found():
    # The extraction itself works: the README's quick start and the docs' examples are all picked up.
    assert len(python_blocks(ROOT / "README.md")) >= 1
    assert sum(len(python_blocks(page)) for page in PAGES) >= 9


@pytest.fixture
def readers_deployment(private_redis: PrivateRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    url = private_redis.database_url()  # a Redis of its own: the examples use fixed names ("acme")
    env = {
        "MEMORY_REDIS__URL": url,
        "MEMORY_REDIS__KEY_PREFIX": "mcreadme",
        "MEMORY_QDRANT__PATH": str(tmp_path / "store"),
        "MEMORY_ANTHROPIC__API_KEY": "",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # no .env of the checkout is read
    settings = make_settings(
        url, tmp_path / "store", redis={"url": url, "key_prefix": "mcreadme"}, anthropic={"api_key": ""}
    )
    app = create_app(settings)
    try:
        with in_thread_worker(app, concurrency=4):
            yield
    finally:
        services.close(app)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_example_runs_in_order(page: Path, readers_deployment: None):
    blocks = python_blocks(page)
    scope: dict[str, object] = {"__name__": "readme"}
    for line, code in blocks:
        try:
            # dont_inherit: an example runs as a reader pasting it would, without this module's __future__ imports.
            exec(compile(code, f"{page.name}:{line}", "exec", dont_inherit=True), scope)  # noqa: S102  # ours
        except Exception as exc:  # noqa: BLE001  # any failure is the example's: say which one
            pytest.fail(f"{page.relative_to(ROOT)} example at line {line} raised {type(exc).__name__}: {exc}")
    client = scope.get("client")
    if client is not None:
        client.close()  # type: ignore[attr-defined]  # the README's own MemoryClient
