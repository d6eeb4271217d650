"""Formation: memories formed from conversations by a model, exactly once, on their own queue.

``extractor`` asks the model (or keeps the user's turns verbatim, without one), ``reconciler`` finds the
scope's similar live facts and maps the model's numbers back to ids, ``applier`` writes the decisions,
``budget`` keeps spending and concurrency within bounds, ``former`` runs an operation end to end, and
``provenance`` answers ``history`` and erases along sources.
"""

from __future__ import annotations

import logging

from memory_core.core.settings import Settings
from memory_core.engine.formation.extractor import ClaudeExtractor, Extractor, VerbatimExtractor
from memory_core.engine.formation.former import Former
from memory_core.engine.formation.provenance import Provenance

__all__ = ["Extractor", "Former", "Provenance", "open_extractor"]

logger = logging.getLogger(__name__)


def open_extractor(settings: Settings) -> tuple[Extractor, bool]:
    """Claude when an API key is set; else the verbatim extractor (and True: nothing is formed by a model)."""
    if settings.anthropic.api_key is not None:
        return ClaudeExtractor(settings.anthropic, max_output_tokens=settings.formation.max_output_tokens), False
    logger.warning(
        "MEMORY_ANTHROPIC__API_KEY is not set: remember() keeps the user's own turns verbatim as facts "
        "(formed_by='verbatim'); `memory-core formation replay` forms them once a key is set"
    )
    return VerbatimExtractor(), True
