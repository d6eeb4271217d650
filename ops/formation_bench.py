"""What memory formation costs, and what it does to adds and searches while it runs (``ops/bench --formation``).

One worker (every queue, the default settings) forms with the real anthropic SDK against the fake Messages API
on loopback (``memory_core.testing.fake_anthropic``): each answer takes 0.5-2 s, a model's think time, and comes
from its rule-based "model" (each user turn becomes a fact; ``same``, ``update`` or ``contradict`` where a known
fact says so). So what is measured is the path around the model: the queue, the namespace's and the scope's
limits, the snapshot of similar facts, the writes; a real model's latency and token counts differ.

``SESSIONS`` sessions (one key each, in one namespace, as one app's users) save exchanges (a user turn and the
reply: consecutive turns of the chat datasets in ``../shared/data``, else template sentences) with
``remember(wait=False)``, each session one exchange every ``THINK`` seconds. In one run, ``ROUNDS`` times in
turn: a phase with formation idle (nothing queued or running) and a busy one (the sessions saving their share,
until it is formed), while another thread times one-item adds (``wait=True``) and searches (limit 10, query texts
never asked before: cache misses) back to back, in a set of their own. Printed:

  * formation lag: from the exchange saved (the receipt's ``created_at``) to its operation done (its facts
    visible), p50 / p95 (``updated_at`` of the operation's report: no polling interval in it);
  * model calls and tokens per 100 exchanges: the calls the fake received, the tokens of ``client.usage`` (as the
    fake counts them: a quarter of the messages' characters plus 200, the system prompt left out), and the size
    of the requests sent;
  * add and search p50 / p95 with formation idle and busy, and busy / idle: the goal is within 10%.

    ops/bench --formation [EXCHANGES]    # 300 exchanges by default: three to four minutes
"""

from __future__ import annotations

import functools
import json
import os
import random
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

from benchkit import SHARED_DATA, corpus, pair, percentile
from eval import formation_message
from stack import clear_prefix, isolated_env, redis_server, worker

from memory_core import LongTermMemory, MemoryClient, MemorySet, load_settings
from memory_core.core.messages import FormationReport
from memory_core.testing.fake_anthropic import FakeAnthropic

SESSIONS = 50
ROUNDS = 3
"""Idle and busy phases, in turn: drift (caches, the store's growth) weighs on both alike."""
IDLE_SECONDS = 20.0
"""How long each idle phase is timed."""
LATENCY = (0.5, 2.0)
"""Seconds the fake model takes per answer."""
THINK = (10.0, 30.0)
"""Seconds between one session's exchanges (the user reads the reply and types): 50 sessions offer about 2.5
exchanges a second, below what one namespace forms at once (``MEMORY_FORMATION__MAX_IN_FLIGHT`` calls of about
1.25 s)."""
NAMESPACE = "formation"
PROBE = ("probe", "k")
"""Where the timed adds and searches go: a namespace of their own, so formation's usage counts only formation."""
PROBE_ITEMS = 1_000
FINAL = ("done", "failed", "deferred")
Exchange = list[dict[str, Any]]


def run(exchanges: int) -> None:
    """Saves about ``exchanges`` exchanges from ``SESSIONS`` sessions over ``ROUNDS`` busy phases; prints the table."""
    per_round = max(1, round(exchanges / (SESSIONS * ROUNDS)))
    sessions, source = _sessions(per_round * ROUNDS)
    with FakeAnthropic(latency=LATENCY) as fake:
        env = isolated_env("bench-form")  # the Redis key prefix is "mc" + this: 16 characters at most
        env.update({"MEMORY_ANTHROPIC__API_KEY": "sk-ant-bench-fake", "MEMORY_ANTHROPIC__BASE_URL": fake.url})
        os.environ.update(env)
        settings = load_settings()
        with redis_server(settings.redis.url), worker(env, name="bench-formation-worker"), MemoryClient(settings) as c:
            clear_prefix(settings.redis.url, settings.redis.key_prefix)
            notes = _probe_set(c)
            c.long_term("warm-up", "k").remember([{"role": "user", "content": "I like green tea"}], wait=True)
            warm_calls = len(_formation_requests(fake))
            timeline = _Timeline()
            probe = _Probe(notes, timeline)
            probe.start()
            reports: list[FormationReport] = []
            try:
                for round_ in range(ROUNDS):
                    timeline.enter("idle")
                    time.sleep(IDLE_SECONDS)
                    timeline.enter("busy")
                    shares = [s[round_ * per_round : (round_ + 1) * per_round] for s in sessions]
                    reports += _busy_phase(c, shares, random.Random(round_))
                timeline.enter("end")
            finally:
                probe.stop()
            usage = c.usage(NAMESPACE)
        requests = _formation_requests(fake)[warm_calls:]
        with fake.lock:
            spans = fake.spans[warm_calls:]  # in the order the answers ended: the warm-up's first
        busy = timeline.windows("busy")
        load = _Load(
            *_in_flight(spans, busy),
            answers=[end - start for _, start, end in spans],
            seconds=sum(end - start for start, end in busy),
        )
    failed = [r for r in reports if r.status != "done"]
    if failed:
        raise SystemExit(f"{len(failed)} formation(s) did not end done, e.g. {failed[0].status}: {failed[0].error}")
    _print(reports, requests, usage.model_dump(), probe.samples, load, source, settings.formation.model_dump())


def _sessions(count: int) -> tuple[list[list[Exchange]], str]:
    """``count`` exchanges for each session: consecutive turns of one conversation of the datasets (a turn, then
    the reply), round robin over the datasets; template sentences for sessions the data cannot fill."""
    files = sorted(SHARED_DATA.glob("*/items.jsonl"))
    long_enough = [[c for c in _conversations(items) if len(c) >= 2 * count] for items in files]
    pool = [c for group in zip_longest(*long_enough) for c in group if c is not None][:SESSIONS]
    sessions: list[list[Exchange]] = []
    for turns in pool:
        messages = [{**formation_message(t), "role": ("user", "assistant")[i % 2]} for i, t in enumerate(turns)]
        sessions.append([messages[2 * i : 2 * i + 2] for i in range(count)])
    texts = corpus((SESSIONS - len(pool)) * count, seed=17)
    for n in range(SESSIONS - len(pool)):
        mine = texts[n * count : (n + 1) * count]
        sessions.append([[{"role": "user", "content": t}, {"role": "assistant", "content": "Noted."}] for t in mine])
    if len(pool) == SESSIONS:
        return sessions, f"turns of {' and '.join(f.parent.name for f in files)}"
    return sessions, f"{len(pool)} sessions of chat turns, {SESSIONS - len(pool)} of template sentences"


def _conversations(items: Path) -> list[list[dict[str, Any]]]:
    """The turns of each conversation of an ``items.jsonl``, in file order."""
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in items.read_text(encoding="utf-8").splitlines():
        if line.strip():
            turn = json.loads(line)
            by_conv[turn["conv_id"]].append(turn)
    return list(by_conv.values())


def _probe_set(client: MemoryClient) -> MemorySet:
    notes = client.long_term(*PROBE).get_or_create_memory_set("notes", capacity=1_000_000)
    texts = corpus(PROBE_ITEMS, seed=3)
    for receipt in [notes.submit(texts[i : i + 100]) for i in range(0, len(texts), 100)]:
        receipt.wait(timeout=600)
    for n in range(10):  # warm-up: the connections, the index
        notes.add([f"warm-up {n}"], wait=True)
        notes.search(f"warm-up query {n}", limit=10)
    return notes


def _busy_phase(client: MemoryClient, shares: list[list[Exchange]], rng: random.Random) -> list[FormationReport]:
    """Every session saves its share (starting at a random moment, then one every ``THINK`` seconds); returns
    the operations' reports once all are done."""
    sent: list[tuple[LongTermMemory, str]] = []
    lock = threading.Lock()

    def session(n: int, share: list[Exchange], start: float, gaps: list[float]) -> None:
        memory = client.long_term(NAMESPACE, f"session-{n}")
        time.sleep(start)
        for exchange, gap in zip(share, gaps, strict=True):
            receipt = memory.remember(exchange, wait=False)
            with lock:
                sent.append((memory, receipt.op_id))
            time.sleep(gap)

    threads = []
    for n, share in enumerate(shares):
        gaps = [rng.uniform(*THINK) for _ in share[:-1]] + [0.0]
        threads.append(threading.Thread(target=session, args=(n, share, rng.uniform(0, THINK[0]), gaps)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [_finished(memory, op_id) for memory, op_id in sent]


def _finished(memory: LongTermMemory, op_id: str, timeout: float = 600.0) -> FormationReport:
    """The operation's report once it ended (most have by the time their turn to be asked comes)."""
    deadline = time.monotonic() + timeout
    while True:
        report = memory.operation(op_id)
        if report.status in FINAL:
            return report
        if time.monotonic() > deadline:
            raise SystemExit(f"formation {op_id} still {report.status} after {timeout:.0f} s")
        time.sleep(0.25)


class _Timeline:
    """The phases, in order, with their monotonic start times."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, float]] = []

    def enter(self, phase: str) -> None:
        self.phases.append((phase, time.monotonic()))

    def epoch(self) -> int:
        return len(self.phases)

    def windows(self, phase: str) -> list[tuple[float, float]]:
        bounds = [*self.phases, ("", time.monotonic())]
        return [(start, bounds[i + 1][1]) for i, (name, start) in enumerate(self.phases) if name == phase]


class _Probe:
    """One-item adds (``wait=True``) and searches (limit 10, new query texts), in turn, back to back, from a
    thread of their own; a call is kept under its phase when no phase began while it ran."""

    def __init__(self, notes: MemorySet, timeline: _Timeline) -> None:
        self.notes = notes
        self.timeline = timeline
        self.samples: dict[tuple[str, str], list[float]] = defaultdict(list)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._queries = [t.rsplit(" (", 1)[0] for t in corpus(500, seed=23)]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def _loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            text = f"{self._queries[n % len(self._queries)]} (probe {n})"
            self._time("add", functools.partial(self.notes.add, [text], wait=True))
            self._time("search", functools.partial(self.notes.search, f"{text}?", limit=10))
            n += 1

    def _time(self, op: str, call: Callable[[], object]) -> None:
        epoch = self.timeline.epoch()
        started = time.perf_counter()
        call()
        elapsed = (time.perf_counter() - started) * 1000
        if epoch and self.timeline.epoch() == epoch:
            self.samples[(self.timeline.phases[epoch - 1][0], op)].append(elapsed)


@dataclass
class _Load:
    """What the model was asked during the busy phases."""

    mean_in_flight: float
    share_in_flight: float
    answers: list[float]
    """Seconds each answer took."""
    seconds: float
    """How long the busy phases lasted, in all."""


def _formation_requests(fake: FakeAnthropic) -> list[dict[str, Any]]:
    with fake.lock:
        return [r for r in fake.requests if r.get("tool_choice", {}).get("name") == "record_memories"]


def _in_flight(spans: list[tuple[str, float, float]], windows: list[tuple[float, float]]) -> tuple[float, float]:
    """Model calls in flight during ``windows``: their mean count, and the share of the time with at least one."""
    total = sum(end - start for start, end in windows)
    covered = busy = 0.0
    for start, end in windows:
        clipped = sorted((max(s, start), min(e, end)) for _, s, e in spans if e > start and s < end)
        covered += sum(e - s for s, e in clipped)
        reach = start
        for s, e in clipped:  # the union of the clipped spans
            busy += max(0.0, e - max(s, reach))
            reach = max(reach, e)
    return covered / total, busy / total


def _print(
    reports: list[FormationReport],
    requests: list[dict[str, Any]],
    usage: dict[str, Any],
    samples: dict[tuple[str, str], list[float]],
    load: _Load,
    source: str,
    formation: dict[str, Any],
) -> None:
    count = len(reports)
    lags = [(r.updated_at - r.created_at).total_seconds() for r in reports]
    per_100 = 100 / count
    tokens = usage["tokens"].get(formation["model"], {"input_tokens": 0, "output_tokens": 0, "calls": 0})
    chars = [len(json.dumps(r.get("system", ""))) + len(json.dumps(r.get("messages", []))) for r in requests]
    decisions: dict[str, int] = defaultdict(int)
    for report in reports:
        for decision in report.decisions:
            decisions[decision.decision] += 1
    print(
        f"\nmemory-core bench --formation: {count} exchanges from {SESSIONS} sessions of one namespace ({source}), "
        f"{ROUNDS} busy phases between idle ones, one worker, {os.cpu_count()} cores\n"
        f"model: the fake Messages API, {LATENCY[0]}-{LATENCY[1]} s an answer, rule-based; each session saves an "
        f"exchange every {THINK[0]:.0f}-{THINK[1]:.0f} s; MEMORY_FORMATION__MAX_IN_FLIGHT={formation['max_in_flight']}, "
        f"__CONCURRENCY={formation['concurrency']}, __BUSY_RETRY={formation['busy_retry']}\n"
    )
    print("| measure | value |")
    print("|---|---|")
    print(f"| formation lag, exchange saved -> its facts visible, p50 / p95 | {_seconds(lags)} |")
    print(f"| formation lag, max | {max(lags):.2f} s |")
    print(f"| of which the model's answer (the fake's think time), p50 / p95 | {_seconds(load.answers)} |")
    print(f"| exchanges saved per second during the busy phases | {count / load.seconds:.2f} |")
    print(
        f"| model calls in flight during the busy phases: mean / share of the time with one or more | "
        f"{load.mean_in_flight:.2f} / {load.share_in_flight:.0%} |"
    )
    print(f"| model calls per 100 exchanges (the fake's count) | {len(requests) * per_100:.1f} |")
    print(
        f"| tokens per 100 exchanges (client.usage: input + output) | {tokens['input_tokens'] * per_100:,.0f} + "
        f"{tokens['output_tokens'] * per_100:,.0f} ({usage['formations']} formations, "
        f"{usage['formation_tokens']:,} tokens in all) |"
    )
    print(
        f"| request size per call: system prompt + messages, characters (about a quarter as many tokens) | "
        f"{statistics.mean(chars):,.0f} |"
    )
    print(
        f"| facts formed per 100 exchanges | {usage['facts_formed'] * per_100:.1f} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(decisions.items()))}) |"
    )
    print("\n| through the queue, one call at a time | formation idle: p50 / p95 (n) | formation busy: p50 / p95 (n) "
          "| busy / idle, p50 | busy / idle, p95 |")  # fmt: skip
    print("|---|---|---|---|---|")
    labels = {"add": "add of one item, wait=True (until durable)", "search": "search, limit 10 (cache miss)"}
    for op, label in labels.items():
        idle, busy = samples[("idle", op)], samples[("busy", op)]
        p50 = statistics.median(busy) / statistics.median(idle)
        p95 = percentile(busy, 0.95) / percentile(idle, 0.95)
        print(
            f"| {label} | {pair(idle)} ({len(idle)}) | {pair(busy)} ({len(busy)}) | x{p50:.2f} "
            f"({'within' if p50 <= 1.10 else 'over'} 10%) | x{p95:.2f} |"
        )


def _seconds(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s / {percentile(values, 0.95):.2f} s"
