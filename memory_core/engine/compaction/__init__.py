"""Compaction: folding a memory set into topic summaries when it reaches capacity."""

from __future__ import annotations

import logging

from memory_core.core.settings import Settings
from memory_core.engine.compaction.compactor import Compactor
from memory_core.engine.compaction.summarizer import Summarizer, Summary, Topic
from memory_core.engine.compaction.trigger import CompactionTrigger
from memory_core.engine.embedders import Embedder

__all__ = ["CompactionTrigger", "Compactor", "Summarizer", "Summary", "Topic", "open_summarizer"]


logger = logging.getLogger(__name__)


def open_summarizer(settings: Settings, embedder: Embedder) -> Summarizer:
    """Claude when an API key is set, else the offline extractive summarizer (logged, and said by the demo)."""
    if settings.anthropic.api_key is not None:
        from memory_core.engine.compaction.claude import ClaudeSummarizer

        return ClaudeSummarizer(settings.anthropic, max_output_tokens=settings.compaction.max_output_tokens)
    from memory_core.engine.compaction.extractive import ExtractiveSummarizer

    logger.warning(
        "MEMORY_ANTHROPIC__API_KEY is not set: compaction, session summaries and entities use the offline "
        "extractive summarizer (no model calls)"
    )
    return ExtractiveSummarizer(embedder)
