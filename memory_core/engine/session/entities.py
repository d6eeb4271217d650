"""Entity extraction for the entity strategy: which entities an exchange mentions, and what it says of them.

The offline extractor (the default without an Anthropic key) takes runs of capitalized
words that are not common sentence openers as entities, plus any already-known entity
the exchange names in any case, and keeps per entity the newest sentences that mention
it. It is crude next to a model, but deterministic, free and private.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol

from memory_core.core.models import ChatMessage
from memory_core.tiers.session.strategies import mentions

# Capitalized words that open sentences or address someone far more often than they name anything.
_NOT_ENTITIES = frozenset(
    [
        "a",
        "about",
        "after",
        "again",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "don",
        "done",
        "during",
        "each",
        "either",
        "even",
        "ever",
        "every",
        "few",
        "for",
        "from",
        "good",
        "great",
        "had",
        "has",
        "have",
        "having",
        "he",
        "hello",
        "her",
        "here",
        "hers",
        "herself",
        "hey",
        "hi",
        "him",
        "himself",
        "his",
        "how",
        "however",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "let",
        "lets",
        "let's",
        "like",
        "maybe",
        "me",
        "might",
        "more",
        "most",
        "much",
        "must",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "ok",
        "okay",
        "on",
        "once",
        "one",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "perhaps",
        "please",
        "same",
        "she",
        "should",
        "so",
        "some",
        "sorry",
        "still",
        "such",
        "sure",
        "than",
        "thank",
        "thanks",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "though",
        "through",
        "thus",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "well",
        "were",
        "what",
        "whatever",
        "when",
        "where",
        "whether",
        "which",
        "while",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "would",
        "yeah",
        "yes",
        "yet",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "ai",
        "human",
        "user",
        "assistant",
        "system",
    ]
)
_CAPITALIZED_RUN = re.compile(r"\b[A-Z][\w'’-]*(?:\s+(?:of\s+|de\s+|van\s+|von\s+)?[A-Z][\w'’-]*)*")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")


class EntityExtractor(Protocol):
    """Finds the entities of an exchange and returns their updated summaries."""

    def update(self, messages: Sequence[ChatMessage], known: Mapping[str, str]) -> dict[str, str]:
        """Entity name -> new summary, for every entity ``messages`` mention (others are left out)."""
        ...


class OfflineEntityExtractor:
    """Capitalized-word entities, summarized by the sentences that mention them (newest kept)."""

    def __init__(self, *, max_summary_chars: int = 600, max_entities: int = 20) -> None:
        self.max_summary_chars = max_summary_chars
        self.max_entities = max_entities

    def update(self, messages: Sequence[ChatMessage], known: Mapping[str, str]) -> dict[str, str]:
        sentences = [s.strip() for m in messages for s in _SENTENCE.findall(m.content) if s.strip()]
        text = " ".join(sentences)
        names = [n for n in known if mentions(text, n)]
        for run in _CAPITALIZED_RUN.findall(text):
            name = _trim(run)
            if name and not any(name.lower() == n.lower() for n in names):
                names.append(name)
        updates: dict[str, str] = {}
        for name in names[: self.max_entities]:
            facts = [s for s in sentences if mentions(s, name)]
            summary = known.get(name, "")
            for fact in facts:
                if fact not in summary:
                    summary = f"{summary} {fact}".strip()
            while len(summary) > self.max_summary_chars and ". " in summary:
                summary = summary.split(". ", 1)[1]  # the oldest sentence goes first
            updates[name] = summary[-self.max_summary_chars :]
        return updates


def _trim(run: str) -> str:
    """Drops leading words that are sentence openers ("Yesterday Alice" stays; "The" alone goes)."""
    words = run.split()
    while words and words[0].lower().strip("'’") in _NOT_ENTITIES:
        words.pop(0)
    name = " ".join(words)
    return name if len(name) >= 2 and name.lower() not in _NOT_ENTITIES else ""
