"""memory-core against mem0 (``mem0ai`` 2.2.1) with the same embedder, side by side in one run, on real chat text.

mem0 is no dependency of memory-core: this bench makes a venv of its own (``ops/.run/mem0-venv``, once, again
when the pins change), installs mem0 and memory-core there, and runs itself again under that venv's python.

memory-core: a real worker (``ops/stack.py``), its configured embedder (all-MiniLM-L6-v2 by default), the
client's ``add(..., wait=True)`` (until durable) and ``search``. mem0: ``Memory.from_config`` on a local
qdrant-client store (a path under ``ops/.run``) and a SQLite history, ``add(..., infer=False)`` (no LLM: each
message is stored as it is, one memory each) and ``search``; its embedder is replaced by one that calls this
process's instance of the embedder the worker runs (same class, same settings), so both embed alike. No
network: mem0's telemetry is off (``MEM0_TELEMETRY``), its LLM and embedding endpoints point at loopback and
are never called, and this process refuses any connection off the machine (the run fails if one was tried).
mem0 is installed as ``pip install mem0ai`` installs it, without its extras: no spaCy (no entity boosts, no
lemmas) and no fastembed, whose BM25 weights would come from a model hub.

The workload, the same for both, interleaved call by call (each goes first in turn, so machine noise hits
both alike): ``--items`` chat turns of ``../shared/data`` (equal shares of each dataset, each text once) over
20 users (a namespace each in memory-core, a ``user_id`` in mem0):

  1. one add per call, sequential from one thread, until stored: items/s and p50/p95 per call;
  2. then, on emptied stores, the same turns again in adds of up to ``--batch`` turns of one user;
  3. ``--searches`` questions of the datasets' ``queries.jsonl`` (each once), limit 10, each in one user's
     memories: memory-core's default (hybrid), mem0's, and memory-core dense-only, which is what mem0 runs
     here (without fastembed it searches by cosine alone). Every memory-core search is a cache miss (a new question: the client's counters
     must show no hit); the dense-only row asks ``question (dense)``, so the worker embeds it afresh.

Both stores are counted after each add section, and every search must return hits; memory-core's dense-only hits
for each very question (asked once more, untimed) are compared with mem0's: same vectors and cosine, so their top
10 should agree.

    ops/bench --mem0 [--items 2000] [--batch 100] [--searches 200]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.metadata
import ipaddress
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import SHARED_DATA, _clear_embeddings, _pair, chat_turns, corpus
from stack import ROOT, RUN_DIR, clear_prefix, isolated_env, redis_server, worker

from memory_core import MemoryClient, MemorySet, load_settings
from memory_core.core.models import SearchMode
from memory_core.engine.embedders import Embedder, open_embedder

MEM0_REQUIREMENT = "mem0ai==2.2.1"
MEM0_VENV = RUN_DIR / "mem0-venv"
MEM0_DIR = RUN_DIR / "bench-mem0"
"""mem0's store, history database and home directory (``MEM0_DIR``), made anew each run."""
CONSTRAINTS = ROOT / "ops" / "constraints.txt"
# mcp: ops/bench.py, whose helpers this reuses, imports it.
PROJECT = f"{ROOT}[worker,mcp]"
USERS = 20
LIMIT = 10
UNUSED_ENDPOINT = "http://127.0.0.1:9/v1"
"""Where mem0's OpenAI LLM and embedder would call (the discard port): they are built, never called."""
SYSTEMS = ("memory-core", "mem0")


def run(items: int, batch: int, searches: int) -> None:
    """Measures in mem0's venv: makes it if needed, then runs this file there (this process ends)."""
    if Path(sys.prefix).resolve() == MEM0_VENV.resolve():
        _measure(items, batch, searches)
        return
    python = _mem0_python()
    arguments = ["--items", str(items), "--batch", str(batch), "--searches", str(searches)]
    sys.stdout.flush()
    os.execv(python, [str(python), str(Path(__file__).resolve()), *arguments])


def _mem0_python() -> Path:
    """The python of mem0's venv, installed on first use (and again when the project's pins or mem0's change)."""
    python = MEM0_VENV / "bin" / "python"
    pins = b"".join(path.read_bytes() for path in (ROOT / "pyproject.toml", CONSTRAINTS)) + MEM0_REQUIREMENT.encode()
    stamp = MEM0_VENV / f".installed-{hashlib.sha256(pins).hexdigest()[:16]}"
    if stamp.exists():
        return python
    print(f"installing {MEM0_REQUIREMENT} and memory-core into {MEM0_VENV} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(MEM0_VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
    subprocess.run([*pip, "--quiet", "--upgrade", "pip"], check=True)
    together = subprocess.run(  # not quiet: its output names a conflict
        [*pip, "-c", str(CONSTRAINTS), MEM0_REQUIREMENT, "-e", PROJECT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,  # a conflict is expected, and handled below
    )
    if together.returncode != 0:
        # mem0 2.2.1 pins protobuf<7, ops/constraints.txt has 7: memory-core at CI's versions first, then mem0,
        # which changes only what its own pins need (listed in the table's header).
        output = (together.stdout + together.stderr).splitlines()
        causes = [line.strip() for line in output if " depends on " in line or "(constraint)" in line]
        print(
            f"{MEM0_REQUIREMENT} conflicts with ops/constraints.txt ({'; '.join(causes)}): memory-core at its "
            "constraints, then mem0 on top",
            flush=True,
        )
        subprocess.run([*pip, "--quiet", "-c", str(CONSTRAINTS), "-e", PROJECT], cwd=ROOT, check=True)
        subprocess.run([*pip, "--quiet", MEM0_REQUIREMENT], cwd=ROOT, check=True)
    for earlier in MEM0_VENV.glob(".installed-*"):
        earlier.unlink()
    stamp.touch()
    return python


def _refuse_remote_connections() -> list[str]:
    """Makes every connection of this process to an address off this machine fail; returns the list of the
    addresses refused, which must stay empty (mem0 is configured to call nothing)."""
    refused: list[str] = []
    connect = socket.socket.connect

    def local_only(sock: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and address[0] != "localhost":
            try:
                loopback = ipaddress.ip_address(address[0]).is_loopback
            except ValueError:  # a host name: resolved by the caller on the way, refused here
                loopback = False
            if not loopback:
                refused.append(str(address[0]))
                raise ConnectionRefusedError(f"the mem0 bench connects to nothing off this machine: {address[0]!r}")
        connect(sock, address)

    socket.socket.connect = local_only  # type: ignore[method-assign]  # a guard for this bench process only
    return refused


def _mem0_memory(embedder: Embedder, dimension: int) -> Any:
    """mem0's ``Memory`` on a local qdrant-client store, its embedder calling ``embedder``."""
    from mem0 import Memory
    from mem0.configs.embeddings.base import BaseEmbedderConfig
    from mem0.embeddings.base import EmbeddingBase
    from mem0.memory import telemetry

    assert telemetry.MEM0_TELEMETRY is False, "mem0's telemetry must be off"

    class SharedEmbedder(EmbeddingBase):  # type: ignore[misc]  # mem0 ships no type information
        """mem0's embedder interface over the embedder memory-core's worker runs (same class, same settings)."""

        def __init__(self) -> None:
            super().__init__(BaseEmbedderConfig(embedding_dims=dimension))

        def embed(self, text: str, memory_action: str | None = None) -> list[float]:
            if memory_action == "search":
                return embedder.embed_queries([text])[0]
            return embedder.embed([text])[0]

        def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
            return embedder.embed_queries(texts) if memory_action == "search" else embedder.embed(texts)

    unused = {"api_key": "unused", "openai_base_url": UNUSED_ENDPOINT}
    memory = Memory.from_config(
        {
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": "bench",
                    "embedding_model_dims": dimension,
                    "path": str(MEM0_DIR / "qdrant"),
                },
            },
            "embedder": {"provider": "openai", "config": {**unused, "embedding_dims": dimension}},
            "llm": {"provider": "openai", "config": unused},
            "history_db_path": str(MEM0_DIR / "history.db"),
        }
    )
    memory.embedding_model = SharedEmbedder()
    return memory


def _questions(count: int) -> list[str]:
    """``count`` distinct questions, an equal share of each dataset's ``queries.jsonl`` (a stride through it)."""
    files = sorted(SHARED_DATA.glob("*/queries.jsonl"))
    questions: list[str] = []
    for queries in files:
        lines = queries.read_text().splitlines()
        share = -(-count // len(files))
        picked = [json.loads(line)["question"] for line in lines[:: max(1, len(lines) // share)]]
        questions += [q for q in dict.fromkeys(picked) if q not in questions][:share]
    return questions[:count]


def _user(n: int) -> str:
    """The user of the ``n``-th turn (or question): the users take turns."""
    return f"user-{n % USERS:02d}"


def _by_user(texts: list[str]) -> dict[str, list[str]]:
    """Each user's turns, in order (those ``_user`` gives them)."""
    return {_user(u): texts[u::USERS] for u in range(USERS)}


def _side_by_side(n: int, calls: Mapping[str, Callable[[], object]], times: dict[str, list[float]]) -> dict[str, Any]:
    """Runs the calls, the ``n``-th time each starting in turn, timing each (ms); returns what each returned."""
    names = list(calls)
    answers: dict[str, Any] = {}
    for name in names[n % len(names) :] + names[: n % len(names)]:
        began = time.perf_counter()
        answers[name] = calls[name]()
        times[name].append((time.perf_counter() - began) * 1000)
    return answers


def _counts(sets: dict[str, MemorySet], memory: Any, limit: int) -> dict[str, int]:
    """Memories stored by each, over the users."""
    mem0 = sum(len(memory.get_all(filters={"user_id": user}, top_k=limit)["results"]) for user in sets)
    return {"memory-core": sum(memory_set.size() for memory_set in sets.values()), "mem0": mem0}


def _one_by_one(sets: dict[str, MemorySet], memory: Any, texts: list[str]) -> dict[str, list[float]]:
    """(1): one add per call, until stored; ms per call."""
    times: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    for n, text in enumerate(texts):
        user = _user(n)
        calls = {
            "memory-core": functools.partial(sets[user].add, [text], wait=True),
            "mem0": functools.partial(memory.add, text, user_id=user, infer=False),
        }
        _side_by_side(n, calls, times)
    return times


def _batches(sets: dict[str, MemorySet], memory: Any, texts: list[str], batch: int) -> dict[str, list[float]]:
    """(2): adds of up to ``batch`` turns of one user (mem0: one ``add`` of that many messages); ms per call."""
    times: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    parts = [(user, mine[i : i + batch]) for user, mine in _by_user(texts).items() for i in range(0, len(mine), batch)]
    for n, (user, part) in enumerate(parts):
        messages = [{"role": "user", "content": text} for text in part]
        calls = {
            "memory-core": functools.partial(sets[user].add, part, wait=True),
            "mem0": functools.partial(memory.add, messages, user_id=user, infer=False),
        }
        answers = _side_by_side(n, calls, times)
        assert len(answers["mem0"]["results"]) == len(part), "mem0 must store each message as a memory"
    return times


def _found(memory_set: MemorySet, question: str, mode: SearchMode) -> list[str]:
    return [str(item.value) for item in memory_set.search(question, limit=LIMIT, mode=mode)]


def _mem0_found(memory: Any, question: str, user: str) -> list[str]:
    return [found["memory"] for found in memory.search(question, top_k=LIMIT, filters={"user_id": user})["results"]]


def _searches(sets: dict[str, MemorySet], memory: Any, questions: list[str]) -> dict[str, Any]:
    """(3): each question in one user's memories, three ways; ms per call, hits, and how far memory-core's
    dense-only hits for the very question (asked untimed, after: its embedding is cached) agree with mem0's."""
    names = ("memory-core", "mem0", "memory-core dense")
    times: dict[str, list[float]] = {name: [] for name in names}
    hits: dict[str, list[int]] = {name: [] for name in names}
    overlaps = []
    for n, question in enumerate(questions):
        user = _user(n)
        calls = {
            "memory-core": functools.partial(_found, sets[user], question, "hybrid"),
            "mem0": functools.partial(_mem0_found, memory, question, user),
            "memory-core dense": functools.partial(_found, sets[user], f"{question} (dense)", "dense"),
        }
        answers = _side_by_side(n, calls, times)
        for name in names:
            hits[name].append(len(answers[name]))
        dense, mem0 = set(_found(sets[user], question, "dense")), set(answers["mem0"])
        overlaps.append(len(dense & mem0) / max(1, min(len(dense), len(mem0))))
    return {"times": times, "hits": hits, "overlap": statistics.mean(overlaps)}


def _versions() -> tuple[str, list[str]]:
    """The versions that matter, and each installed package whose version differs from ops/constraints.txt."""
    names = ("memory-core", "mem0ai", "qdrant-client", "qdrant-edge-py", "onnxruntime", "celery")
    line = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in names)
    pinned = dict(
        entry.split("==", 1) for entry in CONSTRAINTS.read_text().split() if "==" in entry and not entry.startswith("#")
    )
    differing = []
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        wanted = next(
            (v for k, v in pinned.items() if k.lower().replace("_", "-") == name.lower().replace("_", "-")), None
        )
        if wanted is not None and wanted != dist.version:
            differing.append(f"{name} {dist.version} (constraints: {wanted})")
    return line, sorted(differing)


def _measure(items: int, batch: int, searches: int) -> None:
    os.environ["MEM0_TELEMETRY"] = "False"  # read when mem0 is imported
    os.environ["MEM0_DIR"] = str(MEM0_DIR / "home")  # not ~/.mem0
    refused = _refuse_remote_connections()
    load_before = os.getloadavg()
    texts = list(dict.fromkeys(chat_turns(items)))
    questions = _questions(searches)
    if not texts or not questions:
        raise SystemExit(f"no chat turns or questions in {SHARED_DATA}: the mem0 bench runs on real chat text")
    env = isolated_env("bench-mem0")
    settings = load_settings()
    embedder = open_embedder(settings.embedder)
    describe = embedder.fingerprint.describe()
    shutil.rmtree(MEM0_DIR, ignore_errors=True)
    MEM0_DIR.mkdir(parents=True)
    memory = _mem0_memory(embedder, embedder.fingerprint.dimension)
    users = [_user(n) for n in range(USERS)]

    with redis_server(settings.redis.url), worker(env, name="bench-mem0-worker"), MemoryClient(settings) as client:
        clear_prefix(settings.redis.url, settings.redis.key_prefix)  # no embedding or result of an earlier run

        def open_sets() -> dict[str, MemorySet]:
            return {u: client.long_term(u, "chat").get_or_create_memory_set("turns", capacity=1_000_000) for u in users}

        sets = open_sets()
        warm = client.long_term("warm-up", "chat").get_or_create_memory_set("turns", capacity=1_000_000)
        for text in corpus(8, seed=99):  # the model, the connections, both stores' first writes and reads
            warm.add([text])
            warm.search(f"{text}?", limit=LIMIT)
            memory.add(text, user_id="warm-up", infer=False)
            memory.search(f"{text}?", top_k=LIMIT, filters={"user_id": "warm-up"})

        singles = _one_by_one(sets, memory, texts)
        stored_singles = _counts(sets, memory, len(texts))
        for user in users:  # empty stores again; the same texts must be embedded again
            client.long_term(user, "chat").delete_memory_set("turns")
        memory.reset()
        _clear_embeddings(settings.redis.url, settings.redis.key_prefix)
        sets = open_sets()

        batched = _batches(sets, memory, texts, batch)
        stored_batched = _counts(sets, memory, len(texts))
        before = client.stats()
        found = _searches(sets, memory, questions)
        after = client.stats()
    load_after = os.getloadavg()

    for stored in (stored_singles, stored_batched):
        assert stored == {"memory-core": len(texts), "mem0": len(texts)}, f"each must store every turn: {stored}"
    for name, counts in found["hits"].items():
        assert all(counts), f"{name}: {counts.count(0)} of {len(counts)} searches found nothing"
    cache_hits = (after.l1_hits - before.l1_hits, after.l2_hits - before.l2_hits)
    assert cache_hits == (0, 0), f"every memory-core search must miss the caches, hits (L1, L2): {cache_hits}"
    assert not refused, f"connections off this machine were attempted: {refused}"
    _print(
        texts=texts,
        batch=batch,
        singles=singles,
        batched=batched,
        found=found,
        stored=stored_batched,
        describe=describe,
        loads=(load_before, load_after),
    )


def _rate(count: int, times: list[float]) -> float:
    return count / (sum(times) / 1000)


def _rate_row(label: str, count: int, times: dict[str, list[float]]) -> str:
    """A table row of items/s over all calls; the ratio is memory-core's rate to mem0's."""
    mc, mem0 = _rate(count, times["memory-core"]), _rate(count, times["mem0"])
    return f"| {label} | {mc:.0f} | {mem0:.0f} | x{mc / mem0:.2f} |"


def _latency_row(label: str, mc: list[float], mem0: list[float]) -> str:
    """A table row of p50 / p95 per call; the ratio is mem0's p50 to memory-core's."""
    return f"| {label} | {_pair(mc)} | {_pair(mem0)} | x{statistics.median(mem0) / statistics.median(mc):.2f} |"


def _print(
    *,
    texts: list[str],
    batch: int,
    singles: dict[str, list[float]],
    batched: dict[str, list[float]],
    found: dict[str, Any],
    stored: dict[str, int],
    describe: str,
    loads: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> None:
    versions, differing = _versions()
    times, hits = found["times"], found["hits"]
    mean_batch = len(texts) / len(batched["mem0"])
    print(
        f"\nmemory-core against mem0, the same embedder: {len(texts)} chat turns of {SHARED_DATA} over {USERS} "
        f"users, {len(times['mem0'])} questions, interleaved call by call\n"
        f"embedder: {describe}\n{versions}; Python {sys.version.split()[0]}; {os.cpu_count()} cores; "
        f"load average (1, 5, 15 min) {' '.join(f'{x:.2f}' for x in loads[0])} at the start, "
        f"{' '.join(f'{x:.2f}' for x in loads[1])} at the end\n"
        f"this venv's packages at other versions than ops/constraints.txt: {', '.join(differing) or 'none'}\n"
    )
    count = len(texts)
    print("| measure | memory-core | mem0 | memory-core faster by |")
    print("|---|---|---|---|")
    print(_rate_row("one add per call, sequential, until stored: items/s", count, singles))
    print(_latency_row("the same, per call, p50 / p95", singles["memory-core"], singles["mem0"]))
    label = f"adds of up to {batch} turns of one user ({mean_batch:.0f} on average), sequential, until stored: items/s"
    print(_rate_row(label, count, batched))
    print(_latency_row("the same, per call, p50 / p95", batched["memory-core"], batched["mem0"]))
    label = f"search, limit {LIMIT}, in one user's memories, p50 / p95 (memory-core: hybrid, its default)"
    print(_latency_row(label, times["memory-core"], times["mem0"]))
    label = 'the same, memory-core dense-only (`mode="dense"`, cosine as mem0 here), p50 / p95'
    print(_latency_row(label, times["memory-core dense"], times["mem0"]))
    print(
        f"| memories stored (of {len(texts)}), after each add section | {stored['memory-core']} | {stored['mem0']} | |"
    )
    print(
        f"| hits per search, mean (none empty) | {statistics.mean(hits['memory-core']):.1f} (dense: "
        f"{statistics.mean(hits['memory-core dense']):.1f}) | {statistics.mean(hits['mem0']):.1f} | |"
    )
    print(
        f"\nmemory-core dense-only and mem0 agree on {found['overlap']:.0%} of their top {LIMIT} for the same "
        "question (same vectors, same cosine; mem0 leaves out hits scored below 0.1). memory-core's timed searches "
        "all missed its caches (new questions; L1 and L2 hits: 0), so each embedded its question on the worker; "
        "mem0 has no cache. No connection off this machine was attempted."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--searches", type=int, default=200)
    args = parser.parse_args()
    run(args.items, args.batch, args.searches)


if __name__ == "__main__":
    main()
