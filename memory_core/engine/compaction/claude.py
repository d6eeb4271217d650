"""Claude as the summarizer, through the official ``anthropic`` SDK, with a tool the model must call.

The API key is a ``SecretStr`` handed to the SDK and never logged. The SDK retries
429 and 5xx replies, timeouts and dropped connections itself (``max_retries``, with
backoff); what still fails becomes a ``SummarizerError``, which the compaction task
retries with backoff and finally dead-letters. A refused connection (nothing listens
at the endpoint) is not retried: it raises ``SummarizerUnavailable`` at once, so a
caller waiting on a session summary hears of it in milliseconds, not after every
backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anthropic
from anthropic import APIRequest, APIResponse, CallNext
from anthropic.types import MessageParam, ToolChoiceToolParam, ToolParam

from memory_core.core.errors import ConfigurationError, SummarizerError, SummarizerUnavailable
from memory_core.core.models import ChatMessage, CompactionConfig
from memory_core.core.settings import AnthropicSettings
from memory_core.engine.compaction.summarizer import (
    TOOL_NAME,
    TOOL_SCHEMA,
    Summary,
    system_prompt,
    user_message,
    validate_topics,
)

logger = logging.getLogger(__name__)


def anthropic_client(settings: AnthropicSettings, user: str) -> anthropic.Anthropic:
    """The SDK client for ``user`` (a class name, for the error), with the key handed over, never logged."""
    if settings.api_key is None:
        raise ConfigurationError(f"{user} needs MEMORY_ANTHROPIC__API_KEY")
    return anthropic.Anthropic(
        api_key=settings.api_key.get_secret_value(),
        base_url=settings.base_url,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        middleware=[fail_fast_on_refusal],
    )


def fail_fast_on_refusal(request: APIRequest, call_next: CallNext) -> APIResponse[Any]:
    """SDK middleware (it runs once per attempt, inside the SDK's retry loop): a refused connection raises
    ``SummarizerUnavailable``, which the SDK does not retry; everything else goes through its retry policy."""
    try:
        return call_next(request)
    except anthropic.APIConnectionError as exc:
        if not _refused(exc):
            raise
        # No ``from exc``: the SDK retries any error whose cause chain holds a connection error.
        raise SummarizerUnavailable(
            f"the Anthropic endpoint refused the connection ({exc.request.url.host}:{exc.request.url.port}); "
            "check MEMORY_ANTHROPIC__BASE_URL and that the endpoint is up"
        ) from None


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a refused TCP connection (anywhere in its chain of causes)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ConnectionRefusedError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def forced_tool_input(content: Sequence[Any], name: str) -> dict[str, Any]:
    """The input of the ``name`` tool call in a reply; ``SummarizerError`` when the model did not call it."""
    for block in content:
        is_call = getattr(block, "type", None) == "tool_use" and getattr(block, "name", None) == name
        if is_call and isinstance(block.input, dict):
            return block.input
    raise SummarizerError(f"Claude did not call {name}; got blocks {[getattr(b, 'type', '?') for b in content]}")


class ClaudeSummarizer:
    """Summarizes through the Messages API with forced tool use (structured output)."""

    def __init__(self, settings: AnthropicSettings, *, max_output_tokens: int = 4096) -> None:
        self._client = anthropic_client(settings, "ClaudeSummarizer")
        self._max_output_tokens = max_output_tokens

    def summarize(self, items: Sequence[str | ChatMessage], config: CompactionConfig) -> Summary:
        tool: ToolParam = {
            "name": TOOL_NAME,
            "description": "Record the topics of this compaction.",
            "input_schema": TOOL_SCHEMA,
        }
        choice: ToolChoiceToolParam = {"type": "tool", "name": TOOL_NAME}
        message: MessageParam = {"role": "user", "content": user_message(items, config)}
        try:
            response = self._client.messages.create(
                model=config.model,
                max_tokens=self._max_output_tokens,
                system=system_prompt(config, len(items)),
                messages=[message],
                tools=[tool],
                tool_choice=choice,
            )
        except (anthropic.AnthropicError, ValueError) as exc:  # ValueError: the SDK lets a non-JSON body through
            raise SummarizerError(f"Claude ({config.model}) failed: {type(exc).__name__}: {exc}") from exc
        tool_input = forced_tool_input(response.content, TOOL_NAME)
        topics = validate_topics(tool_input.get("topics"), len(items), config.limit)
        usage = response.usage
        return Summary(
            topics=topics, model=config.model, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens
        )
