"""The memory-core CLI as scripts use it: real subprocesses against the session's worker, --json, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry, Counter, start_http_server

from memory_core import MemoryClient
from memory_core.cli.commands import fingerprint
from memory_core.core.settings import Settings

from .processes import PrivateRedis, free_port

CLI = str(Path(sys.executable).parent / "memory-core")


def run(
    settings: Settings, cwd: Path, *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    variables = {
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "MEMORY_REDIS__URL": settings.redis.url,
        "MEMORY_REDIS__KEY_PREFIX": settings.redis.key_prefix,
        "MEMORY_CLIENT__TIMEOUT": "30",
        "MEMORY_METRICS__PORT": str(free_port()),  # nobody serves metrics there: stats must say so, not fail
        **env,
    }
    return subprocess.run(
        [CLI, *args], input=stdin, capture_output=True, text=True, env=variables, cwd=cwd, timeout=120, check=False
    )


def ok(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.lstrip().startswith(("[", "{")) else done.stdout


def test_help_works_for_every_command(settings: Settings, tmp_path: Path):
    for command in ("up", "down", "status", "sets", "items", "export", "import", "backup", "restore", "dead-letters"):
        done = run(settings, tmp_path, command, "--help")
        assert done.returncode == 0, done.stderr
        assert "usage: memory-core" in done.stdout


def test_items_add_reads_jsonl_and_sets_items_and_search_list_them(
    client: MemoryClient, settings: Settings, namespace: str, tmp_path: Path
):
    client.long_term(namespace, "alice").get_or_create_memory_set("notes", capacity=1000)
    lines = ['{"value": "Alice prefers green tea", "id": "tea", "metadata": {"src": "chat"}}', '"Alice moved to Lyon"']
    lines += [json.dumps({"value": f"project fact {i}"}) for i in range(150)]
    done = run(settings, tmp_path, "items", "add", namespace, "alice", "notes", stdin="\n".join(lines) + "\n")
    assert done.returncode == 0, done.stderr
    assert "152 items" in done.stderr  # progress goes to stderr
    listed = ok(run(settings, tmp_path, "sets", "list", namespace, "--json"))
    assert [(s["key"], s["definition"]["name"], s["size"]) for s in listed] == [("alice", "notes", 152)]
    hits = ok(run(settings, tmp_path, "items", "search", namespace, "alice", "notes", "green tea", "--json"))
    assert hits[0]["id"] == "tea"
    assert hits[0]["additional_metadata"] == {"src": "chat"}
    got = ok(run(settings, tmp_path, "items", "get", namespace, "alice", "notes", "tea", "--json"))
    assert [i["value"] for i in got] == ["Alice prefers green tea"]


def test_exit_codes_scripts_can_rely_on(settings: Settings, namespace: str, tmp_path: Path, worker: object):
    missing = run(settings, tmp_path, "sets", "show", namespace, "k", "nope")
    assert missing.returncode == 1
    assert "MemorySetNotFound" in missing.stderr
    assert run(settings, tmp_path, "sets", "frobnicate").returncode == 2
    bad_line = run(settings, tmp_path, "forget", namespace)  # no --yes
    assert bad_line.returncode == 2
    assert "--yes" in bad_line.stderr
    unreachable = run(settings, tmp_path, "sets", "list", namespace, MEMORY_REDIS__URL="redis://127.0.0.1:1/0")
    assert unreachable.returncode == 3, unreachable.stderr


def test_export_then_import_after_a_forget_brings_every_item_back_and_a_rerun_adds_nothing(
    client: MemoryClient, settings: Settings, namespace: str, tmp_path: Path
):
    ltm = client.long_term(namespace, "u")
    notes = ltm.get_or_create_memory_set("notes", capacity=1000)
    chat = client.long_term(namespace, "v").get_or_create_memory_set("facts", capacity=1000, dedup="none")
    notes.add([f"note {i}" for i in range(450)], ids=[f"n{i}" for i in range(450)], importance=0.9)
    chat.add(["short", "lived"], ids=["s", "l"], pinned=True)
    before = {s: _export_items(settings, tmp_path, namespace, s) for s in ("u", "v")}
    export = tmp_path / "ns.jsonl"
    done = run(settings, tmp_path, "export", namespace, "--vectors", "-o", str(export))
    assert done.returncode == 0, done.stderr
    assert "452/452 items" in done.stderr

    ok(run(settings, tmp_path, "forget", namespace, "--yes", "--json"))
    assert ok(run(settings, tmp_path, "sets", "list", namespace, "--json")) == []
    done = run(settings, tmp_path, "import", str(export))
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "ns.jsonl.import-progress").exists()
    assert ok(run(settings, tmp_path, "import", str(export))).strip() == ""  # a second run: same items, no copies

    sizes = {
        (s["key"], s["definition"]["name"]): s["size"]
        for s in ok(run(settings, tmp_path, "sets", "list", namespace, "--json"))
    }
    assert sizes == {("u", "notes"): 450, ("v", "facts"): 2}
    after = {s: _export_items(settings, tmp_path, namespace, s) for s in ("u", "v")}
    assert after == before  # ids, values, order, times, lifecycle fields and vectors


def test_an_interrupted_import_resumes_where_it_stopped(
    client: MemoryClient, settings: Settings, namespace: str, tmp_path: Path
):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes", capacity=1000)
    notes.add([f"note {i}" for i in range(300)], ids=[f"n{i}" for i in range(300)])
    export = tmp_path / "ns.jsonl"
    ok(run(settings, tmp_path, "export", namespace, "-o", str(export)))
    ok(run(settings, tmp_path, "forget", namespace, "--yes"))
    lines = export.read_text().splitlines()
    # As if a run had written the first 100 items and died: its progress file says so.
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(lines[:102]) + "\n")
    ok(run(settings, tmp_path, "import", str(partial)))
    assert notes.size() == 100
    progress = tmp_path / "ns.jsonl.import-progress"
    progress.write_text(json.dumps({"fingerprint": fingerprint(export), "lines": 102}))
    done = run(settings, tmp_path, "import", str(export))
    assert done.returncode == 0, done.stderr
    assert "resuming after line 102" in done.stderr
    assert "200/200 items" in done.stderr  # only what the first run had not written
    assert notes.size() == 300


def test_dead_letters_usage_and_stats_answer_in_json(
    settings: Settings, namespace: str, tmp_path: Path, worker: object
):
    assert ok(run(settings, tmp_path, "dead-letters", "list", "--namespace", namespace, "--json")) == []
    usage = ok(run(settings, tmp_path, "usage", namespace, "--json"))
    assert usage[0]["namespace"] == namespace
    stats = ok(run(settings, tmp_path, "stats", "--json"))
    assert set(stats["l2"]) == {"item", "search", "embedding", "setdef"}
    assert stats["hit_rates"] is None  # no worker metrics at that port: said, not an error


def _metrics_endpoint(hits: int, misses: int) -> tuple[str, Any]:
    """A real Prometheus endpoint, like a worker's, whose L1 counters read ``hits`` and ``misses``."""
    registry = CollectorRegistry()
    lookups = Counter("memory_core_cache_requests", "lookups", ["tier", "result"], registry=registry)
    lookups.labels("l1", "hit").inc(hits)
    lookups.labels("l1", "miss").inc(misses)
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    return f"http://127.0.0.1:{server.server_port}/metrics", server


def test_stats_sums_hit_rates_over_the_workers_named_and_says_which_did_not_answer(settings: Settings, tmp_path: Path):
    (first, one), (second, two) = _metrics_endpoint(3, 1), _metrics_endpoint(1, 3)
    gone = f"http://127.0.0.1:{free_port()}/metrics"
    try:
        stats = ok(
            run(settings, tmp_path, "stats", "--json", "--metrics", first, "--metrics", second, "--metrics", gone)
        )
        text = ok(run(settings, tmp_path, "stats", "--metrics", first, "--metrics", second, "--metrics", gone))
    finally:
        for server in (one, two):
            server.shutdown()
            server.server_close()
    assert stats["hit_rates"] == {"l1": {"rate": 0.5, "lookups": 8.0}}  # (3 + 1) hits of (4 + 4) lookups
    assert stats["unreachable_metrics"] == [gone]
    assert "50.0% of 8 lookups (2 workers)" in text
    assert f"no worker metrics at {gone}" in text


def test_restore_caches_only_makes_cached_reads_stale(
    client: MemoryClient, settings: Settings, namespace: str, tmp_path: Path, raw_redis: Any
):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    notes.add(["a fact"])
    key = client.keys.set_version(namespace, "u", "notes")
    hint = client.keys.size_hint(namespace, "u", "notes")
    assert raw_redis.exists(hint)  # the add left the set's size hint
    # Sessions of users named like a cache kind match the same globs, and must come through untouched.
    sessions = [client.keys.session(namespace, user, "s1", "state") for user in ("version", "size", "setdef")]
    for session in sessions:
        raw_redis.set(session, "a summary")
    before = int(raw_redis.get(key) or 0)
    done = run(settings, tmp_path, "restore", "--caches-only")
    assert done.returncode == 0, done.stderr
    assert int(raw_redis.get(key)) == before + 1
    assert not raw_redis.exists(hint)
    assert [raw_redis.get(session) for session in sessions] == [b"a summary"] * 3
    assert run(settings, tmp_path, "restore").returncode == 2  # neither a label nor --caches-only


def _export_items(settings: Settings, cwd: Path, namespace: str, key: str) -> list[dict[str, Any]]:
    out = cwd / f"{key}.jsonl"
    ok(run(settings, cwd, "export", namespace, "--vectors", "-o", str(out)))
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    items = [r for r in rows if r["kind"] == "item" and r["key"] == key]
    for row in items:
        row["item"].pop("last_accessed_time")  # reads move it on; everything else must be equal
        row["vector"] = [round(x, 5) for x in row["vector"]]
    return items


@pytest.fixture(autouse=True)
def _worker_runs(worker: object) -> None:
    """Every CLI test talks to the session's worker."""


def test_status_counts_the_queues_on_a_broker_apart_from_the_cache_redis(
    settings: Settings, private_redis: PrivateRedis, tmp_path: Path
):
    broker_url = private_redis.database_url()  # another server than the cache's
    broker = redis.Redis.from_url(broker_url)
    queue = f"{settings.redis.key_prefix}/memory.write"
    broker.lpush(queue, "{}", "{}", "{}")
    try:
        report = ok(run(settings, tmp_path, "status", "--json", MEMORY_CELERY__BROKER_URL=broker_url))
    finally:
        broker.close()
    assert report["queues"]["memory.write"] == 3


def test_sets_create_makes_a_set_and_a_different_definition_is_refused(
    settings: Settings, namespace: str, tmp_path: Path
):
    created = ok(run(settings, tmp_path, "sets", "create", namespace, "u", "notes", "--capacity", "50", "--json"))
    assert (created["name"], created["capacity"]) == ("notes", 50)
    again = ok(run(settings, tmp_path, "sets", "create", namespace, "u", "notes", "--capacity", "50", "--json"))
    assert again == created  # the same definition: it exists, nothing changes
    clash = run(settings, tmp_path, "sets", "create", namespace, "u", "notes", "--capacity", "60")
    assert clash.returncode == 2
    assert "capacity" in clash.stderr
    assert "Traceback" not in clash.stderr
    bad = run(settings, tmp_path, "sets", "create", namespace, "u", "other", "--capacity", "0")
    assert bad.returncode == 2
    assert "capacity" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_items_search_filters_on_metadata_and_a_malformed_filter_is_named(
    settings: Settings, namespace: str, tmp_path: Path
):
    ok(run(settings, tmp_path, "sets", "create", namespace, "u", "notes"))
    rows = [
        {"value": f"tea note {i}", "id": f"n{i}", "metadata": {"src": "chat" if i % 2 else "mail", "n": i}}
        for i in range(6)
    ]
    ok(run(settings, tmp_path, "items", "add", namespace, "u", "notes", stdin="\n".join(map(json.dumps, rows)) + "\n"))
    hits = ok(
        run(settings, tmp_path, "items", "search", namespace, "u", "notes", "tea", "--filter", "src=chat", "--json")
    )
    assert sorted(h["id"] for h in hits) == ["n1", "n3", "n5"]
    both = ["--filter", "src=chat", "--filter", "n=3", "--json"]
    assert [h["id"] for h in ok(run(settings, tmp_path, "items", "search", namespace, "u", "notes", "tea", *both))] == [
        "n3"
    ]
    quoted = ["--filter", 'n="3"', "--json"]  # JSON text "3" is not the number 3
    assert ok(run(settings, tmp_path, "items", "search", namespace, "u", "notes", "tea", *quoted)) == []
    malformed = run(settings, tmp_path, "items", "search", namespace, "u", "notes", "tea", "--filter", "src")
    assert malformed.returncode == 2
    assert "--filter 'src': expected KEY=VALUE" in malformed.stderr


def test_items_add_reports_what_it_stored_and_json_keeps_stderr_quiet(
    settings: Settings, namespace: str, tmp_path: Path
):
    ok(run(settings, tmp_path, "sets", "create", namespace, "u", "notes"))
    source = tmp_path / "items.jsonl"
    source.write_text("\n".join(json.dumps({"value": f"fact {i}", "id": f"f{i}"}) for i in range(5)) + "\n\n")
    done = run(settings, tmp_path, "items", "add", namespace, "u", "notes", str(source), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"stored": 5, "ids": [f"f{i}" for i in range(5)]}
    assert done.stderr == ""
    text = run(settings, tmp_path, "items", "add", namespace, "u", "notes", str(source))
    assert text.returncode == 0, text.stderr
    assert text.stdout == ""
    assert len(text.stderr.strip().splitlines()) == 1  # off a terminal: one closing line, no bar redrawn
    assert "5/5 items" in text.stderr


def test_empty_listings_answer_and_a_namespace_with_nothing_to_export_writes_nothing(
    settings: Settings, namespace: str, tmp_path: Path
):
    empty = run(settings, tmp_path, "sets", "list", namespace)
    assert empty.returncode == 0
    assert f"namespace {namespace!r} has no memory sets" in empty.stderr
    assert ok(run(settings, tmp_path, "sets", "list", namespace, "--json")) == []
    out = tmp_path / "typo.jsonl"
    nothing = run(settings, tmp_path, "export", namespace, "-o", str(out))
    assert nothing.returncode == 1
    assert "has no memory sets" in nothing.stderr
    assert not out.exists()


def test_a_cut_short_export_is_refused_with_its_line_number(
    client: MemoryClient, settings: Settings, namespace: str, tmp_path: Path
):
    client.long_term(namespace, "u").get_or_create_memory_set("notes").add(["one", "two", "three"])
    export = tmp_path / "ns.jsonl"
    ok(run(settings, tmp_path, "export", namespace, "-o", str(export)))
    whole = export.read_text()
    export.write_text(whole[: len(whole) - 20])  # the copy stopped in the middle of the last line
    done = run(settings, tmp_path, "import", str(export))
    assert done.returncode == 2
    assert "line 5" in done.stderr
    assert "cut short" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    not_export = tmp_path / "other.jsonl"
    not_export.write_text("[1, 2]\n")
    refused = run(settings, tmp_path, "import", str(not_export))
    assert refused.returncode == 2
    assert "is not a memory-core export" in refused.stderr
    missing = run(settings, tmp_path, "import", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2
    assert "nope.jsonl: No such file or directory" in missing.stderr


def test_version_and_a_reader_that_goes_away(client: MemoryClient, settings: Settings, namespace: str, tmp_path: Path):
    shown = run(settings, tmp_path, "--version")
    assert shown.returncode == 0
    assert shown.stdout.startswith("memory-core ")
    assert "unknown" not in shown.stdout
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes", capacity=5000)
    for start in (0, 1000):  # more than a pipe holds, so the export is still writing when the reader leaves
        notes.add([f"a rather long note number {i} " + "x" * 200 for i in range(start, start + 1000)])
    # `export ns | head -1`: the reader closes the pipe after one line; the export stops, quietly.
    with subprocess.Popen(
        [CLI, "export", namespace],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={
            "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
            "MEMORY_REDIS__URL": settings.redis.url,
            "MEMORY_REDIS__KEY_PREFIX": settings.redis.key_prefix,
        },
        cwd=tmp_path,
    ) as export:
        assert export.stdout is not None
        assert export.stderr is not None
        assert json.loads(export.stdout.readline())["kind"] == "memory-core-export"
        export.stdout.close()
        stderr = export.stderr.read().decode()
        assert export.wait(timeout=60) == 0, stderr
    assert "Traceback" not in stderr
    assert "BrokenPipe" not in stderr


def test_status_reports_the_store_the_workers_serve_not_this_directorys(
    settings: Settings, tmp_path: Path, client: MemoryClient, namespace: str
):
    client.long_term(namespace, "u").get_or_create_memory_set("notes").add(["a fact"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The shell's own default would be another directory: the CLI reports what the workers say, not its settings.
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    report = ok(run(settings, elsewhere, "status", "--json", **env))
    served = str(settings.qdrant.path.resolve())
    (store,) = report["stores"]
    assert (store["backend"], store["location"]) == ("edge", served)
    assert store["bytes"] > 0
    text = ok(run(settings, elsewhere, "status", **env))
    assert f"store    edge at {served} on " in text
    assert str(elsewhere) not in text
    assert str(tmp_path / "xdg") not in text


def test_status_with_redis_down_exits_3_naming_the_url(settings: Settings, tmp_path: Path):
    done = run(settings, tmp_path, "status", MEMORY_REDIS__URL="redis://127.0.0.1:1/0")
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "redis://127.0.0.1:1/0" in line
    assert "MEMORY_REDIS__URL" in line


def test_status_counts_the_dead_letters_that_name_no_namespace_as_ops(
    settings: Settings, tmp_path: Path, namespace: str, raw_redis: Any
):
    from memory_core.core.keys import Keys

    keys = Keys(settings.redis.key_prefix)
    letter = {"task": "memory.add", "task_id": "t1", "kwargs": {}, "error": {"type": "X"}, "failed_at": "now"}
    raw_redis.rpush(keys.dead_letters(namespace), json.dumps(letter))
    raw_redis.sadd(keys.dead_letter_namespaces(), namespace)
    raw_redis.rpush(keys.unroutable_dead_letters(), json.dumps(letter), json.dumps(letter))
    report = ok(run(settings, tmp_path, "status", "--json"))
    assert report["dead_letters"]["by_namespace"] == {namespace: 1, "!ops": 2}
    assert report["dead_letters"]["total"] == 3
    text = ok(run(settings, tmp_path, "status"))
    assert f"dead     3 dead letters ({namespace}: 1, !ops: 2)" in text
    listed = ok(run(settings, tmp_path, "dead-letters", "list", "--namespace", "!ops", "--json"))
    assert len(listed) == 2  # the namespace status names is one `dead-letters list` takes


def test_dead_letters_says_when_there_are_none_and_refuses_a_malformed_namespace(settings: Settings, tmp_path: Path):
    empty = run(settings, tmp_path, "dead-letters", "list")
    assert empty.returncode == 0
    assert empty.stdout == ""
    assert "no dead letters" in empty.stderr
    one = run(settings, tmp_path, "dead-letters", "list", "--namespace", "acme")
    assert "namespace 'acme' has no dead letters" in one.stderr
    for action in (["list"], ["replay"], ["drop", "--yes"]):
        bad = run(settings, tmp_path, "dead-letters", *action, "--namespace", "bad ns")
        assert bad.returncode == 2, (action, bad.stderr)
        assert "namespace 'bad ns' is invalid" in bad.stderr


def test_items_get_of_an_unknown_id_names_it_and_the_set(settings: Settings, tmp_path: Path, namespace: str):
    ok(run(settings, tmp_path, "sets", "create", namespace, "u", "notes"))
    ok(run(settings, tmp_path, "items", "add", namespace, "u", "notes", stdin='{"value": "tea", "id": "known"}\n'))
    missing = run(settings, tmp_path, "items", "get", namespace, "u", "notes", "nope")
    assert missing.returncode == 1
    assert missing.stdout == ""
    (line,) = missing.stderr.strip().splitlines()
    assert "'nope'" in line
    assert "'notes'" in line
    partly = run(settings, tmp_path, "items", "get", namespace, "u", "notes", "known", "nope")
    assert partly.returncode == 0
    assert partly.stdout.startswith("known  tea")
    assert "'nope'" in partly.stderr


def test_the_top_level_help_lists_every_command_down_to_its_action(settings: Settings, tmp_path: Path):
    from memory_core.cli import build_parser, command_helps

    done = run(settings, tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    commands = command_helps(build_parser())
    assert {"sets create", "dead-letters replay", "status", "worker"} <= set(commands)
    for words, text in commands.items():
        assert f"  {words} " in done.stdout, words
        assert text.split()[0] in done.stdout


def test_a_worker_is_refused_an_unknown_queue_naming_the_known_ones(settings: Settings, tmp_path: Path):
    done = run(settings, tmp_path, "worker", "-Q", "memory.write,memory.bogus", MEMORY_QDRANT__PATH=str(tmp_path / "q"))
    assert done.returncode == 2, done.stderr
    assert "'memory.bogus'" in done.stderr
    assert "memory.write, memory.read, memory.maintenance, memory.compaction" in done.stderr
    excluded = run(settings, tmp_path, "worker", "-X", "memory.nope", MEMORY_QDRANT__PATH=str(tmp_path / "q"))
    assert excluded.returncode == 2, excluded.stderr
    assert "'memory.nope'" in excluded.stderr


@pytest.mark.timeout(180)
def test_worker_log_lines_name_the_task_inside_one_and_nothing_outside(settings: Settings, tmp_path: Path):
    from .conftest import make_settings
    from .processes import stop

    prefix = "mclog"  # a deployment of its own: the session's worker takes none of these tasks
    env = {
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "MEMORY_REDIS__URL": settings.redis.url,
        "MEMORY_REDIS__KEY_PREFIX": prefix,
        "MEMORY_QDRANT__PATH": str(tmp_path / "store"),
        "MEMORY_METRICS__ENABLED": "false",
    }
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        process = subprocess.Popen([CLI, "worker"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while " ready." not in log.read_text(errors="replace"):
            assert process.poll() is None, log.read_text(errors="replace")[-2000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
            time.sleep(0.2)
        other = make_settings(
            settings.redis.url, tmp_path / "unused", redis={"url": settings.redis.url, "key_prefix": prefix}
        )
        with MemoryClient(other) as mine:
            receipt = mine.forget("acme")
    finally:
        stop(process)
    text = log.read_text(errors="replace")
    assert "???" not in text
    erased = next(line for line in text.splitlines() if "erased namespace acme" in line)
    assert "[memory.forget(" in erased, erased
    assert receipt.namespace == "acme"


def test_models_pull_with_a_local_model_directory_checks_it_holds_the_model_and_downloads_nothing(
    settings: Settings, tmp_path: Path
):
    pytest.importorskip("fastembed", reason="the [fastembed] extra is not installed")
    from tests.local_models import FASTEMBED_MINILM, lay_out_minilm

    local = lay_out_minilm(tmp_path / "minilm")
    cache = tmp_path / "models"
    spec = f"fastembed:{FASTEMBED_MINILM}"
    env = {"MEMORY_EMBEDDER__PATH": str(local), "MEMORY_EMBEDDER__CACHE_DIR": str(cache)}
    done = run(settings, tmp_path, "models", "pull", spec, **env)
    assert done.returncode == 0, done.stderr
    assert f"MEMORY_EMBEDDER__PATH is set: workers load {spec} from {local}" in done.stdout
    assert ok(run(settings, tmp_path, "models", "pull", spec, "--json", **env)) == {
        "spec": spec,
        "source": "local",
        "path": str(local),
    }
    # A directory the worker would refuse is refused now, with the reason, as a line and as a JSON answer.
    empty = tmp_path / "empty"
    empty.mkdir()
    env["MEMORY_EMBEDDER__PATH"] = str(empty)
    refused = run(settings, tmp_path, "models", "pull", spec, "--json", **env)
    assert refused.returncode == 2, refused.stderr
    answer = json.loads(refused.stdout)
    assert answer["spec"] == spec
    assert f"MEMORY_EMBEDDER__PATH={str(empty)!r} holds no loadable {spec}" in answer["error"]
    assert "lacks model.onnx" in answer["error"]
    (line,) = refused.stderr.strip().splitlines()
    assert "holds no loadable" in line
    assert not cache.exists()


def test_models_pull_finds_a_completed_copy_in_the_cache_and_refuses_what_it_cannot_pull(
    settings: Settings, tmp_path: Path
):
    pytest.importorskip("fastembed", reason="the [fastembed] extra is not installed")
    cache = tmp_path / "models"
    pulled = cache / "fastembed" / "baai--bge-small-en-v1.5"
    pulled.mkdir(parents=True)
    (pulled / "memory-core-model.json").write_text("{}")  # written by a pull just before its rename
    env = {"MEMORY_EMBEDDER__CACHE_DIR": str(cache)}
    answer = ok(run(settings, tmp_path, "models", "pull", "fastembed:BAAI/bge-small-en-v1.5", "--json", **env))
    assert answer == {"spec": "fastembed:BAAI/bge-small-en-v1.5", "source": "cache", "path": str(pulled)}
    unknown = run(settings, tmp_path, "models", "pull", "fastembed:no/such-model", **env)
    assert unknown.returncode == 1
    assert "'no/such-model'" in unknown.stderr
    bad = run(settings, tmp_path, "models", "pull", "word2vec", **env)
    assert bad.returncode == 2
    assert "'word2vec'" in bad.stderr
    assert "fastembed:<model>" in bad.stderr
    assert ok(run(settings, tmp_path, "models", "pull", "all-MiniLM-L6-v2", "--json"))["source"] == "shipped"
    failed = run(settings, tmp_path, "models", "pull", "fastembed:no/such-model", "--json", **env)
    assert failed.returncode == 1
    assert "'no/such-model'" in json.loads(failed.stdout)["error"]


def test_items_search_hands_rerank_to_the_workers(settings: Settings, tmp_path: Path, namespace: str):
    ok(run(settings, tmp_path, "sets", "create", namespace, "u", "notes"))
    ok(run(settings, tmp_path, "items", "add", namespace, "u", "notes", stdin='{"value": "green tea", "id": "t"}\n'))
    asked = run(settings, tmp_path, "items", "search", namespace, "u", "notes", "tea", "--rerank")
    assert asked.returncode == 2, asked.stderr  # the session's workers have no reranker, and say so
    assert "the workers have no reranker" in asked.stderr
    off = ok(run(settings, tmp_path, "items", "search", namespace, "u", "notes", "tea", "--no-rerank", "--json"))
    assert [hit["id"] for hit in off] == ["t"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_up_prints_the_metrics_port_its_worker_picked_and_status_shows_the_reranker_and_a_reindex(
    private_redis: PrivateRedis, tmp_path: Path
):
    import httpx

    from memory_core.testing.fake_rerank import VALID_KEY, FakeRerankEndpoint

    with FakeRerankEndpoint() as endpoint:
        env = {
            "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
            "MEMORY_REDIS__URL": private_redis.database_url(),  # no other worker consumes these queues
            "MEMORY_REDIS__KEY_PREFIX": "mcup",
            "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"),
            "MEMORY_STACK__RUN_DIR": str(tmp_path / "run"),
            "MEMORY_STACK__BACKUP_DIR": str(tmp_path / "backups"),
            "MEMORY_METRICS__PORT": "0",
            "MEMORY_RERANK__MODEL": f"http:{endpoint.url}",
            "MEMORY_RERANK__API_KEY": VALID_KEY,
            "MEMORY_CLIENT__TIMEOUT": "60",
        }

        def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [CLI, *args],
                input=stdin,
                capture_output=True,
                text=True,
                env=env,
                cwd=tmp_path,
                timeout=180,
                check=False,
            )

        try:
            up = cli("up", "--no-beat", "--no-flower")
            assert up.returncode == 0, up.stderr + up.stdout
            (line,) = [row for row in up.stdout.splitlines() if row.startswith("metrics  ")]
            url = line.split()[1]
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            assert port != 0, line
            assert "memory_core_tasks_total" in httpx.get(url, timeout=10).text  # the worker serves there

            status = cli("status")
            assert status.returncode == 0, status.stderr
            assert f"reranker http:{endpoint.url}" in status.stdout.splitlines()
            assert "reindex" not in status.stdout  # none started: nothing to see to
            assert cli("sets", "create", "acme", "u", "notes").returncode == 0
            lines = '{"value": "green tea", "id": "t"}\n{"value": "black coffee", "id": "c"}\n'
            added = cli("items", "add", "acme", "u", "notes", stdin=lines)
            assert added.returncode == 0, added.stderr
            asked = len(endpoint.requests)
            assert cli("items", "search", "acme", "u", "notes", "green tea", "--no-rerank").returncode == 0
            assert len(endpoint.requests) == asked
            assert cli("items", "search", "acme", "u", "notes", "green tea", "--rerank").returncode == 0
            assert len(endpoint.requests) == asked + 1

            started = cli("reindex", "--to", "hashing", "--detach")
            assert started.returncode == 0, started.stderr
            report = json.loads(cli("status", "--json").stdout)
            assert report["reindex"]["state"] in ("building", "complete")
            assert report["reindex"]["target_spec"] == "hashing"
            rows = cli("status").stdout.splitlines()
            assert any(row.startswith(f"reindex {report['reindex']['state']}: ") for row in rows), rows
            assert any(row.startswith("  next: ") for row in rows), rows
        finally:
            cli("down")
