"""What the layout migration costs: time and peak RSS of an open that migrates a store of the earlier (v2)
layout, beside the RSS of a process serving the same store once migrated.

A v2 store of ``items`` items is written straight into the embedded engine (stand-in vectors of the shipped
model, the bench's texts; half in one big set, the rest over 990 sets, one of them with no definition, 1%
deleted). Then, each in a fresh process: an open that migrates it (RSS sampled every 20 ms: peak, and its
anonymous and file-backed parts), then serving hybrid searches in the big set; and a fresh process that opens
the migrated store and serves the same searches (its serving RSS). With ``--before DIR`` the migration also
runs with the ``memory_core`` package found in DIR (e.g. an export of an earlier revision:
``git archive REV memory_core | tar -x -C DIR``), side by side.

    .venv/bin/python ops/migration_bench.py --items 200000 [--before DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from benchkit import corpus
from stack import ROOT, RUN_DIR

from memory_core.core.models import MemorySet, MemorySetItem, Scope
from memory_core.core.settings import QdrantSettings
from memory_core.engine.embedders.minilm import DIMENSION, MODEL_NAME
from memory_core.engine.stores import ItemRecord, collection_name, earlier_collection_names
from memory_core.engine.stores.edge import EdgeVectorStore

_CHUNK = 2_000

# Run in a fresh process: ``EdgeVectorStore`` opens (and migrates) the store, while a thread samples the RSS.
_OPEN = """
import json, sys, threading, time
from pathlib import Path

def status():
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[name] = int(value.split()[0]) / 1024
    return fields

peak = {"RssAnon": 0.0, "RssFile": 0.0}
opening = True

def sample():
    while opening:
        now = status()
        for name in peak:
            peak[name] = max(peak[name], now[name])
        time.sleep(0.02)

import memory_core
from memory_core.engine.stores.edge import EdgeVectorStore
from memory_core.engine.stores.base import LEXICAL

LEXICAL.document("warm up")  # the BM25 model loads in serving too
path, collection, earlier, dimension, searches = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
sampler = threading.Thread(target=sample)
sampler.start()
began = time.perf_counter()
store = EdgeVectorStore(Path(path), collection=collection, dimension=dimension, earlier=(earlier,))
opened_s = time.perf_counter() - began
highest = status()["VmHWM"]  # exact, where the sampled parts may miss a moment
opening = False
sampler.join()
from memory_core.core.models import Scope
import numpy as np
rng = np.random.default_rng(1)
for n in range(searches):
    vector = rng.standard_normal(dimension)
    store.search(Scope("big", "u", "notes"), (vector / np.linalg.norm(vector)).tolist(), 10, {}, text=f"garden {n}", mode="hybrid")
served = status()
store.close()
print(json.dumps({"package": memory_core.__file__, "open_s": opened_s, "peak_mb": highest,
                  "peak_anon_mb": peak["RssAnon"], "peak_file_mb": peak["RssFile"], "rss_mb": served["VmRSS"],
                  "anon_mb": served["RssAnon"], "file_mb": served["RssFile"]}))
"""


def _names(path: Path) -> tuple[str, str]:
    settings = QdrantSettings(path=path)
    return collection_name(settings, MODEL_NAME), earlier_collection_names(settings, MODEL_NAME)[0]


def build(path: Path, count: int) -> float:
    """Writes a ``count``-item store of the v2 layout; seconds taken."""
    shutil.rmtree(path, ignore_errors=True)
    _, v2 = _names(path)
    store = EdgeVectorStore(path, collection=v2, dimension=DIMENSION)
    rng = np.random.default_rng(3)
    texts = corpus(min(count, 50_000), seed=3)
    now = datetime.now(UTC)
    big = count // 2
    per_set = max(1, (count - big) // 990)
    layout = [(Scope("big", "u", "notes"), big)]
    layout += [(Scope(f"tenant-{n}", "u", f"set-{s}"), per_set) for n in range(99) for s in range(10)]
    started = time.perf_counter()
    written = 0
    try:
        for number, (scope, size) in enumerate(layout):
            if number != 1:  # one set keeps no definition: its items migrate with the default window
                store.put_set(scope.namespace, scope.key, MemorySet(name=scope.set_name, capacity=1_000_000))
            for start in range(0, size, _CHUNK):
                n = min(_CHUNK, size - start)
                vectors = rng.standard_normal((n, DIMENSION), dtype=np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                records = [
                    ItemRecord(
                        item=MemorySetItem(
                            memory_set_name=scope.set_name,
                            id=str(start + i),
                            value=texts[(written + i) % len(texts)],
                            created_time=now,
                            last_accessed_time=now,
                        ),
                        seq=1_763_866_000_000_000_000 + written + i,
                        vector=vector.tolist(),
                    )
                    for i, vector in enumerate(vectors)
                ]
                store.upsert(scope, records, context_window=2)
                store.delete(scope, {str(start + i): records[i].seq + 1 for i in range(0, n, 100)})
                written += n
        store.optimize()
        return time.perf_counter() - started
    finally:
        store.close()


def _forget_migration(path: Path) -> None:
    current, _ = _names(path)
    for name in (current, f"{current}__sets", f"{current}__meta"):
        shutil.rmtree(path / name, ignore_errors=True)


def _open(path: Path, searches: int, package_root: Path) -> dict[str, Any]:
    current, v2 = _names(path)
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    done = subprocess.run(
        [sys.executable, "-c", _OPEN, str(path), current, v2, str(DIMENSION), str(searches)],
        env=env,
        cwd=package_root,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["package"].startswith(str(package_root)):
        raise SystemExit(f"the open imported memory_core from {result['package']}, not from {package_root}")
    return result


def run(items: int, before: Path | None = None, searches: int = 200, keep: bool = False) -> None:
    path = RUN_DIR / f"bench-migration-{items}"
    if keep and (path / _names(path)[1]).is_dir():
        print(f"migration: reusing the v2 store of {items:,} items at {path}", flush=True)
        written = "kept from an earlier run"
    else:
        print(f"migration: writing a v2 store of {items:,} items", flush=True)
        written = f"written in {build(path, items):.0f} s"
    rows: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    variants = ([("before", before)] if before is not None else []) + [("this build", ROOT)]
    for label, root in variants:
        print(f"migration: {label}", flush=True)
        _forget_migration(path)
        migrating = _open(path, searches, root)  # migrates, then serves in the same process
        serving = _open(path, searches, root)  # a fresh process serving the migrated store
        rows[label] = (migrating, serving)
    if not keep:
        shutil.rmtree(path, ignore_errors=True)
    print(f"\n### Layout migration: {items:,} items of the v2 layout ({written}), one process each\n")
    print(
        "| | open that migrates | peak RSS during it (anon / file) | then serving, same process "
        "| serving, fresh process (anon / file) | peak - fresh serving |"
    )
    print("|---|---|---|---|---|---|")
    for label, (migrating, serving) in rows.items():
        print(
            f"| {label} | {migrating['open_s']:.1f} s ({items / migrating['open_s']:,.0f} items/s) "
            f"| {migrating['peak_mb']:,.0f} MB ({migrating['peak_anon_mb']:,.0f} / {migrating['peak_file_mb']:,.0f}) "
            f"| {migrating['rss_mb']:,.0f} MB "
            f"| {serving['rss_mb']:,.0f} MB ({serving['anon_mb']:,.0f} / {serving['file_mb']:,.0f}) "
            f"| {migrating['peak_mb'] - serving['rss_mb']:+,.0f} MB |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--before", type=Path, help="a directory holding an earlier memory_core package, to compare")
    parser.add_argument("--keep", action="store_true", help="keep the v2 store for another run (and reuse a kept one)")
    args = parser.parse_args()
    run(args.items, args.before, args.searches, args.keep)


if __name__ == "__main__":
    main()
