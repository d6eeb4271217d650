"""memory-core against mem0 (``mem0ai`` 2.2.1) with the same embedder object, interleaved, on the shared
datasets' chat turns: concurrent callers, fire-and-forget, one add at a time, and search at two sizes.

mem0 is no dependency of memory-core: this bench makes a venv of its own (``ops/.run/mem0-venv``, once, again
when the pins change), installs mem0, ``faiss-cpu`` (for mem0's FAISS store) and memory-core there, and runs
itself again under that venv's python.

memory-core: a real worker (``ops/stack.py``), its configured embedder (all-MiniLM-L6-v2 by default), the
client's ``add([turn], wait=True)`` (until durable), ``submit`` (``add(wait=False)`` with a receipt to wait on
later) and ``search``. mem0: ``Memory.from_config`` with ``add(turn, infer=False)`` (no LLM: each turn stored as
it is) and ``search``, on two of its embedded stores: qdrant-client's local store (a path under ``ops/.run``)
and FAISS (``IndexFlatIP``, cosine), each with a SQLite history. mem0's embedder is replaced by one that calls
this process's instance of the embedder the worker runs (same class, same settings), so all embed alike. No
network: mem0's telemetry is off (``MEM0_TELEMETRY``), its LLM and embedding endpoints point at loopback and
are never called, and this process refuses any connection off the machine (the run fails if one was tried).
mem0 is installed as ``pip install mem0ai`` installs it, without its extras: no spaCy (no entity boosts, no
lemmas) and no fastembed, whose BM25 weights would come from a model hub: it searches by cosine alone.

The workload, the same for both: ``--items`` distinct chat turns of ``../shared/data`` (every distinct turn of
its datasets, mixed in a fixed shuffle and cycled; the k-th repeat of a turn starts ``(k)``, so no text is
another's: memory-core's exact-duplicate check and its embedding cache see new text every time) over 200 users
(a namespace each in memory-core, a ``user_id`` in mem0; turn n is user n mod 200's). In order:

  0. the ceiling: the embedder alone at its best layout (``benchkit.embed_rates``) on 2,000 of these turns, in
     this process, before the loads and again after them (the best of both);
  1. concurrent callers: the first tenth of the items from 4 threads, each thread adding one turn per call until
     stored (memory-core ``add([turn], wait=True)``, mem0 ``add(turn)`` on its qdrant store, from the same
     threads); the sides take turns in blocks of up to 500 items, each going first in turn, so machine noise hits
     both; items/s (and its ratio to the ceiling), p50/p95 per call, failed calls and calls in flight on average
     (near the thread count: the calls overlap; near 1: something serializes them);
  2. search at a tenth of the items: ``--searches`` new questions of the datasets' ``queries.jsonl``, limit 10,
     each in one user's memories: memory-core's default (hybrid) and dense-only (what mem0 runs here), mem0 on
     its qdrant store and on FAISS. The FAISS store is filled first, untimed, with the same turns, reusing the
     vectors the qdrant side computed (no second embedding pass) and with its save to disk once at the end
     instead of after every insert (it rewrites its whole index and docstore each time). Every search embeds its
     question afresh on every side: every memory-core search is a cache miss (the client's counters must show no
     hit; the dense-only row asks ``question (dense)``) and mem0 has no cache;
  3. the other nine tenths of the items from 16 threads, as in 1, then search at all the items, as in 2;
  4. fire-and-forget, 300 calls: memory-core's ``add(wait=False)`` (``submit``; the receipts are waited on after
     each block, untimed) against mem0's ``add``, always synchronous; caller-side p50/p95;
  5. one add at a time until stored, 300 calls, interleaved call by call: p50/p95; memory-core also on sets
     without dedup (``dedup="none"``: what mem0's ``add(infer=False)`` does), the same turns, in namespaces of
     their own;
  6. a few adds to mem0's FAISS store with its save as shipped (it only is part of the search rows otherwise).

Stores are counted at the end; memory-core must hold every turn and every memory-core search must return hits.
mem0's failures under threads are counted and reported, not raised. mem0's FAISS store filters by ``user_id``
after its search (the top ``2 x 60`` of all users' vectors, then the user's among them): its hits are checked
to belong to the user, and its empty answers are counted.

    ops/bench --mem0 [--items 20000] [--searches 200]
"""

from __future__ import annotations

import argparse
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
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchkit import SHARED_DATA, corpus, distinct_turns, embed_rates, pair
from stack import ROOT, RUN_DIR, clear_prefix, isolated_env, redis_server, worker

from memory_core import MemoryClient, MemorySet, load_settings
from memory_core.core.models import SearchMode
from memory_core.core.settings import Settings
from memory_core.engine.embedders import Embedder, open_embedder

MEM0_REQUIREMENT = "mem0ai==2.2.1"
FAISS_REQUIREMENT = "faiss-cpu==1.15.1"
"""mem0's FAISS vector store needs it (an extra mem0 does not install by itself)."""
MEM0_VENV = RUN_DIR / "mem0-venv"
MEM0_DIR = RUN_DIR / "bench-mem0"
"""mem0's stores, history databases and home directory (``MEM0_DIR``), made anew each run."""
CONSTRAINTS = ROOT / "ops" / "constraints.txt"
# mcp: ops/bench.py, whose helpers this reuses, imports it.
PROJECT = f"{ROOT}[worker,mcp]"
USERS = 200
ITEMS = 20_000
"""The items ``ops/bench --mem0`` loads unless ``--items`` says otherwise."""
LIMIT = 10
THREADS = (4, 16)
"""Callers of the first tenth of the items, then of the rest."""
BLOCK = 500
"""Items one side adds before the other's turn (fewer on small runs, so that each side goes first often)."""
SINGLES = 300
"""Calls of the fire-and-forget and of the one-at-a-time sections."""
SINGLES_BLOCK = 50
"""Fire-and-forget: calls of one side before the other's turn (memory-core's receipts are waited on between)."""
FAISS_ADDS = 20
"""Adds to mem0's FAISS store as shipped, saving its files after each."""
CEILING_SAMPLE = 2000
UNUSED_ENDPOINT = "http://127.0.0.1:9/v1"
"""Where mem0's OpenAI LLM and embedder would call (the discard port): they are built, never called."""
SYSTEMS = ("memory-core", "mem0")
PLAIN = "memory-core, dedup off"
"""One add at a time also runs on memory-core sets without dedup (what mem0's ``add(infer=False)`` does)."""
SEARCHERS = ("memory-core", "memory-core dense", "mem0", "mem0 faiss")


def run(items: int, batch: int, searches: int) -> None:
    """Measures in mem0's venv: makes it if needed, then runs this file there (this process ends).

    ``items``: the turns loaded by the concurrent callers (search is measured at a tenth of them and at all);
    ``batch``: unused (the runner's shared option; every add here is of one turn); ``searches``: questions at
    each of the two sizes.
    """
    if Path(sys.prefix).resolve() == MEM0_VENV.resolve():
        _measure(items, searches)
        return
    python = _mem0_python()
    arguments = ["--items", str(items), "--batch", str(batch), "--searches", str(searches)]
    sys.stdout.flush()
    os.execv(python, [str(python), str(Path(__file__).resolve()), *arguments])


def _mem0_python() -> Path:
    """The python of mem0's venv, installed on first use (and again when the project's pins or mem0's change)."""
    python = MEM0_VENV / "bin" / "python"
    pins = (
        b"".join(path.read_bytes() for path in (ROOT / "pyproject.toml", CONSTRAINTS))
        + f"{MEM0_REQUIREMENT} {FAISS_REQUIREMENT}".encode()
    )
    stamp = MEM0_VENV / f".installed-{hashlib.sha256(pins).hexdigest()[:16]}"
    if stamp.exists():
        return python
    print(f"installing {MEM0_REQUIREMENT}, {FAISS_REQUIREMENT} and memory-core into {MEM0_VENV} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(MEM0_VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
    subprocess.run([*pip, "--quiet", "--upgrade", "pip"], check=True)
    together = subprocess.run(  # not quiet: its output names a conflict
        [*pip, "-c", str(CONSTRAINTS), MEM0_REQUIREMENT, FAISS_REQUIREMENT, "-e", PROJECT],
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
        subprocess.run([*pip, "--quiet", MEM0_REQUIREMENT, FAISS_REQUIREMENT], cwd=ROOT, check=True)
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


class _Vectors:
    """The vectors of turns embedded for mem0's qdrant store, kept to fill its FAISS store without embedding
    them again (loading, untimed). Questions are never kept: every search embeds its own."""

    def __init__(self) -> None:
        self.kept: dict[str, Any] = {}
        self.reused = 0
        self.embedded = 0


def _mem0_embedder(embedder: Embedder, dimension: int, vectors: _Vectors, *, reuse: bool) -> Any:
    """mem0's embedder interface over the embedder memory-core's worker runs (same class, same settings).

    Without ``reuse`` it keeps each turn's vector in ``vectors``; with it, it answers a kept turn from there."""
    import numpy as np
    from mem0.configs.embeddings.base import BaseEmbedderConfig
    from mem0.embeddings.base import EmbeddingBase

    class SharedEmbedder(EmbeddingBase):  # type: ignore[misc]  # mem0 ships no type information
        def __init__(self) -> None:
            super().__init__(BaseEmbedderConfig(embedding_dims=dimension))

        def embed(self, text: str, memory_action: str | None = None) -> list[float]:
            if memory_action == "search":
                return embedder.embed_queries([text])[0]
            if reuse:
                kept = vectors.kept.get(text)
                if kept is not None:
                    vectors.reused += 1
                    return list(kept.tolist())
                vectors.embedded += 1
                return embedder.embed([text])[0]
            vector = embedder.embed([text])[0]
            vectors.kept[text] = np.asarray(vector, dtype=np.float32)  # 1.5 kB a turn, not a list of floats
            return vector

        def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
            return [self.embed(text, memory_action) for text in texts]

    return SharedEmbedder()


def _mem0_memory(store: dict[str, Any], history: str, embedding: Any) -> Any:
    """mem0's ``Memory`` on the vector ``store`` (its ``provider`` and ``config``), its embedder ``embedding``."""
    from mem0 import Memory
    from mem0.memory import telemetry

    assert telemetry.MEM0_TELEMETRY is False, "mem0's telemetry must be off"
    unused = {"api_key": "unused", "openai_base_url": UNUSED_ENDPOINT}
    dimension = store["config"]["embedding_model_dims"]
    memory = Memory.from_config(
        {
            "vector_store": store,
            "embedder": {"provider": "openai", "config": {**unused, "embedding_dims": dimension}},
            "llm": {"provider": "openai", "config": unused},
            "history_db_path": str(MEM0_DIR / history),
        }
    )
    memory.embedding_model = embedding
    return memory


def _mem0_memories(embedder: Embedder, vectors: _Vectors) -> dict[str, Any]:
    """mem0 on qdrant-client's local store and on FAISS (cosine, as qdrant's), by ``SYSTEMS``-style name."""
    dimension = embedder.fingerprint.dimension
    qdrant = {"collection_name": "bench", "embedding_model_dims": dimension, "path": str(MEM0_DIR / "qdrant")}
    faiss = {**qdrant, "path": str(MEM0_DIR / "faiss"), "distance_strategy": "cosine"}
    threaded = {**qdrant, "path": str(MEM0_DIR / "qdrant-threads")}
    return {
        # What the concurrent callers add to: qdrant-client's local mode is not thread-safe, so this store may be
        # left broken; its health is reported, and the search rows use the stores below, filled a call at a time.
        "mem0 threads": _mem0_memory(
            {"provider": "qdrant", "config": threaded},
            "history-threads.db",
            _mem0_embedder(embedder, dimension, vectors, reuse=False),
        ),
        "mem0": _mem0_memory(
            {"provider": "qdrant", "config": qdrant},
            "history.db",
            _mem0_embedder(embedder, dimension, vectors, reuse=True),
        ),
        "mem0 faiss": _mem0_memory(
            {"provider": "faiss", "config": faiss},
            "history-faiss.db",
            _mem0_embedder(embedder, dimension, vectors, reuse=True),
        ),
    }


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
    """The user of the ``n``-th turn: the users take turns."""
    return f"user-{n % USERS:03d}"


@dataclass
class Loaded:
    """One side's concurrent adds: ms per successful call, wall seconds of its blocks, failures."""

    times: list[float] = field(default_factory=list)
    wall: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return len(self.times) / self.wall

    @property
    def in_flight(self) -> float:
        """Calls under way at once, on average: the thread count when they overlap, 1 when serialized."""
        return sum(self.times) / 1000 / self.wall


def _block(pool: ThreadPoolExecutor, threads: int, block: range, add: Callable[[int], object], loaded: Loaded) -> None:
    """Adds the turns of ``block`` from ``threads`` threads, each taking the next turn when its call returns."""
    turns = iter(block)
    lock = threading.Lock()

    def feed(_: int) -> tuple[list[float], list[str]]:
        times: list[float] = []
        failures: list[str] = []
        while True:
            with lock:
                n = next(turns, None)
            if n is None:
                return times, failures
            began = time.perf_counter()
            try:
                add(n)
            except Exception as exc:  # noqa: BLE001  # mem0 under threads: counted and reported, the run goes on
                failures.append(f"{type(exc).__name__}: {exc}")
            else:
                times.append((time.perf_counter() - began) * 1000)

    began = time.perf_counter()
    for times, failures in pool.map(feed, range(threads)):
        loaded.times += times
        loaded.failures += failures
    loaded.wall += time.perf_counter() - began


def _load(span: range, threads: int, adders: Mapping[str, Callable[[int], object]], block: int) -> dict[str, Loaded]:
    """Adds the turns of ``span`` on each side from ``threads`` threads, ``block`` turns at a time per side, the
    sides taking turns to go first."""
    loaded = {name: Loaded() for name in adders}
    names = list(adders)
    with ThreadPoolExecutor(threads) as pool:
        for b, start in enumerate(range(span.start, span.stop, block)):
            part = range(start, min(start + block, span.stop))
            for name in names[b % 2 :] + names[: b % 2]:
                _block(pool, threads, part, adders[name], loaded[name])
    return loaded


def _fill(memory: Any, texts: list[str], span: range) -> float:
    """Adds the turns of ``span`` to a mem0 store one call at a time, untimed for the table (loading: their
    vectors are reused); a FAISS store's files are written once at the end, not after each insert. Returns the
    seconds it took."""
    store = memory.vector_store
    faiss = hasattr(store, "_save")
    began = time.perf_counter()
    if faiss:
        store._save = lambda: None  # an instance attribute over the method: the rewrite of both files per insert
    try:
        for n in span:
            memory.add(texts[n], user_id=_user(n), infer=False)
    finally:
        if faiss:
            del store._save
    if faiss:
        store._save()
    return time.perf_counter() - began


def _health(memory: Any, users: Sequence[str]) -> str:
    """Whether the store the threads wrote still answers: a search and a listing for a few users."""
    try:
        for user in users[:5]:
            memory.search("what did they say?", top_k=LIMIT, filters={"user_id": user})
            memory.get_all(filters={"user_id": user}, top_k=LIMIT)
    except Exception as exc:  # noqa: BLE001  # what breaking looks like is the finding
        return f"broken: {type(exc).__name__}: {str(exc)[:120]}"
    return "answers"


def _side_by_side(n: int, calls: Mapping[str, Callable[[], object]], times: dict[str, list[float]]) -> dict[str, Any]:
    """Runs the calls, the ``n``-th time each starting in turn, timing each (ms); returns what each returned."""
    names = list(calls)
    answers: dict[str, Any] = {}
    for name in names[n % len(names) :] + names[: n % len(names)]:
        began = time.perf_counter()
        answers[name] = calls[name]()
        times[name].append((time.perf_counter() - began) * 1000)
    return answers


def _fire_and_forget(sets: dict[str, MemorySet], memory: Any, texts: list[str], span: range) -> dict[str, list[float]]:
    """(4): memory-core's ``add(wait=False)`` (as ``submit``, whose receipts are waited on after each block,
    untimed) against mem0's ``add``, in blocks of ``SINGLES_BLOCK`` calls, each side going first in turn; ms."""
    times: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    for b, start in enumerate(range(span.start, span.stop, SINGLES_BLOCK)):
        part = range(start, min(start + SINGLES_BLOCK, span.stop))
        for name in SYSTEMS[b % 2 :] + SYSTEMS[: b % 2]:
            receipts = []
            for n in part:
                began = time.perf_counter()
                if name == "memory-core":
                    receipts.append(sets[_user(n)].submit([texts[n]]))
                else:
                    memory.add(texts[n], user_id=_user(n), infer=False)
                times[name].append((time.perf_counter() - began) * 1000)
            for receipt in receipts:
                receipt.wait(timeout=600)
    return times


def _one_by_one(
    client: MemoryClient, sets: dict[str, MemorySet], memory: Any, texts: list[str], span: range
) -> dict[str, list[float]]:
    """(5): one add per call, until stored, interleaved call by call; ms per call. memory-core is called twice per
    turn: on the users' sets (exact dedup, the default for text) and on sets without dedup (``dedup="none"``, each
    user's in a namespace of its own, so its embedding cache cannot answer the second call), as mem0's
    ``add(infer=False)`` keeps every turn."""
    plain = {
        user: client.long_term(f"{user}-plain", "chat").get_or_create_memory_set(
            "turns", capacity=1_000_000, dedup="none"
        )
        for user in sets
    }
    times: dict[str, list[float]] = {name: [] for name in (*SYSTEMS, PLAIN)}
    for n in span:
        calls = {
            "memory-core": lambda n=n: sets[_user(n)].add([texts[n]], wait=True),
            PLAIN: lambda n=n: plain[_user(n)].add([texts[n]], wait=True),
            "mem0": lambda n=n: memory.add(texts[n], user_id=_user(n), infer=False),
        }
        _side_by_side(n, calls, times)
    return times


def _faiss_adds(memory: Any, texts: list[str], span: range) -> list[float]:
    """(6): adds to mem0's FAISS store as shipped (each rewrites its index and docstore files); ms per call."""
    times = []
    for n in span:
        began = time.perf_counter()
        memory.add(texts[n], user_id=_user(n), infer=False)
        times.append((time.perf_counter() - began) * 1000)
    return times


def _found(memory_set: MemorySet, question: str, mode: SearchMode) -> list[str]:
    return [str(item.value) for item in memory_set.search(question, limit=LIMIT, mode=mode)]


def _mem0_found(memory: Any, question: str, user: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = memory.search(question, top_k=LIMIT, filters={"user_id": user})["results"]
    return found


def _searches(sets: dict[str, MemorySet], memories: dict[str, Any], questions: list[str], size: int) -> dict[str, Any]:
    """(2): each question in one user's memories (of those who have some), four ways; ms per call, hits, hits of
    another user, and how far memory-core's dense-only hits for the very question (asked untimed, after) and
    mem0's FAISS hits agree with mem0's qdrant hits."""
    times: dict[str, list[float]] = {name: [] for name in SEARCHERS}
    hits: dict[str, list[int]] = {name: [] for name in SEARCHERS}
    foreign = 0
    overlaps: dict[str, list[float]] = {"memory-core dense": [], "mem0 faiss": []}
    for n, question in enumerate(questions):
        user = _user(n % min(size, USERS))
        calls = {
            "memory-core": lambda q=question, u=user: _found(sets[u], q, "hybrid"),
            "memory-core dense": lambda q=question, u=user: _found(sets[u], f"{q} (dense)", "dense"),
            "mem0": lambda q=question, u=user: _mem0_found(memories["mem0"], q, u),
            "mem0 faiss": lambda q=question, u=user: _mem0_found(memories["mem0 faiss"], q, u),
        }
        answers = _side_by_side(n, calls, times)
        for name in SEARCHERS:
            hits[name].append(len(answers[name]))
        foreign += sum(1 for name in ("mem0", "mem0 faiss") for found in answers[name] if found.get("user_id") != user)
        qdrant = {found["memory"] for found in answers["mem0"]}
        dense = set(_found(sets[user], question, "dense"))
        faiss = {found["memory"] for found in answers["mem0 faiss"]}
        if qdrant:  # mem0 leaves out hits scored below 0.1: a question may find none of the user's memories
            overlaps["memory-core dense"].append(len(dense & qdrant) / min(len(dense), len(qdrant)))
            overlaps["mem0 faiss"].append(len(faiss & qdrant) / len(qdrant))
    return {
        "size": size,
        "times": times,
        "hits": hits,
        "foreign": foreign,
        "overlap": {name: statistics.mean(values) if values else 0.0 for name, values in overlaps.items()},
    }


def _versions() -> tuple[str, list[str]]:
    """The versions that matter, and each installed package whose version differs from ops/constraints.txt."""
    names = ("memory-core", "mem0ai", "faiss-cpu", "qdrant-client", "qdrant-edge-py", "onnxruntime", "celery")
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


def _warm_up(client: MemoryClient, memories: dict[str, Any]) -> None:
    """The model, the connections, every store's first writes and reads."""
    warm = client.long_term("warm-up", "chat").get_or_create_memory_set("turns", capacity=1_000_000)
    for text in corpus(8, seed=99):
        warm.add([text])
        warm.search(f"{text}?", limit=LIMIT)
        for memory in memories.values():
            memory.add(text, user_id="warm-up", infer=False)
            memory.search(f"{text}?", top_k=LIMIT, filters={"user_id": "warm-up"})


def _counts(sets: dict[str, MemorySet], memories: dict[str, Any], total: int) -> dict[str, int]:
    """Memories each store holds for the users (mem0's FAISS store: counted in its docstore, which ``get_all``
    would scan once per user)."""
    mem0 = memories["mem0"]
    return {
        "memory-core": sum(memory_set.size() for memory_set in sets.values()),
        "mem0": sum(len(mem0.get_all(filters={"user_id": user}, top_k=total)["results"]) for user in sets),
        "mem0 faiss": sum(
            1 for payload in memories["mem0 faiss"].vector_store.docstore.values() if payload.get("user_id") in sets
        ),
    }


def _sections(
    client: MemoryClient,
    sets: dict[str, MemorySet],
    memories: dict[str, Any],
    texts: list[str],
    items: int,
    questions: list[str],
    embedder: Embedder,
    settings: Settings,
) -> dict[str, Any]:
    """(0) to (6) of the module's docstring, in order; the ceiling is measured before the loads and again after
    them (the best of both: the machine is shared), while the worker waits and mem0 is not called."""
    sample = texts[: min(items, CEILING_SAMPLE)]
    rates = [embed_rates(embedder, sample, settings)]
    mem0, threaded = memories["mem0"], memories["mem0 threads"]
    adders: dict[str, Callable[[int], object]] = {
        "memory-core": lambda n: sets[_user(n)].add([texts[n]], wait=True),
        "mem0": lambda n: threaded.add(texts[n], user_id=_user(n), infer=False),
    }
    block = min(BLOCK, max(20, items // 40))
    first, half = max(1, items // 10), len(questions) // 2
    loads: list[tuple[int, range, dict[str, Loaded]]] = []
    found, fills, health = [], [], []
    for threads, span, asked in (
        (THREADS[0], range(first), questions[:half]),
        (THREADS[1], range(first, items), questions[half:]),
    ):
        loads.append((threads, span, _load(span, threads, adders, block)))
        health.append(_health(threaded, sorted(sets)))
        fills.append(_fill(mem0, texts, span) + _fill(memories["mem0 faiss"], texts, span))
        before = client.stats()
        found.append(_searches(sets, memories, asked, span.stop))
        after = client.stats()
        cache_hits = (after.l1_hits - before.l1_hits, after.l2_hits - before.l2_hits)
        assert cache_hits == (0, 0), f"every memory-core search must miss the caches, hits (L1, L2): {cache_hits}"
    rates.append(embed_rates(embedder, sample, settings))
    singles = items + SINGLES
    return {
        "rates": {threads: max(measured[threads] for measured in rates) for threads in rates[0]},
        "loads": loads,
        "block": block,
        "found": found,
        "fills": fills,
        "health": health,
        "fire": _fire_and_forget(sets, mem0, texts, range(items, singles)),
        "sequential": _one_by_one(client, sets, mem0, texts, range(singles, singles + SINGLES)),
        "faiss adds": _faiss_adds(memories["mem0 faiss"], texts, range(singles + SINGLES, len(texts))),
        "stored": _counts(sets, memories, len(texts)),
    }


def _measure(items: int, searches: int) -> None:
    os.environ["MEM0_TELEMETRY"] = "False"  # read when mem0 is imported
    os.environ["MEM0_DIR"] = str(MEM0_DIR / "home")  # not ~/.mem0
    refused = _refuse_remote_connections()
    load_before = os.getloadavg()
    texts = distinct_turns(items + 2 * SINGLES + FAISS_ADDS)
    questions = _questions(2 * searches)
    if not texts or len(questions) < 2 * searches:
        raise SystemExit(f"too few chat turns or questions in {SHARED_DATA}: the mem0 bench runs on real chat text")
    env = isolated_env("bench-mem0")
    settings = load_settings()
    embedder = open_embedder(settings.embedder)
    shutil.rmtree(MEM0_DIR, ignore_errors=True)
    MEM0_DIR.mkdir(parents=True)
    vectors = _Vectors()
    memories = _mem0_memories(embedder, vectors)
    users = [_user(n) for n in range(USERS)]

    with redis_server(settings.redis.url), worker(env, name="bench-mem0-worker"), MemoryClient(settings) as client:
        clear_prefix(settings.redis.url, settings.redis.key_prefix)  # no embedding or result of an earlier run
        sets = {u: client.long_term(u, "chat").get_or_create_memory_set("turns", capacity=1_000_000) for u in users}
        _warm_up(client, memories)
        results = _sections(client, sets, memories, texts, items, questions, embedder, settings)
    load_after = os.getloadavg()

    failed = {name: len(loaded.failures) for _, _, load in results["loads"] for name, loaded in load.items()}
    assert failed["memory-core"] == 0, f"memory-core's adds must all succeed: {failed}"
    assert results["stored"]["memory-core"] == items + 2 * SINGLES, f"memory-core must store every turn: {results}"
    for found in results["found"]:
        for name in ("memory-core", "memory-core dense"):  # mem0's empty answers are counted in the table
            assert all(found["hits"][name]), f"{name}: some searches at {found['size']} items found nothing"
    assert not refused, f"connections off this machine were attempted: {refused}"
    _print(
        texts=len(texts),
        items=items,
        rates=results["rates"],
        results=results,
        vectors=vectors,
        describe=embedder.fingerprint.describe(),
        loads=(load_before, load_after),
    )


def _p50(values: Sequence[float]) -> float:
    return statistics.median(values)


def _ratio(mem0: Sequence[float], mc: Sequence[float]) -> str:
    """mem0's p50 to memory-core's: how many times faster memory-core's median call is."""
    return f"x{_p50(mem0) / _p50(mc):.2f}"


def _load_rows(threads: int, span: range, load: dict[str, Loaded], ceiling: float) -> list[str]:
    mc, mem0 = load["memory-core"], load["mem0"]
    label = f"{threads} threads, one add per call until stored, turns {span.start + 1}-{span.stop}"
    return [
        (
            f"| {label}: items/s (share of the ceiling) | {mc.rate:.0f} ({mc.rate / ceiling:.2f}) | "
            f"{mem0.rate:.0f} ({mem0.rate / ceiling:.2f}) | | x{mc.rate / mem0.rate:.2f} |"
        ),
        f"| the same, per call, p50 / p95 | {pair(mc.times)} | {pair(mem0.times)} | | {_ratio(mem0.times, mc.times)} |",
        (
            f"| the same, failed calls; calls in flight on average | {len(mc.failures)}; {mc.in_flight:.1f} | "
            f"{len(mem0.failures)}; {mem0.in_flight:.1f} | | |"
        ),
    ]


def _search_rows(found: dict[str, Any]) -> list[str]:
    times, hits, size = found["times"], found["hits"], found["size"]
    faster = min(("mem0", "mem0 faiss"), key=lambda name: _p50(times[name]))
    which = "qdrant" if faster == "mem0" else "FAISS"
    rows = []
    for mc, label in (
        (
            "memory-core",
            f"search at {size} turns, limit {LIMIT}, in one user's memories, p50 / p95 (memory-core: hybrid)",
        ),
        ("memory-core dense", 'the same, memory-core dense-only (`mode="dense"`, cosine as mem0 here)'),
    ):
        rows.append(
            f"| {label} | {pair(times[mc])} | {pair(times['mem0'])} | {pair(times['mem0 faiss'])} | "
            f"{_ratio(times[faster], times[mc])} (against {which}) |"
        )
    empty = {name: hits[name].count(0) for name in SEARCHERS}
    rows.append(
        f"| the same, hits per search, mean (searches with none) | {statistics.mean(hits['memory-core']):.1f} "
        f"({empty['memory-core']}; dense {statistics.mean(hits['memory-core dense']):.1f}, {empty['memory-core dense']}) "
        f"| {statistics.mean(hits['mem0']):.1f} ({empty['mem0']}) | {statistics.mean(hits['mem0 faiss']):.1f} "
        f"({empty['mem0 faiss']} of {len(hits['mem0 faiss'])}) | |"
    )
    return rows


def _goals(ceiling: float, results: dict[str, Any]) -> str:
    """The issue's goals, each with its measure."""
    parts = [
        f"{threads} threads at {load['memory-core'].rate / ceiling:.2f} of the ceiling (goal >= 0.9)"
        for threads, _, load in results["loads"]
    ]
    fire, sequential = results["fire"], results["sequential"]
    parts.append(f"fire-and-forget p50 {_ratio(fire['mem0'], fire['memory-core'])} (goal >= x10)")
    parts.append(
        f"one add at a time p50 at {_p50(sequential['memory-core']) / _p50(sequential['mem0']):.2f} of mem0's, "
        f"without dedup {_p50(sequential[PLAIN]) / _p50(sequential['mem0']):.2f} (goal <= 1.25)"
    )
    for found in results["found"]:
        times = found["times"]
        faster = min(_p50(times["mem0"]), _p50(times["mem0 faiss"]))
        parts.append(
            f"search at {found['size']} turns x{faster / _p50(times['memory-core']):.2f} the faster mem0 store "
            "(goal >= x2.5)"
        )
    return "; ".join(parts)


def _print(
    *,
    texts: int,
    items: int,
    rates: dict[int, float],
    results: dict[str, Any],
    vectors: _Vectors,
    describe: str,
    loads: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> None:
    versions, differing = _versions()
    best = max(rates, key=lambda threads: rates[threads])
    ceiling = rates[best]
    found = results["found"]
    print(
        f"\nmemory-core against mem0, the same embedder object: {texts} distinct chat turns of {SHARED_DATA} over "
        f"{USERS} users ({items} loaded by concurrent callers, in blocks of {results['block']} per side; then "
        f"{SINGLES} fire-and-forget and {SINGLES} one at a time, each side), {len(found[0]['times']['mem0'])} "
        f"questions at each search size, every section interleaved\n"
        f"embedder: {describe}\n{versions}; Python {sys.version.split()[0]}; {os.cpu_count()} cores; "
        f"load average (1, 5, 15 min) {' '.join(f'{x:.2f}' for x in loads[0])} at the start, "
        f"{' '.join(f'{x:.2f}' for x in loads[1])} at the end\n"
        f"this venv's packages at other versions than ops/constraints.txt: {', '.join(differing) or 'none'}\n"
    )
    sample = min(items, CEILING_SAMPLE)
    fire, sequential, faiss_adds = results["fire"], results["sequential"], results["faiss adds"]
    stored = results["stored"]
    rows = [
        "| measure | memory-core | mem0 (qdrant local) | mem0 (FAISS) | memory-core faster by |",
        "|---|---|---|---|---|",
        (
            f"| the ceiling: the embedder alone at its best layout on {sample} of these turns ({best} threads; the best "
            "of before and after the loads), "
            f"items/s | {ceiling:.0f} | | | |"
        ),
    ]
    threads, span, load = results["loads"][0]
    rows += _load_rows(threads, span, load, ceiling)
    rows += _search_rows(found[0])
    threads, span, load = results["loads"][1]
    rows += _load_rows(threads, span, load, ceiling)
    rows += _search_rows(found[1])
    rows += [
        (
            "| fire-and-forget, one turn per call, caller side, p50 / p95 (memory-core `add(wait=False)`; mem0's "
            f"`add` always waits) | {pair(fire['memory-core'])} | {pair(fire['mem0'])} | | "
            f"{_ratio(fire['mem0'], fire['memory-core'])} |"
        ),
        (
            "| one add at a time, until stored, p50 / p95 | "
            f"{pair(sequential['memory-core'])} | {pair(sequential['mem0'])} | | "
            f"{_ratio(sequential['mem0'], sequential['memory-core'])} |"
        ),
        (
            '| the same, memory-core sets without dedup (`dedup="none"`, as mem0\'s `add(infer=False)`; empty at the '
            f"start), p50 / p95 | {pair(sequential[PLAIN])} | {pair(sequential['mem0'])} | | "
            f"{_ratio(sequential['mem0'], sequential[PLAIN])} |"
        ),
        (
            f"| one add to mem0's FAISS store as shipped (its index and docstore files rewritten each time), at {items} "
            f"turns, p50 / p95 | | | {pair(faiss_adds)} | |"
        ),
        (
            f"| memories stored for the users, at the end (of {items} loaded + {2 * SINGLES} single adds) | "
            f"{stored['memory-core']} | {stored['mem0']} | {stored['mem0 faiss']} (loaded, and {FAISS_ADDS} adds as "
            "shipped) | |"
        ),
    ]
    print("\n".join(rows))
    _notes(ceiling, rates, results, vectors)


def _notes(ceiling: float, rates: dict[int, float], results: dict[str, Any], vectors: _Vectors) -> None:
    found = results["found"]
    failures = [
        f"{threads} threads: {len(load['mem0'].failures)} of {len(span)} ({'; '.join(sorted(set(load['mem0'].failures))[:3])})"
        for threads, span, load in results["loads"]
        if load["mem0"].failures
    ]
    overlaps = ", ".join(
        f"at {f['size']} turns {f['overlap']['memory-core dense']:.0%} (memory-core dense-only) and "
        f"{f['overlap']['mem0 faiss']:.0%} (mem0 FAISS)"
        for f in found
    )
    print(
        f"\nGoals of the issue: {_goals(ceiling, results)}.\n"
        f"The ceiling's items/s by embedding threads: {', '.join(f'{t}: {r:.0f}' for t, r in sorted(rates.items()))}. "
        f"mem0's adds from threads: {'; '.join(failures) or 'none failed'}.\n"
        "Both mem0 stores leave out hits scored below 0.1 (mem0's default threshold), so a question may find none "
        "of a user's memories (mem0 qdrant's searches with none). mem0's FAISS store moreover filters by user after "
        f"its search: it takes the top {2 * max(LIMIT * 4, 60)} vectors of all users (mem0 asks for 60, the store "
        "for twice that when filtered) and keeps the user's, so it misses a user's memories that are not among them "
        "(a post-filter over the top k, not a filtered search). Hits of either mem0 store belonging to another user: "
        f"{sum(f['foreign'] for f in found)}. mem0's qdrant-local store written by the threads, after each load: "
        f"{'; '.join(results['health'])} (the search rows use stores filled one call at a time). Of mem0 qdrant's hits, where it found any, the others found: "
        f"{overlaps} (same vectors, same cosine). The qdrant and FAISS stores searched were filled untimed in "
        f"{', '.join(f'{s:.1f} s' for s in results['fills'])}, reusing {vectors.reused} vectors of the qdrant side "
        f"(it embedded {vectors.embedded} turns: those of its adds as shipped, and any the qdrant side did not "
        "embed), and saved once per fill. "
        "memory-core's timed searches all missed its caches (new questions; L1 and L2 hits: 0), so each embedded "
        "its question on the worker; mem0 has no cache. No connection off this machine was attempted."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100, help="unused; the runner passes its own")
    parser.add_argument("--searches", type=int, default=200)
    args = parser.parse_args()
    run(args.items, args.batch, args.searches)


if __name__ == "__main__":
    main()
