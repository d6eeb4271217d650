"""What recall gathers in the client from the volatile tiers: short-term state and the session."""

from __future__ import annotations

import json
from typing import Any

from memory_core.core.messages import RecallCandidate
from memory_core.core.steps import Operation
from memory_core.tiers.session.history import HistoryOperations
from memory_core.tiers.short_term import MemoryObject

_MAX_TEXT = 2_000


def from_short_term(state: MemoryObject, limit: int) -> list[RecallCandidate]:
    """One candidate per value in the state, as ``"path: value"``; bytes are left out (they are not text)."""
    found: list[RecallCandidate] = []
    _walk(state, found, limit)
    return found


def _walk(node: MemoryObject, found: list[RecallCandidate], limit: int) -> None:
    for name in node.get_field_names():
        if len(found) >= limit:
            return
        path = f"{node.path}.{name}" if node.path else name
        value = node.get(name)
        if isinstance(value, MemoryObject):
            _walk(value, found, limit)
        elif value is not None and not isinstance(value, bytes):
            text = f"{path}: {_as_text(value)}"[:_MAX_TEXT]
            found.append(RecallCandidate(tier="short_term", text=text, ref=path))


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=lambda v: "<bytes>")


def from_session(history: HistoryOperations, last: int, limit: int) -> Operation[list[RecallCandidate]]:
    """The session's summary and newest messages, each as the long-term set would store it (``"role: content"``)."""
    found: list[RecallCandidate] = []
    summary = (yield from history.summary_state()).summary
    if summary:
        found.append(RecallCandidate(tier="session", text=f"Summary: {summary}"[:_MAX_TEXT], ref="summary"))
    for entry in reversed((yield from history.entries(last=last))):
        if len(found) >= limit:
            break
        if entry.content.strip():
            text = str(entry.message)[:_MAX_TEXT]
            found.append(RecallCandidate(tier="session", text=text, ref=entry.id, created_at=entry.created_at))
    return found
