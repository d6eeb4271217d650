"""Data commands: sets, items, forget, dead letters, usage, stats, export/import, backup/restore; serve.

``models``, ``reindex`` and ``formation`` have modules of their own, registered from here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from memory_core.cli import EXIT_FAILED, EXIT_OK, emit, formation, models, reindex
from memory_core.cli.progress import Progress
from memory_core.client import MemoryClient
from memory_core.client.admin import PAGE, Admin
from memory_core.client.checks import NAMESPACE, checked
from memory_core.client.deadletters import DeadLetters
from memory_core.core import routing
from memory_core.core.errors import ConfigurationError, InvalidRequestError, NotFoundError
from memory_core.core.files import disk_usage
from memory_core.core.messages import CreateSetRequest, ExportedItem
from memory_core.core.models import ChatMessage, CompactionConfig, MemorySet, SearchMode
from memory_core.core.settings import load_settings

EXPORT_FORMAT = "memory-core-export"


def register(sub: Any) -> None:
    """Adds the data commands to the ``memory-core`` parser."""
    sets = sub.add_parser("sets", help="list, create, show or delete memory sets").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    p = sets.add_parser("list", help="the sets of a namespace, with sizes")
    p.add_argument("namespace")
    p.add_argument("--key", help="one key only")
    _json(p).set_defaults(run=_sets_list)
    p = sets.add_parser("create", help="create a set (or check that it exists with this definition)")
    _scope(p)
    p.add_argument("--type", choices=["text", "chat"], default="text", help="what the items are (default: text)")
    p.add_argument("--capacity", type=int, default=100, help="items before a compaction (default: 100)")
    p.add_argument("--ttl", type=int, help="default time to live of its items, in seconds")
    p.add_argument("--dedup", choices=["exact", "semantic", "none"], help="deduplication on write")
    p.add_argument("--model", help="the summarizer's model for its compactions")
    p.add_argument("--topics", type=int, help="at most this many summaries per compaction")
    _json(p).set_defaults(run=_sets_create)
    p = sets.add_parser("show", help="one set's definition and size")
    _scope(p)
    _json(p).set_defaults(run=_sets_show)
    p = sets.add_parser("delete", help="delete a set and its items")
    _scope(p)
    p.add_argument("--yes", action="store_true", help="really delete")
    p.set_defaults(run=_sets_delete)

    items = sub.add_parser("items", help="get, search or add items").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    p = items.add_parser("get", help="items by id, or all, in insertion order")
    _scope(p)
    p.add_argument("ids", nargs="*", help="item ids (all items when none)")
    _json(p).set_defaults(run=_items_get)
    p = items.add_parser("search", help="items most relevant to a query")
    _scope(p)
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--mode", choices=["hybrid", "dense", "lexical"], default="hybrid")
    p.add_argument(
        "--rerank",
        action=argparse.BooleanOptionalAction,
        help="ask the workers' reranker (MEMORY_RERANK__MODEL) to order the hits (refused where they have none), "
        "or turn it off for this search (default: as the workers are set)",
    )
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="match metadata exactly (repeatable; all must match). A VALUE that is JSON (42, [1, 2], "
        '"42") is read as JSON, anything else as text',
    )
    _json(p).set_defaults(run=_items_search)
    p = items.add_parser("add", help='add items from JSON lines ({"value": ..., "id": ..., "metadata": ...})')
    _scope(p)
    p.add_argument("file", nargs="?", default="-", help="a JSONL file, or - for stdin (default)")
    p.add_argument("--batch", type=int, default=100, help="items per add call")
    _json(p).set_defaults(run=_items_add)

    p = sub.add_parser("forget", help="erase a namespace (or one key of it) everywhere")
    p.add_argument("namespace")
    p.add_argument("--key")
    p.add_argument("--yes", action="store_true", help="really erase")
    _json(p).set_defaults(run=_forget)

    letters = sub.add_parser("dead-letters", help="writes that failed for good, kept with their payload")
    actions = letters.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("list", help="list dead letters")
    p.add_argument("--namespace")
    _json(p).set_defaults(run=_letters_list)
    p = actions.add_parser("replay", help="send a namespace's dead letters again (writes are idempotent)")
    p.add_argument("--namespace", required=True)
    p.set_defaults(run=_letters_replay)
    p = actions.add_parser("drop", help="delete a namespace's dead letters")
    p.add_argument("--namespace", required=True)
    p.add_argument("--yes", action="store_true", help="really drop")
    p.set_defaults(run=_letters_drop)

    p = sub.add_parser("usage", help="model and embedding tokens per model, compactions and formations, per namespace")
    p.add_argument(
        "namespace",
        nargs="?",
        help="one namespace, or '!ops' for a reindex's embeddings (default: every namespace with usage, and '!ops')",
    )
    _json(p).set_defaults(run=_usage)
    p = sub.add_parser("stats", help="cache sizes in Redis, and hit rates from the workers' metrics")
    p.add_argument(
        "--metrics",
        action="append",
        metavar="URL",
        help="a worker's metrics URL; repeat it for each worker, whose counts are summed "
        "(default: MEMORY_METRICS__ADDRESS:PORT)",
    )
    _json(p).set_defaults(run=_stats)

    p = sub.add_parser("export", help="write a namespace (or everything) as JSON lines")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("namespace", nargs="?")
    target.add_argument("--all", action="store_true", help="every namespace")
    p.add_argument("-o", "--output", default="-", help="a file, or - for stdout (default)")
    p.add_argument("--vectors", action="store_true", help="include vectors (import then skips re-embedding)")
    p.set_defaults(run=_export)
    p = sub.add_parser("import", help="load an export; re-running an interrupted import resumes it")
    p.add_argument("file")
    p.add_argument("--restart", action="store_true", help="ignore the progress of an earlier run")
    p.set_defaults(run=_import)
    p = sub.add_parser("backup", help="a consistent snapshot of the store (taken by a worker)")
    p.add_argument("--label", help="the snapshot's name (default: the time)")
    _json(p).set_defaults(run=_backup)
    p = sub.add_parser("restore", help="put a snapshot back (workers stopped), and make cached reads stale")
    p.add_argument("label", nargs="?", help="the snapshot (not with --caches-only)")
    p.add_argument(
        "--caches-only",
        action="store_true",
        help="only make cached reads stale (after recovering a Qdrant server's snapshots with its own API)",
    )
    p.add_argument("--yes", action="store_true", help="really replace the store's data")
    p.set_defaults(run=_restore)

    p = sub.add_parser("serve", help="serve the HTTP API (/v1), bearer tokens from MEMORY_AUTH__TOKENS")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default: 8080)")
    p.add_argument("--dev", action="store_true", help="no auth, loopback only: for trying it out")
    p.set_defaults(run=_serve)

    models.register(sub)
    reindex.register(sub)
    formation.register(sub)


def _json(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _scope(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("namespace")
    parser.add_argument("key")
    parser.add_argument("set", metavar="SET")


@contextmanager
def _client() -> Iterator[MemoryClient]:
    with MemoryClient(load_settings()) as client:
        yield client


def _confirm(args: argparse.Namespace, what: str) -> None:
    if not args.yes:
        raise InvalidRequestError(f"{what}: pass --yes to do it")


# -- sets ---------------------------------------------------------------------


def _sets_list(args: argparse.Namespace, rest: list[str]) -> int:
    with _client() as client:
        found = Admin(client).list_sets(args.namespace, args.key)
    if not found and not args.json:  # said on stderr: an empty listing is an answer, not a failure
        where = f"namespace {args.namespace!r}" + (f", key {args.key!r}," if args.key else "")
        print(f"memory-core sets: {where} has no memory sets", file=sys.stderr)
    emit(
        args,
        [s.model_dump(mode="json") for s in found],
        lambda: [
            f"{s.key:<24} {s.definition.name:<24} {s.size:>8} items  capacity {s.definition.capacity}" for s in found
        ],
    )
    return EXIT_OK


def _sets_create(args: argparse.Namespace, rest: list[str]) -> int:
    compaction = {name: value for name, value in (("model", args.model), ("limit", args.topics)) if value is not None}
    with _client() as client:
        created = client.long_term(args.namespace, args.key).get_or_create_memory_set(
            args.set,
            item_type=ChatMessage if args.type == "chat" else str,
            capacity=args.capacity,
            compaction_config=CompactionConfig(**compaction),
            ttl_seconds=args.ttl,
            dedup=args.dedup,
        )
    data = created.model_dump(mode="json")
    emit(args, data, lambda: [f"{args.namespace}/{args.key}/{created.name}: {json.dumps(data)}"])
    return EXIT_OK


def _sets_show(args: argparse.Namespace, rest: list[str]) -> int:
    with _client() as client:
        ltm = client.long_term(args.namespace, args.key)
        definition = ltm.get_memory_set(args.set)
        size = ltm.size(definition)
    data = {"definition": definition.model_dump(mode="json"), "size": size}
    emit(args, data, lambda: [json.dumps(data["definition"], indent=2), f"size: {size} items"])
    return EXIT_OK


def _sets_delete(args: argparse.Namespace, rest: list[str]) -> int:
    _confirm(args, f"delete set {args.set!r} of {args.namespace}/{args.key}")
    with _client() as client:
        deleted = client.long_term(args.namespace, args.key).delete_memory_set(args.set)
    print("deleted" if deleted else "no such set")
    return EXIT_OK if deleted else EXIT_FAILED


# -- items --------------------------------------------------------------------


def _items_get(args: argparse.Namespace, rest: list[str]) -> int:
    with _client() as client:
        items = client.long_term(args.namespace, args.key).get(args.set, args.ids or None)
    emit(args, [i.model_dump(mode="json") for i in items], lambda: [f"{i.id}  {i.value}" for i in items])
    found = {i.id for i in items}
    missing = [i for i in dict.fromkeys(args.ids) if i not in found]
    if missing:  # on stderr, so stdout stays the items found
        print(
            f"memory-core items: no item {', '.join(map(repr, missing))} in set {args.set!r} of "
            f"{args.namespace}/{args.key}",
            file=sys.stderr,
        )
    return EXIT_OK if items or not args.ids else EXIT_FAILED


def _items_search(args: argparse.Namespace, rest: list[str]) -> int:
    mode: SearchMode = args.mode
    filters = dict(_filter(text) for text in args.filter) or None
    with _client() as client:
        ltm = client.long_term(args.namespace, args.key)
        hits = ltm.search(args.set, args.query, limit=args.limit, filters=filters, mode=mode, rerank=args.rerank)
    emit(args, [i.model_dump(mode="json") for i in hits], lambda: [f"{i.score:.3f}  {i.id}  {i.value}" for i in hits])
    return EXIT_OK


def _filter(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise InvalidRequestError(f"--filter {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def _items_add(args: argparse.Namespace, rest: list[str]) -> int:
    total = None if args.file == "-" else _count_lines(Path(args.file))
    stored: list[str] = []
    with _client() as client, _open_in(args.file) as lines:
        ltm = client.long_term(args.namespace, args.key)
        definition = ltm.get_memory_set(args.set)
        progress = Progress(f"add to {args.set}", total, quiet=args.json)
        batch: list[dict[str, Any]] = []

        def flush() -> None:
            ids = [str(row["id"]) for row in batch] if all("id" in row for row in batch) else None
            if ids is None and any("id" in row for row in batch):  # the client names ids only for a whole call
                ids = [str(row["id"]) if "id" in row else str(uuid.uuid4()) for row in batch]
            stored.extend(
                ltm.add(
                    definition,
                    [row["value"] for row in batch],
                    ids=ids,
                    metadatas=[row.get("metadata", {}) for row in batch],
                )
            )
            progress.advance(len(batch))
            batch.clear()

        for number, line in enumerate(lines, start=1):
            if line.strip():
                batch.append(_row(line, number))
            if len(batch) >= args.batch:
                flush()
        if batch:
            flush()
        progress.finish()
    if args.json:
        print(json.dumps({"stored": len(stored), "ids": stored}))
    return EXIT_OK


def _count_lines(path: Path) -> int:
    with path.open(encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def _row(line: str, number: int) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f'line {number} is not JSON ({exc.msg}): expected {{"value": ...}}') from exc
    if isinstance(row, str):
        return {"value": row}
    if not isinstance(row, dict) or "value" not in row:
        raise InvalidRequestError(f'line {number}: expected a string or an object with "value", got {line[:80]!r}')
    return row


@contextmanager
def _open_in(name: str) -> Iterator[IO[str]]:
    if name == "-":
        yield sys.stdin
        return
    with Path(name).open(encoding="utf-8") as handle:
        yield handle


@contextmanager
def _open_out(name: str) -> Iterator[IO[str]]:
    if name == "-":
        yield sys.stdout
        return
    with Path(name).open("w", encoding="utf-8") as handle:
        yield handle


# -- forget, dead letters, usage, stats ---------------------------------------


def _forget(args: argparse.Namespace, rest: list[str]) -> int:
    _confirm(args, f"erase namespace {args.namespace!r}" + (f" key {args.key!r}" if args.key else ""))
    with _client() as client:
        receipt = client.forget(args.namespace, args.key)
    data = receipt.model_dump(mode="json")
    emit(args, data, lambda: [f"{k}: {v}" for k, v in data.items()])
    return EXIT_OK


def _letters(client: MemoryClient) -> DeadLetters:
    return DeadLetters(client.dispatcher_redis, client.keys, client.dispatcher)


def _letters_namespace(namespace: str) -> str:
    """``namespace`` checked as the client checks it; ``!ops`` (letters that name none) is one too here."""
    return namespace if namespace == routing.OPS_NAMESPACE else checked(NAMESPACE, namespace, "namespace")


def _letters_list(args: argparse.Namespace, rest: list[str]) -> int:
    chosen = _letters_namespace(args.namespace) if args.namespace is not None else None
    with _client() as client:
        letters = _letters(client)
        namespaces = [chosen] if chosen else letters.namespaces()
        found = [letter for ns in namespaces for letter in letters.entries(ns)]
    if not found and not args.json:  # said on stderr: an empty listing is an answer, not a failure
        where = f"namespace {chosen!r} has" if chosen else "there are"
        print(f"memory-core dead-letters: {where} no dead letters", file=sys.stderr)
    emit(
        args,
        [letter.model_dump(mode="json", by_alias=True) for letter in found],
        lambda: [
            f"{x.failed_at}  {x.namespace}  {x.task}  {x.task_id}  {x.error.get('type')}: {x.error.get('message')}"
            for x in found
        ],
    )
    return EXIT_OK


def _letters_replay(args: argparse.Namespace, rest: list[str]) -> int:
    _letters_namespace(args.namespace)
    with _client() as client:
        sent = _letters(client).replay(args.namespace)
    print(f"replayed {len(sent)} dead letters of {args.namespace}")
    return EXIT_OK


def _letters_drop(args: argparse.Namespace, rest: list[str]) -> int:
    _letters_namespace(args.namespace)
    _confirm(args, f"drop the dead letters of {args.namespace!r}")
    with _client() as client:
        dropped = _letters(client).drop(args.namespace)
    print(f"dropped {dropped} dead letters of {args.namespace}")
    return EXIT_OK


def _usage(args: argparse.Namespace, rest: list[str]) -> int:
    with _client() as client:
        admin = Admin(client)
        if args.namespace == routing.OPS_NAMESPACE:
            reports = [admin.operator_usage()]
        elif args.namespace:
            reports = [client.usage(args.namespace)]
        else:
            operator = admin.operator_usage()
            reports = [client.usage(ns) for ns in admin.namespaces()] + ([operator] if operator.embeddings else [])
    data = [r.model_dump(mode="json") for r in reports]

    def rows() -> list[str]:
        lines = []
        for r in reports:
            for model, t in r.tokens.items():
                lines.append(
                    f"{r.namespace:<20} {model:<28} {t.calls:>6} calls {t.input_tokens:>10,} in {t.output_tokens:>9,} out"
                )
            for model, e in r.embeddings.items():
                lines.append(f"{r.namespace:<20} {model:<28} {e.texts:>6} texts {e.tokens:>10,} embedding tokens")
            if r.namespace != routing.OPS_NAMESPACE:  # the operator's ledger holds no compactions
                lines.append(
                    f"{r.namespace:<20} {r.compactions} compactions, {r.items_folded} items folded, {r.failures} failures"
                )
            if r.formations or r.facts_formed or r.formation_tokens:  # silent where formation never ran
                lines.append(
                    f"{r.namespace:<20} {r.formations} formations, {r.facts_formed} facts formed, "
                    f"{r.formation_tokens:,} formation tokens"
                )
        return lines

    emit(args, data, rows)
    return EXIT_OK


def _stats(args: argparse.Namespace, rest: list[str]) -> int:
    settings = load_settings()
    with _client() as client:
        r = client.dispatcher_redis
        prefix = settings.redis.key_prefix
        kinds: dict[str, dict[str, int]] = {}
        for kind in ("item", "search", "embedding", "setdef"):
            count = sampled = sampled_bytes = 0
            for key in r.scan_iter(f"{prefix}:*:{kind}:*", count=1000):
                count += 1
                if sampled < 200:  # MEMORY USAGE per key is exact but costly: estimate from a sample
                    sampled += 1
                    sampled_bytes += int(r.memory_usage(key) or 0)
            kinds[kind] = {"entries": count, "approx_bytes": sampled_bytes * count // sampled if sampled else 0}
        memory = r.info("memory")
    urls = args.metrics or [f"http://{settings.metrics.address}:{settings.metrics.port}/metrics"]
    rates, unreachable = _hit_rates(urls)
    data: dict[str, Any] = {
        "l2": kinds,
        "redis_used_memory": memory.get("used_memory"),
        "hit_rates": rates,
        "metrics_urls": urls,
        "unreachable_metrics": unreachable,
    }

    def rows() -> list[str]:
        lines = [f"L2 {k:<10} {v['entries']:>8} entries  ~{v['approx_bytes'] / 1e6:.1f} MB" for k, v in kinds.items()]
        lines.append(f"Redis used memory: {int(data['redis_used_memory'] or 0) / 1e6:.1f} MB")
        lines.extend(f"hit rates: no worker metrics at {url}" for url in unreachable)
        answered = len(urls) - len(unreachable)
        for tier, value in (rates or {}).items():
            lines.append(
                f"hit rate {tier:<10} {value['rate']:.1%} of {value['lookups']:,.0f} lookups "
                f"({answered} worker{'s' if answered != 1 else ''})"
            )
        return lines

    emit(args, data, rows)
    return EXIT_OK


def _hit_rates(urls: list[str]) -> tuple[dict[str, dict[str, float]] | None, list[str]]:
    """Hit rates per cache tier, summed over the workers' Prometheus endpoints (None when none answers),
    and the endpoints that did not answer."""
    from prometheus_client.parser import text_string_to_metric_families

    counts: dict[str, dict[str, float]] = {}
    unreachable: list[str] = []
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=3) as response:  # an operator-given http URL
                text = response.read().decode()
        except OSError:
            unreachable.append(url)
            continue
        for family in text_string_to_metric_families(text):
            if family.name != "memory_core_cache_requests":
                continue
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    tier = counts.setdefault(sample.labels["tier"], {"hit": 0.0, "miss": 0.0})
                    tier[sample.labels["result"]] += sample.value
    if len(unreachable) == len(urls):
        return None, unreachable
    rates = {
        tier: {
            "rate": c["hit"] / (c["hit"] + c["miss"]) if c["hit"] + c["miss"] else 0.0,
            "lookups": c["hit"] + c["miss"],
        }
        for tier, c in counts.items()
    }
    return rates, unreachable


# -- export, import, backup, restore -----------------------------------------


def _export(args: argparse.Namespace, rest: list[str]) -> int:
    settings = load_settings()
    with _client() as client:
        admin = Admin(client)
        namespaces = admin.namespaces() if args.all else [args.namespace]
        listed = [(ns, info) for ns in namespaces for info in admin.list_sets(ns)]
        if not listed and not args.all:  # a misspelt namespace: say so, and leave no empty export behind
            raise NotFoundError(f"namespace {args.namespace!r} has no memory sets: nothing to export")
        with _open_out(args.output) as out:
            _write_export(admin, listed, out, model=settings.embedder.model, vectors=args.vectors)
    return EXIT_OK


def _write_export(admin: Admin, listed: list[tuple[str, Any]], out: IO[str], *, model: str, vectors: bool) -> None:
    header = {"kind": EXPORT_FORMAT, "version": 1, "model": model, "vectors": vectors}
    out.write(json.dumps(header) + "\n")
    progress = Progress("export", sum(info.size for _, info in listed))
    for namespace, info in listed:
        line = {
            "kind": "set",
            "namespace": namespace,
            "key": info.key,
            "definition": info.definition.model_dump(mode="json"),
        }
        out.write(json.dumps(line) + "\n")
        for page in admin.export_set(namespace, info, vectors=vectors):
            for exported in page:
                row = {"kind": "item", "namespace": namespace, "key": info.key, "set": info.definition.name}
                row.update(exported.model_dump(mode="json", exclude_none=True))
                out.write(json.dumps(row) + "\n")
            progress.advance(len(page))
    progress.finish()


def _import(args: argparse.Namespace, rest: list[str]) -> int:
    settings = load_settings()
    path = Path(args.file)
    state_file = path.with_name(path.name + ".import-progress")
    digest = fingerprint(path)
    done_lines = 0
    if state_file.exists() and not args.restart:
        state = json.loads(state_file.read_text())
        if state.get("fingerprint") == digest:
            done_lines = int(state["lines"])
            print(f"resuming after line {done_lines:,} ({state_file})", file=sys.stderr)
    lines = path.read_text(encoding="utf-8").splitlines()
    header = _export_header(lines, path)
    keep_vectors = header.get("model") == settings.embedder.model
    if header.get("vectors") and not keep_vectors:
        print(
            f"the export's vectors are of {header.get('model')!r}, not {settings.embedder.model!r}: re-embedding",
            file=sys.stderr,
        )
    remaining = sum(1 for n, line in enumerate(lines, start=1) if n > done_lines and line.startswith('{"kind": "item"'))
    progress = Progress("import", remaining)
    with _client() as client:
        admin = Admin(client)
        pending: list[ExportedItem] = []
        scope: tuple[str, str, str] | None = None
        last_line = 0

        def flush() -> None:
            if pending and scope is not None:
                admin.import_items(*scope, pending)
                progress.advance(len(pending))
                pending.clear()
            state_file.write_text(json.dumps({"fingerprint": digest, "lines": last_line}))

        for number, line in enumerate(lines[1:], start=2):
            row = _export_line(line, number, path)
            if row.get("kind") == "set":
                flush()
                scope = (row["namespace"], row["key"], row["definition"]["name"])
                definition = MemorySet.model_validate(row["definition"])
                request = CreateSetRequest(namespace=row["namespace"], key=row["key"], definition=definition)
                client.dispatcher.call(routing.CREATE_SET, request, json.dumps({"namespace": row["namespace"]}))
                last_line = number
                continue
            if number <= done_lines:  # written by the interrupted run (sets are re-declared: idempotent)
                continue
            try:
                exported = ExportedItem(item=row["item"], vector=row.get("vector") if keep_vectors else None)
            except (ValidationError, KeyError) as exc:
                raise InvalidRequestError(f"line {number} of {path} is not an exported item: {exc}") from exc
            pending.append(exported)
            last_line = number
            if len(pending) >= PAGE:
                flush()
        flush()
        progress.finish()
    state_file.unlink(missing_ok=True)
    return EXIT_OK


def _export_header(lines: list[str], path: Path) -> dict[str, Any]:
    try:
        header = json.loads(lines[0]) if lines else {}
    except ValueError:
        header = {}
    if not isinstance(header, dict) or header.get("kind") != EXPORT_FORMAT:
        raise InvalidRequestError(
            f'{path} is not a memory-core export (its first line has no "kind": "{EXPORT_FORMAT}")'
        )
    return header


def _export_line(line: str, number: int, path: Path) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise InvalidRequestError(
            f"line {number} of {path} is not JSON ({exc}); the export may be cut short: export it again"
        ) from exc
    if not isinstance(row, dict):
        raise InvalidRequestError(f"line {number} of {path} is not an object of an export: {line[:80]!r}")
    return row


def fingerprint(path: Path) -> str:
    """What an import's progress file is tied to: the export's content (a different file starts over)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _backup(args: argparse.Namespace, rest: list[str]) -> int:
    label = args.label or time.strftime("backup-%Y%m%dT%H%M%S")
    with _client() as client:
        reply = Admin(client).backup(label)
    size = f" ({reply.bytes_on_disk / 1e6:,.1f} MB on disk)" if reply.bytes_on_disk else ""
    emit(args, reply.model_dump(mode="json"), lambda: [f"snapshot {label!r}: {reply.location}{size}", *reply.parts])
    return EXIT_OK


def _restore(args: argparse.Namespace, rest: list[str]) -> int:
    if args.caches_only == (args.label is not None):
        raise InvalidRequestError("restore takes a snapshot label, or --caches-only (not both)")
    if args.caches_only:
        with _client() as client:
            bumped = Admin(client).invalidate_caches()
        print(f"cached reads of {bumped} sets invalidated")
        return EXIT_OK
    _confirm(args, f"replace the store's data with snapshot {args.label!r}")
    with _client() as client:
        admin = Admin(client)
        target = admin.restore(args.label)
    size = disk_usage(target) / 1e6
    print(
        f"restored {args.label!r} into {target} ({size:,.1f} MB on disk); cached reads invalidated. Start the workers again."
    )
    return EXIT_OK


def _serve(args: argparse.Namespace, rest: list[str]) -> int:
    try:
        import uvicorn

        from memory_core.servers import http
    except ImportError as exc:
        raise ConfigurationError(
            f"memory-core serve needs FastAPI and uvicorn (missing {exc.name!r}): pip install 'memory-core[http]'"
        ) from exc
    settings = load_settings()
    app = http.create_app(settings, dev=args.dev, host=args.host, port=args.port)  # no tokens: refused unless --dev
    http.check(settings, dev=args.dev, host=args.host)
    if args.dev and settings.auth.tokens is None:
        print("memory-core serve: dev mode: no authentication, every namespace, loopback only", file=sys.stderr)
    print(f"memory-core serve: serving http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    if settings.console.enabled:
        print(f"memory-core serve: the console is at http://{args.host}:{args.port}/ui", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return EXIT_OK
