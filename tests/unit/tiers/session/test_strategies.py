from memory_core.core.models import ChatMessage, MessageRole
from memory_core.core.tokens import WhitespaceCounter
from memory_core.tiers.session.strategies import mentions, newest_within


def test_newest_within_keeps_the_longest_suffix_that_fits():
    messages = [ChatMessage(role=MessageRole.USER, content=" ".join(["w"] * n)) for n in (5, 1, 2, 3)]
    line = lambda m: m.content  # a plain renderer keeps the counts obvious
    counter = WhitespaceCounter()
    # This counter does not count line breaks: 2 + 3 words fit 5, 1 + 2 + 3 fit 6.
    assert [len(m.content.split()) for m in newest_within(messages, 5, counter, line)] == [2, 3]
    assert [len(m.content.split()) for m in newest_within(messages, 6, counter, line)] == [1, 2, 3]
    assert [len(m.content.split()) for m in newest_within(messages, 10, counter, line)] == [1, 2, 3]
    assert newest_within(messages, 2, counter, line) == []  # the newest alone is too big: nothing
    assert newest_within(messages, 100, counter, line) == messages


def test_mentions_matches_whole_words_ignoring_case():
    assert mentions("I met sam today", "Sam")
    assert not mentions("I met Samantha today", "Sam")
    assert mentions("Call Ana Lopez.", "ana lopez")
