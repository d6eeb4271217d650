"""Reading back the JSON memory-core keeps in Redis: it builds data only, and a bad value fails one call, typed.

Anyone who can write to Redis can plant a value under one of our keys, and a bug or a
truncated write can leave one: JSON nested past the interpreter's recursion limit (which
``json`` answers with ``RecursionError``, not ``ValueError``), bytes that are no UTF-8,
numbers with more digits than ``int`` parses, a list where an object belongs. Every read of
stored JSON goes through ``stored_json`` or ``stored_model``, which turn any of these into a
``CorruptDataError`` naming what was read; nothing else is caught, and nothing is evaluated.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memory_core.core.errors import CorruptDataError

M = TypeVar("M", bound=BaseModel)

MAX_STORED_DEPTH = 200
"""How deeply stored JSON may nest: pydantic's own JSON parser's limit, far past what memory-core writes (short-term
state: 32 levels, checkpoints: 16, metadata: ``limits.max_metadata_depth``), and far enough below the recursion
limit that whatever walks the value afterwards (``json.dumps``, a merge) cannot exhaust the stack."""

# A decoder or a validator can fail in many ways on hostile input; each of these is one bad value, not a bug of
# the caller, and none leaves the process in a state it cannot go on from (the stack has unwound).
_UNREADABLE = (ValueError, TypeError, RecursionError, MemoryError, OverflowError, ValidationError)


def stored_json(raw: bytes | bytearray | str, what: str) -> Any:
    """``raw`` decoded as JSON, nested at most ``MAX_STORED_DEPTH`` levels.

    Raises:
        CorruptDataError: ``raw`` is not such JSON; the message names ``what`` (e.g. "checkpoint 'c1'").
    """
    try:
        value = json.loads(raw)
    except _UNREADABLE as exc:
        raise CorruptDataError(f"{what} read back from Redis is not valid JSON: {_describe(exc)}") from exc
    depth = nesting(value)
    if depth > MAX_STORED_DEPTH:
        raise CorruptDataError(f"{what} read back from Redis nests {depth} levels deep, more than {MAX_STORED_DEPTH}")
    return value


def stored_object(raw: bytes | bytearray | str, what: str) -> dict[str, Any]:
    """``stored_json`` of a value that must be a JSON object."""
    value = stored_json(raw, what)
    if not isinstance(value, dict):
        raise CorruptDataError(f"{what} read back from Redis is a JSON {type(value).__name__}, not an object")
    return value


def stored_model(model: type[M], raw: bytes | bytearray | str, what: str) -> M:
    """``raw`` (JSON) validated as ``model``.

    Raises:
        CorruptDataError: ``raw`` is no valid ``model``; the message names ``what``.
    """
    try:
        # pydantic's own JSON parser bounds nesting itself (a ValidationError past its limit).
        return model.model_validate_json(raw)
    except _UNREADABLE as exc:
        raise CorruptDataError(
            f"{what} read back from Redis is not a valid {model.__name__}: {_describe(exc)}"
        ) from exc


def nesting(value: Any) -> int:
    """How many levels of lists and dicts ``value`` nests (0 for a scalar); iterative, so any depth is safe."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        current, depth = pending.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_STORED_DEPTH:
            return deepest  # enough to refuse it; no need to walk the rest
        pending.extend((child, depth + 1) for child in children)
    return deepest


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False, include_input=False)[:1]
        where = ".".join(str(part) for part in first[0]["loc"]) if first else ""
        return f"{exc.error_count()} error(s), first at {where or 'the top'}: {first[0]['msg'] if first else ''}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"
