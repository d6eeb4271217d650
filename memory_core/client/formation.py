"""Formation from the app's side: ``remember`` (messages in, an operation receipt out), ``operation``,
``history`` and ``forget_sources``, as operations both clients run (``core.steps``).

The operation id is derived here, before anything is sent (``core.formation.operation_id``): the same call
twice is the same operation, and the worker replays the first one's decisions instead of forming again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memory_core.client.checks import ITEM_ID, SET_NAME, checked
from memory_core.core import routing
from memory_core.core.errors import InvalidRequestError
from memory_core.core.formation import message_id, operation_id
from memory_core.core.liveness import alive
from memory_core.core.messages import (
    ForgetSourcesReport,
    ForgetSourcesRequest,
    FormationRecord,
    FormationReport,
    FormMessage,
    HistoryRequest,
    ItemsReply,
    OperationRequest,
    RememberRequest,
)
from memory_core.core.models import FORMATION_PROMPT_VERSION, VERBATIM, ChatMessage, MessageRole, Scope, utcnow
from memory_core.core.steps import Call, Command, Operation, Send
from memory_core.core.validation import check_seconds, check_text, short_repr

if TYPE_CHECKING:
    from memory_core.client.long_term import ClientParts

MessageLike = ChatMessage | Mapping[str, Any]
_FIELDS = frozenset({"role", "content", "id", "at"})


def form_messages(messages: Sequence[MessageLike], max_messages: int, max_chars: int) -> list[FormMessage]:
    """The messages as formation takes them, each checked; an id derived where none was given."""
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise InvalidRequestError(
            f"messages must be a list of ChatMessage or {{role, content}} dicts, got {type(messages).__name__}"
        )
    if not messages:
        raise InvalidRequestError("messages is empty; give at least one message to remember")
    if len(messages) > max_messages:
        raise InvalidRequestError(
            f"remember got {len(messages)} messages; at most {max_messages} per call (MEMORY_FORMATION__MAX_MESSAGES)"
        )
    return [_form_message(message, position, max_chars) for position, message in enumerate(messages)]


def _form_message(message: MessageLike, position: int, max_chars: int) -> FormMessage:
    where = f"messages[{position}]"
    given_id: Any = None
    at: Any = None
    role: Any
    content: Any
    if isinstance(message, ChatMessage):
        role, content = message.role.value, message.content
        given_id, at = message.extra_args.get("id"), message.extra_args.get("at")
    elif isinstance(message, Mapping):
        unknown = sorted(str(k) for k in message if k not in _FIELDS)
        if unknown:
            raise InvalidRequestError(f"{where} has unknown fields {unknown}; a message has {sorted(_FIELDS)}")
        role, content = message.get("role", "user"), message.get("content")
        given_id, at = message.get("id"), message.get("at")
    else:
        raise InvalidRequestError(f"{where} is {type(message).__name__}; expected a ChatMessage or a dict")
    if role not in {r.value for r in MessageRole}:
        raise InvalidRequestError(f"{where} role {short_repr(role)} is not one of user, assistant, system, tool")
    if not isinstance(content, str) or not content.strip():
        raise InvalidRequestError(f"{where} content {short_repr(content)} is not a non-empty string")
    check_text(content, f"{where} content", max_chars)
    if at is not None and not (isinstance(at, datetime) and at.tzinfo is not None):
        raise InvalidRequestError(f"{where} at {short_repr(at)} is not a timezone-aware datetime")
    ident = checked(ITEM_ID, given_id, f"{where} id") if given_id is not None else message_id(role, content, position)
    return FormMessage(id=ident, role=MessageRole(role), content=content, at=at)


class FormationOperations:
    """Formation calls of one ``(namespace, key)``."""

    def __init__(self, client: ClientParts, namespace: str, key: str) -> None:
        self._client = client
        self.namespace = namespace
        self.key = key

    def remember(
        self, messages: Sequence[MessageLike], set_name: str, *, wait: bool, timeout: float | None
    ) -> Operation[FormationReport]:
        if timeout is not None:
            check_seconds(timeout, "timeout")
        settings = self._client.settings
        name = checked(SET_NAME, set_name, "memory set name")
        formed = form_messages(messages, settings.formation.max_messages, settings.limits.max_value_chars)
        model = settings.formation.model
        scope = Scope(self.namespace, self.key, name)
        op_id = operation_id(scope, [m.id for m in formed], FORMATION_PROMPT_VERSION, model)
        now = utcnow()
        request = RememberRequest(
            namespace=self.namespace,
            key=self.key,
            set_name=name,
            op_id=op_id,
            messages=formed,
            model=model,
            prompt_version=FORMATION_PROMPT_VERSION,
            seq=self._client.reserve_seq(1),
            received_at=now,
        )
        receipt = FormationReport(
            op_id=op_id,
            namespace=self.namespace,
            key=self.key,
            set_name=name,
            status="pending",
            created_at=now,
            updated_at=now,
        )
        record_key = self._client.keys.formation_operation(self.namespace, self.key, op_id)
        pending = FormationRecord(report=receipt).model_dump_json()
        # Only where no record is: a repeated call must not hide how the first one ended.
        yield Command(lambda r: r.set(record_key, pending, nx=True, ex=settings.formation.operation_ttl))
        summary = json.dumps({"namespace": self.namespace, "key": self.key, "set": name, "messages": len(formed)})
        if wait:
            limit = max(settings.client.timeout, 600.0) if timeout is None else timeout
            return FormationReport.model_validate((yield Call(routing.FORM, request, summary, limit)))
        yield Send(routing.FORM, request, summary)
        formers = {
            w.former
            for w in (yield from alive(self._client.keys, self._client.keys.queue_workers(routing.FORMATION_QUEUE)))
        }
        if formers == {VERBATIM}:
            receipt.formed_by = VERBATIM
            receipt.notes.append(
                "the workers have no model (MEMORY_ANTHROPIC__API_KEY): the user's own turns are kept verbatim as "
                "facts marked formed_by='verbatim'; `memory-core formation replay` forms them once a key is set"
            )
        return receipt

    def operation(self, op_id: str) -> Operation[FormationReport]:
        if not isinstance(op_id, str):
            raise InvalidRequestError(f"op_id must be a str, got {type(op_id).__name__}")
        request = OperationRequest(namespace=self.namespace, key=self.key, op_id=op_id)
        summary = json.dumps({"namespace": self.namespace, "key": self.key})
        return FormationReport.model_validate((yield Call(routing.OPERATION, request, summary)))

    def history(self, fact_id: str, set_name: str) -> Operation[list[Any]]:
        request = HistoryRequest(
            namespace=self.namespace,
            key=self.key,
            set_name=checked(SET_NAME, set_name, "memory set name"),
            fact_id=checked(ITEM_ID, fact_id, "fact id"),
        )
        summary = json.dumps({"namespace": self.namespace, "key": self.key, "set": request.set_name})
        return ItemsReply.model_validate((yield Call(routing.FACT_HISTORY, request, summary))).items

    def forget_sources(self, source_ids: Sequence[str], set_name: str) -> Operation[ForgetSourcesReport]:
        if isinstance(source_ids, str) or not isinstance(source_ids, Sequence) or not source_ids:
            raise InvalidRequestError(
                f"source_ids must be a non-empty list of message ids, got {short_repr(source_ids)}"
            )
        request = ForgetSourcesRequest(
            namespace=self.namespace,
            key=self.key,
            set_name=checked(SET_NAME, set_name, "memory set name"),
            source_ids=[checked(ITEM_ID, i, "message id") for i in source_ids],
            seq=self._client.reserve_seq(1),
        )
        summary = json.dumps({"namespace": self.namespace, "key": self.key, "set": request.set_name})
        return ForgetSourcesReport.model_validate((yield Call(routing.FORGET_SOURCES, request, summary)))
