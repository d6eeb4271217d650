"""``memory-core formation`` and the formation counters of ``memory-core usage``: real CLI subprocesses against
real workers forming through the fake Messages API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from memory_core import MemoryClient
from memory_core.core.settings import Settings
from memory_core.engine.formation.budget import today
from memory_core.testing.fake_anthropic import FakeAnthropic
from memory_core.workers import services
from memory_core.workers.app import create_app

from .conftest import make_settings
from .in_thread import in_thread_worker
from .test_cli import ok, run
from .waiting import wait_for

LONG = "I have been learning to play the cello for three years with a teacher who lives two streets away from my flat"


def test_status_prints_a_done_operations_decisions_and_usage_its_tokens(
    client: MemoryClient, settings: Settings, namespace: str, tmp_path: Path, fake_anthropic: FakeAnthropic
):
    memory = client.long_term(namespace, "ana")
    receipt = memory.remember(
        [{"role": "user", "content": "I live in Lisbon"}, {"role": "user", "content": LONG}], wait=True
    )
    assert receipt.status == "done"
    done = run(settings, tmp_path, "formation", "status", "--namespace", namespace, "--key", "ana", receipt.op_id)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"operation {receipt.op_id}: done, formed by {settings.formation.model}"
    lisbon, cello = receipt.decisions
    assert f"    add        {lisbon.fact_id}  I live in Lisbon" in lines
    cut = f"    add        {cello.fact_id}  {LONG[:79]}…"
    assert cut in lines
    assert LONG not in done.stdout  # the text is cut to 80 characters; --json has it whole
    assert f"  tokens: {receipt.input_tokens:,} in, {receipt.output_tokens:,} out (1 model calls)" in lines
    report = ok(
        run(
            settings, tmp_path, "formation", "status", "--namespace", namespace, "--key", "ana", receipt.op_id, "--json"
        )
    )
    assert [d["text"] for d in report["decisions"]] == ["I live in Lisbon", LONG]

    usage = client.usage(namespace)
    assert usage.formations == 1
    assert usage.facts_formed == 2
    assert usage.formation_tokens == receipt.input_tokens + receipt.output_tokens > 0
    shown = ok(run(settings, tmp_path, "usage", namespace))
    assert (
        f"{namespace:<20} 1 formations, 2 facts formed, {usage.formation_tokens:,} formation tokens"
        in shown.splitlines()
    )
    assert f"{settings.formation.model}" in shown  # and its tokens per model, as for any model


def test_status_of_an_unknown_operation_fails_naming_it(settings: Settings, namespace: str, tmp_path: Path, worker):
    done = run(settings, tmp_path, "formation", "status", "--namespace", namespace, "--key", "ana", "0" * 32)
    assert done.returncode == 1
    assert "NotFoundError" in done.stderr
    assert repr("0" * 32) in done.stderr


def test_resume_with_nothing_deferred_sends_nothing(settings: Settings, namespace: str, tmp_path: Path, worker):
    done = run(settings, tmp_path, "formation", "resume", "--namespace", namespace)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"sent 0 deferred operations of {namespace}, 0 left"]
    assert ok(run(settings, tmp_path, "formation", "resume", "--namespace", namespace, "--json")) == {
        "sent": 0,
        "left": 0,
        "notes": [],
    }


@pytest.fixture
def budgeted(redis_url: str, tmp_path: Path, fake_anthropic: FakeAnthropic) -> Iterator[MemoryClient]:
    """A worker (queues of its own) whose namespaces may spend 1 formation token a day: one formation spends it."""
    settings = make_settings(
        redis_url,
        tmp_path / "qdrant",
        redis={"url": redis_url, "key_prefix": "mcbudget"},
        embedder={"model": "hashing"},
        anthropic={"api_key": "sk-ant-test-not-real", "base_url": fake_anthropic.url, "max_retries": 0, "timeout": 5},
        formation={"daily_tokens": 1},
    )
    app = create_app(settings)
    with in_thread_worker(app, concurrency=2), MemoryClient(settings) as client:
        yield client
    services.close(app)


@pytest.mark.timeout(120)
def test_a_deferred_operation_is_resumed_and_formed(budgeted: MemoryClient, tmp_path: Path, raw_redis: redis.Redis):
    settings = budgeted.settings
    memory = budgeted.long_term("acme", "ana")
    assert memory.remember([{"role": "user", "content": "I live in Porto"}], wait=True).status == "done"
    deferred = memory.remember([{"role": "user", "content": "I like green tea"}], wait=True)
    assert deferred.status == "deferred"
    shown = run(settings, tmp_path, "formation", "status", "--namespace", "acme", "--key", "ana", deferred.op_id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"operation {deferred.op_id}: deferred\n")
    assert "MEMORY_FORMATION__DAILY_TOKENS" in shown.stdout

    raw_redis.delete(budgeted.keys.formation_tokens("acme", today()))  # a new day: the budget is spent on nothing
    done = run(settings, tmp_path, "formation", "resume", "--namespace", "acme")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["sent 1 deferred operations of acme, 0 left"]
    wait_for(lambda: memory.operation(deferred.op_id).status == "done", timeout=60)
    shown = run(settings, tmp_path, "formation", "status", "--namespace", "acme", "--key", "ana", deferred.op_id)
    assert shown.returncode == 0, shown.stderr
    (decision,) = memory.operation(deferred.op_id).decisions
    assert f"    add        {decision.fact_id}  I like green tea" in shown.stdout.splitlines()


def _worker_settings(redis_url: str, store: Path, anthropic: dict[str, object]) -> Settings:
    return make_settings(
        redis_url,
        store,
        redis={"url": redis_url, "key_prefix": "mcreplay"},  # queues of its own: the session's worker takes none
        embedder={"model": "hashing"},
        anthropic=anthropic,
    )


@pytest.mark.timeout(180)
def test_replay_is_refused_without_a_key_and_forms_the_verbatim_facts_with_one(
    redis_url: str, tmp_path: Path, fake_anthropic: FakeAnthropic
):
    store = tmp_path / "qdrant"
    keyless = _worker_settings(redis_url, store, {"api_key": ""})
    app = create_app(keyless)
    try:
        with in_thread_worker(app, concurrency=2), MemoryClient(keyless) as client:
            memory = client.long_term("acme", "ana")
            kept = memory.remember([{"role": "user", "content": "I live in Porto"}], wait=True)
            assert kept.formed_by == "verbatim"
            refused = run(keyless, tmp_path, "formation", "replay", "--namespace", "acme", "--key", "ana")
            assert refused.returncode == 2, refused.stdout  # the configuration is the operator's to fix
            assert "memory-core formation: formation replay needs a model" in refused.stderr
            assert "MEMORY_ANTHROPIC__API_KEY" in refused.stderr
            assert refused.stdout == ""
    finally:
        services.close(app)

    keyed = _worker_settings(
        redis_url,
        store,
        {"api_key": "sk-ant-test-not-real", "base_url": fake_anthropic.url, "max_retries": 0, "timeout": 5},
    )
    app = create_app(keyed)
    try:
        with in_thread_worker(app, concurrency=2), MemoryClient(keyed) as client:
            done = run(keyed, tmp_path, "formation", "replay", "--namespace", "acme", "--key", "ana", "--set", "facts")
            assert done.returncode == 0, done.stderr
            assert done.stdout.splitlines()[0] == (
                "sent 1 formation operations to form the verbatim facts of acme/ana/facts again"
            )
            memory = client.long_term("acme", "ana")

            def formed_by_the_model() -> bool:
                live = memory.search("facts", "Porto", limit=5)
                return [(str(i.value), i.fact.formed_by if i.fact else None) for i in live] == [
                    ("I live in Porto", keyed.formation.model)
                ]

            wait_for(formed_by_the_model, timeout=60)
            again = ok(run(keyed, tmp_path, "formation", "replay", "--namespace", "acme", "--key", "ana", "--json"))
            assert again == {"sent": 0, "left": 0, "notes": ["no facts kept verbatim in 'facts'"]}
    finally:
        services.close(app)
