"""What a reindex costs: its rate on a large store, and one-item adds and searches during it against none.

A store of ``items`` items (real texts, stand-in vectors of the shipped model, written straight into the
embedded engine as the bench's large-set section does) is served by one worker running all-MiniLM-L6-v2.
In one run, side by side:

  1. one-item adds and hybrid searches through the queue, p50/p95, with no reindex;
  2. the same, while a reindex to an OpenAI-compatible endpoint runs (a fake on loopback that answers each
     embeddings call after ``TARGET_LATENCY``), the copy taking ``MEMORY_REINDEX__DUTY`` of the worker;
  3. the same again while that endpoint is down (every call a 500): the live path must not notice;
  4. the reindex's rate: once under that load, and once alone (aborted, then started again).

    ops/bench --reindex [--big-items 100000] [--searches 200]
"""

from __future__ import annotations

import os
import statistics
import time

from benchkit import big_store, corpus, pair, timed
from stack import RUN_DIR, clear_prefix, isolated_env, worker

from memory_core import MemoryClient, MemorySet
from memory_core.client.admin import Admin
from memory_core.core.messages import ReindexStatus
from memory_core.core.settings import load_settings
from memory_core.engine.embedders.minilm import MODEL_NAME, minilm_fingerprint
from memory_core.testing.fake_openai import VALID_KEY, FakeOpenAI

TARGET = "openai:bench-target"
"""The target: an embeddings endpoint (``FakeOpenAI``, cheap vectors), so the rate shows the reindex's own cost
(scan, copy, records) plus the endpoint's latency, as with a hosted model."""
TARGET_LATENCY = 0.02
"""Seconds the fake endpoint takes per embeddings call."""


def run(items: int, searches: int) -> None:
    env = isolated_env("bench-reindex")
    env.pop("MEMORY_EMBEDDER__MODEL", None)  # the store holds the shipped model's vectors: its worker runs it
    os.environ.pop("MEMORY_EMBEDDER__MODEL", None)
    path = RUN_DIR / "bench-reindex"
    write_s = big_store(path, items, MODEL_NAME, minilm_fingerprint())
    env = {**env, "MEMORY_QDRANT__PATH": str(path), "MEMORY_EMBEDDER__API_KEY": VALID_KEY}
    os.environ.update(env)
    settings = load_settings()
    queries = corpus(searches * 4, seed=11)
    fake = FakeOpenAI(dimension=384)
    with fake, worker(env, name="bench-reindex-worker"), MemoryClient(settings) as client:
        fake.behave("stall", stall_seconds=TARGET_LATENCY)
        clear_prefix(settings.redis.url, settings.redis.key_prefix)
        admin = Admin(client)
        notes = client.long_term("bench", "big").get_memory_set("notes")
        notes.search("warm-up query", limit=10)
        notes.add(["warm-up write"])
        quiet = _load(notes, queries[:searches], "quiet")
        admin.reindex("start", to=TARGET, base_url=fake.url)
        during = _load(notes, queries[searches : 2 * searches], "during")
        fake.behave("http_500")
        down = _load(notes, queries[2 * searches : 3 * searches], "down")
        unreachable = admin.reindex("status")
        fake.behave("stall", stall_seconds=TARGET_LATENCY)
        still = admin.reindex("status")
        loaded = _finish(admin)
        admin.reindex("abort")
        admin.reindex("start", to=TARGET, base_url=fake.url)
        alone = _finish(admin)
        admin.reindex("abort")
    print(
        f"\n### Reindex: {items:,} items, all-MiniLM-L6-v2 -> {TARGET}, one worker "
        f"(the store written straight into the engine in {write_s:.0f} s)\n"
    )
    duty = settings.reindex.duty
    print(f"Target endpoint: {TARGET_LATENCY * 1000:.0f} ms a call; MEMORY_REINDEX__DUTY={duty}.\n")
    print("| | no reindex: p50 / p95 | during: p50 / p95 | ratio | target down: p50 / p95 | ratio |")
    print("|---|---|---|---|---|---|")
    for op in ("add", "search"):
        ratio = statistics.median(during[op]) / statistics.median(quiet[op])
        down_ratio = statistics.median(down[op]) / statistics.median(quiet[op])
        label = "one-item add (waits for the store)" if op == "add" else "hybrid search (new query: cache misses)"
        print(
            f"| {label} | {pair(quiet[op])} | {pair(during[op])} | x{ratio:.2f} | {pair(down[op])} "
            f"| x{down_ratio:.2f} |"
        )
    print(
        f"\nWith the target down, the reindex said: {unreachable.target_error or 'no error'!r} ({unreachable.owed} owed)."
    )
    overlap = "every measured call overlapped it" if still.state == "building" else "it ended before the load did"
    print(
        f"\nWhen the load ended the reindex was {still.state} ({still.scanned:,} of about {2 * still.total:,} point "
        f"reads, {still.parts_done}/{still.parts} parts done): {overlap}."
    )
    print("\n| reindex of the store | seconds | points per second (first pass) |")
    print("|---|---|---|")
    for label, status in (("under the measuring load", loaded), ("alone", alone)):
        seconds = (status.completed_at or 0) - (status.started_at or 0)
        print(f"| {label} | {seconds:.1f} | {status.total / seconds:,.0f} |")


def _load(notes: MemorySet, queries: list[str], tag: str) -> dict[str, list[float]]:
    """One-item adds and hybrid searches, in turn, one call at a time."""
    adds = timed(lambda q: notes.add([f"{q} ({tag} write)"]), queries)
    found = timed(lambda q: notes.search(f"{q} ({tag})", limit=10), queries)
    return {"add": adds, "search": found}


def _finish(admin: Admin) -> ReindexStatus:
    status = admin.reindex("status")
    while status.state == "building":
        time.sleep(0.5)
        status = admin.reindex("status")
    if status.state != "complete":
        raise SystemExit(f"the reindex ended {status.state}: {status}")
    return status
