"""The console on a large set (``ops/bench --console [ITEMS]``): server time and page weight of its views.

A set of ITEMS items (100,000 by default: real texts, metadata, importances, creation times over a year, one
``add`` call's consecutive seqs throughout) is written straight into an embedded store with stand-in vectors,
as ``ops/scale.py`` writes its sets. A worker serves that store; ``memory-core serve --dev``'s app serves the
console in this process (uvicorn on loopback). Each view is asked for in turn, interleaved, with new queries
and items each time (no cache answers):

- the set page (50 items, newest first), a later page by its cursor, the set filtered by a word and by a
  metadata value;
- an item page;
- the search tester (hybrid, limit 10, each ranker's part: the worker embeds the query with the real model).

Server time is the request's round trip on loopback to its last byte, as the browser would wait for it;
page weight is the HTML plus the CSS and htmx it loads (fetched once, then cached by a browser).
"""

from __future__ import annotations

import random
import shutil
import socket
import statistics
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import numpy as np
import uvicorn
from benchkit import corpus, percentile
from stack import RUN_DIR, clear_prefix, isolated_env, worker

from memory_core import MemoryClient, load_settings
from memory_core.core.models import MemorySet, MemorySetItem, Scope
from memory_core.core.settings import QdrantSettings
from memory_core.engine.embedders.minilm import DIMENSION, MODEL_NAME
from memory_core.engine.stores import ItemRecord, collection_name
from memory_core.engine.stores.edge import EdgeVectorStore
from memory_core.servers.http.app import create_app

NAMESPACE, KEY, SET = "bench", "alice", "notes"
_CHUNK = 2_000
_TOPICS = ["travel", "food", "work", "family", "health", "music", "sport", "books"]


def _load(path: Any, count: int) -> list[str]:
    """Writes the set; returns some item ids to open."""
    shutil.rmtree(path, ignore_errors=True)
    store = EdgeVectorStore(
        path, collection=collection_name(QdrantSettings(path=path), MODEL_NAME), dimension=DIMENSION
    )
    scope = Scope(NAMESPACE, KEY, SET)
    store.put_set(NAMESPACE, KEY, MemorySet(name=SET, capacity=1_000_000))
    rng = np.random.default_rng(7)
    texts = corpus(5_000, seed=11)
    start = datetime.now(UTC) - timedelta(days=365)
    first_seq = time.time_ns()  # consecutive nanosecond seqs, as one add call's items have
    try:
        for offset in range(0, count, _CHUNK):
            n = min(_CHUNK, count - offset)
            vectors = rng.standard_normal((n, DIMENSION), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            records = []
            for i, vector in enumerate(vectors):
                number = offset + i
                created = start + timedelta(seconds=number * 365 * 24 * 3600 / count)
                item = MemorySetItem(
                    memory_set_name=SET,
                    id=f"item-{number}",
                    value=f"{texts[number % len(texts)]} (note {number})",
                    created_time=created,
                    last_accessed_time=created,
                    additional_metadata={"topic": _TOPICS[number % len(_TOPICS)], "n": number},
                    importance=round(random.Random(number).random(), 2),
                    pinned=number % 97 == 0,
                )
                records.append(ItemRecord(item=item, seq=first_seq + number, vector=vector.tolist()))
            store.upsert(scope, records, context_window=2)
        store.optimize()
    finally:
        store.close()
    return [f"item-{n}" for n in random.Random(3).sample(range(count), 400)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def timed(get: Callable[[int], httpx.Response], i: int) -> tuple[float, int]:
    began = time.perf_counter()
    answer = get(i)
    elapsed = (time.perf_counter() - began) * 1000
    if answer.status_code != 200:
        raise SystemExit(f"console answered {answer.status_code}: {answer.text[:300]}")
    return elapsed, len(answer.content)


def run(items: int, rounds: int = 100) -> None:
    env = isolated_env("bench-ui")
    env["MEMORY_ANTHROPIC__API_KEY"] = ""
    path = RUN_DIR / "bench-ui-qdrant"
    print(f"console bench: writing {items:,} items into one set", flush=True)
    began = time.perf_counter()
    ids = _load(path, items)
    print(
        f"console bench: written in {time.perf_counter() - began:.0f} s; starting a worker and the server", flush=True
    )
    env["MEMORY_QDRANT__PATH"] = str(path)
    import os

    os.environ.update(env)
    settings = load_settings()
    clear_prefix(settings.redis.url, settings.redis.key_prefix)
    port = _free_port()
    app = create_app(settings, dev=True, host="127.0.0.1", port=port)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    words = [w for w in " ".join(corpus(2_000, seed=13)).split() if len(w) > 5 and w.isalpha()]
    queries = corpus(rounds * 2, seed=17)
    base = f"/ui/ns/{NAMESPACE}/keys/{KEY}/sets/{SET}"
    times: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    with worker(env, name="bench-ui-worker"), MemoryClient(settings) as client:
        client.long_term(NAMESPACE, KEY).size(SET)  # the worker is up and the set is there
        thread.start()
        while not server.started:
            time.sleep(0.05)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            http.get("/ui/")  # the dev sign-in cookie
            first = http.get(base)
            cursor = _next_cursor(first.text)
            assets = sum(len(http.get(f"/ui/static/{name}").content) for name in ("console.css", "htmx.min.js"))
            views: dict[str, Callable[[int], httpx.Response]] = {
                "set page, newest 50": lambda i: http.get(base),
                "set page, a later page (cursor)": lambda i: http.get(base, params={"cursor": cursor}),
                "set page, text contains a word": lambda i: http.get(base, params={"contains": words[i % len(words)]}),
                "set page, metadata topic = value": lambda i: http.get(
                    base, params={"field": "topic", "value": _TOPICS[i % len(_TOPICS)]}
                ),
                "item page": lambda i: http.get(f"{base}/items/{ids[i % len(ids)]}"),
                "search tester (hybrid, limit 10)": lambda i: http.get(
                    f"{base}/search", params={"q": queries[i], "mode": "hybrid", "limit": 10}
                ),
            }
            for view in views.values():  # one warm-up each: the first page of a view loads its templates
                view(rounds + 1)
            for i in range(rounds):
                for name, view in views.items():
                    ms, size = timed(view, i)
                    times.setdefault(name, []).append(ms)
                    sizes[name] = max(sizes.get(name, 0), size)
        server.should_exit = True
        thread.join(timeout=10)
    shutil.rmtree(path, ignore_errors=True)
    _print(items, rounds, times, sizes, assets)


def _next_cursor(html: str) -> str:
    import re
    from html import unescape
    from urllib.parse import parse_qs, urlsplit

    for href in re.findall(r'href="([^"]+)"', html):
        query = parse_qs(urlsplit(unescape(href)).query)
        if "cursor" in query:
            return query["cursor"][0]
    raise SystemExit("the set page offers no next page")


def _print(items: int, rounds: int, times: dict[str, list[float]], sizes: dict[str, int], assets: int) -> None:
    print(f"\nmemory-core bench --console: a set of {items:,} items, {rounds} requests per view, interleaved")
    print("| view | server time p50 / p95 | HTML | page weight (HTML + CSS + htmx) |")
    print("|---|---|---|---|")
    for name, values in times.items():
        p50, p95 = statistics.median(values), percentile(values, 95)
        weight = sizes[name] + assets
        print(f"| {name} | {p50:.1f} ms / {p95:.1f} ms | {sizes[name] / 1024:.1f} KB | {weight / 1024:.1f} KB |")
    print("goal: p95 <= 150 ms of server time, under 100 KB a page")
