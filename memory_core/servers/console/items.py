"""One item's page, and its corrections (edit value or metadata, pin, importance, expiry, delete).

Item ids may hold any character, ``/`` included, so the item routes take the rest of the path; the edit
routes are registered first (an id that itself ends in ``/edit`` is reached through its set's page only).

A correction is two POSTs: the first shows "change X from A to B?" with a button that sends the same values
back with ``confirm``; the second writes (``corrections.apply``), records the audit entry and redirects to the
item. Both carry the item's version as the form saw it: if the item was written in between, the correction
is refused (409) and the form shown again with what the item now holds.
"""

from __future__ import annotations

import logging
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from memory_core.client.long_term import LongTermMemory
from memory_core.core.errors import InvalidRequestError, NotFoundError
from memory_core.core.models import ChatMessage, MemorySetItem
from memory_core.servers.console import audit, corrections, display
from memory_core.servers.console.access import Principal
from memory_core.servers.console.pages import Signed, console_of, granted, render, require_write

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/ui", include_in_schema=False)

ITEM = "/ns/{namespace}/keys/{key}/sets/{set_name}/items/{item_id:path}"
MAX_FOLDED_CHECKED = 200
"""How many of a summary's folded ids its page looks up (a summary may fold thousands)."""
FormText = Annotated[str, Form()]


def item_url(namespace: str, key: str, set_name: str, item_id: str) -> str:
    """The path of an item's page (every segment quoted)."""
    parts = (namespace, key, set_name, item_id)
    return "/ui/ns/{}/keys/{}/sets/{}/items/{}".format(*(quote(p, safe="") for p in parts))


def _memory(request: Request, namespace: str, key: str) -> LongTermMemory:
    return console_of(request).client(namespace).long_term(namespace, key)


def _item(memory: LongTermMemory, set_name: str, item_id: str) -> MemorySetItem:
    found = memory.get(set_name, [item_id])
    if not found:
        raise NotFoundError(f"item {item_id!r} not found in memory set {set_name!r} (deleted, expired or folded)")
    return found[0]


# -- corrections (before the item page: its route takes the rest of the path) ---------------


@router.get(ITEM + "/edit")
def edit_page(request: Request, namespace: str, key: str, set_name: str, item_id: str, who: Signed) -> HTMLResponse:
    granted(who, namespace)
    require_write(who)
    item = _item(_memory(request, namespace, key), set_name, item_id)
    return _edit_form(request, who, namespace, key, set_name, item)


@router.post(ITEM + "/edit")
def edit(
    request: Request,
    namespace: str,
    key: str,
    set_name: str,
    item_id: str,
    who: Signed,
    action: FormText = "",
    version: FormText = "",
    confirm: FormText = "",
    value: FormText = "",
    role: FormText = "",
    metadata: FormText = "",
    pinned: FormText = "",
    importance: FormText = "",
    expires_at: FormText = "",
) -> Response:
    granted(who, namespace)
    require_write(who)
    console = console_of(request)
    memory = _memory(request, namespace, key)
    item = _item(memory, set_name, item_id)
    form = corrections.Form(action, value, role, metadata, pinned, importance, expires_at)
    if version != str(item.seq):
        message = "the item was written since this form was shown: here is what it holds now"
        return _edit_form(request, who, namespace, key, set_name, item, status=409, error=message)
    try:
        change = corrections.propose(item, form, console.settings.limits)
    except InvalidRequestError as exc:
        return _edit_form(request, who, namespace, key, set_name, item, status=400, error=str(exc), form=form)
    if not change.changes_anything:
        return _edit_form(request, who, namespace, key, set_name, item, error=f"the {change.what} is that already")
    if confirm != "yes":
        return render(
            request,
            "item_confirm.html",
            who=who,
            namespace=namespace,
            key=key,
            set_name=set_name,
            item=item,
            item_path=item_url(namespace, key, set_name, item.id),
            change=change,
            carried={**change.carried, "version": str(item.seq), "confirm": "yes"},
        )
    written = corrections.apply(memory, set_name, item, change)
    target = {"key": key, "set": set_name, "id": item.id}
    audit.record(console, namespace, who, change.what, target, change.before, corrections.after(change, written))
    if change.what == "delete":
        return RedirectResponse(_set_url(namespace, key, set_name), status_code=303)
    return RedirectResponse(item_url(namespace, key, set_name, item.id), status_code=303)


def _edit_form(
    request: Request,
    who: Principal,
    namespace: str,
    key: str,
    set_name: str,
    item: MemorySetItem,
    *,
    status: int = 200,
    error: str | None = None,
    form: corrections.Form | None = None,
) -> HTMLResponse:
    """The correction forms, filled with the item's values (or, after a refused value, with what was sent)."""
    shown = form or corrections.Form()
    chat = isinstance(item.value, ChatMessage)
    text, role = (
        (item.value.content, item.value.role.value) if isinstance(item.value, ChatMessage) else (item.value, "")
    )
    current = {
        "value": shown.value if shown.action == "value" else text,
        "role": shown.role if shown.action == "value" else role,
        "metadata": shown.metadata if shown.action == "metadata" else display.json_text(item.additional_metadata, 2),
        "importance": shown.importance if shown.action == "importance" else str(item.importance),
        "expires_at": shown.expires_at if shown.action == "expiry" else _local(item),
    }
    return render(
        request,
        "item_edit.html",
        status=status,
        who=who,
        namespace=namespace,
        key=key,
        set_name=set_name,
        item=item,
        item_path=item_url(namespace, key, set_name, item.id),
        chat=chat,
        current=current,
        rewritable=corrections.rewritable(item),
        error=error,
    )


def _local(item: MemorySetItem) -> str:
    """The item's expiry as a ``datetime-local`` input takes it (UTC, to the second)."""
    return "" if item.expires_at is None else display.when(item.expires_at)[:19].replace(" ", "T")


def _set_url(namespace: str, key: str, set_name: str) -> str:
    return "/ui/ns/{}/keys/{}/sets/{}".format(*(quote(p, safe="") for p in (namespace, key, set_name)))


# -- the item page ----------------------------------------------------------------------


@router.get(ITEM)
def item_view(request: Request, namespace: str, key: str, set_name: str, item_id: str, who: Signed) -> HTMLResponse:
    granted(who, namespace)
    if not item_id:
        raise HTTPException(404, "no item id in this address")
    memory = _memory(request, namespace, key)
    item = _item(memory, set_name, item_id)
    folded = item.compacted_from[:MAX_FOLDED_CHECKED]
    existing = {found.id for found in memory.get(set_name, folded)} if folded else set()
    history = audit.for_item(console_of(request), namespace, key, set_name, item.id)
    return render(
        request,
        "item.html",
        who=who,
        namespace=namespace,
        key=key,
        set_name=set_name,
        item=item,
        item_path=item_url(namespace, key, set_name, item.id),
        existing=existing,
        checked=len(folded),
        history=history,
        scanned=audit.ITEM_SCAN,
    )
