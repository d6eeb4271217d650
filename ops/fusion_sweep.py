"""Offline sweep of hybrid search's fusion: each ranker's candidates fetched once per query, fusions compared after.

    cd ops && ../.venv/bin/python fusion_sweep.py DATA_DIR [--embedder SPEC] [--base-url URL] [--roles ROLES]
        [--timeout S] [--chunk N] [--conversations N] [--embed-only] [--grid] [--json FILE]

e.g. ``--embedder openai:multilingual-e5-small-q4 --base-url http://127.0.0.1:8777/v1 --roles input-type``.

DATA_DIR holds ``items.jsonl`` and ``queries.jsonl`` (the schema ``ops/eval`` reads). Items are embedded as
documents and questions as queries once per model, cached under ``/tmp/fusion_cache/<model>/`` in chunks (an
interrupted run resumes where it stopped; ``--embed-only`` just fills the cache). The items then go into an
embedded store in a temporary directory exactly as ``ops/eval`` loads them: namespace ``eval``, one key per
conversation, three sets (context windows 2, 1, 0: the collection-wide IDF sees what ``ops/eval``'s does),
turns in conversation order. Each query is searched once in ``hybrid`` mode on the window-2 set through the
store's own ``search``, catching what ``EdgeVectorStore._hybrid`` hands ``fused_hybrid`` (the dense top
``PREFETCH``, each lexical ranker's top ``PREFETCH`` above ``LEXICAL_FLOOR``, and the cosines of the lexical
candidates); every fusion below is then computed offline from those rankings, scored as ``ops/eval`` scores
(R@1/5/10 and MRR over the queries with evidence, LoCoMo's category 5 and abstentions left out).

Rows: the product's fusion (``fused_hybrid``), a dense weight ``w`` (the dense ranker's DBSF scores times
``w``), a few (dense, bm25, bm25_ctx) weightings, per-query weightings by rule (none fitted), and single
rankers. The last column splits the queries by parity: a choice made on one half can be checked on the other.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from eval import KS, NAMESPACE, _apart, _key, _position, _read, _Score

from memory_core.core.models import MemorySetItem, Scope
from memory_core.core.settings import EmbedderSettings
from memory_core.engine.embedders import open_embedder
from memory_core.engine.stores import edge
from memory_core.engine.stores.base import TIE_BREAK, ItemRecord, Ranking, dbsf, fused_hybrid, point_id
from memory_core.engine.stores.edge import EdgeVectorStore

CACHE = Path("/tmp/fusion_cache")
CHUNK = 64
WINDOWS = (2, 1, 0)
DENSE_WEIGHTS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
# (dense, bm25, bm25_ctx) weights: plain BM25 ranked best on LongMemEval in the first run, so these lean to it.
LEXICAL_WEIGHTS = ((1.0, 1.0, 0.5), (1.0, 1.0, 0.75), (0.75, 1.0, 0.5), (0.75, 1.0, 0.75), (1.0, 1.5, 1.0))
GRID = [(d, b, c) for d in (0.5, 0.75, 1.0) for b in (1.0, 1.5, 2.0) for c in (0.5, 0.75, 1.0)]
"""``--grid``: every (dense, bm25, bm25_ctx) weighting of these, written to the JSON only (a 27-row table)."""
LIMIT = max(KS)

# One query's rankings as the store found them: dense (point, cosine), each lexical ranker (point, BM25), and
# the cosines of the lexical candidates.
Caught = tuple[Ranking, list[Ranking], dict[Any, float]]


def _embed_cached(
    embed: Callable[[Sequence[str]], list[list[float]]], texts: list[str], folder: Path, label: str, chunk_size: int
) -> np.ndarray:
    """The vectors of ``texts``, each embedded once: chunks of ``CHUNK`` are saved as they come (with the hashes
    of their texts), so a later run, or one on fewer conversations, embeds only what no earlier run did."""
    folder.mkdir(parents=True, exist_ok=True)
    known: dict[str, np.ndarray] = {}
    for path in folder.glob(f"{label}-*.npz"):
        saved = np.load(path)
        known.update(zip(saved["hashes"].tolist(), saved["vectors"], strict=True))
    hashes = [hashlib.sha256(t.encode("utf-8")).hexdigest()[:32] for t in texts]
    missing = list(dict.fromkeys(h for h in hashes if h not in known))
    by_hash = dict(zip(hashes, texts, strict=True))
    started = time.perf_counter()
    for start in range(0, len(missing), chunk_size):
        chunk = missing[start : start + chunk_size]
        vectors = np.asarray(embed([by_hash[h] for h in chunk]), dtype=np.float32)
        np.savez(folder / f"{label}-{chunk[0]}.npz", hashes=np.asarray(chunk), vectors=vectors)
        known.update(zip(chunk, vectors, strict=True))
        rate = (start + len(chunk)) / (time.perf_counter() - started)
        print(f"  {label}: {start + len(chunk)}/{len(missing)} new ({rate:.1f} texts/s)", flush=True)
    return np.stack([known[h] for h in hashes]) if hashes else np.zeros((0, 0), dtype=np.float32)


def _conversations(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each conversation's turns in the order ``ops/eval`` adds them."""
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        by_conv[item["conv_id"]].append(item)
    for turns in by_conv.values():
        turns.sort(key=_position)
    return by_conv


def _load(
    store: EdgeVectorStore, by_conv: dict[str, list[dict[str, Any]]], vectors: dict[tuple[str, str], np.ndarray]
) -> None:
    moment = datetime(2025, 1, 1, tzinfo=UTC)
    seq = 1_700_000_000_000_000_000
    for conv_id, turns in by_conv.items():
        for window in WINDOWS:
            scope = Scope(NAMESPACE, _key(conv_id), f"turns-w{window}")
            records = []
            for turn in turns:
                seq += 1
                item = MemorySetItem(
                    memory_set_name=scope.set_name,
                    id=turn["item_id"],
                    value=turn["text"],
                    created_time=moment,
                    last_accessed_time=moment,
                )
                records.append(ItemRecord(item=item, seq=seq, vector=vectors[(conv_id, turn["item_id"])].tolist()))
            for start in range(0, len(records), 200):  # ops/eval's batches: a batch's context comes from the store
                store.upsert(scope, records[start : start + 200], context_window=window)


def _catch(store: EdgeVectorStore, scope: Scope, vector: np.ndarray, text: str) -> Caught:
    """The rankings the store's hybrid search fuses for this query (``fused_hybrid``'s arguments)."""
    caught: list[Caught] = []

    def spy(dense: Ranking, lexical: Sequence[Ranking], cosines: Any, limit: int) -> Ranking:
        caught.append((list(dense), [list(r) for r in lexical], dict(cosines)))
        return fused_hybrid(dense, lexical, cosines, limit)

    original = edge.fused_hybrid
    edge.fused_hybrid = spy  # type: ignore[assignment]
    try:
        store.search(scope, vector.tolist(), LIMIT, {}, text=text, mode="hybrid")
    finally:
        edge.fused_hybrid = original
    return caught[0]


# ---- fusions ---------------------------------------------------------------------------------------------------


def _scaled(ranking: Ranking) -> dict[Any, float]:
    """A ranking's DBSF-scaled scores (``dbsf`` of it alone)."""
    return dict(dbsf([ranking]))


def _tie_broken(lexical: list[Ranking], cosines: dict[Any, float]) -> list[Ranking]:
    return [
        sorted(((p, bm25 + TIE_BREAK * cosines.get(p, 0.0)) for p, bm25 in ranking), key=lambda x: -x[1])
        for ranking in lexical
    ]


def _weighted(rankings: list[Ranking], weights: Sequence[float]) -> list[Any]:
    fused: dict[Any, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for point, value in _scaled(ranking).items():
            fused[point] = fused.get(point, 0.0) + weight * value
    return [p for p, _ in sorted(fused.items(), key=lambda x: (-x[1], x[0]))[:LIMIT]]


def _top_z(ranking: Ranking) -> float:
    """How far the top score stands above the rest, in standard deviations (0 for fewer than 3 candidates)."""
    scores = [s for _, s in ranking]
    if len(scores) < 3:
        return 0.0
    rest = scores[1:]
    spread = statistics.pstdev(rest)
    return 0.0 if spread == 0 else (scores[0] - statistics.fmean(rest)) / spread


def _confidence_weights(rankings: list[Ranking]) -> list[float]:
    """Each ranker weighted by its top score's standing (``_top_z``), normalized to mean 1, clipped to 0.5..2."""
    z = [_top_z(r) for r in rankings]
    mean = sum(z) / len(z)
    if mean <= 0:
        return [1.0] * len(rankings)
    return [min(2.0, max(0.5, v / mean)) for v in z]


def _disagree_weights(rankings: list[Ranking]) -> list[float]:
    """Dense weight 0.5 when none of dense's top 5 is in either lexical ranker's top 5 (and lexical found some)."""
    dense_top = {p for p, _ in rankings[0][:5]}
    lexical_top = {p for r in rankings[1:] for p, _ in r[:5]}
    return [0.5 if lexical_top and not dense_top & lexical_top else 1.0, 1.0, 1.0]


def _disagree_top1_weights(rankings: list[Ranking]) -> list[float]:
    """Dense weight 0.5 when dense's top 1 is neither lexical ranker's top 1 (and lexical found some)."""
    lexical_top = {r[0][0] for r in rankings[1:] if r}
    return [0.5 if lexical_top and rankings[0] and rankings[0][0][0] not in lexical_top else 1.0, 1.0, 1.0]


def _gap_weights(rankings: list[Ranking]) -> list[float]:
    """Each ranker weighted by its top-1 minus top-5 gap over its top-1 minus top-50 range (mean 1, 0.5..2)."""
    gaps = []
    for r in rankings:
        scores = [s for _, s in r]
        if len(scores) < 6 or scores[0] == scores[-1]:
            gaps.append(0.0)
        else:
            gaps.append((scores[0] - scores[4]) / (scores[0] - scores[-1]))
    mean = sum(gaps) / len(gaps)
    return [1.0] * len(rankings) if mean <= 0 else [min(2.0, max(0.5, g / mean)) for g in gaps]


def _variants() -> dict[str, Callable[[Caught], list[Any]]]:
    def product(c: Caught) -> list[Any]:
        return [p for p, _ in fused_hybrid(c[0], c[1], c[2], LIMIT)]

    def dense_weight(w: float) -> Callable[[Caught], list[Any]]:
        return lambda c: _weighted([c[0], *_tie_broken(c[1], c[2])], [w, 1.0, 1.0])

    def weights(dense: float, bm25: float, context: float) -> Callable[[Caught], list[Any]]:
        return lambda c: _weighted([c[0], *_tie_broken(c[1], c[2])], [dense, bm25, context])

    def per_query(rule: Callable[[list[Ranking]], list[float]]) -> Callable[[Caught], list[Any]]:
        def fuse(c: Caught) -> list[Any]:
            rankings = [c[0], *_tie_broken(c[1], c[2])]
            return _weighted(rankings, rule(rankings))

        return fuse

    variants: dict[str, Callable[[Caught], list[Any]]] = {"hybrid (product fused_hybrid)": product}
    for w in DENSE_WEIGHTS:
        variants[f"dense weight {w:g}"] = dense_weight(w)
    for dense, bm25, context in LEXICAL_WEIGHTS:
        variants[f"weights dense {dense:g} / bm25 {bm25:g} / bm25_ctx {context:g}"] = weights(dense, bm25, context)
    variants["disagree: dense 0.5 if top-1 differs"] = per_query(_disagree_top1_weights)
    variants["disagree: dense 0.5 if top-5s disjoint"] = per_query(_disagree_weights)
    variants["per-query: top-1 z-score weights"] = per_query(_confidence_weights)
    variants["per-query: top-5 gap weights"] = per_query(_gap_weights)
    variants["bm25 + tie-break only"] = lambda c: _weighted(_tie_broken(c[1], c[2])[:1], [1.0])
    variants["lexical (bm25 + bm25_ctx, DBSF, pure)"] = lambda c: _weighted(c[1], [1.0, 1.0])
    variants["lexical + tie-break (no dense)"] = lambda c: _weighted(_tie_broken(c[1], c[2]), [1.0, 1.0])
    variants["bm25 only"] = lambda c: [p for p, _ in c[1][0][:LIMIT]]
    variants["bm25_ctx only"] = lambda c: [p for p, _ in c[1][1][:LIMIT]]
    variants["dense only"] = lambda c: [p for p, _ in c[0][:LIMIT]]
    return variants


def _score(
    caught: list[tuple[dict[str, Any], Caught, dict[Any, str]]], fuse: Callable[[Caught], list[Any]]
) -> dict[str, float]:
    score = _Score()
    for query, rankings, names in caught:
        score.add([names[p] for p in fuse(rankings) if p in names], set(query["evidence_item_ids"]))
    return score.row()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ops/fusion_sweep.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("data", type=Path, help="a folder with items.jsonl and queries.jsonl")
    parser.add_argument("--embedder", default=EmbedderSettings.model_fields["model"].default, metavar="SPEC")
    parser.add_argument("--base-url", help="the embeddings endpoint (openai:)")
    parser.add_argument("--roles", help="how the model tells queries from documents (e.g. input-type)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds an endpoint's request may take")
    parser.add_argument("--chunk", type=int, default=CHUNK, help="texts per embedding request and cache file")
    parser.add_argument("--conversations", type=int, metavar="N", help="only the first N conversations")
    parser.add_argument("--embed-only", action="store_true", help="fill the embedding cache and stop")
    parser.add_argument("--grid", action="store_true", help="also score every weighting of GRID (into --json)")
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    items, queries = _read(args.data / "items.jsonl"), _read(args.data / "queries.jsonl")
    if args.conversations:
        kept = set(list(dict.fromkeys(i["conv_id"] for i in items))[: args.conversations])
        items = [i for i in items if i["conv_id"] in kept]
        queries = [q for q in queries if q["conv_id"] in kept]
    queries = [q for q in queries if q.get("evidence_item_ids") and not _apart(q)]  # ops/eval's headline
    settings: dict[str, Any] = {"model": args.embedder, "timeout": args.timeout}
    if args.base_url:
        settings["base_url"] = args.base_url
    if args.roles:
        settings["roles"] = args.roles
    embedder = open_embedder(EmbedderSettings(**settings))
    folder = CACHE / "".join(c if c.isalnum() or c in "-_." else "_" for c in args.embedder)
    print(f"{args.data}: {len(items)} items, {len(queries)} queries; embedder {embedder.fingerprint.describe()}")

    started = time.perf_counter()
    # Questions first: they are few and short, and an interrupted run keeps them.
    query_vectors = _embed_cached(
        embedder.embed_queries, [q["question"] for q in queries], folder, "queries", args.chunk
    )
    item_vectors = _embed_cached(embedder.embed, [i["text"] for i in items], folder, "items", args.chunk)
    embed_s = time.perf_counter() - started
    print(f"embedded in {embed_s:.1f} s")
    if args.embed_only:
        return 0
    vectors = {(i["conv_id"], i["item_id"]): v for i, v in zip(items, item_vectors, strict=True)}  # ids repeat

    with tempfile.TemporaryDirectory(prefix="fusion-sweep-") as tmp:
        store = EdgeVectorStore(Path(tmp), collection="items", dimension=embedder.dimension)
        try:
            started = time.perf_counter()
            by_conv = _conversations(items)
            _load(store, by_conv, vectors)
            load_s = time.perf_counter() - started
            started = time.perf_counter()
            caught = []
            for query, vector in zip(queries, query_vectors, strict=True):
                scope = Scope(NAMESPACE, _key(query["conv_id"]), "turns-w2")
                names = {uuid.UUID(point_id(scope, t["item_id"])).int: t["item_id"] for t in by_conv[query["conv_id"]]}
                caught.append((query, _catch(store, scope, vector, query["question"]), names))
            search_s = time.perf_counter() - started
        finally:
            store.close()
    print(f"loaded in {load_s:.1f} s, rankings fetched in {search_s:.1f} s\n")

    rows = {label: _score(caught, fuse) for label, fuse in _variants().items()}
    halves = {label: [_score(caught[h::2], fuse)["MRR"] for h in (0, 1)] for label, fuse in _variants().items()}
    print(f"| {args.data.name} / {args.embedder} | R@1 | R@5 | R@10 | MRR | MRR even / odd queries |")
    print("|---|---|---|---|---|---|")
    for label, row in rows.items():
        even, odd = halves[label]
        print(
            f"| {label} | {row['R@1']:.3f} | {row['R@5']:.3f} | {row['R@10']:.3f} | {row['MRR']:.3f} "
            f"| {even:.3f} / {odd:.3f} |"
        )
    grid = {}
    if args.grid:
        for dense, bm25, context in GRID:
            fuse = lambda c, w=(dense, bm25, context): _weighted([c[0], *_tie_broken(c[1], c[2])], w)
            row = _score(caught, fuse)
            row["MRR even"], row["MRR odd"] = (_score(caught[h::2], fuse)["MRR"] for h in (0, 1))
            grid[f"{dense:g}/{bm25:g}/{context:g}"] = row
    if args.json:
        report = {"data": str(args.data), "embedder": args.embedder, "conversations": args.conversations}
        args.json.write_text(json.dumps({**report, "rows": rows, "grid": grid}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
