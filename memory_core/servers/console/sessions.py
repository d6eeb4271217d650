"""The console's views of the Redis tiers: a session's messages (paged, newest last), summary and entities; a
key's short-term (or sensory) state and profile; a checkpoint thread's checkpoints (newest first, paged).

Everything stored is shown as data: JSON dumped by ``as_json`` and escaped by the templates, never executed,
never decoded as objects (the tiers keep JSON only). Reads go through the tiers' own handles (``client.session``,
``client.short_term``, ``client.profile``, ``client.checkpoints``); they never write, persist or touch a TTL.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

import redis
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from memory_core.client.checks import KEY, NAMESPACE, checked
from memory_core.core.errors import CorruptDataError, InvalidRequestError
from memory_core.core.keys import decoded
from memory_core.core.redis_errors import redis_failure
from memory_core.servers.console.access import Console
from memory_core.servers.console.pages import Signed, console_of, granted, render
from memory_core.tiers.session.history import SessionMessage, parse_entries
from memory_core.tiers.short_term import MemoryObject

router = APIRouter(prefix="/ui", include_in_schema=False)

MESSAGES_PER_PAGE = 50
ENTITIES_SHOWN = 500
STATE_PER_PAGE = 100
STATE_FIELDS_READ = 10_000
"""The most short-term paths the state page walks."""
CHECKPOINTS_PER_PAGE = 20
CHECKPOINT_NAMESPACES_LISTED = 100
JSON_CHARS = 20_000
"""The most characters of one JSON value a list shows (a single checkpoint's page shows more)."""
SESSIONS_SEARCHED = 200
MESSAGES_SEARCHED = 50_000
"""How far the search for a fact's source message reads: sessions of the key, and messages in all."""
_CURSOR = re.compile(r"^\d{1,20}-\d{1,20}$")
_PAGE = re.compile(r"^[0-9]{1,9}$")

T = TypeVar("T")


# -- shared by the views ------------------------------------------------------------


def page_number(raw: str, count: int, per_page: int) -> tuple[int, int]:
    """The page asked for (1-based, clamped to those there are) and how many pages ``count`` rows make."""
    pages = max(1, -(-count // per_page))
    number = int(raw) if _PAGE.match(raw) else 1
    return min(max(number, 1), pages), pages


def as_json(value: Any, limit: int = JSON_CHARS) -> str:
    """``value`` as indented JSON text for a page (bytes and times as text), cut after ``limit`` characters."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=_plain)
    return text if len(text) <= limit else f"{text[:limit]}\n… ({len(text):,} characters in all)"


def _plain(value: Any) -> str:
    if isinstance(value, bytes):
        return f"<{len(value):,} bytes>"
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value)


def _reading(what: str, read: Callable[[], T]) -> T:
    """``read()``, with Redis failures as the typed error the console's pages answer."""
    try:
        return read()
    except redis.RedisError as exc:
        raise redis_failure(exc, what) from exc


def _names(namespace: str, key: str) -> None:
    checked(NAMESPACE, namespace, "namespace")
    checked(KEY, key, "key")


# -- sessions -----------------------------------------------------------------------


@dataclass
class ShownMessage:
    """A session's message as the page lists it; ``message`` None for an entry that does not parse."""

    cursor: str
    message: SessionMessage | None
    extra: str = ""


def _shown(cursor: Any, fields: Any) -> ShownMessage:
    try:
        entry = parse_entries([(cursor, fields)])[0]
    except CorruptDataError:
        return ShownMessage(decoded(cursor), None)
    extra = as_json(entry.message.extra_args) if entry.message.extra_args else ""
    return ShownMessage(entry.cursor or decoded(cursor), entry, extra)


def _cursor(value: str) -> str:
    if value and not _CURSOR.match(value):
        raise InvalidRequestError(f"message cursor {value[:40]!r} is not a session cursor like '1700000000000-0'")
    return value


@router.get("/ns/{namespace}/keys/{key}/sessions/{session_id}")
def session_view(
    request: Request,
    namespace: str,
    key: str,
    session_id: str,
    who: Signed,
    before: str = "",
    after: str = "",
    at: str = "",
) -> HTMLResponse:
    granted(who, namespace)
    client = console_of(request).client(namespace)
    session = client.session(namespace, session_id, key=key)
    stream, r, count = session.keys.messages, client.dispatcher_redis, MESSAGES_PER_PAGE
    before, after, at = _cursor(before), _cursor(after), _cursor(at)

    def page() -> tuple[list[Any], bool, bool]:
        raw: list[Any]
        if at or after:
            raw = list(r.xrange(stream, at or f"({after}", "+", count=count) or [])
        else:
            raw = list(r.xrevrange(stream, f"({before}" if before else "+", "-", count=count) or [])[::-1]
        if not raw:
            return [], False, False
        first, last = decoded(raw[0][0]), decoded(raw[-1][0])
        older = bool(r.xrevrange(stream, f"({first}", "-", count=1))
        newer = bool(r.xrange(stream, f"({last}", "+", count=1))
        return raw, older, newer

    raw, older, newer = _reading("read the session", page)
    messages = [_shown(cursor, fields) for cursor, fields in raw]
    total = len(session.history)
    try:
        summary, summary_error = session.summary_state(), ""
    except CorruptDataError as exc:
        summary, summary_error = None, str(exc)
    entities = sorted(session.entities().items())
    return render(
        request,
        "session.html",
        who=who,
        namespace=namespace,
        key=key,
        session_id=session_id,
        messages=messages,
        total=total,
        older=older,
        newer=newer,
        at=at,
        summary=summary,
        summary_error=summary_error,
        entities=entities[:ENTITIES_SHOWN],
        more_entities=len(entities) > ENTITIES_SHOWN,
    )


def locate_message(console: Console, namespace: str, key: str, message_id: str) -> tuple[str, str] | None:
    """``(session id, cursor)`` of the session message ``message_id`` of ``key``, searched in at most
    ``SESSIONS_SEARCHED`` sessions and ``MESSAGES_SEARCHED`` messages; None when not found there."""
    pattern = console.keys.session(namespace, key, "*", "messages")
    head, tail = pattern.rsplit("*", 1)
    # A message's JSON starts with its id: a byte search finds the candidates, parsing confirms them.
    needle = b'"id":' + json.dumps(message_id, ensure_ascii=False).encode()
    read = 0
    for searched, name in enumerate(console.redis.scan_iter(match=pattern, count=1000)):
        stream = decoded(name)
        if searched >= SESSIONS_SEARCHED or read >= MESSAGES_SEARCHED:
            break
        start = "-"
        while read < MESSAGES_SEARCHED:
            chunk: list[Any] = list(console.redis.xrange(stream, start, "+", count=1000) or [])
            if not chunk:
                break
            read += len(chunk)
            for cursor, fields in chunk:
                raw = (fields or {}).get(b"m", b"")
                if needle in raw and (found := _shown(cursor, fields).message) is not None and found.id == message_id:
                    return stream[len(head) : -len(tail)], decoded(cursor)
            start = f"({decoded(chunk[-1][0])}"
    return None


@router.get("/ns/{namespace}/keys/{key}/messages")
def message_view(
    request: Request, namespace: str, key: str, who: Signed, message_id: Annotated[str, Query(alias="id")] = ""
) -> RedirectResponse:
    """A fact's source message: the page of its session that starts with it."""
    granted(who, namespace)
    _names(namespace, key)
    found = _reading("search the sessions", lambda: locate_message(console_of(request), namespace, key, message_id))
    if found is None:
        raise HTTPException(
            404,
            "no session of this key holds a message of that id: it was given to remember directly, or its session "
            "expired or was trimmed",
        )
    session_id, cursor = found
    url = f"/ui/ns/{_q(namespace)}/keys/{_q(key)}/sessions/{_q(session_id)}?at={cursor}#m-{cursor}"
    return RedirectResponse(url, status_code=303)


def _q(value: str) -> str:
    return quote(value, safe="")


# -- short-term state and profile ---------------------------------------------------------


@dataclass
class StateField:
    """One path of a short-term state: an object, or a value shown as JSON."""

    path: str
    depth: int
    is_object: bool
    value: str = ""


def state_fields(root: MemoryObject) -> tuple[list[StateField], bool]:
    """Every live path under ``root`` (at most ``STATE_FIELDS_READ``) in path order, each object before what
    it holds, and whether there were more."""
    found: list[StateField] = []
    pending: list[tuple[MemoryObject, int]] = [(root, 0)]
    more = False
    while pending and not more:
        node, depth = pending.pop()
        for name in node.get_field_names():
            if len(found) >= STATE_FIELDS_READ:
                more = True
                break
            path = f"{node.path}.{name}" if node.path else name
            try:
                value = node.get(name)
            except ValueError:  # a field planted under the key that no write of ours makes
                found.append(StateField(path, depth, False, "(unreadable)"))
                continue
            if isinstance(value, MemoryObject):
                found.append(StateField(path, depth, True))
                pending.append((value, depth + 1))
            else:
                found.append(StateField(path, depth, False, as_json(value)))
    found.sort(key=lambda f: f.path.split("."))
    return found, more


@router.get("/ns/{namespace}/keys/{key}/state")
def state_view(
    request: Request, namespace: str, key: str, who: Signed, kind: str = "stm", page: str = "1"
) -> HTMLResponse:
    granted(who, namespace)
    client = console_of(request).client(namespace)
    sensory = kind == "sensory"
    # Read only: neither handle is entered as a context manager, so nothing is persisted and no TTL renewed.
    memory = client.sensory(namespace, key) if sensory else client.short_term(namespace, key)
    fields, more = state_fields(memory)
    number, pages = page_number(page, len(fields), STATE_PER_PAGE)
    return render(
        request,
        "state.html",
        who=who,
        namespace=namespace,
        key=key,
        kind="sensory" if sensory else "stm",
        fields=fields[(number - 1) * STATE_PER_PAGE : number * STATE_PER_PAGE],
        count=len(fields),
        more=more,
        limit=STATE_FIELDS_READ,
        page=number,
        pages=pages,
    )


@router.get("/ns/{namespace}/keys/{key}/profile")
def profile_view(request: Request, namespace: str, key: str, who: Signed) -> HTMLResponse:
    granted(who, namespace)
    _names(namespace, key)
    document = console_of(request).client(namespace).profile(namespace, key).get()
    return render(
        request,
        "profile.html",
        who=who,
        namespace=namespace,
        key=key,
        document=as_json(document) if document else "",
    )


# -- checkpoints -------------------------------------------------------------------------


def checkpoint_namespaces(console: Console, namespace: str, thread: str) -> list[str]:
    """The checkpoint namespaces a thread has (names decoded from its keys; one that does not decode is left
    out), at most ``CHECKPOINT_NAMESPACES_LISTED``."""
    pattern = console.keys.checkpoint_pattern(namespace, thread)
    head = pattern[:-1]
    found: set[str] = set()
    for name in console.redis.scan_iter(match=pattern, count=1000):
        encoded = decoded(name)[len(head) :]
        if not encoded.endswith(":order") or not encoded.startswith("n"):
            continue
        body = encoded[1 : -len(":order")]
        try:
            found.add(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8"))
        except (binascii.Error, ValueError):
            continue
        if len(found) >= CHECKPOINT_NAMESPACES_LISTED:
            break
    return sorted(found)


@router.get("/ns/{namespace}/threads/{thread}")
def thread_view(
    request: Request,
    namespace: str,
    thread: str,
    who: Signed,
    cns: str = "",
    before: str = "",
    checkpoint_id: Annotated[str, Query(alias="id")] = "",
) -> HTMLResponse:
    granted(who, namespace)
    _names(namespace, thread)
    console = console_of(request)
    store = console.client(namespace).checkpoints(namespace)
    if checkpoint_id:
        one = store.get(thread, checkpoint_id, checkpoint_ns=cns)
        if one is None:
            raise HTTPException(404, "no checkpoint of that id in this thread")
        shown = [(one, as_json(one.metadata), as_json(one.checkpoint, limit=200_000))]
        more = False
    else:
        listed = store.list(thread, checkpoint_ns=cns, limit=CHECKPOINTS_PER_PAGE + 1, before=before or None)
        more = len(listed) > CHECKPOINTS_PER_PAGE
        shown = [(c, as_json(c.metadata), as_json(c.checkpoint, limit=2_000)) for c in listed[:CHECKPOINTS_PER_PAGE]]
    return render(
        request,
        "thread.html",
        who=who,
        namespace=namespace,
        thread=thread,
        cns=cns,
        checkpoint_namespaces=_reading(
            "list the thread's keys", lambda: checkpoint_namespaces(console, namespace, thread)
        ),
        checkpoints=shown,
        single=bool(checkpoint_id),
        before=before,
        more=more,
    )
