"""A memory set's page: its items a page at a time, filtered and sorted on the workers (``browse``).

Everything the page shows is in its URL's query (filters, sort, page), so a view is a link. Paging is by the
workers' opaque cursors: ``cursor`` opens the current page and ``back`` (repeated) holds the cursors of the
pages before it, so Previous pops the last one. The stack keeps the newest cursors up to ``MAX_BACK_CHARS``
(a URL stays well under servers' limits); ``skipped`` counts the pages dropped from its bottom, so the page
number stays right and Previous from the oldest kept page offers only the first. Reversing the sort to page
backwards would need a cursor for the start of the current page, which ``browse`` does not give.

The filter form is a plain GET form; htmx, when it runs, swaps only the items (``_set_items.html``) and pushes
the same URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from memory_core.core.errors import InvalidRequestError
from memory_core.core.validation import short_repr
from memory_core.servers.console import display  # noqa: F401  (registers the templates' filters)
from memory_core.servers.console.pages import Signed, console_of, granted, render

router = APIRouter(prefix="/ui", include_in_schema=False)

SORTS = {"created": "created", "updated": "last written", "importance": "importance", "last_access": "last access"}
SORTS["expires"] = "expiry (expiring items only)"
PAGE_SIZES = (20, 50, 100, 200)
MAX_BACK_CHARS = 4_000
"""The most characters of earlier pages' cursors a set page's URL carries."""
MAX_BACK = 100
_INT = re.compile(r"-?[0-9]{1,19}")


@dataclass(frozen=True)
class Filters:
    """A set page's query, as the form sends it (text); ``browse`` takes what ``arguments`` makes of it."""

    sort: str = "created"
    order: str = "desc"
    contains: str = ""
    field: str = ""
    value: str = ""
    created_from: str = ""
    created_to: str = ""
    compacted: str = ""
    pinned: str = ""
    expiring: str = ""
    min_importance: str = ""
    max_importance: str = ""
    limit: str = "50"
    cursor: str = ""
    back: tuple[str, ...] = ()
    skipped: str = ""

    def query(self, **changes: Any) -> str:
        """This query with ``changes``, URL-encoded; fields at their defaults are left out."""
        values = {f.name: getattr(self, f.name) for f in fields(self)} | changes
        defaults = Filters()
        pairs: list[tuple[str, str]] = []
        for name, value in values.items():
            if name == "back":
                pairs.extend(("back", cursor) for cursor in value)
            elif value != getattr(defaults, name):
                pairs.append((name, value))
        return urlencode(pairs)

    @property
    def dropped(self) -> int:
        """How many pages' cursors were dropped from the bottom of the stack."""
        return int(self.skipped) if self.skipped.isdigit() else 0

    def first_query(self) -> str:
        return self.query(cursor="", back=(), skipped="")

    def next_query(self, next_cursor: str) -> str:
        back, dropped = list(self.back), self.dropped
        if self.cursor:
            back.append(self.cursor)
        while len(back) > MAX_BACK or (back and sum(len(cursor) for cursor in back) > MAX_BACK_CHARS):
            back.pop(0)
            dropped += 1
        return self.query(cursor=next_cursor, back=tuple(back), skipped=str(dropped) if dropped else "")

    def previous_query(self) -> str | None:
        """The previous page's query; None when its cursor was dropped (only the first page is offered)."""
        if self.back:
            return self.query(cursor=self.back[-1], back=self.back[:-1])
        return self.first_query() if not self.dropped else None

    @property
    def page_number(self) -> int:
        """The page's number, from 1."""
        return len(self.back) + self.dropped + 2 if self.cursor else 1

    @property
    def filtered(self) -> bool:
        names = ("contains", "field", "created_from", "created_to", "compacted", "pinned", "expiring")
        return any(getattr(self, name) for name in (*names, "min_importance", "max_importance"))

    def arguments(self) -> dict[str, Any]:
        """``browse``'s keyword arguments; ``InvalidRequestError`` naming the field a value does not fit."""
        if self.sort not in SORTS:
            raise InvalidRequestError(f"sort {short_repr(self.sort)} is not one of {', '.join(SORTS)}")
        if self.order not in ("desc", "asc"):
            raise InvalidRequestError(f"order {short_repr(self.order)} is not 'desc' or 'asc'")
        if not self.limit.isdigit() or int(self.limit) not in PAGE_SIZES:
            raise InvalidRequestError(f"page size {short_repr(self.limit)} is not one of {PAGE_SIZES}")
        if self.value and not self.field.strip():
            raise InvalidRequestError("a metadata value needs the field it is the value of")
        return {
            "sort": self.sort,
            "descending": self.order == "desc",
            "cursor": self.cursor or None,
            "limit": int(self.limit),
            "contains": self.contains.strip() or None,
            "metadata": {self.field.strip(): metadata_value(self.value)} if self.field.strip() else None,
            "created_after": _time(self.created_from, "created from", end_of_day=False),
            "created_before": _time(self.created_to, "created until", end_of_day=True),
            "compacted": _tristate(self.compacted, "summaries"),
            "pinned": _tristate(self.pinned, "pinned"),
            "expiring": _tristate(self.expiring, "expiring"),
            "min_importance": _importance(self.min_importance, "least importance"),
            "max_importance": _importance(self.max_importance, "most importance"),
        }


def metadata_value(text: str) -> str | list[str | int]:
    """A metadata filter's value: the text, or when it reads as an integer, either the text or that integer (a
    form cannot say which was stored, and ints match only ints)."""
    if _INT.fullmatch(text) and -(2**63) <= int(text) < 2**63:
        return [text, int(text)]
    return text


def _time(text: str, what: str, *, end_of_day: bool) -> datetime | None:
    """A time the form gave (UTC); a bare date is its whole day (``until`` a date includes that date)."""
    text = text.strip()
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidRequestError(f"{what} {short_repr(text)} is not a date or time, like 2025-01-31") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if end_of_day and len(text) == 10:
        when += timedelta(days=1)
    return when


def _tristate(text: str, what: str) -> bool | None:
    if text not in ("", "yes", "no"):
        raise InvalidRequestError(f"{what} {short_repr(text)} is not 'yes', 'no' or empty")
    return None if not text else text == "yes"


def _importance(text: str, what: str) -> float | None:
    if not text.strip():
        return None
    try:
        number = float(text)
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        raise InvalidRequestError(f"{what} {short_repr(text)} is not a number from 0 to 1")
    return number


def set_path(namespace: str, key: str, set_name: str) -> str:
    return "/ui/ns/{}/keys/{}/sets/{}".format(*(quote(p, safe="") for p in (namespace, key, set_name)))


Text = Annotated[str, Query(max_length=4_000)]


@router.get("/ns/{namespace}/keys/{key}/sets/{set_name}")
def set_view(
    request: Request,
    namespace: str,
    key: str,
    set_name: str,
    who: Signed,
    sort: Text = "created",
    order: Text = "desc",
    contains: Text = "",
    field: Text = "",
    value: Text = "",
    created_from: Text = "",
    created_to: Text = "",
    compacted: Text = "",
    pinned: Text = "",
    expiring: Text = "",
    min_importance: Text = "",
    max_importance: Text = "",
    limit: Text = "50",
    cursor: Text = "",
    back: Annotated[list[str] | None, Query(max_length=MAX_BACK)] = None,
    skipped: Text = "",
) -> HTMLResponse:
    granted(who, namespace)
    filters = Filters(
        sort, order, contains, field, value, created_from, created_to, compacted, pinned, expiring,
        min_importance, max_importance, limit, cursor, tuple(back or ()), skipped,
    )  # fmt: skip
    memory = console_of(request).client(namespace).long_term(namespace, key)
    page, error = None, None
    try:
        page = memory.browse(set_name, **filters.arguments())
    except InvalidRequestError as exc:  # a filter the form or the client refused: said above the form
        error = str(exc)
    partial = request.headers.get("hx-target") == "items" and not request.headers.get("hx-history-restore-request")
    return render(
        request,
        "_set_items.html" if partial else "set.html",
        status=400 if error else 200,
        who=who,
        namespace=namespace,
        key=key,
        set_name=set_name,
        set_path=set_path(namespace, key, set_name),
        filters=filters,
        page=page,
        error=error,
        sorts=SORTS,
        page_sizes=PAGE_SIZES,
    )
