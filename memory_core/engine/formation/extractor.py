"""The extractor: what the model proposes to remember from some messages, checked before anything uses it.

One call does both halves of formation, extraction and reconciliation: the prompt quotes the messages and the
scope's most similar live facts (numbered: the model sees small integers, never ids), and the reply proposes
facts, each with its sources (message numbers) and a decision against the known facts (``add``, ``same``,
``update``, ``contradict``). One call, not two, because the decision needs the same context as the extraction
and a second call would double the latency and the input tokens.

The reply is the input of a forced tool call, validated whole by ``FormationReply`` (pydantic, unknown fields
refused). It has no field that could name a namespace, key or set, and no decision that deletes: whatever a
message asks of the model, it can only propose facts for the scope it came from. A reply that fails validation
gets one repair call (the prompt again, with the error); a second failure is a ``FormationError`` that carries
both raw replies. Rate limits, overload and timeouts are ``FormationBusy`` with the endpoint's ``Retry-After``:
the SDK's own retries are off, so no worker thread sleeps through a wait that the queue can keep instead.
"""

from __future__ import annotations

import email.utils
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any, Literal, Protocol

import anthropic
from anthropic.types import MessageParam, ToolChoiceToolParam, ToolParam
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memory_core.core.errors import ConfigurationError, FormationBusy, FormationError, SummarizerUnavailable
from memory_core.core.messages import FormMessage
from memory_core.core.models import VERBATIM, Decision, FactKind, MessageRole, describe
from memory_core.core.settings import AnthropicSettings
from memory_core.engine.compaction.claude import anthropic_client

logger = logging.getLogger(__name__)

TOOL_NAME = "record_memories"
_MAX_FACTS = 200
_DEFAULT_RETRY_AFTER = 5.0


@cache
def prompt_text(version: str) -> str:
    """The system prompt of ``version`` (``prompts/<version>.txt`` beside this module)."""
    try:
        return resources.files(__package__).joinpath("prompts", f"{version}.txt").read_text(encoding="utf-8")
    except (FileNotFoundError, ValueError) as exc:
        raise ConfigurationError(
            f"formation prompt version {version!r} is not known to this worker; upgrade the workers to the "
            "clients' release"
        ) from exc


def has_prompt(version: str) -> bool:
    """Whether this worker can form with prompt ``version``."""
    try:
        prompt_text(version)
    except ConfigurationError:
        return False
    return True


class ProposedFact(BaseModel):
    """One fact the model proposes, as its reply states it (numbers, not ids)."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=10_000)
    kind: FactKind = "fact"
    entities: list[str] = Field(default_factory=list, max_length=32)
    occurred_at: datetime | None = None
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    sources: list[int] = Field(min_length=1, max_length=1000)
    decision: Decision = "add"
    target: int | None = None

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("text is blank")
        return text.strip()

    @field_validator("entities")
    @classmethod
    def _short_entities(cls, entities: list[str]) -> list[str]:
        return [name.strip()[:200] for name in entities if name.strip()]

    @field_validator("occurred_at")
    @classmethod
    def _aware(cls, moment: datetime | None) -> datetime | None:
        # A date without a zone is the messages' own (UTC unless they say otherwise).
        return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


class FormationReply(BaseModel):
    """The tool input the model must send."""

    model_config = ConfigDict(extra="forbid")

    facts: list[ProposedFact] = Field(max_length=_MAX_FACTS)


@dataclass
class Proposal:
    """A validated reply, with what it cost and the raw replies that failed on the way."""

    reply: FormationReply
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    rejected: list[str] = field(default_factory=list)


class Extractor(Protocol):
    """Proposes facts from messages, reconciled against known facts (numbered from 1, in order)."""

    def propose(
        self,
        messages: Sequence[FormMessage],
        known: Sequence[str],
        *,
        model: str,
        prompt_version: str,
        received_at: datetime,
    ) -> Proposal:
        """The validated proposal; ``FormationBusy`` to wait, ``FormationError`` when it cannot."""
        ...


def _quoted(value: Any) -> str:
    # One JSON line whose text can never close the tag it sits in: newlines are escaped by JSON, angle
    # brackets here (a message saying "</messages>" stays inside its own line of data).
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")


def render(messages: Sequence[FormMessage], known: Sequence[str], received_at: datetime) -> str:
    """The user turn of the prompt: messages and known facts quoted as JSON lines (data, never instructions)."""
    lines = [
        _quoted(
            {
                "number": number,
                "role": message.role.value,
                "content": message.content,
                "at": None if message.at is None else message.at.isoformat(),
            }
        )
        for number, message in enumerate(messages, start=1)
    ]
    facts = [_quoted({"number": n, "text": text}) for n, text in enumerate(known, start=1)]
    return (
        "<messages>\n"
        + "\n".join(lines)
        + "\n</messages>\n<known_facts>\n"
        + "\n".join(facts)
        + f'\n</known_facts>\nMessages without an "at" were sent at {received_at.isoformat()}.'
    )


TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["facts"],
    "properties": {
        "facts": {
            "type": "array",
            "maxItems": _MAX_FACTS,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["text", "kind", "sources", "decision"],
                "properties": {
                    "text": {"type": "string", "description": "One self-contained statement."},
                    "kind": {"type": "string", "enum": ["fact", "preference", "event", "plan", "relationship"]},
                    "entities": {"type": "array", "items": {"type": "string"}},
                    "occurred_at": {"type": ["string", "null"], "description": "ISO 8601, when stated."},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    "sources": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
                    "decision": {"type": "string", "enum": ["add", "same", "update", "contradict"]},
                    "target": {"type": ["integer", "null"], "description": "The known fact's number."},
                },
            },
        }
    },
}


def validated(raw: Any) -> FormationReply:
    """``raw`` (a tool input) as a ``FormationReply``; ``ValueError`` naming what is wrong."""
    try:
        return FormationReply.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(describe(exc, "formation reply")) from None


def retry_after(response: Any) -> float:
    """Seconds an endpoint's reply asks to wait (``retry-after-ms``, ``retry-after`` in seconds or as a date)."""
    headers = getattr(response, "headers", None) or {}
    try:
        if headers.get("retry-after-ms"):
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if value:
            try:
                return max(0.0, float(value))
            except ValueError:
                moment = email.utils.parsedate_to_datetime(value)
                return max(0.0, moment.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        pass
    return _DEFAULT_RETRY_AFTER


_BUSY_STATUSES = frozenset({408, 409, 429, 529})


class ClaudeExtractor:
    """Proposes facts through the Messages API, with forced tool use (structured output)."""

    def __init__(self, settings: AnthropicSettings, *, max_output_tokens: int = 4096) -> None:
        # The queue waits out a rate limit (the task comes back after Retry-After); the SDK must not sleep on it.
        self._client = anthropic_client(settings, "ClaudeExtractor").with_options(max_retries=0)
        self._max_output_tokens = max_output_tokens

    def propose(
        self,
        messages: Sequence[FormMessage],
        known: Sequence[str],
        *,
        model: str,
        prompt_version: str,
        received_at: datetime,
    ) -> Proposal:
        system = prompt_text(prompt_version)
        prompt = render(messages, known, received_at)
        proposal = Proposal(reply=FormationReply(facts=[]), model=model)
        error = ""
        for attempt in ("first", "repair"):
            text = prompt if attempt == "first" else f"{prompt}\n\n{_repair_note(error)}"
            raw, content = self._call(model, system, text, proposal)
            try:
                proposal.reply = validated(raw)
                return proposal
            except ValueError as exc:
                error = str(exc)
                proposal.rejected.append(content)
                logger.warning("formation reply of %s failed validation (%s attempt)", model, attempt)
        raise FormationError(
            f"Claude ({model}) answered the formation twice with an unusable reply; last: {error[:500]}",
            raw_replies=proposal.rejected,
        )

    def _call(self, model: str, system: str, text: str, proposal: Proposal) -> tuple[Any, str]:
        """One request: the tool input (or what stood in its place) and the reply's content as JSON text."""
        tool: ToolParam = {
            "name": TOOL_NAME,
            "description": "Record the memories formed from these messages.",
            "input_schema": TOOL_SCHEMA,
        }
        choice: ToolChoiceToolParam = {"type": "tool", "name": TOOL_NAME}
        message: MessageParam = {"role": "user", "content": text}
        try:
            response = self._client.messages.create(
                model=model,
                max_tokens=self._max_output_tokens,
                system=system,
                messages=[message],
                tools=[tool],
                tool_choice=choice,
            )
        except SummarizerUnavailable as exc:
            raise FormationBusy(f"Claude ({model}) is unreachable: {exc}", retry_after=_DEFAULT_RETRY_AFTER) from exc
        except (anthropic.APITimeoutError, anthropic.APIConnectionError) as exc:
            raise FormationBusy(
                f"Claude ({model}) did not answer: {type(exc).__name__}", retry_after=_DEFAULT_RETRY_AFTER
            ) from exc
        except anthropic.APIStatusError as exc:
            status = exc.status_code
            if status in _BUSY_STATUSES or status >= 500:
                raise FormationBusy(
                    f"Claude ({model}) is busy: HTTP {status}", retry_after=retry_after(exc.response)
                ) from exc
            raise FormationError(
                f"Claude ({model}) refused the formation request: HTTP {status}; check MEMORY_ANTHROPIC__API_KEY "
                "and MEMORY_FORMATION__MODEL"
            ) from exc
        except (anthropic.AnthropicError, ValueError) as exc:  # ValueError: a body that is not JSON
            proposal.calls += 1
            return None, f"unreadable reply: {type(exc).__name__}"
        proposal.calls += 1
        usage = response.usage
        proposal.input_tokens += usage.input_tokens
        proposal.output_tokens += usage.output_tokens
        content = json.dumps([_block(b) for b in response.content], ensure_ascii=False)[:20_000]
        for block in response.content:
            if block.type == "tool_use" and block.name == TOOL_NAME:
                return block.input, content
        return {"error": f"no {TOOL_NAME} call"}, content


def _block(block: Any) -> Any:
    dump = getattr(block, "model_dump", None)
    return dump(mode="json") if callable(dump) else str(block)


def _repair_note(error: str) -> str:
    return (
        f"Your previous reply could not be used: {error[:2000]}\nCall {TOOL_NAME} again, following its schema exactly."
    )


class VerbatimExtractor:
    """Without a model: each of the user's own turns is kept as it was said (``formed_by="verbatim"``); a turn
    whose text a known fact already holds confirms it. Nothing is invented, nothing the assistant said is kept."""

    def propose(
        self,
        messages: Sequence[FormMessage],
        known: Sequence[str],
        *,
        model: str,
        prompt_version: str,
        received_at: datetime,
    ) -> Proposal:
        numbers = {_normal(text): number for number, text in enumerate(known, start=1)}
        facts: list[ProposedFact] = []
        seen: set[str] = set()
        for number, message in enumerate(messages, start=1):
            text = message.content.strip()
            if message.role is not MessageRole.USER or not text or _normal(text) in seen:
                continue
            seen.add(_normal(text))
            target = numbers.get(_normal(text))
            decision: Literal["add", "same"] = "same" if target is not None else "add"
            facts.append(ProposedFact(text=text, sources=[number], decision=decision, target=target))
        return Proposal(reply=FormationReply(facts=facts), model=VERBATIM)


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()
