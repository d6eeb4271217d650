"""Corrections of one item from the console: what a form asks to change, and the write that changes it.

A correction goes through the same write path as the API: ``LongTermMemory.add`` with the item's own id (the
queue, the embedder, the store's monotonic versions), or ``delete``. ``add`` with an existing id replaces the
item (value, metadata, times, place in the order), so every field the correction does not change is carried
over explicitly: value, metadata, importance, pin, source and expiry. Its created time becomes the time of
the correction: the store keeps no older version of an item.

Summaries and formed facts are only ever deleted here: ``add`` writes plain items, so a rewrite would drop a
summary's ``compacted_from`` and a fact's provenance and history links.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memory_core.client.long_term import LongTermMemory
from memory_core.core.errors import InvalidRequestError
from memory_core.core.models import ChatMessage, MemorySetItem, MessageRole, utcnow
from memory_core.core.settings import LimitsSettings
from memory_core.core.validation import check_metadata, check_value, short_repr

ACTIONS = ("value", "metadata", "pin", "importance", "expiry", "delete")
"""What a correction may change."""


@dataclass(frozen=True)
class Form:
    """The fields a correction form sends (all text, as browsers send them)."""

    action: str = ""
    value: str = ""
    role: str = ""
    metadata: str = ""
    pinned: str = ""
    importance: str = ""
    expires_at: str = ""


@dataclass(frozen=True)
class Change:
    """One correction asked for: its field, the values before and after, and how to write it.

    ``carried``: the form fields that carry the same change to the confirmation step. ``before`` and ``after``
    are JSON values, as the audit log keeps them.
    """

    what: str
    before: Any
    after: Any
    carried: dict[str, str]
    value: str | ChatMessage | None = None
    metadata: dict[str, Any] | None = None
    lifecycle: dict[str, Any] = field(default_factory=dict)

    @property
    def changes_anything(self) -> bool:
        return self.what == "delete" or self.before != self.after


def rewritable(item: MemorySetItem) -> bool:
    """Whether a correction may rewrite ``item`` (summaries and facts may only be deleted)."""
    return not item.compacted and item.fact is None


def propose(item: MemorySetItem, form: Form, limits: LimitsSettings, now: datetime | None = None) -> Change:
    """The change ``form`` asks for on ``item``; ``InvalidRequestError`` naming the field when it is not valid."""
    action = form.action
    if action not in ACTIONS:
        raise InvalidRequestError(f"correction {short_repr(action)} is not one of {', '.join(ACTIONS)}")
    if action == "delete":
        return Change("delete", _snapshot(item), None, {"action": "delete"})
    if not rewritable(item):
        raise InvalidRequestError(
            f"item {item.id!r} is a {'summary' if item.compacted else 'formed fact'}: a rewrite would drop its "
            "provenance, so the console only deletes it"
        )
    if action == "value":
        value = _value(item, form, limits)
        carried = {"action": action, "value": form.value, "role": form.role}
        return Change(action, plain(item.value), plain(value), carried, value=value)
    if action == "metadata":
        metadata = _metadata(form.metadata, limits)
        return Change(
            action, item.additional_metadata, metadata, {"action": action, "metadata": form.metadata}, metadata=metadata
        )
    if action == "pin":
        pinned = _choice(form.pinned, "pinned")
        return Change(
            action, item.pinned, pinned, {"action": action, "pinned": form.pinned}, lifecycle={"pinned": pinned}
        )
    if action == "importance":
        importance = _importance(form.importance)
        carried = {"action": action, "importance": form.importance}
        return Change(action, item.importance, importance, carried, lifecycle={"importance": importance})
    expires_at = _expiry(form.expires_at, now or utcnow())
    carried = {"action": action, "expires_at": form.expires_at}
    return Change(action, _iso(item.expires_at), _iso(expires_at), carried, lifecycle={"expires_at": expires_at})


def apply(memory: LongTermMemory, set_name: str, item: MemorySetItem, change: Change) -> MemorySetItem | None:
    """Writes ``change`` through the queue and waits until it is durable; the item as it now is (None: deleted)."""
    if change.what == "delete":
        memory.delete(set_name, [item.id])
        return None
    lifecycle: dict[str, Any] = {"importance": item.importance, "pinned": item.pinned, "source": item.source}
    if item.expires_at is not None and item.expires_at > utcnow():
        lifecycle["expires_at"] = item.expires_at
    lifecycle.update(change.lifecycle)
    kept = {name: value for name, value in lifecycle.items() if value is not None}
    value = change.value if change.value is not None else item.value
    metadata = change.metadata if change.metadata is not None else item.additional_metadata
    memory.add(set_name, [value], ids=[item.id], metadatas=[metadata], **kept)
    found = memory.get(set_name, [item.id])
    return found[0] if found else None


def after(change: Change, written: MemorySetItem | None) -> Any:
    """What the audit log records as the value after: the field as the store now holds it (the set's default
    TTL, a redaction), or what was asked when the item is gone."""
    fields: dict[str, Any] = {
        "value": None if written is None else plain(written.value),
        "metadata": None if written is None else written.additional_metadata,
        "pin": None if written is None else written.pinned,
        "importance": None if written is None else written.importance,
        "expiry": None if written is None else _iso(written.expires_at),
    }
    return change.after if written is None or change.what not in fields else fields[change.what]


def plain(value: str | ChatMessage) -> Any:
    """An item's value as a JSON value: text as it is, a chat message as its fields."""
    return value if isinstance(value, str) else value.model_dump(mode="json")


def _snapshot(item: MemorySetItem) -> dict[str, Any]:
    """What a deleted item was: enough to write it back by hand."""
    return {
        "value": plain(item.value),
        "metadata": item.additional_metadata,
        "importance": item.importance,
        "pinned": item.pinned,
        "source": item.source,
        "expires_at": _iso(item.expires_at),
    }


def _value(item: MemorySetItem, form: Form, limits: LimitsSettings) -> str | ChatMessage:
    text = form.value.replace("\r\n", "\n")  # browsers send a textarea's line ends as CRLF
    if isinstance(item.value, ChatMessage):
        if form.role not in {role.value for role in MessageRole}:
            raise InvalidRequestError(f"role {short_repr(form.role)} is not one of system, user, assistant, tool")
        value: str | ChatMessage = item.value.model_copy(update={"role": MessageRole(form.role), "content": text})
        check_value(value, ChatMessage, "the new value", limits)
        return value
    check_value(text, str, "the new value", limits)
    return text


def _metadata(text: str, limits: LimitsSettings) -> dict[str, Any]:
    try:
        metadata = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise InvalidRequestError(f'metadata is not JSON ({exc}); give an object like {{"topic": "work"}}') from exc
    if not isinstance(metadata, dict):
        raise InvalidRequestError(
            f'metadata is a {type(metadata).__name__}; give a JSON object like {{"topic": "work"}}'
        )
    check_metadata(metadata, "metadata", limits)
    return metadata


def _choice(text: str, what: str) -> bool:
    if text not in ("yes", "no"):
        raise InvalidRequestError(f"{what} {short_repr(text)} is not 'yes' or 'no'")
    return text == "yes"


def _importance(text: str) -> float:
    try:
        importance = float(text)
    except ValueError:
        importance = -1.0
    if not 0.0 <= importance <= 1.0:
        raise InvalidRequestError(f"importance {short_repr(text)} is not a number from 0 to 1")
    return importance


def _expiry(text: str, now: datetime) -> datetime | None:
    """The new expiry: None for the set's default (no expiry in a set without a TTL), else a time in UTC."""
    if not text.strip():
        return None
    try:
        expires_at = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise InvalidRequestError(
            f"expiry {short_repr(text)} is not a time; give one like 2030-01-31T12:00 (UTC), or nothing"
        ) from exc
    if expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=UTC)  # the form says its times are UTC
    if expires_at <= now:
        raise InvalidRequestError(f"expiry {expires_at.isoformat()} is in the past; to remove the item, delete it")
    return expires_at


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()
