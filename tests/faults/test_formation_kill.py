"""SIGKILL a formation worker at each point of an operation: the redelivered message ends with the facts of one run.

Each test forms a first operation in a fresh scope ("Ana's city is Lisbon", "I like green tea"), then sends a
second one that the fake model's rules answer with one decision of each kind against it: ``update`` (Porto
supersedes Lisbon), ``same`` (tea again: confirmed, one more source) and ``add`` (a cat). The worker forming the
second one is SIGKILLed at one point; a second worker, started after the kill, gets the message back when the
broker's visibility timeout (8 s here) lapses, and once the dead worker's scope lock has expired
(``MEMORY_FORMATION__LOCK_TTL`` 5 s here) it finishes the operation. In every case the set then holds exactly
four facts (Lisbon superseded once, by Porto; tea confirmed once; the cat), and the operation is ``done``.

How each point is reached:

* (a) reply stored, no fact written: the worker embeds its new facts (through the fake OpenAI embeddings
  server) after it stored the model's reply and before it writes anything to the store. The fake holds the
  first embeddings request that arrives after the model answered the second operation, and the worker is killed
  while it waits there. The model must then have been called once for that operation, however often it is
  delivered: the redelivery applies the stored reply.
* (b) new facts written, no supersession, confirmation or "done" yet: nothing leaves the worker's process
  between the store write of the new facts and the supersession (the embedded store is a library, and the next
  Redis command comes after the supersession), so no fake server can hold it there. The worker of this test
  imports this module (``--include``), which, only when ``FORMATION_KILL_PAUSE_FILE`` is set, wraps the
  applier's write of new facts: after the write, in an operation that has a fact to supersede, it writes that
  file and sleeps; the test kills the worker once the file is there. The second worker runs without it. The
  model is called once for the operation; the new facts are not written twice, and the supersession and the
  confirmation are applied once.
* (a) again, with an erasure between the kill and the redelivery: ``forget_sources`` of the cat's message, served
  by a worker of the write queue alone (so it runs before the formation comes back), must keep the stored
  decisions from writing that fact when the operation is replayed, and keep its text out of the record.
* (c) the model call in flight: the fake Messages API holds the second operation's request, and the worker is
  killed while it waits for the answer. Nothing was stored, so the redelivery asks the model again (twice in
  all) and forms the facts once.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from memory_core import MemoryClient
from memory_core.core.messages import FormationRecord, FormationReport
from memory_core.core.settings import Settings
from memory_core.testing.fake_anthropic import FakeAnthropic
from memory_core.testing.fake_openai import VALID_KEY, FakeOpenAI
from tests.integration.processes import celery_process
from tests.integration.waiting import wait_for

THIS_MODULE = "tests.faults.test_formation_kill"
PAUSE_ENV = "FORMATION_KILL_PAUSE_FILE"
VISIBILITY_TIMEOUT = 8
NAMESPACE, KEY = "faults", "ana"

FIRST = [
    {"role": "user", "content": "Ana's city is Lisbon", "id": "m1"},
    {"role": "user", "content": "I like green tea", "id": "m2"},
]
PORTO = "Ana's city is Porto"
SECOND = [
    {"role": "user", "content": PORTO, "id": "m3"},
    {"role": "assistant", "content": "Porto is lovely in spring", "id": "m4"},
    {"role": "user", "content": "I like green tea", "id": "m5"},
    {"role": "user", "content": "I have a cat", "id": "m6"},
]


# -- the test-only pause of point (b), installed in a worker that imports this module with PAUSE_ENV set ------


def _pause_after_new_facts(reached: Path) -> None:
    from memory_core.engine.formation.applier import Applier

    write_new = Applier._write_new

    def write_then_pause(self: Applier, scope: Any, definition: Any, plan: Any, origin: Any) -> set[str]:
        written = write_new(self, scope, definition, plan, origin)
        if any(planned.target is not None for planned in plan):  # the operation with a fact to supersede
            reached.write_text(origin.op_id)
            time.sleep(3600)  # the test's SIGKILL comes first
        return written

    Applier._write_new = write_then_pause  # type: ignore[method-assign]  # this test's worker only


if os.environ.get(PAUSE_ENV):
    _pause_after_new_facts(Path(os.environ[PAUSE_ENV]))


# -- fakes that hold one request until released ---------------------------------------------------------------


@dataclass
class HeldEmbeddings(FakeOpenAI):
    """The fake embeddings server; while ``hold_when()`` is true, a request waits until ``released`` is set."""

    hold_when: Callable[[], bool] = lambda: False
    held: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def respond(self, body: dict[str, Any], key: str) -> Any:
        if not self.released.is_set() and self.hold_when():
            self.held.set()
            self.released.wait(60)
        return super().respond(body, key)


@dataclass
class HeldMessages(FakeAnthropic):
    """The fake Messages API; while ``holding``, a formation request waits until ``released`` is set."""

    holding: bool = False
    held: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def answer(self, path: str, body: Any, key: str) -> Any:
        if self.holding and _is_formation(body) and not self.released.is_set():
            self.held.set()
            self.released.wait(60)
        return super().answer(path, body, key)


def _is_formation(body: Any) -> bool:
    return isinstance(body, dict) and body.get("tool_choice", {}).get("name") == "record_memories"


def model_calls(fake: FakeAnthropic, content: str) -> int:
    """Formation requests to the fake whose prompt quotes ``content``."""
    return sum(1 for body in list(fake.requests) if _is_formation(body) and content in _prompt(body))


def _prompt(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in body.get("messages", []) if isinstance(m, dict))


# -- the scenario ---------------------------------------------------------------------------------------------


@dataclass
class Stage:
    """The fakes, the worker environment and the client of one test."""

    tmp_path: Path
    redis_url: str
    messages: HeldMessages
    embeddings: HeldEmbeddings
    client: MemoryClient
    stack: ExitStack
    workers: int = 0

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "MEMORY_REDIS__URL": self.redis_url,
            "MEMORY_QDRANT__PATH": str(self.tmp_path / "qdrant"),
            "MEMORY_CELERY__VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
            "MEMORY_CELERY__RETRY_BACKOFF_MAX": "2",
            "MEMORY_ANTHROPIC__API_KEY": "sk-ant-test-not-real",
            "MEMORY_ANTHROPIC__BASE_URL": self.messages.url,
            "MEMORY_ANTHROPIC__MAX_RETRIES": "0",
            "MEMORY_EMBEDDER__MODEL": "openai:text-embedding-3-small",
            "MEMORY_EMBEDDER__BASE_URL": self.embeddings.url,
            "MEMORY_EMBEDDER__API_KEY": VALID_KEY,
            "MEMORY_FORMATION__LOCK_TTL": "5",  # the killed worker's scope lock frees itself within 5 s
            "MEMORY_FORMATION__BUSY_RETRY": "0.5",
            "MEMORY_METRICS__ENABLED": "false",
            **extra,
        }

    def worker(self, *extra: str, **env: str) -> Any:
        log = self.tmp_path / f"worker-{self.workers}.log"
        self.workers += 1
        return self.stack.enter_context(celery_process("worker", self.env(**env), log, *extra))

    def record(self, op_id: str) -> FormationRecord | None:
        raw = redis.Redis.from_url(self.redis_url).get(self.client.keys.formation_operation(NAMESPACE, KEY, op_id))
        return None if raw is None else FormationRecord.model_validate_json(raw)

    def done(self, op_id: str) -> bool:
        record = self.record(op_id)
        return record is not None and record.report.status == "done"


@pytest.fixture
def stage(fault_redis_url: str, tmp_path: Path) -> Iterator[Stage]:
    settings = Settings(
        _env_file=None,
        redis={"url": fault_redis_url},
        celery={"visibility_timeout": VISIBILITY_TIMEOUT, "retry_backoff_max": 2},
        client={"timeout": 60},
    )
    with ExitStack() as stack:
        messages = stack.enter_context(HeldMessages())
        embeddings = stack.enter_context(HeldEmbeddings())
        client = stack.enter_context(MemoryClient(settings))
        yield Stage(tmp_path, fault_redis_url, messages, embeddings, client, stack)
        messages.released.set()  # no server thread stays held past the test
        embeddings.released.set()


def _first_formed(stage: Stage, *extra: str, **env: str) -> Any:
    """A worker (process) that has formed the first operation."""
    worker = stage.worker(*extra, **env)
    first = stage.client.long_term(NAMESPACE, KEY).remember(FIRST, wait=True)
    assert first.status == "done"
    assert [d.decision for d in first.decisions] == ["add", "add"]
    return worker


def _kill(worker: Any) -> None:
    worker.send_signal(signal.SIGKILL)
    worker.wait()


def _finished_by_a_second_worker(stage: Stage, op_id: str) -> FormationReport:
    """Starts the second worker; returns the operation's report once it is done (after the redelivery)."""
    stage.worker()
    wait_for(lambda: stage.done(op_id), timeout=90, interval=0.2)
    log = (stage.tmp_path / f"worker-{stage.workers - 1}.log").read_text(errors="replace")
    assert re.search(r"Task memory\.form\[[0-9a-f-]+\] received", log), "the second worker formed nothing"
    record = stage.record(op_id)
    assert record is not None
    return record.report


def _assert_one_run(stage: Stage, report: FormationReport) -> None:
    """The facts of exactly one run of the second operation, its supersession and confirmation applied once."""
    assert [d.decision for d in report.decisions] == ["update", "same", "add"]
    items = stage.client.long_term(NAMESPACE, KEY).get("facts")
    by_text: dict[str, list[Any]] = {}
    for item in items:
        by_text.setdefault(str(item.value), []).append(item)
    assert sorted((text, len(found)) for text, found in by_text.items()) == [
        ("Ana's city is Lisbon", 1),
        ("Ana's city is Porto", 1),
        ("I have a cat", 1),
        ("I like green tea", 1),
    ], "a fact is missing or stored twice"
    (lisbon,), (porto,) = by_text["Ana's city is Lisbon"], by_text["Ana's city is Porto"]
    (tea,), (cat,) = by_text["I like green tea"], by_text["I have a cat"]
    assert lisbon.fact is not None
    assert porto.fact is not None
    assert tea.fact is not None
    assert cat.fact is not None
    assert [e.decision for e in lisbon.fact.events] == ["add", "superseded"]
    assert not lisbon.fact.live
    assert lisbon.fact.superseded_by == porto.id
    assert porto.fact.live
    assert porto.fact.supersedes == lisbon.id
    assert porto.fact.sources == ["m3"]
    assert [e.decision for e in tea.fact.events] == ["add", "same"]
    assert tea.fact.live
    assert tea.fact.sources == ["m2", "m5"]
    assert cat.fact.live
    assert cat.fact.sources == ["m6"]
    assert {porto.id, tea.id, cat.id} == set(report.facts)
    assert all(item.fact is not None and item.fact.op_id == report.op_id for item in (porto, cat))


@pytest.mark.timeout(240)
def test_a_worker_killed_after_the_reply_is_stored_replays_it_without_asking_the_model_again(stage: Stage):
    worker = _first_formed(stage)
    # From here on, an embeddings request that comes after the model answered the second operation is the
    # applier's, embedding the new facts before it writes them: the fake holds it.
    stage.embeddings.hold_when = lambda: model_calls(stage.messages, PORTO) > 0
    receipt = stage.client.long_term(NAMESPACE, KEY).remember(SECOND)
    assert stage.embeddings.held.wait(60), "the worker never embedded the new facts"
    _kill(worker)
    stage.embeddings.released.set()
    at_kill = stage.record(receipt.op_id)
    assert at_kill is not None
    stored = (at_kill.report.status, at_kill.reply is not None)
    assert stored == ("running", True), "the model's reply was not stored before the facts were written"
    report = _finished_by_a_second_worker(stage, receipt.op_id)
    calls = model_calls(stage.messages, PORTO)
    assert calls == 1, f"the model was asked {calls} times for the operation"
    _assert_one_run(stage, report)


@pytest.mark.timeout(240)
def test_a_worker_killed_after_the_new_facts_are_written_supersedes_once_and_writes_nothing_twice(stage: Stage):
    reached = stage.tmp_path / "new-facts-written"
    worker = _first_formed(stage, "--include", THIS_MODULE, **{PAUSE_ENV: str(reached)})
    receipt = stage.client.long_term(NAMESPACE, KEY).remember(SECOND)
    wait_for(reached.exists, timeout=60, interval=0.05)
    _kill(worker)
    assert reached.read_text() == receipt.op_id
    at_kill = stage.record(receipt.op_id)
    assert at_kill is not None
    assert at_kill.report.status == "running"
    report = _finished_by_a_second_worker(stage, receipt.op_id)
    calls = model_calls(stage.messages, PORTO)
    assert calls == 1, f"the model was asked {calls} times for the operation"
    _assert_one_run(stage, report)


@pytest.mark.timeout(240)
def test_a_worker_killed_while_the_model_answers_forms_again_once(stage: Stage):
    worker = _first_formed(stage)
    stage.messages.holding = True
    receipt = stage.client.long_term(NAMESPACE, KEY).remember(SECOND)
    assert stage.messages.held.wait(60), "the model was never asked"
    _kill(worker)
    at_kill = stage.record(receipt.op_id)
    assert at_kill is not None
    assert at_kill.reply is None
    stage.messages.released.set()
    report = _finished_by_a_second_worker(stage, receipt.op_id)
    calls = model_calls(stage.messages, PORTO)
    assert calls == 2, f"the model was asked {calls} times; expected the lost call and the redelivery's"
    _assert_one_run(stage, report)


@pytest.mark.timeout(240)
def test_messages_forgotten_between_the_kill_and_the_redelivery_are_not_formed_by_the_replay(stage: Stage):
    worker = _first_formed(stage)
    stage.embeddings.hold_when = lambda: model_calls(stage.messages, PORTO) > 0
    receipt = stage.client.long_term(NAMESPACE, KEY).remember(SECOND)
    assert stage.embeddings.held.wait(60), "the worker never embedded the new facts"
    _kill(worker)
    stage.embeddings.released.set()
    writer = stage.worker("-Q", "memory.write")  # erases; takes no formation
    forgotten = stage.client.long_term(NAMESPACE, KEY).forget_sources(["m6"])
    assert (forgotten.removed, forgotten.updated) == (0, 0)  # the cat is not written yet
    writer.terminate()
    writer.wait()
    report = _finished_by_a_second_worker(stage, receipt.op_id)
    assert [d.decision for d in report.decisions] == ["update", "same"]
    items = stage.client.long_term(NAMESPACE, KEY).get("facts")
    assert sorted(str(item.value) for item in items) == [
        "Ana's city is Lisbon",
        "Ana's city is Porto",
        "I like green tea",
    ], "a fact of a forgotten message was formed"
    assert all("m6" not in (item.fact.sources if item.fact else []) for item in items)
    raw = redis.Redis.from_url(stage.redis_url).get(
        stage.client.keys.formation_operation(NAMESPACE, KEY, receipt.op_id)
    )
    assert raw is not None
    assert b"I have a cat" not in raw
    assert b"m6" not in raw
