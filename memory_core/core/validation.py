"""Checks shared by the client (before enqueueing) and the worker (on every raw message).

Every failure raises ``InvalidRequestError`` naming the offending value and what was expected.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memory_core.core.errors import InvalidRequestError
from memory_core.core.models import ChatMessage
from memory_core.core.settings import LimitsSettings

M = TypeVar("M", bound=BaseModel)

# Always applied with fullmatch: re.match with "$" would let a trailing newline through.
FILTER_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")

MAX_TTL_SECONDS = 100 * 365 * 24 * 3600
"""The longest time to live anything accepts: 100 years, in seconds.

Far inside what ``datetime`` arithmetic can reach (year 9999), and near enough that an expiry stored as
float epoch seconds still reads back to the exact microsecond.
"""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The ints metadata and filters may hold. The store turns wider ints into floats (``10**30`` came back
as ``1e+30``), and its filter conditions take a signed 64-bit integer (a C long) only."""


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, so error messages stay readable (and small)."""
    if isinstance(value, int) and value.bit_length() > 4 * limit:
        # Too long to show anyway, and str() of an int past ~4300 digits raises ValueError.
        return f"<int of {value.bit_length()} bits>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse(model: type[M], data: object, what: str) -> M:
    """Validates ``data`` as ``model``, turning pydantic's error into an ``InvalidRequestError``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in err['loc']) or what}: {err['msg']} (got {short_repr(err.get('input'))})"
            for err in exc.errors()[:5]
        ]
        raise InvalidRequestError(f"invalid {what}: " + "; ".join(problems)) from exc


def check_text(text: str, what: str, max_chars: int) -> None:
    """Rejects text that is too long or not encodable as UTF-8 (lone surrogates)."""
    if len(text) > max_chars:
        raise InvalidRequestError(f"{what} has {len(text)} characters; at most {max_chars} are allowed")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(f"{what} is not valid UTF-8 text ({exc.reason} at {exc.start})") from exc


def check_value(value: object, item_type: type[str | ChatMessage], what: str, limits: LimitsSettings) -> None:
    """Checks one item value against its set's type and the size limit."""
    if item_type is str:
        if not isinstance(value, str):
            raise InvalidRequestError(f"{what} is {type(value).__name__} {short_repr(value)}; this set holds str")
        if not value.strip():
            raise InvalidRequestError(f"{what} is {short_repr(value)}: empty or only whitespace; an item needs text")
        check_text(value, what, limits.max_value_chars)
        return
    if not isinstance(value, ChatMessage):
        raise InvalidRequestError(f"{what} is {type(value).__name__} {short_repr(value)}; this set holds ChatMessage")
    if not value.content.strip() and not value.tool_calls:
        raise InvalidRequestError(f"{what} has no content and no tool calls; a message needs one of them")
    check_text(value.content, f"{what}.content", limits.max_value_chars)
    check_metadata({"tool_calls": value.tool_calls, "extra_args": value.extra_args}, f"{what} extras", limits)


def check_metadata(metadata: object, what: str, limits: LimitsSettings) -> None:
    """Metadata must be a JSON object of finite numbers, strings, bools, nulls, lists and objects."""
    if not isinstance(metadata, Mapping):
        raise InvalidRequestError(f"{what} is {type(metadata).__name__}; expected a dict")
    _check_json(metadata, what, limits.max_metadata_depth, 1)
    try:
        size = len(json.dumps(metadata, allow_nan=False, ensure_ascii=False).encode("utf-8"))
    except (TypeError, ValueError) as exc:  # defensive: _check_json already rejects these
        raise InvalidRequestError(f"{what} is not JSON-serializable: {exc}") from exc
    if size > limits.max_metadata_bytes:
        raise InvalidRequestError(f"{what} is {size} bytes as JSON; at most {limits.max_metadata_bytes} are allowed")


def _check_number(value: float, where: str) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise InvalidRequestError(
            f"{where} is {short_repr(value)}; ints must fit in signed 64 bits ({INT64_MIN} to {INT64_MAX})"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidRequestError(f"{where} is {value!r}; only finite numbers are allowed")


def _check_json(value: Any, where: str, max_depth: int, depth: int) -> None:
    if value is None:
        return
    if isinstance(value, int | float):  # bool included
        _check_number(value, where)
        return
    if isinstance(value, str):
        check_text(value, where, 1 << 30)
        return
    if depth > max_depth:
        raise InvalidRequestError(f"{where} nests deeper than {max_depth} levels")
    if isinstance(value, list | tuple):
        for i, element in enumerate(value):
            _check_json(element, f"{where}[{i}]", max_depth, depth + 1)
        return
    if isinstance(value, Mapping):
        for k, element in value.items():
            if not isinstance(k, str):
                raise InvalidRequestError(f"{where} has key {k!r}; keys must be str")
            check_text(k, f"{where} key", 256)
            _check_json(element, f"{where}.{k}", max_depth, depth + 1)
        return
    raise InvalidRequestError(f"{where} is {type(value).__name__} {short_repr(value)}; expected a JSON value")


def check_filters(filters: object) -> None:
    """Search filters: a mapping of metadata key -> a str or int value, or a list of them (match any).

    Strs must be UTF-8 encodable and ints must fit in signed 64 bits, as in stored metadata.
    """
    if not isinstance(filters, Mapping):
        raise InvalidRequestError(f"filters is {type(filters).__name__} {short_repr(filters)}; expected a dict")
    for name, expected in filters.items():
        if not isinstance(name, str) or not FILTER_KEY.fullmatch(name):
            raise InvalidRequestError(
                f"filter key {short_repr(name)} is not a metadata key matching {FILTER_KEY.pattern}"
            )
        values = expected if isinstance(expected, list) else [expected]
        if not values:
            raise InvalidRequestError(f"filter {name!r} has an empty list; give at least one value")
        for v in values:
            if isinstance(v, bool):
                # qdrant-edge-py 0.9.0 turns MatchValue(True) into the integer 1, so a bool filter would
                # silently match nothing on the embedded engine; refuse it rather than mean different things.
                raise InvalidRequestError(
                    f"filter {name!r} value {v!r} is a bool; bool filters are not supported, store 'true'/'false'"
                )
            if not isinstance(v, str | int):
                raise InvalidRequestError(f"filter {name!r} value {short_repr(v)} is not a str or int")
            if isinstance(v, str):
                check_text(v, f"filter {name!r} value {short_repr(v)}", 1 << 30)
            elif not INT64_MIN <= v <= INT64_MAX:
                raise InvalidRequestError(
                    f"filter {name!r} value {short_repr(v)} is outside the signed 64-bit range "
                    f"({INT64_MIN} to {INT64_MAX})"
                )


def check_ttl(value: object, what: str, minimum: int) -> int:
    """A time to live in whole seconds, from ``minimum`` to ``MAX_TTL_SECONDS``."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_TTL_SECONDS:
        raise InvalidRequestError(
            f"{what} must be an int of seconds from {minimum} to {MAX_TTL_SECONDS}, got {short_repr(value)}"
        )
    return value


MAX_COUNT = 1_000_000
"""The largest count a call may ask for (a list's ``limit``, a page size): more than any answer holds."""


def check_count(value: object, what: str, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """A whole number from ``minimum`` to ``maximum`` (a limit, a ``k``, a capacity): bools and floats refused."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidRequestError(f"{what} must be an int from {minimum} to {maximum}, got {short_repr(value)}")
    return value


MAX_TOKENS = 10_000_000
"""The largest token count a call may name (a recall's ``token_budget``, a strategy's ``max_tokens``): several
times the largest context window of any model, and small enough that token arithmetic stays exact."""

MAX_WAIT_SECONDS = 7 * 86_400
"""The longest a call may be told to wait for a worker's reply (a ``timeout``): a week, in seconds. Past it
a wait is a hang, and ``time.monotonic() + timeout`` must stay a finite, exact deadline."""


def check_seconds(value: object, what: str, maximum: float = MAX_WAIT_SECONDS) -> float:
    """A duration in seconds (an int or a finite float) above 0 and at most ``maximum``: bools, NaN, inf refused.

    A range check alone refuses NaN (it compares False with everything, so a deadline of NaN would never pass)
    and inf; ``math.isfinite`` would raise ``OverflowError`` on an int past float range (``10**400``).
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= maximum:
        raise InvalidRequestError(
            f"{what} must be a finite number of seconds above 0 and at most {maximum:g}, got {short_repr(value)}"
        )
    return float(value)


def check_lifecycle(name: str, value: object, what: str, now: datetime) -> None:
    """One lifecycle field of an item to add, taken as given: no coercion, so what is stored is what was passed.

    ``importance``: a number from 0 to 1. ``pinned``: a bool. ``source``: a str of at most 200 characters.
    ``ttl``: an int of seconds from 1 to ``MAX_TTL_SECONDS``. ``expires_at``: an aware datetime within
    ``MAX_TTL_SECONDS`` of ``now`` (the creation time).
    """
    label = f"{name} of {what}"
    if name == "importance":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise InvalidRequestError(f"{label} is {short_repr(value)}; expected a number from 0 to 1")
    elif name == "pinned":
        if not isinstance(value, bool):
            raise InvalidRequestError(f"{label} is {short_repr(value)}; expected a bool")
    elif name == "source":
        if not isinstance(value, str):
            raise InvalidRequestError(f"{label} is {short_repr(value)}; expected a str or None")
        check_text(value, label, 200)
    elif name == "ttl":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TTL_SECONDS:
            raise InvalidRequestError(
                f"{label} is {short_repr(value)}; expected an int of seconds from 1 to {MAX_TTL_SECONDS}"
            )
    elif name == "expires_at":
        _check_expiry(value, label, now)


def _check_expiry(value: object, label: str, now: datetime) -> None:
    if not isinstance(value, datetime):
        raise InvalidRequestError(f"{label} is {short_repr(value)}; expected an aware datetime")
    if value.utcoffset() is None:
        raise InvalidRequestError(f"{label} is {value.isoformat()} and has no timezone; expected an aware datetime")
    span = timedelta(seconds=MAX_TTL_SECONDS)
    earliest, latest = now - span, now + span
    if not earliest <= value <= latest:
        raise InvalidRequestError(
            f"{label} is {value.isoformat()}; expected at most {MAX_TTL_SECONDS} seconds (100 years) from now, "
            f"between {earliest.isoformat()} and {latest.isoformat()}"
        )
