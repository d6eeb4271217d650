"""Per-namespace tokens, enforced by a worker that has them (a process of its own, on its own Redis DB)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from memory_core import AuthorizationError, MemoryClient, routing
from memory_core.settings import Settings

from .conftest import REDIS_URL
from .processes import celery_process
from .rawbroker import add_kwargs, publish_raw
from .waiting import wait_for

TOKENS = {"token-of-acme": "acme", "token-of-globex": "globex"}


@pytest.fixture(scope="module")
def auth_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A worker with tokens on its own Redis DB: its Redis URL and its log."""
    url = REDIS_URL.rsplit("/", 1)[0] + "/11"
    redis.Redis.from_url(url).flushdb()
    env = {
        "MEMORY_REDIS__URL": url,
        "MEMORY_QDRANT__PATH": str(tmp_path_factory.mktemp("auth-qdrant")),
        "MEMORY_AUTH__TOKENS": json.dumps(TOKENS),
    }
    log = tmp_path_factory.mktemp("auth") / "worker.log"
    with celery_process("worker", env, log):
        yield url, log
    redis.Redis.from_url(url).flushdb()


@pytest.fixture(scope="module")
def auth_url(auth_worker: tuple[str, Path]) -> str:
    return auth_worker[0]


def _client(url: str, token: str | None, *, knows_tokens: bool) -> MemoryClient:
    auth = {"tokens": json.dumps(TOKENS)} if knows_tokens else {}
    client = {"timeout": 30, "token": token}
    return MemoryClient(Settings(_env_file=None, redis={"url": url}, auth=auth, client=client))


@pytest.mark.slow
def test_a_token_reaches_its_namespace_only_and_the_worker_checks_it(auth_url: str):
    with _client(auth_url, "token-of-acme", knows_tokens=True) as acme:
        notes = acme.long_term("acme", "u").get_or_create_memory_set("notes")
        notes.add(["acme's own memory"])
        assert [i.value for i in notes.get()] == ["acme's own memory"]
        with pytest.raises(AuthorizationError, match="'globex'"):
            acme.long_term("globex", "u")  # refused in the client, which knows the map
        with pytest.raises(AuthorizationError):
            acme.forget("globex")

    # A client that does not know the map (or lies about it) is stopped by the worker.
    with _client(auth_url, "token-of-acme", knows_tokens=False) as sneaky:
        with pytest.raises(AuthorizationError, match="'globex'"):
            sneaky.long_term("globex", "u").get_or_create_memory_set("notes")
        with pytest.raises(AuthorizationError):
            sneaky.long_term("globex", "u").search("notes", "anything", limit=1)
    # The refused write was dead-lettered, but the token (a header, not an argument) is not kept with it.
    letters = redis.Redis.from_url(auth_url).lrange("mc:globex:deadletters", 0, -1)
    assert letters
    assert all(b"token-of-acme" not in letter for letter in letters)


@pytest.mark.slow
def test_a_wrong_token_is_refused_without_revealing_whether_the_namespace_exists(auth_url: str):
    with _client(auth_url, "token-of-globex", knows_tokens=True) as globex:
        globex.long_term("globex", "u").get_or_create_memory_set("notes").add(["globex data"])
    messages = []
    for token in ("made-up-token", None):
        with _client(auth_url, token, knows_tokens=False) as stranger:
            for namespace in ("globex", "does-not-exist"):
                with pytest.raises(AuthorizationError) as refused:
                    stranger.long_term(namespace, "u").get_memory_set("notes")
                messages.append(str(refused.value).replace(namespace, "<ns>"))
    assert len(set(messages)) == 1, messages  # the same answer for existing and missing namespaces


def _victim_request(task: str) -> dict[str, Any]:
    """A well-formed request of ``task`` aimed at globex: for the writes, one that would change its data."""
    if task == routing.ADD:
        planted: dict[str, Any] = add_kwargs("globex", "planted", "planted by a stranger")["request"]
        return planted
    if task == routing.DELETE:
        return {"v": 1, "namespace": "globex", "key": "u", "set_name": "notes", "ids": None}
    if task == routing.FORGET:
        return {"v": 1, "namespace": "globex"}
    return {"v": 1, "namespace": "globex", "key": "u", "set_name": "notes"}


def _placements(request: dict[str, Any], takes_request: bool) -> dict[str, tuple[list[Any] | None, dict[str, Any]]]:
    """Every way a message can carry the request but as the one ``request`` keyword: (args, kwargs)."""
    placements: dict[str, tuple[list[Any] | None, dict[str, Any]]] = {
        "positional": ([request], {}),
        "both": ([request], {"request": request}),
        "nested": (None, {"wrapper": {"request": request}}),
        "nested positionally": ([{"request": request}], {}),
        "extra keyword": (None, {"request": request, "namespace": "acme"}),
        "not an object": (None, {"request": [request]}),
    }
    if takes_request:
        placements["missing"] = (None, {})
    return placements


def _outcome(log: Path, task_id: str) -> str | None:
    """The error a task failed with, ``succeeded``, or None while the worker has not finished it."""
    text = log.read_text(errors="replace")
    found = re.search(rf"task \S+ {task_id} failed: (\w+)", text)
    if found:
        return found.group(1)
    return "succeeded" if re.search(rf"\[{task_id}\] succeeded", text) else None


@pytest.mark.slow
def test_no_placement_of_a_request_and_no_token_but_the_right_one_acts_on_a_namespace(
    auth_worker: tuple[str, Path],
):
    url, log = auth_worker
    with _client(url, "token-of-globex", knows_tokens=True) as globex:
        notes = globex.long_term("globex", "u").get_or_create_memory_set("notes")
        notes.add(["globex keeps this"], ids=["kept"])
        before = [(i.id, i.value) for i in notes.get()]
    settings = Settings(_env_file=None, redis={"url": url})
    expected: dict[str, str] = {}  # task id -> the error it must fail with
    for task in routing.ROUTES:
        request = _victim_request(task)
        takes_request = task not in MAINTENANCE_SWEEPS
        for token in (None, "token-of-acme", "token-of-globex"):
            for args, kwargs in _placements(request, takes_request).values():
                sent = publish_raw(settings, task, kwargs, args=args, token=token)
                expected[sent] = "InvalidRequestError"
            if takes_request and task not in routing.OPS_REPLIES and token != "token-of-globex":
                expected[publish_raw(settings, task, {"request": request}, token=token)] = "AuthorizationError"
    wait_for(lambda: all(_outcome(log, task_id) for task_id in expected), timeout=50)
    assert {task_id: _outcome(log, task_id) for task_id in expected} == expected
    with _client(url, "token-of-globex", knows_tokens=True) as globex:
        notes = globex.long_term("globex", "u").get_memory_set("notes")
        assert [(i.id, i.value) for i in notes.get()] == before


MAINTENANCE_SWEEPS = frozenset(
    {routing.TTL_SWEEP, routing.FLUSH_ACCESS, routing.EVICT, routing.OPTIMIZE, routing.COMPACTION_SWEEP}
)
