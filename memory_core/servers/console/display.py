"""How the console's views show values: times, JSON, excerpts of memory text. Registered as template filters.

Every function returns plain text: the templates escape it (autoescape), so nothing here may return markup.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from memory_core.core.models import ChatMessage, DatetimeRange, MemorySetItem, utcnow
from memory_core.servers.console.pages import templates


def when(value: datetime | DatetimeRange | None) -> str:
    """A time in UTC to the second (a summary's range as ``start – end``); empty for None."""
    if value is None:
        return ""
    if isinstance(value, DatetimeRange):
        return f"{when(value.start)} – {when(value.end)}"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def seq_time(seq: int | None) -> datetime | None:
    """When an item was last written: its ``seq`` is the writing client's clock in nanoseconds since the epoch."""
    if seq is None:
        return None
    try:
        return datetime.fromtimestamp(seq / 1e9, UTC)
    except (OverflowError, OSError, ValueError):
        return None  # not a time: a store that numbers its writes otherwise


def remaining(expires_at: datetime | None, now: datetime | None = None) -> str:
    """How long until ``expires_at``, coarsely (``3 d 4 h``, ``12 min``); ``expired`` once past."""
    if expires_at is None:
        return ""
    seconds = int((expires_at - (now or utcnow())).total_seconds())
    if seconds <= 0:
        return "expired"
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size} {unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return "in " + " ".join(parts)


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON text (non-ASCII kept): how metadata, lists and audit values are shown."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, indent=indent, default=str)


def scalar(value: Any) -> str:
    """A metadata value as text: a string as it is (never a link, whatever it holds), anything else as JSON."""
    return value if isinstance(value, str) else json_text(value)


def text_of(value: str | ChatMessage) -> str:
    """An item's value as text: a chat message as ``role: content``."""
    return str(value)


def excerpt(text: str, length: int = 240) -> str:
    """The start of ``text``, cut at ``length`` characters (with an ellipsis when cut)."""
    return text if len(text) <= length else text[: length - 1] + "…"


def score(value: float | None) -> str:
    """A score to four decimals; empty when the ranker did not score the item."""
    return "" if value is None else f"{value:.4f}"


def kind(item: MemorySetItem) -> str:
    """What an item is: a summary, a fact (live or superseded), or an item."""
    if item.compacted:
        return "summary"
    if item.fact is not None:
        return "fact" if item.fact.live else "superseded fact"
    return "item"


for _name, _function in {
    "when": when,
    "seq_time": seq_time,
    "remaining": remaining,
    "json_text": json_text,
    "scalar": scalar,
    "text_of": text_of,
    "excerpt": excerpt,
    "score": score,
    "kind": kind,
}.items():
    templates.filters[_name] = _function
