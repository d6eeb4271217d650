"""``memory-core reindex`` end to end: a real worker re-embeds its store for another embedder while adds and
deletes go on, the new collection ends equal to the old, and a worker restarted with the new setting switches."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from memory_core import ChatMessage, MemoryClient
from memory_core.client.admin import Admin
from memory_core.core.coordination import Coordinator
from memory_core.core.errors import InvalidRequestError
from memory_core.core.keys import Keys
from memory_core.core.models import Scope
from memory_core.core.settings import QdrantSettings, Settings
from memory_core.engine.embedders.hashing import hashing_fingerprint
from memory_core.engine.embedders.minilm import minilm_fingerprint
from memory_core.engine.reindex import PARTS
from memory_core.engine.stores import collection_name
from memory_core.testing.fake_openai import VALID_KEY, FakeOpenAI
from tests.local_models import FASTEMBED_MINILM, lay_out_minilm
from tests.reindexing import both_collections, follow

from .processes import CELERY, CLI, ROOT, PrivateRedis, celery_process
from .waiting import queued_tasks, wait_for

pytestmark = pytest.mark.slow

URL = ""  # each test's own Redis database (no worker of the session consumes it), set by _fresh_db


def _env(path: Path, **extra: str) -> dict[str, str]:
    return {
        "MEMORY_REDIS__URL": URL,
        "MEMORY_QDRANT__PATH": str(path),
        "MEMORY_REINDEX__BATCH_SIZE": "64",
        "MEMORY_REINDEX__REFRESH": "0.5",
        "MEMORY_CELERY__CONCURRENCY": "2",
        **extra,
    }


def _settings() -> Settings:
    return Settings(_env_file=None, redis={"url": URL}, client={"timeout": 60})


@pytest.fixture(autouse=True)
def _fresh_db(private_redis: PrivateRedis) -> None:
    global URL
    URL = private_redis.database_url()


def test_minilm_to_hashing_while_writing_then_switch_and_drop_old(tmp_path: Path):
    path = tmp_path / "store"
    with ExitStack() as stack:
        stack.enter_context(celery_process("worker", _env(path), tmp_path / "worker-minilm.log"))
        client = stack.enter_context(MemoryClient(_settings()))
        notes = client.long_term("alpha", "u1").get_or_create_memory_set("notes", capacity=100_000, dedup="none")
        chat = client.long_term("beta", "u2").get_or_create_memory_set(
            "chat", item_type=ChatMessage, capacity=100_000, dedup="none"
        )
        notes.add(
            [f"note {i} about the {('garden', 'harbour', 'market')[i % 3]}" for i in range(300)],
            ids=[f"n{i}" for i in range(300)],
            metadatas=[{"i": i} for i in range(300)],
        )
        chat.add(
            [ChatMessage(role="user", content=f"message {i}") for i in range(40)], ids=[f"m{i}" for i in range(40)]
        )
        notes.delete([f"n{i}" for i in range(0, 300, 10)])
        admin = Admin(client)
        assert admin.reindex("status").state == "none"

        started = admin.reindex("start", to="hashing", dimensions=256)  # another dimension than MiniLM's 384
        assert started.state == "building"
        assert started.target_spec == "hashing"
        assert started.target == hashing_fingerprint(256).describe()
        # A second start to the same target follows the same reindex; another target is refused.
        assert admin.reindex("start", to="hashing", dimensions=256).collection == started.collection
        with pytest.raises(InvalidRequestError, match="abort"):
            admin.reindex("start", to="all-MiniLM-L6-v2")

        writing = threading.Thread(
            target=lambda: [
                (notes.add([f"late note {i}"], ids=[f"late{i}"]), notes.delete([f"n{i * 7 + 1}"])) for i in range(30)
            ]
        )
        writing.start()
        writing.join()
        done = follow(admin)
        assert done.state == "complete", done
        assert done.parts_done == done.parts == 16
        assert done.total >= 340
        source, target = done.source_collection, done.collection
        assert source == collection_name(QdrantSettings(path=path), "all-MiniLM-L6-v2")
        # Searches are still answered from the MiniLM collection until the restart.
        assert notes.search("garden", limit=3)

    old, new = both_collections(path, "all-MiniLM-L6-v2", target)
    assert old == new  # same ids, values, metadata, seq, tombstones
    assert "late29" in {p.get("item_id") for p in new.values()}
    assert any(p.get("tombstone") for p in new.values())

    # A worker restarted with the old setting serves on; one with the new setting switches the store.
    with ExitStack() as stack:
        stack.enter_context(
            celery_process(
                "worker",
                _env(path, MEMORY_EMBEDDER__MODEL="hashing", MEMORY_EMBEDDER__DIMENSIONS="256"),
                tmp_path / "worker-hashing.log",
            )
        )
        client = stack.enter_context(MemoryClient(_settings()))
        admin = Admin(client)
        status = admin.reindex("status")
        assert status.state == "switched"
        notes = client.long_term("alpha", "u1").get_memory_set("notes")
        found = notes.get(["n1", "n2", "late3"])
        assert [item.id for item in found] == ["n2", "late3"]  # n1 was deleted during the reindex
        assert notes.search("note 5 about the market", limit=5)
        notes.add(["written after the switch"], ids=["after"])
        assert admin.reindex("drop_old").source_dropped
        assert not (path / source).exists()

    # The MiniLM setting is now refused, naming the store's new embedder.
    refused = subprocess.run(
        [CELERY, "-A", "memory_core.workers.app", "worker", "-l", "WARNING"],
        check=False,
        cwd=ROOT,
        env={**_env(path), "PATH": __import__("os").environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert refused.returncode == 1
    assert hashing_fingerprint(256).describe() in refused.stderr
    assert minilm_fingerprint().describe() in refused.stderr


def _cli(*args: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "reindex", *args],
        check=False,
        cwd=ROOT,
        env={**os.environ, "MEMORY_REDIS__URL": URL, "MEMORY_QDRANT__PATH": str(path)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_cli_re_embeds_minilm_for_the_same_model_through_fastembed_and_the_switch_keeps_answers(tmp_path: Path):
    """Same dimension, another fingerprint: a fastembed model directory laid out from the shipped MiniLM."""
    path, model_dir = tmp_path / "store", lay_out_minilm(tmp_path / "minilm")
    target = f"fastembed:{FASTEMBED_MINILM}"
    with ExitStack() as stack:
        stack.enter_context(celery_process("worker", _env(path), tmp_path / "worker-minilm.log"))
        client = stack.enter_context(MemoryClient(_settings()))
        facts = client.long_term("alpha", "u1").get_or_create_memory_set("facts", capacity=100_000, dedup="none")
        facts.add(
            ["the cat sleeps on the sofa", "we sail to Corsica in June", "the boiler needs a new valve"],
            ids=["cat", "sail", "boiler"],
        )
        before = [item.id for item in facts.search("where do we go on holiday by boat", limit=3)]

        done = _cli("--to", target, "--path", str(model_dir), path=path)
        assert done.returncode == 0, done.stderr
        assert "reindex complete" in done.stdout
        # Every setting the restart needs, not only the model (the documented restart ran with it alone).
        assert f"restart every worker with MEMORY_EMBEDDER__MODEL={target} MEMORY_EMBEDDER__PATH={model_dir}" in (
            " ".join(done.stdout.split())
        )
        assert "re-embedded (2 passes)" in done.stderr  # the progress line (no terminal here)
        status = json.loads(_cli("--status", "--json", path=path).stdout)
        assert status["state"] == "complete"
        assert status["collection"] != status["source_collection"]

    env = _env(path, MEMORY_EMBEDDER__MODEL=target, MEMORY_EMBEDDER__PATH=str(model_dir))
    with ExitStack() as stack:
        stack.enter_context(celery_process("worker", env, tmp_path / "worker-fastembed.log"))
        client = stack.enter_context(MemoryClient(_settings()))
        facts = client.long_term("alpha", "u1").get_memory_set("facts")
        # The same model through another runtime: the same answers, now from the new collection.
        assert [item.id for item in facts.search("where do we go on holiday by boat", limit=3)] == before
        assert Admin(client).reindex("status").state == "switched"
        refused = _cli("--drop-old", path=path)
        assert refused.returncode != 0
        assert "--yes" in refused.stderr
        assert _cli("--drop-old", "--yes", path=path).returncode == 0


def test_an_aborted_reindex_drops_its_collection_and_the_store_serves_on(tmp_path: Path):
    path = tmp_path / "store"
    with ExitStack() as stack:
        stack.enter_context(
            celery_process("worker", _env(path, MEMORY_REINDEX__BATCH_SIZE="1"), tmp_path / "worker.log")
        )
        client = stack.enter_context(MemoryClient(_settings()))
        notes = client.long_term("alpha", "u1").get_or_create_memory_set("notes", capacity=100_000, dedup="none")
        notes.add([f"note {i}" for i in range(200)], ids=[f"n{i}" for i in range(200)])
        admin = Admin(client)
        started = admin.reindex("start", to="hashing")
        with pytest.raises(InvalidRequestError, match="drop"):
            admin.reindex("drop_old")  # nothing switched yet
        aborted = admin.reindex("abort")
        assert aborted.state == "aborted"
        assert not (path / started.collection).exists()
        notes.add(["after the abort"], ids=["after"])
        assert len(notes.get()) == 201
        with pytest.raises(InvalidRequestError, match="no reindex to abort"):
            admin.reindex("abort")
        with pytest.raises(InvalidRequestError, match="nothing to reindex"):
            admin.reindex("start", to="all-MiniLM-L6-v2")
        with pytest.raises(InvalidRequestError, match="to"):
            admin.reindex("start", to="bert")
    # The aborted target is no setting to start with: the worker refuses, naming the store's embedder.
    refused = subprocess.run(
        [CELERY, "-A", "memory_core.workers.app", "worker", "-l", "WARNING"],
        check=False,
        cwd=ROOT,
        env={**os.environ, **_env(path, MEMORY_EMBEDDER__MODEL="hashing")},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert refused.returncode == 1
    assert "MEMORY_EMBEDDER__MODEL back to 'all-MiniLM-L6-v2'" in refused.stderr


def test_the_targets_outage_fails_no_write_piles_up_nothing_and_the_switch_clears_cached_searches(tmp_path: Path):
    """The live path never waits on the target; its outage is said and waited out with a bounded number of
    messages; the restart needs every setting the "next:" line prints; the switch makes old-model search
    results unreachable."""
    path = tmp_path / "store"
    raw = redis.Redis.from_url(URL)
    settings = _settings()
    keys = Keys(settings.redis.key_prefix)
    scope = Scope("alpha", "u1", "notes")
    source_env = _env(path, MEMORY_EMBEDDER__API_KEY=VALID_KEY, MEMORY_REINDEX__LOCK_TTL="5")
    with FakeOpenAI() as fake:
        with ExitStack() as stack:
            stack.enter_context(celery_process("worker", source_env, tmp_path / "worker-minilm.log"))
            client = stack.enter_context(MemoryClient(settings))
            notes = client.long_term(*scope[:2]).get_or_create_memory_set("notes", capacity=100_000, dedup="none")
            notes.add([f"note {i} about the harbour" for i in range(100)], ids=[f"n{i}" for i in range(100)])
            assert notes.search("harbour", limit=3)  # cached under the set's version
            version = Coordinator(raw, keys).version(scope)

            fake.behave("http_500")
            admin = Admin(client)
            admin.reindex("start", to="openai:fake-model", base_url=fake.url, dimensions=8)
            wait_for(lambda: bool(admin.reindex("status").target_error), 120)
            status = admin.reindex("status")
            assert "500" in status.target_error or "unavailable" in status.target_error.lower()
            # Adds succeed while the target is down (stored at once, never dead-lettered) and owe it a copy.
            notes.add([f"written while the target is down {i}" for i in range(30)], ids=[f"d{i}" for i in range(30)])
            assert len(notes.get([f"d{i}" for i in range(30)])) == 30
            assert admin.reindex("status").owed >= 30
            for _ in range(20):  # following in the foreground re-kicks stalled parts: never more than one each
                time.sleep(0.5)
                assert admin.reindex("status").state == "building"
                held = queued_tasks(raw, settings) + int(raw.hlen(f"{settings.broker_key_prefix}unacked"))
                assert held <= 3 * (PARTS + 1)
            described = _cli("--status", path=path).stdout
            assert "target unreachable:" in described
            assert "retrying" in described

            fake.behave("ok")
            done = follow(admin)
            assert (done.state, done.owed, done.target_error) == ("complete", 0, "")
            assert done.last_success_at is not None

        restart = ["MEMORY_EMBEDDER__MODEL=openai:fake-model", f"MEMORY_EMBEDDER__BASE_URL={fake.url}"]
        assert done.restart == [*restart, "MEMORY_EMBEDDER__DIMENSIONS=8"]
        target_env = _env(path, MEMORY_EMBEDDER__API_KEY=VALID_KEY)
        target_env.update(line.partition("=")[::2] for line in done.restart)
        with ExitStack() as stack:
            stack.enter_context(celery_process("worker", target_env, tmp_path / "worker-target.log"))
            client = stack.enter_context(MemoryClient(settings))
            assert Admin(client).reindex("status").state == "switched"
            assert Coordinator(raw, keys).version(scope) > version  # no search cached under the old model
            notes = client.long_term(*scope[:2]).get_memory_set("notes")
            assert len(notes.get()) == 130
            assert notes.search("harbour", limit=3)
    raw.close()
