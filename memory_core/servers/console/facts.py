"""The console's formation views: a set's facts, live and superseded, each with its history chain and the
messages it rests on; the key's formation operations, one page each, with a retry for a failed one.

Facts are read by ``read_facts`` alone: the whole set up to ``FACTS_LIMIT`` items (``LongTermMemory.get``),
else its first ``FACTS_LIMIT`` by export pages; the page then shows ``PER_PAGE`` of them. Operations are the
key's records in Redis (``Keys.formation_operation``), read back as untrusted data: a record that does not
parse, or names another scope, is left out.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from memory_core import MemoryClient
from memory_core.client.checks import KEY, NAMESPACE, SET_NAME, checked
from memory_core.core import routing
from memory_core.core.errors import CorruptDataError, MemorySetNotFound
from memory_core.core.jsoncodec import stored_model
from memory_core.core.keys import decoded
from memory_core.core.messages import FormationRecord
from memory_core.core.models import MemorySetItem
from memory_core.servers.console import audit
from memory_core.servers.console.access import Console
from memory_core.servers.console.pages import Signed, console_of, granted, render, require_write
from memory_core.servers.console.sessions import page_number

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/ui", include_in_schema=False)

FACTS_LIMIT = 2_000
"""The most items of a set the facts page reads (until a cursor-paged browse exists)."""
PER_PAGE = 50
"""Facts or operations one page shows."""
OPERATIONS_LIMIT = 200
"""The newest operation records of a key the operations page lists."""
OPERATIONS_SCANNED = 10_000
"""The most operation records of a key read to pick the newest from."""
SHOWS = ("all", "live", "superseded")
STATUSES = ("all", "pending", "running", "deferred", "failed", "done")
_OP_ID = re.compile(r"^[0-9a-f]{32}$")

SetQuery = Annotated[str, Query(alias="set")]
"""The memory set a formation page is about (``?set=``; ``facts`` unless given)."""


def _scope(namespace: str, key: str) -> None:
    """400 for names no memory can have; they would also widen the Redis patterns built from them."""
    checked(NAMESPACE, namespace, "namespace")
    checked(KEY, key, "key")


# -- facts -------------------------------------------------------------------------


@dataclass
class FactsWindow:
    """The items of a set the page lists, in insertion order; ``size`` is the set's, ``truncated`` when
    ``items`` holds only its first ``FACTS_LIMIT``; ``missing`` when the set does not exist."""

    items: list[MemorySetItem] = field(default_factory=list)
    size: int = 0
    truncated: bool = False
    missing: bool = False


_BROWSE_PAGE = 200


def read_facts(client: MemoryClient, namespace: str, key: str, set_name: str) -> FactsWindow:
    """The facts the page shows, in the order they were written: at most ``FACTS_LIMIT``, read a page at a time
    through ``browse`` (which records no access, so looking changes no eviction order)."""
    memory = client.long_term(namespace, key)
    items: list[MemorySetItem] = []
    cursor: str | None = None
    total = 0
    try:
        while len(items) < FACTS_LIMIT:
            page = memory.browse(set_name, sort="updated", descending=False, cursor=cursor, limit=_BROWSE_PAGE)
            items.extend(page.items)
            total = page.total if page.total is not None else len(items)
            cursor = page.next_cursor
            if cursor is None:
                break
    except MemorySetNotFound:
        return FactsWindow(missing=True)
    return FactsWindow(items[:FACTS_LIMIT], max(total, len(items)), total > FACTS_LIMIT)


def _shown(item: MemorySetItem, show: str) -> bool:
    if show == "live":
        return item.fact is None or item.fact.live
    if show == "superseded":
        return item.fact is not None and not item.fact.live
    return True


@router.get("/ns/{namespace}/keys/{key}/facts")
def facts_view(
    request: Request,
    namespace: str,
    key: str,
    who: Signed,
    set_name: SetQuery = "facts",
    show: str = "all",
    page: str = "1",
) -> HTMLResponse:
    granted(who, namespace)
    _scope(namespace, key)
    set_name = checked(SET_NAME, set_name, "memory set name")
    show = show if show in SHOWS else "all"
    console = console_of(request)
    window = read_facts(console.client(namespace), namespace, key, set_name)
    listed = [item for item in window.items if _shown(item, show)]
    number, pages = page_number(page, len(listed), PER_PAGE)
    records, _ = read_operations(console, namespace, key)
    return render(
        request,
        "facts.html",
        who=who,
        namespace=namespace,
        key=key,
        set_name=set_name,
        show=show,
        shows=SHOWS,
        window=window,
        facts=listed[(number - 1) * PER_PAGE : number * PER_PAGE],
        matching=len(listed),
        page=number,
        pages=pages,
        limit=FACTS_LIMIT,
        counts=Counter(record.report.status for record in records),
    )


@router.get("/ns/{namespace}/keys/{key}/facts/{fact_id:path}/history")
def fact_history(
    request: Request, namespace: str, key: str, fact_id: str, who: Signed, set_name: SetQuery = "facts"
) -> HTMLResponse:
    granted(who, namespace)
    _scope(namespace, key)
    set_name = checked(SET_NAME, set_name, "memory set name")
    chain = console_of(request).client(namespace).long_term(namespace, key).history(fact_id, set_name=set_name)
    if not chain:
        raise HTTPException(404, "no fact of that id in this set")
    return render(
        request,
        "fact_history.html",
        who=who,
        namespace=namespace,
        key=key,
        set_name=set_name,
        fact_id=fact_id,
        chain=chain,
    )


# -- operations --------------------------------------------------------------------


def read_record(console: Console, namespace: str, key: str, op_id: str) -> FormationRecord | None:
    """One operation's stored record, or None when there is none, it does not parse, or it names another."""
    raw = console.redis.get(console.keys.formation_operation(namespace, key, op_id))
    return None if raw is None else _record(raw, namespace, key, op_id)


def _record(raw: bytes | str, namespace: str, key: str, op_id: str) -> FormationRecord | None:
    try:
        record = stored_model(FormationRecord, raw, f"formation record {op_id!r}")
    except CorruptDataError as exc:
        logger.warning("console: unreadable formation record of %s in %s skipped: %s", op_id, namespace, exc)
        return None
    report = record.report
    if (report.namespace, report.key, report.op_id) != (namespace, key, op_id):
        return None
    return record


def read_operations(console: Console, namespace: str, key: str) -> tuple[list[FormationRecord], bool]:
    """The key's newest ``OPERATIONS_LIMIT`` operation records, newest first, and whether there were more
    (of the first ``OPERATIONS_SCANNED`` found)."""
    pattern = console.keys.formation_operation(namespace, key, "*")
    prefix = pattern[:-1]
    names: list[str] = []
    for name in console.redis.scan_iter(match=pattern, count=1000):
        names.append(decoded(name))
        if len(names) >= OPERATIONS_SCANNED:
            break
    records: list[FormationRecord] = []
    for start in range(0, len(names), 500):
        chunk = names[start : start + 500]
        for name, raw in zip(chunk, console.redis.mget(chunk), strict=True):
            op_id = name[len(prefix) :]
            record = _record(raw, namespace, key, op_id) if raw is not None and _OP_ID.match(op_id) else None
            if record is not None:
                records.append(record)
    records.sort(key=lambda r: r.report.updated_at, reverse=True)
    return records[:OPERATIONS_LIMIT], len(records) > OPERATIONS_LIMIT


@router.get("/ns/{namespace}/keys/{key}/operations")
def operations_view(
    request: Request, namespace: str, key: str, who: Signed, status: str = "all", page: str = "1"
) -> HTMLResponse:
    granted(who, namespace)
    _scope(namespace, key)
    status = status if status in STATUSES else "all"
    records, more = read_operations(console_of(request), namespace, key)
    listed = [r for r in records if status == "all" or r.report.status == status]
    number, pages = page_number(page, len(listed), PER_PAGE)
    return render(
        request,
        "formation_operations.html",
        who=who,
        namespace=namespace,
        key=key,
        chosen=status,
        statuses=STATUSES,
        records=listed[(number - 1) * PER_PAGE : number * PER_PAGE],
        counts=Counter(r.report.status for r in records),
        more=more,
        limit=OPERATIONS_LIMIT,
        page=number,
        pages=pages,
    )


def _op_id(op_id: str) -> str:
    if not _OP_ID.match(op_id):
        raise HTTPException(404, "no formation operation of that id for this key")
    return op_id


@router.get("/ns/{namespace}/keys/{key}/operations/{op_id}")
def operation_view(request: Request, namespace: str, key: str, op_id: str, who: Signed) -> HTMLResponse:
    granted(who, namespace)
    _scope(namespace, key)
    console = console_of(request)
    report = console.client(namespace).long_term(namespace, key).operation(_op_id(op_id))
    record = read_record(console, namespace, key, op_id)
    return render(
        request,
        "formation_operation.html",
        who=who,
        namespace=namespace,
        key=key,
        report=report,
        record=record,
        raw_replies=[_clipped(raw) for raw in (record.raw_replies if record is not None else [])],
        retryable=_retryable(record),
        retried=request.query_params.get("retried") == "1",
    )


def _clipped(text: str, limit: int = 4_000) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _retryable(record: FormationRecord | None) -> bool:
    return record is not None and record.report.status == "failed" and record.request is not None


def _failed_record(console: Console, namespace: str, key: str, op_id: str) -> FormationRecord:
    record = read_record(console, namespace, key, _op_id(op_id))
    if record is None:
        raise HTTPException(404, "no formation operation of that id for this key")
    if not _retryable(record):
        raise HTTPException(409, f"operation {op_id} is {record.report.status}: only a failed operation is retried")
    return record


@router.get("/ns/{namespace}/keys/{key}/operations/{op_id}/retry")
def retry_confirm(request: Request, namespace: str, key: str, op_id: str, who: Signed) -> HTMLResponse:
    granted(who, namespace)
    _scope(namespace, key)
    require_write(who)
    record = _failed_record(console_of(request), namespace, key, op_id)
    assert record.request is not None
    base = f"/ui/ns/{_q(namespace)}/keys/{_q(key)}/operations/{op_id}"
    return render(
        request,
        "action_confirm.html",
        who=who,
        title="Retry a failed formation",
        lines=[
            f"Operation {op_id} of key {key!r} failed: {record.report.error or 'no error recorded'}",
            (
                f"Its {len(record.request.messages)} message(s) are sent to formation again, as they were sent "
                f"(model {record.request.model}); the operation keeps its id."
            ),
        ],
        action=f"{base}/retry",
        back=base,
        button="retry",
        danger=False,
    )


@router.post("/ns/{namespace}/keys/{key}/operations/{op_id}/retry")
def retry(
    request: Request, namespace: str, key: str, op_id: str, who: Signed, confirmed: Annotated[str, Form()] = ""
) -> Response:
    granted(who, namespace)
    _scope(namespace, key)
    require_write(who)
    if confirmed != "yes":
        raise HTTPException(400, "confirm the retry on its confirmation page first")
    console = console_of(request)
    record = _failed_record(console, namespace, key, op_id)
    sent = record.request
    assert sent is not None
    # The stored request itself, not a new ``remember``: the same op id even when this server's formation model
    # differs from the one it was sent with, and a replay's facts to retire go with it.
    summary = json.dumps({"namespace": namespace, "key": key, "set": sent.set_name, "retry_of": op_id})
    task_id = console.client(namespace).dispatcher.send(routing.FORM, sent, summary)
    audit.record(
        console,
        namespace,
        who,
        "formation.retry",
        {"key": key, "set": sent.set_name, "op_id": op_id},
        before={"status": record.report.status, "error": record.report.error},
        after={"status": "sent", "task_id": task_id},
    )
    return RedirectResponse(f"/ui/ns/{_q(namespace)}/keys/{_q(key)}/operations/{op_id}?retried=1", status_code=303)


def _q(value: str) -> str:
    return quote(value, safe="")
