"""Where a call's time goes, from the client's call to its return: a search (``ops/bench --profile-search``) and
one add until stored (``ops/bench --profile-add``).

A search: a set of ``items`` is written, then ``searches`` searches of new query texts (each one a miss of the
embedding cache and of the client's result cache) are timed, wall-clock, stage by stage:

- in the client: our work before the message is published (validation, the read cache's version and lookup),
  the publish, and our work after the reply (decoding it, filling the read cache);
- the message's way to the worker (the broker's push and pop, Celery's consumer and its hand-off to a thread);
- in the worker's task: the embedding model, the engine (the set's definition and the query), our Redis
  calls (embedding cache, access log) and the rest of our handling (validation, JSON, metrics, logging);
- the reply: the worker's push, and its way back until the client's blocking pop returns.

An add: ``items`` chat turns (the shared datasets' turns when they are on this machine, template texts
otherwise) are spread over 200 users' sets, then ``searches`` new turns are each added alone to the next user's
set and waited for until stored, as ``ops/bench --mem0``'s "one add at a time" does. The task's stages are its
validation (with the set's definition), the hand-off to a batch thread, and in that thread the model, the engine
(dedup lookup, upsert), our Redis calls (embedding cache, the set's lock, size hint and version) and the rest,
then the task thread's wake-up and the rest of the task. The same turns also go, call by call, to the default
sets and to sets without dedup through a worker process: what the dedup check costs an add.

The worker's stages are read in one process: the worker runs in a thread of this one (a real Celery worker,
the threads pool, as ``stack.worker`` runs it, consuming from the same Redis), and each stage is timed by
wrapping the function that does it, never by changing it. It shares this process's GIL with the client, so
the client's stages read a little slower than against a worker process: the same calls are also sent to
one (``stack.worker``, the deployment's shape) and timed from the client's side. Each side also times a
trivial task (``memory.get_set``): the queue's floor. ``PYTHONPATH=<an earlier tree>`` profiles that tree (both
workers run it), to compare with.

    ops/bench --profile-search [--items 2000] [--searches 200]
    ops/bench --profile-add [--items 2000] [--searches 200]
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import redis
from benchkit import corpus, distinct_turns, percentile
from celery import Celery, signals
from celery.concurrency.thread import TaskPool
from celery.contrib.testing.worker import TestWorkController
from celery.exceptions import WorkerShutdown
from kombu.asynchronous import get_event_loop, set_event_loop
from stack import ROOT, clear_prefix, isolated_env, worker

import memory_core
from memory_core import MemoryClient, load_settings
from memory_core.core import routing
from memory_core.core.dispatch import Dispatcher
from memory_core.core.messages import SetRequest
from memory_core.core.models import DedupMode, MemorySet
from memory_core.core.settings import Settings
from memory_core.engine.batching import AddBatcher
from memory_core.engine.embedders import cache as embedding_cache
from memory_core.engine.service import MemoryService
from memory_core.engine.stores.edge import EdgeVectorStore
from memory_core.workers import services
from memory_core.workers.app import create_app
from memory_core.workers.base import MemoryTask

NAMESPACE, KEY, SET = "bench", "search", "notes"
PAUSE = 0.005
"""Seconds between two calls: the worker ends the last task (ack, logs) before the next is sent, as between the
calls of one user; with the worker in this process, that work would otherwise hold the GIL in the next call."""

CLIENT_STAGES = (
    ("client total", "total"),
    ("  client: before publish (validation, read cache: version, lookup)", "client_before"),
    ("    of which the read cache's lookup (version, L1, Redis GET)", "cache_lookup"),
    ("  publish until the reply is popped (kombu, broker, the worker's task, reply)", "queue_and_worker"),
    ("    of which the client's publish call (kombu)", "publish"),
    ("  client: after the reply (decode, fill the read cache)", "client_after"),
    ("    of which the read cache's fill (JSON, L1, Redis SET)", "cache_fill"),
)
STAGES = (
    ("client total", "total"),
    ("  client: before publish (validation, read cache: version, lookup)", "client_before"),
    ("    of which the read cache's lookup (version, L1, Redis GET)", "cache_lookup"),
    ("  publish -> worker task start (kombu, the broker, Celery's consumer, pool hand-off)", "to_worker"),
    ("    of which the client's publish call (kombu; it may return after the task started)", "publish"),
    ("  worker: embedding model", "embed"),
    ("  worker: engine (set definition + query)", "engine"),
    ("  worker: our Redis calls (embedding cache, access log)", "redis"),
    ("  worker: rest of the task (our validation, JSON, metrics; Celery's call)", "worker_rest"),
    ("  reply: the worker's push (JSON, RPUSH + EXPIRE) until the client's BLPOP returns", "reply"),
    ("  client: after the reply (decode, fill the read cache)", "client_after"),
    ("    of which the read cache's fill (JSON, L1, Redis SET)", "cache_fill"),
)


class _Clock:
    """Per-thread stage timers: time spent in a wrapped call is added to its stage, nested calls to theirs."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.marks: dict[str, float] = {}  # one search at a time: the events of the current one
        self.spent: dict[str, float] = {}

    def wrap(self, stage: str, call: Callable[..., Any]) -> Callable[..., Any]:
        """``call``, its time added to ``<role>.<stage>`` when this thread plays a worker's role (``task``: the
        pool thread running the task; ``batch``: a batch thread of the add batcher)."""
        local, spent = self.local, self.spent

        def timed(*args: Any, **kwargs: Any) -> Any:
            role = getattr(local, "role", None)
            if role is None or getattr(local, "stage", None) is not None:
                return call(*args, **kwargs)  # the client's, or inside another stage: that stage's time
            local.stage = stage
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                local.stage = None
                key = f"{role}.{stage}"
                spent[key] = spent.get(key, 0.0) + elapsed

        return timed

    def marking(self, call: Callable[..., Any], *, after: str) -> Callable[..., Any]:
        """``call``, marking ``after`` when it returns."""

        def marked(*args: Any, **kwargs: Any) -> Any:
            try:
                return call(*args, **kwargs)
            finally:
                self.mark(after)

        return marked

    def playing(self, role: str, call: Callable[..., Any], *, start: str, end: str) -> Callable[..., Any]:
        """``call``, run in a worker's ``role`` (its stages counted), marking ``start`` and ``end``."""
        local = self.local

        def in_role(*args: Any, **kwargs: Any) -> Any:
            local.role = role
            self.mark(start)
            try:
                return call(*args, **kwargs)
            finally:
                self.mark(end)
                local.role = None

        return in_role

    def mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()


ENGINE_CALLS = ("search", "get_set", "upsert", "retrieve", "find_by_text_hash", "set_fields", "count", "item_vectors")
"""The engine's calls a search or an add makes (the set's definition, the query, dedup lookups, the upsert)."""


@contextlib.contextmanager
def _patched(clock: _Clock) -> Iterator[None]:
    """Wraps, in this process only, the calls each worker stage is made of."""
    targets: list[tuple[Any, str, str]] = [
        (embedding_cache, "embed_timed", "embed"),
        *((EdgeVectorStore, name, "engine") for name in ENGINE_CALLS),
        (MemoryService, "prepare_add", "prepare"),
        (redis.Redis, "execute_command", "redis"),
        (redis.client.Pipeline, "execute", "redis"),
    ]
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in targets]
    for owner, name, stage in targets:
        setattr(owner, name, clock.wrap(stage, getattr(owner, name)))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


class _OwnAppThreads(TaskPool):
    """Celery's thread pool whose threads run their tasks as this pool's app's (as the test suite's worker)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from concurrent.futures import ThreadPoolExecutor

        self.executor = ThreadPoolExecutor(max_workers=self.limit, initializer=self.app.set_current)


@contextlib.contextmanager
def _in_thread_worker(app: Celery, concurrency: int) -> Iterator[None]:
    """A real Celery worker (threads pool, every queue) in a thread of this process."""
    app.finalize()
    previous = get_event_loop()
    set_event_loop(None)
    try:
        controller = TestWorkController(
            app=app,
            concurrency=concurrency,
            hostname="search-profile@localhost",
            pool=_OwnAppThreads,
            loglevel="WARNING",
            ready_callback=None,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
        )
        thread = threading.Thread(target=controller.start, name="search-profile-worker", daemon=True)
        thread.start()
        controller.ensure_started()
    finally:
        set_event_loop(previous)
    try:
        yield
    finally:

        def shutdown() -> None:
            raise WorkerShutdown(0)

        controller.hub.call_soon(shutdown)
        thread.join(30)
        services.close(app)


def _texts(count: int, seed: int) -> list[str]:
    return [f"what about {text}? ({seed})" for text in corpus(count, seed=seed)]


def _fill(client: MemoryClient, items: int) -> None:
    ltm = client.long_term(NAMESPACE, KEY)
    notes = ltm.get_or_create_memory_set(SET, capacity=1_000_000)
    texts = corpus(items, seed=5)
    receipts = [ltm.submit(notes, texts[i : i + 200]) for i in range(0, len(texts), 200)]
    for receipt in receipts:
        receipt.wait(timeout=600)


def _staged(client: MemoryClient, queries: list[str]) -> list[dict[str, float]]:
    """Each search's stages, in ms (the worker runs in this process, see ``_in_thread_worker``)."""
    clock = _Clock()

    searched: list[dict[str, float]] = []
    ltm = client.long_term(NAMESPACE, KEY)
    with _task_marks(clock), _patched(clock), _client_marks(client, clock):
        for query in queries:
            time.sleep(PAUSE)
            clock.marks.clear()
            clock.spent.clear()
            started = time.perf_counter()
            ltm.search(SET, query, limit=10)
            ended = time.perf_counter()
            m, s = clock.marks, dict(clock.spent)
            task = m["reply_start"] - m["task_start"]
            worker_parts = s.get("task.embed", 0.0) + s.get("task.engine", 0.0) + s.get("task.redis", 0.0)
            stages = {
                **_client_stages(m, started, ended),
                "to_worker": m["task_start"] - m["publish_start"],
                "embed": s.get("task.embed", 0.0),
                "engine": s.get("task.engine", 0.0),
                "redis": s.get("task.redis", 0.0),
                "worker_rest": task - worker_parts,
                "reply": m["wait_end"] - m["reply_start"],
            }
            searched.append({k: v * 1000 for k, v in stages.items()})
    return searched


@contextlib.contextmanager
def _task_marks(clock: _Clock) -> Iterator[None]:
    """Marks when a task starts (its thread then plays the ``task`` role) and when it begins its reply."""

    def prerun(**_: Any) -> None:
        clock.local.role = "task"
        clock.mark("task_start")

    def reply(task: MemoryTask, *args: Any, **kwargs: Any) -> None:
        clock.mark("reply_start")
        clock.local.role = None
        original_reply(task, *args, **kwargs)

    original_reply = MemoryTask._reply
    signals.task_prerun.connect(prerun, weak=False)
    MemoryTask._reply = reply  # type: ignore[method-assign]
    try:
        yield
    finally:
        MemoryTask._reply = original_reply  # type: ignore[method-assign]
        signals.task_prerun.disconnect(prerun)


@contextlib.contextmanager
def _batch_marks(clock: _Clock) -> Iterator[None]:
    """Marks an add's way through the batcher: its validation's end, the batch thread's start and end (the thread
    then plays the ``batch`` role), and the task thread's return from the batcher."""
    saved = {
        (MemoryService, "prepare_add"): MemoryService.__dict__["prepare_add"],
        (AddBatcher, "_process"): AddBatcher.__dict__["_process"],
        (AddBatcher, "add"): AddBatcher.__dict__["add"],
    }
    MemoryService.prepare_add = clock.marking(MemoryService.prepare_add, after="prepared")  # type: ignore[method-assign]
    AddBatcher._process = clock.playing("batch", AddBatcher._process, start="batch_start", end="batch_end")  # type: ignore[method-assign]
    AddBatcher.add = clock.marking(AddBatcher.add, after="added")  # type: ignore[method-assign]
    try:
        yield
    finally:
        for (owner, name), original in saved.items():
            setattr(owner, name, original)


def _staged_adds(client: MemoryClient, sets: list[MemorySet], turns: list[str]) -> list[dict[str, float]]:
    """Each add's stages, in ms (the worker runs in this process, see ``_in_thread_worker``)."""
    clock = _Clock()
    added: list[dict[str, float]] = []
    with _task_marks(clock), _patched(clock), _batch_marks(clock), _client_marks(client, clock):
        for n, turn in enumerate(turns):
            time.sleep(PAUSE)
            clock.marks.clear()
            clock.spent.clear()
            started = time.perf_counter()
            sets[n % len(sets)].add([turn], wait=True)
            ended = time.perf_counter()
            m, s = clock.marks, dict(clock.spent)
            batch = m["batch_end"] - m["batch_start"]
            batch_parts = s.get("batch.embed", 0.0) + s.get("batch.engine", 0.0) + s.get("batch.redis", 0.0)
            task = m["reply_start"] - m["task_start"]
            in_batcher = m["added"] - m["prepared"]
            stages = {
                **_client_stages(m, started, ended),
                "to_worker": m["task_start"] - m["publish_start"],
                "prepare": s.get("task.prepare", 0.0),
                "handoff": m["batch_start"] - m["prepared"],
                "embed": s.get("batch.embed", 0.0),
                "engine": s.get("batch.engine", 0.0),
                "redis": s.get("batch.redis", 0.0),
                "batch_rest": batch - batch_parts,
                "wake": m["added"] - m["batch_end"],
                "task_redis": s.get("task.redis", 0.0),
                "worker_rest": task - s.get("task.prepare", 0.0) - in_batcher - s.get("task.redis", 0.0),
                "reply": m["wait_end"] - m["reply_start"],
            }
            stages["not_model"] = stages["total"] - stages["embed"]
            added.append({k: v * 1000 for k, v in stages.items()})
    return added


def _client_stages(m: dict[str, float], started: float, ended: float) -> dict[str, float]:
    stages = {
        "total": ended - started,
        "client_before": m["publish_start"] - started,
        "publish": m["publish_end"] - m["publish_start"],
        "queue_and_worker": m["wait_end"] - m["publish_start"],
        "client_after": ended - m["wait_end"],
    }
    if "lookup_start" in m:  # a search, through the read cache
        stages["cache_lookup"] = m["lookup_end"] - m["lookup_start"]
        stages["cache_fill"] = m["fill_end"] - m["fill_start"]
    return stages


@contextlib.contextmanager
def _client_marks(client: MemoryClient, clock: _Clock) -> Iterator[None]:
    """Marks, on ``clock``, when the client's publish, reply wait, read cache lookup and fill begin and end."""
    dispatcher, reads = client.dispatcher, client.reads
    assert reads is not None, "the profile measures the default client, with its read cache"

    def marked(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            clock.mark(f"{name}_start")
            try:
                return call(*args, **kwargs)
            finally:
                clock.mark(f"{name}_end")

        return timed

    dispatcher.send = marked("publish", dispatcher.send)  # type: ignore[method-assign]
    dispatcher.wait = marked("wait", dispatcher.wait)  # type: ignore[method-assign]
    reads.search = marked("lookup", reads.search)  # type: ignore[method-assign]
    reads.store_search = marked("fill", reads.store_search)  # type: ignore[method-assign]
    try:
        yield
    finally:
        del dispatcher.send, dispatcher.wait, reads.search, reads.store_search


def _client_side(client: MemoryClient, calls: Iterable[Callable[[], object]]) -> list[dict[str, float]]:
    """Each call's client-side stages, in ms, whatever runs the worker."""
    clock = _Clock()
    timed = []
    with _client_marks(client, clock):
        for call in calls:
            time.sleep(PAUSE)
            clock.marks.clear()
            started = time.perf_counter()
            call()
            ended = time.perf_counter()
            timed.append({k: v * 1000 for k, v in _client_stages(clock.marks, started, ended).items()})
    return timed


def _search_calls(client: MemoryClient, queries: list[str]) -> list[Callable[[], object]]:
    ltm = client.long_term(NAMESPACE, KEY)
    return [functools.partial(ltm.search, SET, query, limit=10) for query in queries]


def _add_calls(sets: list[MemorySet], turns: list[str]) -> list[Callable[[], object]]:
    """One turn per call, until stored, each to the next user's set (as ``ops/bench --mem0``'s one add at a time)."""
    return [functools.partial(sets[n % len(sets)].add, [turn], wait=True) for n, turn in enumerate(turns)]


def _round_trips(dispatcher: Dispatcher, count: int) -> list[float]:
    """A trivial task's round trip (``memory.get_set``: one small engine read), ms."""
    request = SetRequest(namespace=NAMESPACE, key=KEY, set_name=SET)
    times = []
    for _ in range(count):
        time.sleep(PAUSE)
        started = time.perf_counter()
        dispatcher.call(routing.GET_SET, request, "{}")
        times.append((time.perf_counter() - started) * 1000)
    return times


def _searches(client: MemoryClient, queries: list[str]) -> list[float]:
    ltm = client.long_term(NAMESPACE, KEY)
    times = []
    for query in queries:
        time.sleep(PAUSE)
        started = time.perf_counter()
        ltm.search(SET, query, limit=10)
        times.append((time.perf_counter() - started) * 1000)
    return times


def _print_stages(searched: list[dict[str, float]], stages: tuple[tuple[str, str], ...], floor: list[float]) -> None:
    total = sum(s["total"] for s in searched)
    print("| stage | p50 ms | p95 ms | share of the total |")
    print("|---|---|---|---|")
    for name, key in stages:
        values = [s[key] for s in searched]
        share = sum(values) / total
        print(f"| {name} | {statistics.median(values):.2f} | {percentile(values, 0.95):.2f} | {share:.1%} |")
    print(
        f"| trivial task round trip (memory.get_set), the queue's floor | {statistics.median(floor):.2f} | "
        f"{percentile(floor, 0.95):.2f} | |"
    )


Side = tuple[list[dict[str, float]], tuple[tuple[str, str], ...], list[float]]
"""The calls' stages, the stages to print, and the trivial task's round trips, as one side measured them."""


def _print_sides(in_thread: Side, in_process: Side) -> None:
    print(
        "\nthe worker in this process (a thread: every stage is seen; it shares this process's GIL with the client):\n"
    )
    _print_stages(*in_thread)
    print("\nthe worker in its own process (stack.worker, the deployment's shape; what the client sees):\n")
    _print_stages(*in_process)


def _profile_in_thread(settings: Settings, searches: int) -> tuple[list[dict[str, float]], list[float]]:
    app = create_app(settings)
    with _in_thread_worker(app, settings.celery.concurrency), MemoryClient(settings) as client:
        _searches(client, _texts(20, seed=1))  # warm-up: the model's first runs, connections
        searched = _staged(client, _texts(searches, seed=2))
        floor = _round_trips(client.dispatcher, searches)
    return searched, floor


def run(items: int = 2_000, searches: int = 200) -> None:
    os.environ.setdefault("MEMORY_METRICS__PORT", "0")  # two workers on one host (and others'): free ports
    env = isolated_env("search-profile")
    settings = load_settings()
    clear_prefix(settings.redis.url, settings.redis.key_prefix)
    # The worker process runs the memory_core this process imported (an earlier build, to compare with, when it
    # comes first on PYTHONPATH).
    imported = Path(memory_core.__file__).resolve().parent.parent
    package = None if imported == ROOT else imported
    with worker(env, name="search-profile-worker", package=package) as _, MemoryClient(settings) as client:
        _fill(client, items)
        _searches(client, _texts(20, seed=3))  # warm-up
        process_floor = _round_trips(client.dispatcher, searches)
        process_side = _client_side(client, _search_calls(client, _texts(searches, seed=4)))
    # The worker process has stopped (and released the store); the same store is served from a thread here.
    searched, floor = _profile_in_thread(settings, searches)
    print(f"\nsearch stages, {items} items, {searches} searches of new query texts each (cache misses)")
    _print_sides((searched, STAGES, floor), (process_side, CLIENT_STAGES, process_floor))


ADD_STAGES = (
    ("client total", "total"),
    ("  everything but the model (the client, the queue, the worker's handling, the store)", "not_model"),
    ("  client: before publish (validation, the set's definition, the worker check, group commit)", "client_before"),
    ("  publish -> worker task start (kombu, the broker, Celery's consumer, pool hand-off)", "to_worker"),
    ("    of which the client's publish call (kombu; it may return after the task started)", "publish"),
    ("  worker task: validation and the set's definition (prepare_add)", "prepare"),
    ("  worker: hand-off to a batch thread", "handoff"),
    ("  batch thread: embedding model", "embed"),
    ("  batch thread: engine (dedup lookup, upsert)", "engine"),
    ("  batch thread: our Redis calls (embedding cache, the set's lock, size hint, version)", "redis"),
    ("  batch thread: the rest (our Python: dedup, records, capacity check, metrics)", "batch_rest"),
    ("  worker: the task thread wakes", "wake"),
    ("  worker task: our Redis calls outside the batch", "task_redis"),
    ("  worker task: the rest (Celery's call, our validation of the reply, JSON, metrics, logging)", "worker_rest"),
    ("  reply: the worker's push (JSON, RPUSH + EXPIRE) until the client's BLPOP returns", "reply"),
    ("  client: after the reply (decode)", "client_after"),
)
ADD_CLIENT_STAGES = (
    ("client total", "total"),
    ("  client: before publish (validation, the set's definition, the worker check, group commit)", "client_before"),
    ("  publish until the reply is popped (kombu, broker, the worker's task, reply)", "queue_and_worker"),
    ("    of which the client's publish call (kombu)", "publish"),
    ("  client: after the reply (decode)", "client_after"),
)
USERS = 200
"""Users, a set each, the adds go round (as ``ops/bench --mem0``'s 200 users)."""


def _user_sets(client: MemoryClient, dedup: DedupMode | None = None) -> list[MemorySet]:
    """A set per user: the default (``exact`` dedup for text), or with ``dedup`` (users of their own)."""
    suffix = "" if dedup is None else f"-{dedup}"
    return [
        client.long_term(f"user-{n}{suffix}", "chat").get_or_create_memory_set(
            "turns", capacity=1_000_000, **({} if dedup is None else {"dedup": dedup})
        )
        for n in range(USERS)
    ]


def _fill_users(sets: list[MemorySet], turns: list[str]) -> None:
    """``turns`` spread over the users' sets, a call per user, 4 at a time."""
    shares = [turns[n :: len(sets)] for n in range(len(sets))]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda pair: pair[0].add(pair[1], wait=True), zip(sets, shares, strict=True)))


def _add_turns(count: int) -> list[str]:
    """Distinct chat turns of the shared datasets, or template texts when they are not on this machine."""
    return distinct_turns(count) or corpus(count, seed=11)


def run_adds(items: int = 2_000, adds: int = 200) -> None:
    """One add at a time until stored, stage by stage, after ``items`` turns over 200 users' sets."""
    os.environ.setdefault("MEMORY_METRICS__PORT", "0")
    env = isolated_env("add-profile")
    settings = load_settings()
    clear_prefix(settings.redis.url, settings.redis.key_prefix)
    turns = _add_turns(items + 40 + 2 * adds)
    fill, warm, rest = turns[:items], turns[items : items + 40], turns[items + 40 :]
    process_turns, thread_turns = rest[:adds], rest[adds:]
    imported = Path(memory_core.__file__).resolve().parent.parent
    package = None if imported == ROOT else imported
    with worker(env, name="add-profile-worker", package=package) as _, MemoryClient(settings) as client:
        sets, plain = _user_sets(client), _user_sets(client, "none")
        _fill_users(sets, fill)
        _fill_users(plain, fill)  # the same turns in both: the embedding cache is per namespace
        for call in _add_calls(sets, warm[:20]):  # warm-up: the model's first runs, connections
            call()
        process_floor = _round_trips(client.dispatcher, adds)
        # The default sets and sets without dedup, call by call (what the dedup check and its lock cost).
        both = [
            call
            for pair in zip(_add_calls(sets, process_turns), _add_calls(plain, process_turns), strict=True)
            for call in pair
        ]
        timed = _client_side(client, both)
        process_side, plain_side = timed[0::2], timed[1::2]
    app = create_app(settings)
    with _in_thread_worker(app, settings.celery.concurrency), MemoryClient(settings) as client:
        sets = _user_sets(client)
        for call in _add_calls(sets, warm[20:]):
            call()
        added = _staged_adds(client, sets, thread_turns)
        floor = _round_trips(client.dispatcher, adds)
    print(f"\nadd stages: {adds} adds of one chat turn each, until stored, over {USERS} users' sets of {items} turns")
    _print_sides((added, ADD_STAGES, floor), (process_side, ADD_CLIENT_STAGES, process_floor))
    print("\nthe same turns, interleaved call by call with the above, to sets without dedup (dedup='none'):\n")
    _print_stages(plain_side, ADD_CLIENT_STAGES, process_floor)
    saved = [a["total"] - b["total"] for a, b in zip(process_side, plain_side, strict=True)]
    print(
        f"\nwhat dedup costs an add, the same turn's two calls apart: p50 {statistics.median(saved):.2f} ms "
        f"(p5 {percentile(saved, 0.05):.2f}, p95 {percentile(saved, 0.95):.2f})"
    )


if __name__ == "__main__":
    import sys

    run(*(int(a) for a in sys.argv[1:3]))
