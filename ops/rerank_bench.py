"""What reranking adds to a search, side by side with none, in one run (``ops/bench --rerank [SPEC]``).

One worker reranks with ``SPEC`` (``MEMORY_RERANK__MODEL``; without one, an ``http:`` endpoint on loopback,
``memory_core.testing.fake_rerank``, whose own scoring is a word count: what it measures is the path, i.e. the
wider fused fetch of ``MEMORY_RERANK__CANDIDATES`` hits, their texts sent in one HTTP request and the answer
read). A real cross-encoder adds its own compute on top: run with its spec to measure it.

A set of ``--items`` texts, then the same new query texts searched three ways, in turn query by query, so
drift weighs on all three alike: no reranking (``limit`` 10), no reranking with ``limit`` the candidate count
(the wider fetch alone), and reranked (``limit`` 10). Caches are off (``MEMORY_CACHE__ENABLED=false``), so
every search embeds its query and reaches the store: each one is a full cache miss.

    ops/bench --rerank    # against the local fake endpoint
    ops/bench --rerank fastembed:Xenova/ms-marco-MiniLM-L-6-v2 --searches 200
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics

from benchkit import corpus, pair, timed
from stack import clear_prefix, isolated_env, redis_server, worker

from memory_core import MemoryClient, load_settings
from memory_core.testing.fake_rerank import FakeRerankEndpoint

LIMIT = 10


def run(spec: str | None, items: int, searches: int) -> None:
    """Loads ``items`` texts, times ``searches`` queries each way, prints the table."""
    with contextlib.ExitStack() as stack:
        if not spec:
            spec = f"http:{stack.enter_context(FakeRerankEndpoint(api_key=None)).url}"
        env = isolated_env("bench-rerank")
        env.update({"MEMORY_RERANK__MODEL": spec, "MEMORY_CACHE__ENABLED": "false"})
        os.environ.update(env)
        settings = load_settings()
        candidates = settings.rerank.candidates
        texts = corpus(items)
        prefixes = list(dict.fromkeys(t.rsplit(" (", 1)[0] for t in texts))
        queries = random.Random(13).sample(prefixes, min(searches, len(prefixes)))
        stack.enter_context(redis_server(settings.redis.url))
        stack.enter_context(worker(env, name="bench-rerank-worker"))
        client = stack.enter_context(MemoryClient(settings))
        clear_prefix(settings.redis.url, settings.redis.key_prefix)
        notes = client.long_term("bench", "rerank").get_or_create_memory_set("notes", capacity=1_000_000)
        receipts = [notes.submit(texts[i : i + 100]) for i in range(0, len(texts), 100)]
        for receipt in receipts:
            receipt.wait(timeout=600)
        for query in queries[:10]:  # warm-up: the model, the connections, the index
            notes.search(query + " warm", limit=LIMIT)
            notes.search(query + " warm", limit=LIMIT, rerank=False)
        off, wide, on = [], [], []
        for query in queries:
            off += timed(lambda q: notes.search(q, limit=LIMIT, rerank=False), [query])
            wide += timed(lambda q: notes.search(q, limit=max(LIMIT, candidates), rerank=False), [query])
            on += timed(lambda q: notes.search(q, limit=LIMIT), [query])
    added = statistics.median(on) - statistics.median(off)
    print(f"\nmemory-core bench --rerank: {items} items, {len(queries)} searches each way, {os.cpu_count()} cores\n")
    print("| search, through the queue, caches off | p50 / p95 |")
    print("|---|---|")
    print(f"| no reranking, limit {LIMIT} | {pair(off)} |")
    print(f"| no reranking, limit {max(LIMIT, candidates)} (the candidates' fetch alone) | {pair(wide)} |")
    print(f"| reranked by {spec} ({candidates} candidates), limit {LIMIT} | {pair(on)} |")
    print(f"| added by reranking, p50 | {added:+.2f} ms (x{statistics.median(on) / statistics.median(off):.2f}) |")
