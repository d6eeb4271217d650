"""The console's operations view, the operator's alone: live workers (queues, embedder, former, heartbeat age),
queue depths, dead letters per namespace (inspect, replay, drop), a running reindex, usage and quotas per
namespace, and where Flower is. Replaying or dropping a namespace's dead letters is a correction: confirmed,
allowed by ``can_write`` only, and recorded in that namespace's audit log (``!ops`` for letters naming none).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import quote

import redis
from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from memory_core.client.admin import Admin
from memory_core.client.checks import NAMESPACE, checked
from memory_core.client.deadletters import DeadLetter, DeadLetters
from memory_core.core import routing
from memory_core.core.dispatch import open_redis
from memory_core.core.errors import CorruptDataError, InvalidRequestError, MemoryCoreError, NoWorkerAvailable
from memory_core.core.jsoncodec import stored_object
from memory_core.core.keys import decoded
from memory_core.core.liveness import MISSED_BEATS, WorkerInfo, live_workers
from memory_core.core.messages import ReindexStatus
from memory_core.core.models import Usage
from memory_core.core.redis_errors import redis_failure
from memory_core.core.settings import NamespaceQuota, Settings
from memory_core.servers.console import audit
from memory_core.servers.console.access import Console, Principal
from memory_core.servers.console.pages import Signed, console_of, render, require_write
from memory_core.servers.console.sessions import as_json, page_number

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/ui", include_in_schema=False)

LETTERS_PER_PAGE = 20
NAMESPACES_PER_PAGE = 50
DEAD_LETTER_NAMESPACES_LISTED = 500
AUDITED_TASK_IDS = 100
"""The most task ids of the letters a dead-letter correction names in its audit entry."""
REINDEX_TIMEOUT = 5.0
"""Seconds the page waits for a worker to say where a reindex stands."""


def _operator(who: Principal) -> None:
    if not who.operator:
        raise HTTPException(403, "the operations page is the operator's: sign in with an operator token")


def _reading(what: str, read: Any) -> Any:
    try:
        return read()
    except redis.RedisError as exc:
        raise redis_failure(exc, what) from exc


# -- the page ----------------------------------------------------------------------------


@dataclass
class WorkerRow:
    """A live worker and how long ago it last beat (None when its key expired meanwhile)."""

    info: WorkerInfo
    beat_age: float | None
    up: float


def workers(console: Console) -> list[WorkerRow]:
    """The live workers by their heartbeats, oldest first."""
    infos = live_workers(console.redis, console.keys)
    with console.redis.pipeline(transaction=False) as pipe:
        for info in infos:
            pipe.pttl(console.keys.worker(info.name))
        ttls = pipe.execute()
    # A beat sets the key to expire after MISSED_BEATS intervals: what is gone of that is the beat's age (by
    # this server's interval setting, which the workers share when they are one deployment).
    full = console.settings.celery.heartbeat_interval * MISSED_BEATS
    now = time.time()
    return [
        WorkerRow(info, max(0.0, full - int(ttl) / 1000) if int(ttl) > 0 else None, max(0.0, now - info.started_at))
        for info, ttl in zip(infos, ttls, strict=True)
    ]


@dataclass
class Queues:
    """Tasks waiting per queue, and those delivered but not yet acknowledged (Redis broker only)."""

    depths: dict[str, int] = field(default_factory=dict)
    unacked: int = 0


def queue_depths(settings: Settings, client: redis.Redis) -> Queues | None:
    """The Redis broker's queue lengths, as ``memory-core status`` counts them; None on another broker."""
    if not settings.broker_is_redis:
        return None
    separate = settings.broker_url != settings.redis.url
    broker = open_redis(settings, url=settings.broker_url) if separate else client
    prefix = settings.broker_key_prefix
    try:
        return Queues({q: int(broker.llen(prefix + q)) for q in routing.QUEUES}, int(broker.hlen(prefix + "unacked")))
    finally:
        if separate:
            broker.close()


def dead_letter_counts(console: Console) -> tuple[dict[str, int], bool]:
    """Dead letters per namespace (``!ops`` for those that name none), and whether the listing was cut."""
    # A member that is no namespace (planted) would name a key of another kind: left out.
    names = sorted(n for n in map(decoded, console.redis.smembers(console.keys.dead_letter_namespaces())) if _named(n))
    cut = len(names) > DEAD_LETTER_NAMESPACES_LISTED
    names = names[:DEAD_LETTER_NAMESPACES_LISTED]
    with console.redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.llen(console.keys.dead_letters(name))
        pipe.llen(console.keys.unroutable_dead_letters())
        counts = pipe.execute()
    found = {name: int(count) for name, count in zip([*names, routing.OPS_NAMESPACE], counts, strict=True)}
    return {name: count for name, count in found.items() if count}, cut


@dataclass
class UsageRow:
    """A namespace's usage counters, its quota, and its long-term usage at the workers' last count."""

    namespace: str
    usage: Usage
    quota: NamespaceQuota
    counted_items: int | None = None
    counted_bytes: int | None = None
    counted_at: float | None = None


def usage_rows(console: Console, namespaces: list[str]) -> list[UsageRow]:
    client = console.any_client()
    rows = []
    for namespace in namespaces:
        row = UsageRow(namespace, client.usage(namespace), console.settings.quotas.for_namespace(namespace))
        items, size, at = console.redis.hmget(console.keys.quota_usage(namespace), ["items", "bytes", "at"])
        try:  # a worker's count, read back: shown when it reads as numbers
            row.counted_items = int(items) if items is not None else None
            row.counted_bytes = int(size) if size is not None else None
            row.counted_at = float(at) if at is not None else None
        except ValueError:
            pass
        rows.append(row)
    return rows


@router.get("/operations")
def operations_view(request: Request, who: Signed, page: str = "1") -> HTMLResponse:
    _operator(who)
    console = console_of(request)
    settings = console.settings
    known = sorted(set(Admin(console.any_client()).namespaces()) | set(settings.quotas.namespaces))
    number, pages = page_number(page, len(known), NAMESPACES_PER_PAGE)
    shown = known[(number - 1) * NAMESPACES_PER_PAGE : number * NAMESPACES_PER_PAGE]
    letters, letters_cut = _reading("count the dead letters", lambda: dead_letter_counts(console))
    return render(
        request,
        "operations.html",
        who=who,
        workers=_reading("read the workers' heartbeats", lambda: workers(console)),
        queues=_reading("read the queues", lambda: queue_depths(settings, console.redis)),
        letters=letters,
        letters_cut=letters_cut,
        usage=usage_rows(console, shown),
        quotas_active=settings.quotas.active,
        page=number,
        pages=pages,
        flower=settings.flower,
    )


@router.get("/operations/reindex")
def reindex_view(request: Request, who: Signed) -> HTMLResponse:
    """Where a reindex stands, as a worker says; htmx loads it into the operations page after it rendered."""
    _operator(who)
    status: ReindexStatus | None = None
    problem = ""
    try:
        status = Admin(console_of(request).any_client()).reindex("status", timeout=REINDEX_TIMEOUT)
    except NoWorkerAvailable:
        problem = "no live worker takes the question (queue memory.read)"
    except MemoryCoreError as exc:
        problem = f"{type(exc).__name__}: {exc}"
    running = status is not None and (
        status.state in ("building", "complete") or (status.state == "switched" and not status.source_dropped)
    )
    template = "reindex_status.html" if request.headers.get("hx-request") == "true" else "reindex.html"
    return render(request, template, who=who, reindex=status, running=running, problem=problem)


# -- dead letters ---------------------------------------------------------------------------


def _named(namespace: str) -> bool:
    try:
        checked(NAMESPACE, namespace, "namespace")
    except InvalidRequestError:
        return False
    return True


def _letters_namespace(namespace: str) -> str:
    return namespace if namespace == routing.OPS_NAMESPACE else checked(NAMESPACE, namespace, "namespace")


def _letters_key(console: Console, namespace: str) -> str:
    if namespace == routing.OPS_NAMESPACE:
        return console.keys.unroutable_dead_letters()
    return console.keys.dead_letters(namespace)


@dataclass
class LetterRow:
    """One dead letter as the page shows it: parsed, or why it could not be."""

    position: int
    letter: DeadLetter | None
    payload: str = ""
    error: str = ""
    extra: str = ""
    problem: str = ""


_LETTER_FIELDS = {"namespace", "task", "task_id", "kwargs", "payload", "error", "retries", "failed_at"}


def _letter_row(position: int, namespace: str, raw: bytes | str) -> LetterRow:
    try:
        fields = stored_object(raw, f"a dead letter of {namespace!r}")
        letter = DeadLetter(**{**{k: v for k, v in fields.items() if k != "namespace"}, "namespace": namespace})
    except (CorruptDataError, ValidationError, TypeError) as exc:
        return LetterRow(position, None, problem=str(exc)[:500])
    extra = {k: v for k, v in fields.items() if k not in _LETTER_FIELDS}
    return LetterRow(
        position,
        letter,
        payload=as_json(letter.payload, limit=4_000),
        error=as_json(letter.error, limit=4_000),
        extra=as_json(extra, limit=4_000) if extra else "",
    )


def _task_ids(console: Console, namespace: str) -> tuple[int, list[str]]:
    """How many letters ``namespace`` has and the task ids of the first ``AUDITED_TASK_IDS``, for the audit."""
    key = _letters_key(console, namespace)
    count = int(console.redis.llen(key))
    rows = [_letter_row(i, namespace, raw) for i, raw in enumerate(console.redis.lrange(key, 0, AUDITED_TASK_IDS - 1))]
    return count, [row.letter.task_id for row in rows if row.letter is not None]


@router.get("/operations/dead-letters/{namespace}")
def dead_letters_view(request: Request, namespace: str, who: Signed, page: str = "1") -> HTMLResponse:
    _operator(who)
    namespace = _letters_namespace(namespace)
    console = console_of(request)
    key = _letters_key(console, namespace)
    count = int(_reading("count the dead letters", lambda: console.redis.llen(key)))
    number, pages = page_number(page, count, LETTERS_PER_PAGE)
    start = (number - 1) * LETTERS_PER_PAGE
    raws = _reading("read the dead letters", lambda: console.redis.lrange(key, start, start + LETTERS_PER_PAGE - 1))
    return render(
        request,
        "dead_letters.html",
        who=who,
        namespace=namespace,
        ops=namespace == routing.OPS_NAMESPACE,
        count=count,
        rows=[_letter_row(start + i, namespace, raw) for i, raw in enumerate(raws)],
        page=number,
        pages=pages,
        done=_done(request.query_params.get("done", "")),
    )


_DONE = re.compile(r"^(replayed|dropped) [0-9]{1,9}$")


def _done(value: str) -> str:
    """What the last correction did, from the redirect after it (any other text is not shown)."""
    return value if _DONE.match(value) else ""


_ACTIONS = {
    "replay": (
        "Replay the dead letters",
        (
            "Each letter's task is sent again with its original arguments, then removed from the list. Writes "
            "are idempotent and monotonic: a replayed write never undoes a later one."
        ),
        False,
    ),
    "drop": ("Drop the dead letters", "The letters are deleted: their tasks will never run.", True),
}


def _action(action: str, namespace: str) -> tuple[str, str, bool]:
    if action not in _ACTIONS:
        raise HTTPException(404, "no such action on dead letters")
    if action == "replay" and namespace == routing.OPS_NAMESPACE:
        raise HTTPException(409, "letters that name no namespace cannot be replayed; read them, then drop them")
    return _ACTIONS[action]


@router.get("/operations/dead-letters/{namespace}/{action}")
def dead_letters_confirm(request: Request, namespace: str, action: str, who: Signed) -> HTMLResponse:
    _operator(who)
    require_write(who)
    namespace = _letters_namespace(namespace)
    title, line, danger = _action(action, namespace)
    console = console_of(request)
    count = int(_reading("count the dead letters", lambda: console.redis.llen(_letters_key(console, namespace))))
    base = f"/ui/operations/dead-letters/{quote(namespace, safe='')}"
    return render(
        request,
        "action_confirm.html",
        who=who,
        title=title,
        lines=[f"Namespace {namespace!r} has {count} dead letter(s).", line],
        action=f"{base}/{action}",
        back=base,
        button=action,
        danger=danger,
    )


@router.post("/operations/dead-letters/{namespace}/{action}")
def dead_letters_correct(
    request: Request, namespace: str, action: str, who: Signed, confirmed: Annotated[str, Form()] = ""
) -> Response:
    _operator(who)
    require_write(who)
    namespace = _letters_namespace(namespace)
    _action(action, namespace)
    if confirmed != "yes":
        raise HTTPException(400, f"confirm the {action} on its confirmation page first")
    console = console_of(request)
    count, task_ids = _reading("read the dead letters", lambda: _task_ids(console, namespace))
    ops = namespace == routing.OPS_NAMESPACE
    client = console.any_client() if ops else console.client(namespace)  # a replay carries the namespace's token
    letters = DeadLetters(client.dispatcher_redis, client.keys, client.dispatcher)
    after: dict[str, Any]
    if action == "replay":
        sent = letters.replay(namespace)
        after = {"letters": 0, "replayed": len(sent), "task_ids": sent[:AUDITED_TASK_IDS]}
        done = f"replayed {len(sent)}"
    else:
        dropped = letters.drop(namespace)
        after = {"letters": 0, "dropped": dropped}
        done = f"dropped {dropped}"
    audit.record(
        console,
        namespace,
        who,
        f"dead_letters.{action}",
        {"namespace": namespace},
        before={"letters": count, "task_ids": task_ids},
        after=after,
    )
    url = f"/ui/operations/dead-letters/{quote(namespace, safe='')}?done={quote(done, safe='')}"
    return RedirectResponse(url, status_code=303)
