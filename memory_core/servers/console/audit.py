"""The console's audit log: every correction made through the console, per namespace, newest first.

Entries live in the Redis list ``Keys.console_audit(namespace)`` as JSON ``{who, at, what, target, before,
after}``: ``who`` names the signed-in token by its id (never the token), ``target`` the item (key, set, id),
``before`` and ``after`` the corrected field's values. The list keeps the newest ``KEPT`` entries (LPUSH, then
LTRIM in one transaction); erasing the namespace erases it with the rest.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from memory_core.core.models import utcnow
from memory_core.servers.console import display  # noqa: F401  (registers the templates' filters)
from memory_core.servers.console.access import Console, Principal
from memory_core.servers.console.pages import Signed, console_of, granted, render

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/ui", include_in_schema=False)

KEPT = 10_000
"""The most entries a namespace's audit log keeps; older ones are dropped."""
PAGE_SIZE = 50
ITEM_SCAN = 1_000
"""How many of the newest entries an item's page looks through for that item's corrections."""


class AuditEntry(BaseModel):
    """One correction: who made it, when, what it changed on which item, and the values before and after."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    who: str
    at: datetime
    what: str
    target: dict[str, str]
    before: Any = None
    after: Any = None


def record(
    console: Console, namespace: str, who: Principal, what: str, target: dict[str, str], before: Any, after: Any
) -> AuditEntry:
    """Appends a correction to ``namespace``'s audit log (trimmed to the newest ``KEPT``)."""
    entry = AuditEntry(who=who.who, at=utcnow(), what=what, target=target, before=before, after=after)
    name = console.keys.console_audit(namespace)
    with console.redis.pipeline(transaction=True) as pipe:
        pipe.lpush(name, entry.model_dump_json())
        pipe.ltrim(name, 0, KEPT - 1)
        pipe.execute()
    logger.info("console correction %s of an item in %s by %s", what, namespace, who.who)
    return entry


def read(console: Console, namespace: str, start: int, count: int) -> tuple[list[AuditEntry | None], int]:
    """Entries ``start`` to ``start + count`` of the log, newest first (None for an entry that does not parse),
    and how many the log holds."""
    name = console.keys.console_audit(namespace)
    with console.redis.pipeline(transaction=False) as pipe:
        pipe.lrange(name, start, start + count - 1)
        pipe.llen(name)
        raw, total = pipe.execute()
    return [_parsed(one) for one in raw], int(total)


def for_item(console: Console, namespace: str, key: str, set_name: str, item_id: str) -> list[AuditEntry]:
    """The corrections of one item among the newest ``ITEM_SCAN`` entries of the log, newest first."""
    target = {"key": key, "set": set_name, "id": item_id}
    raw = console.redis.lrange(console.keys.console_audit(namespace), 0, ITEM_SCAN - 1)
    found = []
    for one in raw:
        entry = _parsed(one)
        if entry is not None and entry.target == target:
            found.append(entry)
    return found


def _parsed(raw: bytes | str) -> AuditEntry | None:
    try:
        return AuditEntry.model_validate_json(raw)
    except ValidationError:
        return None  # not written by this console: shown as unreadable, never trusted


@router.get("/ns/{namespace}/audit")
def audit_view(
    request: Request, namespace: str, who: Signed, start: Annotated[int, Query(ge=0, le=KEPT)] = 0
) -> HTMLResponse:
    granted(who, namespace)
    entries, total = read(console_of(request), namespace, start, PAGE_SIZE)
    return render(
        request,
        "audit.html",
        who=who,
        namespace=namespace,
        entries=entries,
        total=total,
        start=start,
        page_size=PAGE_SIZE,
        kept=KEPT,
    )
