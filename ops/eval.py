"""Retrieval quality through the product's own path: load a dataset with the client, search every query.

    ops/eval [DATA_DIR] [--json FILE] [--conversations N]
    ops/eval DATA_DIR --embedder SPEC [--embedder-path DIR] [--embedder-base-url URL]
    ops/eval DATA_DIR --rerank SPEC

DATA_DIR holds ``items.jsonl`` and ``queries.jsonl`` in the schema of ``../shared/data/locomo-dev`` and
``../shared/data/longmemeval-dev`` (see their READMEs): items have ``conv_id``, ``item_id``, ``text`` and
``metadata`` (``session`` or ``session_index``, ``turn_index``); queries have ``conv_id``, ``question``,
``evidence_item_ids`` and ``category`` (an int or a str). Without DATA_DIR it uses
``../shared/data/locomo-dev`` beside the project, and exits 0 with a note when that is absent.

Each conversation becomes a key of the namespace ``eval``; its turns are added in order, through the
queue and a worker, into three text sets that differ only in ``context_window`` (2, the default; 1; 0),
so the context ablation is measured in the same run. Every query then runs through ``search`` in each
mode. R@k is the share of a query's evidence turns found in the top k (averaged over queries); MRR uses
the rank of the first evidence turn. The headline is every query with evidence; LoCoMo's category 5
(adversarial) and LongMemEval's abstention questions (no evidence) are reported apart.

``--embedder`` runs the worker with another embedder (``MEMORY_EMBEDDER__MODEL``: ``hashing``,
``fastembed:<name>``, ``openai:<model>``); ``--embedder-path`` and ``--embedder-base-url`` set
``MEMORY_EMBEDDER__PATH`` and ``__BASE_URL``, and an endpoint's key is read from ``MEMORY_EMBEDDER__API_KEY``
(never an argument: arguments are visible to every user of the machine). The output names the fingerprint of
the embedder the worker ran.

``--rerank`` gives the worker a reranker (``MEMORY_RERANK__MODEL``: ``fastembed:<cross-encoder>`` or
``http:<url>``, its key read from ``MEMORY_RERANK__API_KEY``) and adds a row: the default hybrid search,
reranked. Every other row turns reranking off, so it stays the fused ranking it names.

``--formation`` measures memory formation instead (``remember``, with the model of ``MEMORY_FORMATION__MODEL``):
each session of a conversation is remembered in order, its turns as messages whose ids are the item ids (a
person's turn of LoCoMo as the user's; LongMemEval's roles as they are), then every query searches the formed
facts (live ones, ``limit`` 10). A fact counts for an evidence turn when its provenance (``fact.sources``)
names that turn: R@k is the share of a query's evidence turns named by the top k facts, MRR the rank of the
first fact naming one. Also printed: model calls and tokens per 1,000 turns. It needs a real model: with no
``MEMORY_ANTHROPIC__API_KEY``, or ``MEMORY_ANTHROPIC__BASE_URL`` on loopback, it says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from stack import ROOT, add_embedder_options, choose_embedder, clear_prefix, isolated_env, redis_server, worker

from memory_core import MemoryClient, load_settings
from memory_core.core.dispatch import open_redis
from memory_core.core.errors import ConfigurationError
from memory_core.core.liveness import live_workers
from memory_core.core.models import MemorySet, SearchMode
from memory_core.core.settings import EmbedderSettings, Settings
from memory_core.testing.fake_anthropic import FakeAnthropic

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo-dev"
NAMESPACE = "eval"
FORMATION_NAMESPACE = "eval-formation"
DEFAULT_EMBEDDER: str = EmbedderSettings.model_fields["model"].default
WINDOWS = (2, 1, 0)  # 2 is the product default
KS = (1, 5, 10)
# (label, set context window, search mode); the first is the product default.
RUNS: list[tuple[str, int, SearchMode]] = [
    ("hybrid (default)", 2, "hybrid"),
    ("hybrid, context 1", 1, "hybrid"),
    ("hybrid, no context", 0, "hybrid"),
    ("lexical (BM25 + context)", 2, "lexical"),
    ("lexical, no context", 0, "lexical"),
    ("dense (MiniLM)", 0, "dense"),
]
RERANKED: tuple[str, int, SearchMode] = ("hybrid (default), reranked", 2, "hybrid")  # with --rerank only
BASELINES = [  # from the issue: exact cosine MiniLM, BM25, and their RRF, categories 1-4
    ("baseline: dense MiniLM, exact cosine", 0.185, 0.416, 0.508, 0.334),
    ("baseline: BM25", 0.259, 0.451, 0.526, 0.383),
    ("baseline: dense + BM25, RRF", 0.249, 0.473, 0.571, 0.403),
]


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _key(conv_id: str) -> str:
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in conv_id)[:128] or "conv"


def _load(client: MemoryClient, items: list[dict[str, Any]]) -> dict[tuple[str, int], MemorySet]:
    """Adds every turn, in conversation order, to one set per context window; returns the sets by conversation."""
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        by_conv[item["conv_id"]].append(item)
    sets: dict[tuple[str, int], MemorySet] = {}
    for conv_id, turns in by_conv.items():
        turns.sort(key=_position)
        ltm = client.long_term(NAMESPACE, _key(conv_id))
        for window in WINDOWS:
            memory_set = ltm.get_or_create_memory_set(
                f"turns-w{window}", capacity=1_000_000, dedup="none", context_window=window
            )
            sets[(conv_id, window)] = memory_set
            receipts = []
            for start in range(0, len(turns), 200):
                batch = turns[start : start + 200]
                metadatas = [{"session": _position(t)[0], "speaker": str(t.get("speaker", ""))} for t in batch]
                receipts.append(
                    ltm.submit(
                        memory_set, [t["text"] for t in batch], ids=[t["item_id"] for t in batch], metadatas=metadatas
                    )
                )
            for receipt in receipts:
                receipt.wait(timeout=600)
    return sets


def _position(turn: dict[str, Any]) -> tuple[int, int]:
    """A turn's session and place in it: ``metadata.session`` (LoCoMo) or ``session_index`` (LongMemEval)."""
    metadata = turn.get("metadata", {})
    return int(metadata.get("session", metadata.get("session_index", 0))), int(metadata.get("turn_index", 0))


def _apart(query: dict[str, Any]) -> bool:
    """Reported apart: LoCoMo's adversarial category 5, LongMemEval's abstention questions."""
    return bool(query.get("abstention")) or query.get("category") == 5


class _Score:
    def __init__(self) -> None:
        self.recall = dict.fromkeys(KS, 0.0)
        self.mrr = 0.0
        self.count = 0

    def add(self, ranked: list[str], evidence: set[str]) -> None:
        for k in KS:
            self.recall[k] += len(set(ranked[:k]) & evidence) / len(evidence)
        first = next((i for i, item_id in enumerate(ranked) if item_id in evidence), None)
        self.mrr += 0.0 if first is None else 1.0 / (first + 1)
        self.count += 1

    def row(self) -> dict[str, float]:
        n = max(self.count, 1)
        return {**{f"R@{k}": self.recall[k] / n for k in KS}, "MRR": self.mrr / n, "n": self.count}


def _evaluate(
    sets: dict[tuple[str, int], MemorySet], queries: list[dict[str, Any]], *, rerank: bool = False
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for label, window, mode in RUNS + ([RERANKED] if rerank else []):
        main, apart = _Score(), _Score()
        by_category: defaultdict[str, _Score] = defaultdict(_Score)
        latencies = []
        for query in queries:
            memory_set = sets.get((query["conv_id"], window))
            evidence = set(query.get("evidence_item_ids") or [])
            if memory_set is None or not evidence:
                continue
            started = time.perf_counter()
            hits = memory_set.search(query["question"], limit=max(KS), mode=mode, rerank=label == RERANKED[0])
            latencies.append((time.perf_counter() - started) * 1000)
            ranked = [hit.id for hit in hits]
            if _apart(query):
                apart.add(ranked, evidence)
            else:
                main.add(ranked, evidence)
                by_category[str(query.get("category", ""))].add(ranked, evidence)
        results[label] = {
            "headline": main.row(),
            "per category": {c: s.row() for c, s in sorted(by_category.items())},
            "apart": apart.row(),
            "search p50 ms": statistics.median(latencies) if latencies else 0.0,
        }
    return results


def _print(
    results: dict[str, Any], data: Path, load_s: float, query_s: float, items: int, queries: int, *, embedder: str
) -> None:
    print(f"\nmemory-core eval: {data} ({items} items, {queries} queries), loaded in {load_s:.1f} s, "
          f"queries in {query_s:.1f} s\nembedder: {embedder}\n")  # fmt: skip
    cats = sorted({c for r in results.values() for c in r["per category"]})
    head = "| run (headline) | R@1 | R@5 | R@10 | MRR | " + " | ".join(f"R@10 {c}" for c in cats)
    print(head + " | apart R@10 (n) | search p50 |")
    print("|" + "---|" * (head.count("|") + 1))
    for label, r in results.items():
        m = r["headline"]
        per = " | ".join(f"{r['per category'].get(c, {}).get('R@10', 0.0):.3f}" for c in cats)
        apart = r["apart"]
        print(
            f"| {label} | {m['R@1']:.3f} | {m['R@5']:.3f} | {m['R@10']:.3f} | {m['MRR']:.3f} | {per} | "
            f"{apart['R@10']:.3f} ({apart['n']}) | {r['search p50 ms']:.1f} ms |"
        )
    if data.resolve() == DEFAULT_DATA.resolve():
        for label, *numbers in BASELINES:
            print(f"| {label} | " + " | ".join(f"{n:.3f}" for n in numbers) + " |" + " |" * (len(cats) + 2))


def _first_conversations(
    items: list[dict[str, Any]], queries: list[dict[str, Any]], count: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The items and queries of the first ``count`` conversations, in file order."""
    kept = set(list(dict.fromkeys(item["conv_id"] for item in items))[:count])
    return [i for i in items if i["conv_id"] in kept], [q for q in queries if q["conv_id"] in kept]


def _worker_embedder(settings: Settings, client: MemoryClient) -> str:
    """The fingerprint (``describe()``) of the embedder the worker runs, as its heartbeat says: what embedded
    the sets, whatever this process would have built from its settings."""
    connection = open_redis(settings)
    try:
        described = sorted({w.embedder for w in live_workers(connection, client.keys) if w.embedder})
    finally:
        connection.close()
    return ", ".join(described) or "unknown (the worker did not say)"


# -- --formation: fact-level evidence recall of formed memories ------------------------------------------------


def formation_message(turn: dict[str, Any]) -> dict[str, Any]:
    """A dataset turn as a message to ``remember``: its item id as the message id, its time (UTC where the data
    names no zone), and its role: LongMemEval's ``user`` and ``assistant`` turns as they are (their ``"user: "``
    prefix dropped), a LoCoMo speaker's (a person, named in the text) as the user's."""
    speaker = str(turn.get("speaker", ""))
    text = str(turn["text"])
    role = speaker if speaker in ("user", "assistant") else "user"
    if role == speaker and text.startswith(f"{speaker}: "):
        text = text[len(speaker) + 2 :]
    message: dict[str, Any] = {"role": role, "content": text, "id": turn["item_id"]}
    if turn.get("timestamp"):
        at = datetime.fromisoformat(turn["timestamp"])
        message["at"] = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return message


def _without_model() -> int | None:
    """The exit status when ``--formation`` has no real model to form with (after saying so), else None."""
    try:
        settings = load_settings()
    except ConfigurationError as exc:
        print(f"ops/eval: {exc}", file=sys.stderr)
        return 2
    if real_model_configured(settings):
        return None
    print(
        "ops/eval --formation: skipped: no model to form with (MEMORY_ANTHROPIC__API_KEY unset, or "
        "MEMORY_ANTHROPIC__BASE_URL on loopback)"
    )
    return 0


def real_model_configured(settings: Settings) -> bool:
    """Whether formation would call a real model: a key is set and the endpoint is not on this machine (the fake
    Messages API of the tests and benchmarks listens on loopback)."""
    if settings.anthropic.api_key is None:
        return False
    host = urlsplit(settings.anthropic.base_url).hostname if settings.anthropic.base_url else None
    if host is None:
        return True
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: not loopback as far as can be told without resolving it
        return True


def _sessions_of(turns: list[dict[str, Any]], most: int) -> list[list[dict[str, Any]]]:
    """A conversation's turns (in order) split by session, each part at most ``most`` turns (one ``remember``)."""
    parts: list[list[dict[str, Any]]] = []
    for turn in turns:
        if not str(turn.get("text", "")).strip():
            continue
        if not parts or _position(parts[-1][0])[0] != _position(turn)[0] or len(parts[-1]) >= most:
            parts.append([])
        parts[-1].append(turn)
    return parts


def _form(client: MemoryClient, items: list[dict[str, Any]], settings: Settings) -> list[Any]:
    """Remembers every session of every conversation, a conversation's in order (each formation reconciles with
    the facts of the earlier ones), as many conversations at once as a namespace may form."""
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        by_conv[item["conv_id"]].append(item)

    def conversation(conv_id: str) -> list[Any]:
        memory = client.long_term(FORMATION_NAMESPACE, _key(conv_id))
        turns = sorted(by_conv[conv_id], key=_position)
        reports = []
        for part in _sessions_of(turns, settings.formation.max_messages):
            report = memory.remember([formation_message(t) for t in part], wait=True, timeout=900)
            if report.status != "done":
                raise SystemExit(f"ops/eval: formation of {conv_id!r} ended {report.status}: {report.notes}")
            reports.append(report)
        return reports

    with ThreadPoolExecutor(settings.formation.max_in_flight) as pool:
        return [report for reports in pool.map(conversation, by_conv) for report in reports]


class _FactScore:
    """R@k and MRR over ranked facts, a fact standing for the evidence turns its sources name."""

    def __init__(self) -> None:
        self.recall = dict.fromkeys(KS, 0.0)
        self.mrr = 0.0
        self.count = 0

    def add(self, ranked: Sequence[set[str]], evidence: set[str]) -> None:
        for k in KS:
            named = set().union(*ranked[:k]) if ranked[:k] else set()
            self.recall[k] += len(named & evidence) / len(evidence)
        first = next((i for i, sources in enumerate(ranked) if sources & evidence), None)
        self.mrr += 0.0 if first is None else 1.0 / (first + 1)
        self.count += 1

    def row(self) -> dict[str, float]:
        n = max(self.count, 1)
        return {**{f"R@{k}": self.recall[k] / n for k in KS}, "MRR": self.mrr / n, "n": self.count}


def _fact_recall(client: MemoryClient, queries: list[dict[str, Any]], conversations: set[str]) -> dict[str, Any]:
    main, apart = _FactScore(), _FactScore()
    by_category: defaultdict[str, _FactScore] = defaultdict(_FactScore)
    for query in queries:
        evidence = set(query.get("evidence_item_ids") or [])
        if query["conv_id"] not in conversations or not evidence:
            continue
        hits = client.long_term(FORMATION_NAMESPACE, _key(query["conv_id"])).search(
            "facts", query["question"], limit=max(KS)
        )
        ranked = [set(hit.fact.sources) if hit.fact is not None else {hit.id} for hit in hits]
        if _apart(query):
            apart.add(ranked, evidence)
        else:
            main.add(ranked, evidence)
            by_category[str(query.get("category", ""))].add(ranked, evidence)
    return {
        "headline": main.row(),
        "per category": {c: s.row() for c, s in sorted(by_category.items())},
        "apart": apart.row(),
    }


def _formation(args: argparse.Namespace, data: Path, items: list[dict[str, Any]], queries: list[dict[str, Any]]) -> int:
    """``--formation``: forms the dataset's conversations, scores fact-level evidence recall, prints the table."""
    with contextlib.ExitStack() as stack:
        if args.formation_fake:  # a smoke run: the fake Messages API's rules (each user turn a fact)
            fake = stack.enter_context(FakeAnthropic())
            os.environ.update({"MEMORY_ANTHROPIC__API_KEY": "sk-ant-eval-fake", "MEMORY_ANTHROPIC__BASE_URL": fake.url})
        env = isolated_env("eval-formation")
        try:
            settings = load_settings()
        except ConfigurationError as exc:  # a misspelt --embedder, say: one line, before anything starts
            print(f"ops/eval: {exc}", file=sys.stderr)
            return 2
        stack.enter_context(redis_server(settings.redis.url))
        stack.enter_context(worker(env, name="eval-formation-worker"))
        client = stack.enter_context(MemoryClient(settings))
        clear_prefix(settings.redis.url, settings.redis.key_prefix)
        started = time.perf_counter()
        reports = _form(client, items, settings)
        form_s = time.perf_counter() - started
        results = _fact_recall(client, queries, {item["conv_id"] for item in items})
        usage = client.usage(FORMATION_NAMESPACE)
    model = "the fake Messages API (rules: each user turn a fact)" if args.formation_fake else settings.formation.model
    tokens = usage.tokens.get(settings.formation.model)
    per_1000 = 1000 / max(len(items), 1)
    cost = {
        "model calls": (tokens.calls if tokens else 0) * per_1000,
        "input tokens": (tokens.input_tokens if tokens else 0) * per_1000,
        "output tokens": (tokens.output_tokens if tokens else 0) * per_1000,
        "facts formed": usage.facts_formed * per_1000,
    }
    print(
        f"\nmemory-core eval --formation: {data} ({len(items)} turns, {len(queries)} queries), {len(reports)} "
        f"remember calls (one a session) formed by {model} in {form_s:.1f} s\n"
    )
    cats = sorted(results["per category"])
    head = "| facts (live), limit 10 | R@1 | R@5 | R@10 | MRR | " + " | ".join(f"R@10 {c}" for c in cats)
    print(head + " | apart R@10 (n) |")
    print("|" + "---|" * (head.count("|") + 1))
    m, apart = results["headline"], results["apart"]
    per = " | ".join(f"{results['per category'][c]['R@10']:.3f}" for c in cats)
    print(
        f"| evidence turns named by the facts' sources ({m['n']} queries) | {m['R@1']:.3f} | {m['R@5']:.3f} | "
        f"{m['R@10']:.3f} | {m['MRR']:.3f} | {per} | {apart['R@10']:.3f} ({apart['n']}) |"
    )
    print(
        f"\nper 1,000 turns: {cost['model calls']:.1f} model calls, {cost['input tokens']:,.0f} input + "
        f"{cost['output tokens']:,.0f} output tokens, {cost['facts formed']:.0f} facts formed"
    )
    if args.json:
        output = {"data": str(data), "model": model, "formation": results, "per 1000 turns": cost}
        args.json.write_text(json.dumps(output, indent=2))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ops/eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("data", nargs="?", type=Path, help="a folder with items.jsonl and queries.jsonl")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument(
        "--conversations", type=int, metavar="N", help="only the first N conversations and their queries"
    )
    add_embedder_options(parser)
    parser.add_argument(
        "--rerank",
        metavar="SPEC",
        help="also run the default search reranked by this MEMORY_RERANK__MODEL (fastembed:<name> or http:<url>)",
    )
    parser.add_argument(
        "--formation",
        action="store_true",
        help="measure memory formation instead: fact-level evidence recall, and tokens per 1,000 turns (needs "
        "MEMORY_ANTHROPIC__API_KEY)",
    )
    parser.add_argument("--formation-fake", action="store_true", help=argparse.SUPPRESS)  # a smoke run, no model
    args = parser.parse_args(argv)
    if args.conversations is not None and args.conversations < 1:
        parser.error("--conversations must be at least 1")
    if args.formation and not args.formation_fake and (refused := _without_model()) is not None:
        return refused
    data: Path = args.data or DEFAULT_DATA
    if not (data / "items.jsonl").is_file() or not (data / "queries.jsonl").is_file():
        if args.data is None:
            print(f"ops/eval: skipped: no data folder given and {DEFAULT_DATA} is absent")
            return 0
        print(f"ops/eval: {data} must hold items.jsonl and queries.jsonl", file=sys.stderr)
        return 2
    items, queries = _read(data / "items.jsonl"), _read(data / "queries.jsonl")
    if args.conversations is not None:
        items, queries = _first_conversations(items, queries, args.conversations)
    choose_embedder(args)
    if args.rerank:
        os.environ["MEMORY_RERANK__MODEL"] = args.rerank  # isolated_env hands it on to the worker
    if args.formation or args.formation_fake:
        return _formation(args, data, items, queries)
    env = isolated_env("eval")
    try:
        settings = load_settings()
    except ConfigurationError as exc:  # a misspelt --embedder, say: one line, before anything starts
        print(f"ops/eval: {exc}", file=sys.stderr)
        return 2
    with redis_server(settings.redis.url), worker(env, name="eval-worker"), MemoryClient(settings) as client:
        embedder = _worker_embedder(settings, client)  # first: clearing the prefix drops heartbeats too
        clear_prefix(settings.redis.url, settings.redis.key_prefix)
        started = time.perf_counter()
        sets = _load(client, items)
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        results = _evaluate(sets, queries, rerank=bool(args.rerank))
        query_s = time.perf_counter() - started
    if settings.embedder.model != DEFAULT_EMBEDDER:  # the dense row is named after the model that ran it
        results = {label.replace("(MiniLM)", f"({settings.embedder.model})"): r for label, r in results.items()}
    _print(results, data, load_s, query_s, len(items), len(queries), embedder=embedder)
    if args.json:
        args.json.write_text(json.dumps({"data": str(data), "embedder": embedder, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
