"""Checks the client runs before anything is sent: names, queries, per-item lifecycle fields."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from memory_core.core.errors import InvalidRequestError
from memory_core.core.models import (
    ItemId,
    Key,
    Namespace,
    SetName,
)
from memory_core.core.settings import LimitsSettings
from memory_core.core.validation import (
    check_lifecycle,
    check_text,
    short_repr,
)

NAMESPACE: TypeAdapter[str] = TypeAdapter(Namespace)
KEY: TypeAdapter[str] = TypeAdapter(Key)
SET_NAME: TypeAdapter[str] = TypeAdapter(SetName)
ITEM_ID: TypeAdapter[str] = TypeAdapter(ItemId)


def checked(adapter: TypeAdapter[str], value: object, what: str) -> str:
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        raise InvalidRequestError(f"{what} {short_repr(value)} is invalid: {reason}") from exc


def check_query(query: object, limit: object, limits: LimitsSettings) -> None:
    """The checks ``search`` and ``recall`` share: a non-empty UTF-8 query within size, a limit in range."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidRequestError(f"query must be a non-empty str, got {short_repr(query)}")
    check_text(query, "query", limits.max_query_chars)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= limits.max_search_limit:
        raise InvalidRequestError(f"limit must be an int from 1 to {limits.max_search_limit}, got {limit!r}")


LIFECYCLE = ("importance", "source", "pinned", "ttl", "expires_at")


def lifecycle_fields(options: dict[str, Any], count: int, now: datetime) -> list[dict[str, Any]]:
    """Per-item lifecycle fields from keywords that are each one value for all items or a list of ``count``.

    Each value is checked as given (``check_lifecycle``): pydantic alone would coerce ``True`` to an importance
    of 1.0 or ``"yes"`` to pinned, and would let a ttl through that overflows the worker's date arithmetic.
    """
    unknown = set(options) - set(LIFECYCLE)
    if unknown:
        raise InvalidRequestError(f"unknown add() options {sorted(unknown)}; expected some of {list(LIFECYCLE)}")
    per_item: list[dict[str, Any]] = [{} for _ in range(count)]
    for name, value in options.items():
        if value is None:
            continue
        if isinstance(value, list | tuple):
            if len(value) != count:
                raise InvalidRequestError(
                    f"got {len(value)} values of {name!r} for {count} items; give one or one each"
                )
            values = list(value)
        else:
            values = [value] * count
        for i, (fields, one) in enumerate(zip(per_item, values, strict=True)):
            if one is not None:
                check_lifecycle(name, one, f"item {i}", now)
                fields[name] = one
    return per_item
