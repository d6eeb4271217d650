"""What every door (HTTP, MCP) checks the same way before a request reaches the client.

- A server without auth answers only requests sent to its own address: a web page that rebinds its own
  DNS name to 127.0.0.1 sends its name in ``Host``, and is refused (``own_hosts``), so it cannot write
  through the token-less server. The host lists live in ``memory_core.core.hosts``, shared with the
  workers' metrics endpoint.
- JSON holds finite numbers only: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (RFC 8259), and a
  number past a float's range would become one. The HTTP API parses bodies with ``loads_json``; the MCP
  server checks tool arguments, already parsed by its SDK, with ``check_finite``. Both refuse at any depth.
- Numbers the doors take have ceilings of their own (``MAX_RESULTS``...), shown in their schemas, so an
  out-of-range value is refused at the door, naming the value and the range, never deeper in Redis.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from memory_core.core.errors import InvalidRequestError
from memory_core.core.hosts import LOOPBACK, matches, own_hosts, own_origins
from memory_core.core.validation import short_repr
from memory_core.tiers.short_term import MemoryObject

__all__ = [
    "LOOPBACK",
    "MAX_LISTED",
    "MAX_RESULTS",
    "MAX_TOKEN_BUDGET",
    "check_finite",
    "loads_json",
    "matches",
    "own_hosts",
    "own_origins",
    "state_json",
]

MAX_RESULTS = 10_000
"""The most items one search or recall may ask for at a door; the deployment's own limit
(``MEMORY_LIMITS__MAX_SEARCH_LIMIT``, 100 by default) is checked by the client below it."""
MAX_LISTED = 1_000_000
"""The most checkpoints one listing may ask for."""
MAX_TOKEN_BUDGET = 10_000_000
"""The largest token budget of a recall: past any model's context."""


def loads_json(data: bytes | str) -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity``, ``-Infinity`` and numbers past a float's range.

    Raises ``json.JSONDecodeError`` (a ``ValueError``) naming the token, as for any other invalid JSON.
    """
    return json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)


def _refuse_constant(token: str) -> Any:
    raise json.JSONDecodeError(f"{token} is not a JSON number; send finite numbers only", token, 0)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise json.JSONDecodeError(f"{short_repr(text, 40)} is past the range of a float; send finite numbers", text, 0)
    return value


def check_finite(value: Any, where: str) -> None:
    """Raises ``InvalidRequestError`` naming the first float in ``value`` (at any depth) that is not finite.

    Walks with a stack of its own, so a deeply nested value cannot exhaust the interpreter's.
    """
    pending: list[tuple[Any, str]] = [(value, where)]
    while pending:
        node, path = pending.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise InvalidRequestError(f"{path} is {node!r}; only finite numbers are allowed (no NaN or Infinity)")
        if isinstance(node, dict):
            pending.extend((child, f"{path}.{name}") for name, child in node.items())
        elif isinstance(node, list | tuple):
            pending.extend((child, f"{path}[{index}]") for index, child in enumerate(node))


def state_json(value: Any) -> Any:
    """Short-term state as JSON: an object with everything under it, nested (``get_fields`` only marks
    objects), and bytes (which a Python caller may set; JSON has none) as ``{"base64": ...}``."""
    if isinstance(value, MemoryObject):
        return {name: state_json(value.get(name)) for name in value.get_field_names()}
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): state_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [state_json(v) for v in value]
    return value
