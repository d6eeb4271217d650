"""Per-namespace tokens, enforced by a worker that has them (a process of its own, on a Redis of its own)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection
from pydantic import BaseModel

from memory_core import AuthorizationError, MemoryClient, MemorySet
from memory_core.client.admin import Admin
from memory_core.core import routing
from memory_core.core.auth import refusal
from memory_core.core.dispatch import celery_message
from memory_core.core.messages import (
    AddRequest,
    BackupRequest,
    BrowseRequest,
    CompactRequest,
    CreateSetRequest,
    DeleteRequest,
    DeleteSetRequest,
    EntitiesRequest,
    ErrorInfo,
    ExplainRequest,
    ExportedItem,
    ExportRequest,
    FoldRequest,
    ForgetRequest,
    ForgetSourcesRequest,
    FormationReplayRequest,
    FormationResumeRequest,
    FormMessage,
    HistoryRequest,
    IdsRequest,
    ImportRequest,
    ListSetsRequest,
    NewItem,
    OperationRequest,
    RecallRequest,
    ReindexBatch,
    ReindexRequest,
    RememberRequest,
    Reply,
    SearchRequest,
    SetRequest,
)
from memory_core.core.models import FORMATION_PROMPT_VERSION, MemorySetItem, MessageRole, utcnow
from memory_core.core.settings import Settings

from .processes import celery_process, free_port, start_redis, stop
from .rawbroker import add_kwargs, publish_raw
from .waiting import wait_for

TOKENS = {"token-of-acme": "acme", "token-of-globex": "globex"}


@pytest.fixture(scope="module")
def auth_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A worker with tokens on a throwaway redis-server of its own: its Redis URL and its log.

    Its own server, not a DB of the test Redis: that one's other DBs belong to other test runs.
    """
    logs = tmp_path_factory.mktemp("auth")
    port = free_port()
    server = start_redis(port, logs / "redis.log")
    url = f"redis://127.0.0.1:{port}/0"
    env = {
        "MEMORY_REDIS__URL": url,
        "MEMORY_QDRANT__PATH": str(tmp_path_factory.mktemp("auth-qdrant")),
        "MEMORY_AUTH__TOKENS": json.dumps(TOKENS),
    }
    try:
        with celery_process("worker", env, logs / "worker.log"):
            yield url, logs / "worker.log"
    finally:
        stop(server)


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
    # The refused write is kept for inspection, but not with globex's letters, whose replay (under the
    # replaying operator's token) would run it; and the token (a header, not an argument) is not kept with it.
    broker = redis.Redis.from_url(auth_url)
    assert not broker.exists("mc:globex:deadletters")
    letters = [json.loads(letter) for letter in broker.lrange("mc:!ops:deadletters-unroutable", 0, -1)]
    assert [letter["error"]["type"] for letter in letters if letter["task"] == routing.CREATE_SET] == [
        "AuthorizationError"
    ]
    assert all("token-of-acme" not in json.dumps(letter) for letter in letters)


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


VICTIM = "globex"
SWEEPS = frozenset(
    {
        routing.TTL_SWEEP,
        routing.FLUSH_ACCESS,
        routing.EVICT,
        routing.OPTIMIZE,
        routing.COMPACTION_SWEEP,
        routing.FORMATION_RESUME_DUE,
    }
)
"""The tasks that take no request (maintenance run over every namespace)."""


def _victim_requests() -> dict[str, dict[str, Any]]:
    """Per task that takes one, a well-formed request aimed at the victim: writes that would change its data
    (plant an item or a set, delete, erase, compact), reads that would return it."""
    now = utcnow()
    base: dict[str, Any] = {"namespace": VICTIM, "key": "u"}
    notes: dict[str, Any] = {**base, "set_name": "notes"}
    planted = MemorySetItem(
        memory_set_name="notes", id="planted", value="planted by a stranger", created_time=now, last_accessed_time=now
    )
    requests: dict[str, BaseModel] = {
        routing.ADD: AddRequest(
            **notes, items=[NewItem(id="planted", value="planted by a stranger", created_time=now, seq=time.time_ns())]
        ),
        routing.DELETE: DeleteRequest(**notes),
        routing.CREATE_SET: CreateSetRequest(**base, definition=MemorySet(name="planted")),
        routing.DELETE_SET: DeleteSetRequest(**notes),
        routing.FORGET: ForgetRequest(namespace=VICTIM),
        routing.GET: IdsRequest(**notes),
        routing.SEARCH: SearchRequest(**notes, query="keeps", limit=5),
        routing.BROWSE: BrowseRequest(**notes),
        routing.EXPLAIN: ExplainRequest(**notes, query="keeps", limit=5),
        routing.SIZE: SetRequest(**notes),
        routing.GET_SET: SetRequest(**notes),
        routing.RECALL: RecallRequest(**base, query="keeps", limit=5),
        routing.LIST_SETS: ListSetsRequest(namespace=VICTIM),
        routing.EXPORT: ExportRequest(**notes),
        routing.IMPORT: ImportRequest(**notes, items=[ExportedItem(item=planted)]),
        routing.BACKUP: BackupRequest(label="planted"),
        routing.REINDEX: ReindexRequest(action="status"),
        routing.REINDEX_BATCH: ReindexBatch(part=0),
        routing.COMPACT: CompactRequest(**notes, force=True),
        routing.SESSION_FOLD: FoldRequest(**base, session_id="s", max_tokens=0),
        routing.SESSION_ENTITIES: EntitiesRequest(**base, session_id="s", first="0-0", last="0-0"),
        routing.FORM: RememberRequest(
            **notes,
            op_id="0" * 32,
            messages=[FormMessage(id="m1", role=MessageRole.USER, content="planted by a stranger")],
            model="claude-haiku-4-5",
            prompt_version=FORMATION_PROMPT_VERSION,
            seq=time.time_ns(),
            received_at=now,
        ),
        routing.OPERATION: OperationRequest(**base, op_id="0" * 32),
        routing.FACT_HISTORY: HistoryRequest(**notes, fact_id="planted"),
        routing.FORGET_SOURCES: ForgetSourcesRequest(**notes, source_ids=["m1"], seq=time.time_ns()),
        routing.FORMATION_RESUME: FormationResumeRequest(namespace=VICTIM),
        routing.FORMATION_REPLAY: FormationReplayRequest(**notes),
    }
    return {task: request.model_dump(mode="json") for task, request in requests.items()}


def _placements(request: Any, takes_request: bool) -> dict[str, tuple[list[Any] | None, dict[str, Any]]]:
    """Every way a message can carry the request but as the one ``request`` keyword: (args, kwargs)."""
    placements: dict[str, tuple[list[Any] | None, dict[str, Any]]] = {
        "positional": ([request], {}),
        "both": ([request], {"request": request}),
        "nested": (None, {"wrapper": {"request": request}}),
        "nested positionally": ([{"request": request}], {}),
        "extra keyword": (None, {"request": request, "namespace": "acme"}),
        "not an object": (None, {"request": [request]}),
        "as JSON text": (None, {"request": json.dumps(request)}),
    }
    if takes_request:
        placements["missing"] = (None, {})
    else:
        placements["as the keyword"] = (None, {"request": request})  # a sweep takes nothing, not even that
    return placements


_OUTCOME = re.compile(
    r"task \S+ (?P<failed>[0-9a-f-]{36}) failed: (?P<error>\w+)"
    r"|\[(?P<raised>[0-9a-f-]{36})\] raised unexpected: (?P<unexpected>\w+)"
    r"|\[(?P<succeeded>[0-9a-f-]{36})\] succeeded"
)


def _outcomes(log: Path) -> dict[str, str]:
    """Task id -> the error it failed with, or ``succeeded``: what the worker logged so far."""
    found: dict[str, str] = {}
    for match in _OUTCOME.finditer(log.read_text(errors="replace")):
        if match["failed"]:
            found[match["failed"]] = match["error"]
        elif match["raised"]:
            found.setdefault(match["raised"], match["unexpected"])
        else:
            found[match["succeeded"]] = "succeeded"
    return found


def _redis_state(broker: redis.Redis) -> dict[bytes, tuple[Any, bool]]:
    """The victim's Redis keys but replies: key -> (its value, dumped; whether it expires)."""
    return {
        key: (broker.dump(key), int(broker.ttl(key)) >= 0)
        for key in broker.scan_iter(f"mc:{VICTIM}:*")
        if b":reply:" not in key
    }


def _changed(before: dict[bytes, tuple[Any, bool]], after: dict[bytes, tuple[Any, bool]]) -> set[bytes]:
    """Keys added, rewritten or deleted between two states; a key that expired (a cache entry) is no change."""
    gone_by_itself = {key for key, (_, expires) in before.items() if expires and key not in after}
    return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)} - gone_by_itself


@pytest.fixture(scope="module")
def victim(auth_url: str) -> Iterator[MemoryClient]:
    """The victim's own client, after it stored one item in its set ``notes``."""
    with _client(auth_url, "token-of-globex", knows_tokens=True) as globex:
        globex.long_term(VICTIM, "u").get_or_create_memory_set("notes").add(["globex keeps this"], ids=["kept"])
        yield globex


def _store_state(victim: MemoryClient) -> tuple[list[tuple[str, Any]], list[tuple[str, str, int]]]:
    """The victim's items in ``notes`` and its sets (with sizes), as the store has them."""
    notes = victim.long_term(VICTIM, "u").get_memory_set("notes")
    sets = [(s.key, s.definition.name, s.size) for s in Admin(victim).list_sets(VICTIM)]
    return [(i.id, i.value) for i in notes.get()], sets


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(routing.ROUTES))
def test_no_placement_of_a_request_and_no_token_but_the_right_one_acts_on_a_namespace(
    task: str, auth_worker: tuple[str, Path], victim: MemoryClient
):
    url, log = auth_worker
    requests = _victim_requests()
    assert task in requests or task in SWEEPS, f"{task!r} is new: give it a request above, or list it as a sweep"
    takes_request = task not in SWEEPS
    namespaced = takes_request and task not in routing.OPS_REPLIES
    request = requests.get(task, requests[routing.FORGET])  # a sweep is sent one too: it must take none
    broker = redis.Redis.from_url(url)
    settings = Settings(_env_file=None, redis={"url": url})
    store_before, redis_before = _store_state(victim), _redis_state(broker)

    sent: dict[str, tuple[str, str | None]] = {}  # task id -> (placement, token)
    for token in (None, "token-of-acme", "token-of-globex"):
        for placement, (args, kwargs) in _placements(request, takes_request).items():
            sent[publish_raw(settings, task, kwargs, args=args, token=token)] = (placement, token)
        if namespaced and token != "token-of-globex":
            sent[publish_raw(settings, task, {"request": request}, token=token)] = ("request keyword", token)
    wait_for(lambda: set(sent) <= set(_outcomes(log)), timeout=20)

    outcomes = _outcomes(log)
    refused = {"AuthorizationError", "InvalidRequestError"}
    got = {(placement, token): outcomes[task_id] for task_id, (placement, token) in sent.items()}
    wrong = {case: outcome for case, outcome in got.items() if outcome not in refused}
    assert not wrong, f"not refused: {wrong}"
    # The shape is judged whatever the token; the token is judged wherever the request keyword names the namespace.
    assert all(got[case] == "InvalidRequestError" for case in got if case[1] == "token-of-globex")
    assert all(got[case] == "AuthorizationError" for case in got if case[0] == "request keyword")

    # Nothing changed for the victim: its items and sets, its Redis keys (dead letters included)...
    assert not _changed(redis_before, _redis_state(broker))
    assert _store_state(victim) == store_before
    assert not broker.sismember("mc:!ops:deadletter-namespaces", VICTIM)
    # ...but for the refusal replied to whoever waited in its namespace, which a client with a wrong token needs.
    refused_there = Reply(ok=False, error=ErrorInfo(type="AuthorizationError", message=str(refusal(VICTIM))))
    refusal_reply = json.loads(refused_there.model_dump_json())
    for task_id, (placement, token) in sent.items():
        if token != "token-of-globex":
            replies = [json.loads(r) for r in broker.lrange(f"mc:{VICTIM}:reply:{task_id}", 0, -1)]
            assert replies in ([], [refusal_reply]), (placement, token, replies)
            assert replies or placement != "request keyword"
    # A refused message of a queue that keeps its failures is kept for inspection, where nothing is replayed.
    if routing.ROUTES[task] in routing.DEAD_LETTER_QUEUES:
        kept = {json.loads(letter)["task_id"] for letter in broker.lrange("mc:!ops:deadletters-unroutable", 0, -1)}
        assert set(sent) <= kept


@pytest.mark.slow
@pytest.mark.parametrize("builtin", ["celery.map", "celery.starmap"])
def test_a_celery_builtin_that_calls_a_task_in_process_gets_no_further(
    builtin: str, auth_worker: tuple[str, Path], victim: MemoryClient
):
    url, log = auth_worker
    broker = redis.Redis.from_url(url)
    settings = Settings(_env_file=None, redis={"url": url})
    store_before = _store_state(victim)
    request = _victim_requests()[routing.ADD]
    signature: dict[str, Any] = {
        "task": routing.ADD,
        "args": [],
        "kwargs": {},
        "options": {},
        "subtask_type": None,
        "immutable": False,
    }
    items = [request] if builtin == "celery.map" else [[request]]
    task_id = str(uuid.uuid4())
    body, headers = celery_message(builtin, task_id, {"task": signature, "it": items}, "raw")
    with Connection(settings.broker_url, transport_options={"global_keyprefix": settings.broker_key_prefix}) as conn:
        conn.Producer().publish(body, exchange="", routing_key=routing.WRITE_QUEUE, headers=headers, serializer="json")
    wait_for(lambda: task_id in _outcomes(log), timeout=20)
    assert _outcomes(log)[task_id] == "InvalidRequestError"  # it calls the task with the request positionally
    assert _store_state(victim) == store_before
    assert not broker.exists(f"mc:{VICTIM}:deadletters")


@pytest.mark.slow
def test_the_right_token_with_the_request_as_the_keyword_is_served(auth_worker: tuple[str, Path], victim: MemoryClient):
    url, _ = auth_worker
    settings = Settings(_env_file=None, redis={"url": url})
    own = victim.long_term(VICTIM, "own").get_or_create_memory_set("notes")
    task_id = publish_raw(
        settings, routing.ADD, add_kwargs(VICTIM, "sent", "sent raw", key="own"), token="token-of-globex"
    )
    victim.dispatcher.wait(VICTIM, task_id)
    assert [(i.id, i.value) for i in own.get()] == [("sent", "sent raw")]
