"""The offline summarizer on a small real corpus, with the real embedding model."""

from __future__ import annotations

import pytest

from memory_core.core.models import CompactionConfig
from memory_core.engine.compaction.extractive import ExtractiveSummarizer
from memory_core.engine.embedders.minilm import MiniLMEmbedder

COOKING = [
    "Simmer the tomato sauce for twenty minutes with garlic and basil.",
    "Knead the bread dough until it is smooth, then let it rise for an hour.",
    "Roast the vegetables in the oven at 200 degrees with olive oil.",
    "Whisk the eggs and sugar before folding in the flour for the cake.",
]
ASTRONOMY = [
    "Jupiter is the largest planet in the solar system.",
    "The Andromeda galaxy is about two and a half million light years away.",
    "A neutron star is the collapsed core of a massive star.",
    "Saturn's rings are made mostly of ice particles and rock.",
]
FOOTBALL = [
    "The striker scored twice in the second half of the match.",
    "The goalkeeper saved a penalty in the final minute.",
    "The team won the league after beating their rivals three nil.",
    "The coach changed the formation to four three three at half time.",
]


@pytest.fixture(scope="module")
def summarizer() -> ExtractiveSummarizer:
    return ExtractiveSummarizer(MiniLMEmbedder())


def test_groups_follow_the_topics_of_the_corpus(summarizer: ExtractiveSummarizer):
    items = [COOKING[0], ASTRONOMY[0], FOOTBALL[0], COOKING[1], ASTRONOMY[1], FOOTBALL[1],
             COOKING[2], ASTRONOMY[2], FOOTBALL[2], COOKING[3], ASTRONOMY[3], FOOTBALL[3]]  # fmt: skip
    result = summarizer.summarize(items, CompactionConfig(limit=3))
    groups = sorted(sorted(items[i] for i in topic.item_indices) for topic in result.topics)
    assert groups == sorted([sorted(COOKING), sorted(ASTRONOMY), sorted(FOOTBALL)])
    assert result.model == "extractive"
    assert result.input_tokens == result.output_tokens == 0


def test_each_summary_is_made_of_its_groups_sentences(summarizer: ExtractiveSummarizer):
    result = summarizer.summarize(COOKING + ASTRONOMY, CompactionConfig(limit=2))
    for topic in result.topics:
        sources = " ".join((COOKING + ASTRONOMY)[i] for i in topic.item_indices)
        sentences = [s if s.endswith(".") else s + "." for s in topic.summary.split(". ")]
        assert all(s.rstrip(".") in sources for s in sentences)


def test_it_is_deterministic_and_respects_the_limit(summarizer: ExtractiveSummarizer):
    items = COOKING + ASTRONOMY + FOOTBALL
    first = summarizer.summarize(items, CompactionConfig(limit=2))
    assert first == summarizer.summarize(items, CompactionConfig(limit=2))
    assert len(first.topics) <= 2
    assert sorted(i for t in first.topics for i in t.item_indices) == list(range(len(items)))


def test_a_summary_covers_every_item_it_replaces(summarizer: ExtractiveSummarizer):
    # Six distinct facts into two topics: each folded item must be in its topic's summary.
    facts = [COOKING[0], ASTRONOMY[0], FOOTBALL[0], COOKING[1], ASTRONOMY[1], FOOTBALL[1]]
    result = summarizer.summarize(facts, CompactionConfig(limit=2))
    folded = [i for t in result.topics for i in t.item_indices]
    assert sorted(folded) == list(range(6))
    for topic in result.topics:
        for i in topic.item_indices:
            assert facts[i] in topic.summary


def test_an_item_that_does_not_fit_the_summary_is_not_folded(summarizer: ExtractiveSummarizer):
    long_facts = [f"Fact {n}: " + "the striker scored again in the match " * 40 + "." for n in range(6)]
    result = summarizer.summarize(long_facts, CompactionConfig(limit=1))
    (topic,) = result.topics
    assert 0 < len(topic.item_indices) < 6  # what fits 8,000 characters, and no more
    assert all(long_facts[i] in topic.summary for i in topic.item_indices)
    assert len(topic.summary) <= 8_000
