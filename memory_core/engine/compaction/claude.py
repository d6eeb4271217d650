"""Claude as the summarizer, through the official ``anthropic`` SDK, with a tool the model must call.

The API key is a ``SecretStr`` handed to the SDK and never logged. The SDK retries
429 and 5xx replies itself (``max_retries``); what still fails becomes a
``SummarizerError``, which the compaction task retries with backoff and finally
dead-letters.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anthropic
from anthropic.types import MessageParam, ToolChoiceToolParam, ToolParam

from memory_core.core.errors import ConfigurationError, SummarizerError
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
    )


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
