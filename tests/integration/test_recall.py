"""Recall across tiers: short-term state, the session and long-term sets, scored, deduplicated, budgeted."""

from __future__ import annotations

import pytest

from memory_core import InvalidRequestError, MemoryClient
from memory_core.core.messages import RecallReply
from memory_core.engine.recall import CONTEXT_HEADER
from tests.integration.waiting import wait_for


def test_recall_gathers_every_tier_and_labels_them(client: MemoryClient, namespace: str):
    key = "user-1"
    facts = client.long_term(namespace, key).get_or_create_memory_set("facts")
    facts.add(["The user is allergic to peanuts", "The user's sister lives in Oslo"])
    with client.short_term(namespace, key) as stm:
        stm.set("task.current", "booking a restaurant for Friday dinner")
    session = client.session(namespace, "chat-1", key=key, promote="none")
    session.buffer().save({"input": "find a thai restaurant near the office"}, {"output": "Looking for thai places."})

    result = client.recall(namespace, key, "restaurant booking and food allergies", session_id="chat-1", limit=10)
    tiers = {item.tier for item in result.items}
    assert tiers == {"short_term", "session", "long_term"}
    texts = [item.text for item in result.items]
    assert "The user is allergic to peanuts" in texts
    assert "task.current: booking a restaurant for Friday dinner" in texts
    assert any("thai restaurant" in t for t in texts)
    assert [i.score for i in result.items] == sorted((i.score for i in result.items), reverse=True)
    assert result.context.startswith(CONTEXT_HEADER)
    assert "- [long-term:facts] The user is allergic to peanuts" in result.context
    assert "- [short-term] task.current: booking a restaurant" in result.context
    peanuts = next(i for i in result.items if "peanuts" in i.text)
    oslo = next(i for i in result.items if "Oslo" in i.text)
    assert peanuts.relevance > oslo.relevance


def test_the_same_fact_from_several_tiers_appears_once(client: MemoryClient, namespace: str):
    key = "user-2"
    session = client.session(namespace, "chat-2", key=key)  # promotes every message into long-term memory
    session.buffer().save({"input": "my passport number ends in 4471"}, {"output": "noted"})
    promoted = session.promotion_set()
    wait_for(lambda: promoted.size() == 2, 30)
    notes = client.long_term(namespace, key).get_or_create_memory_set("notes")
    notes.add(["user: my passport number ends in 4471"])  # the same fact, stated in a third place
    result = client.recall(namespace, key, "passport number", session_id="chat-2", limit=10)
    passport = [i for i in result.items if "4471" in i.text]
    assert len(passport) == 1
    assert len(passport[0].also_in) == 2  # the other two copies are folded into it
    assert {passport[0].tier, *(t.split(":")[0] for t in passport[0].also_in)} == {"session", "long_term"}


def test_the_token_budget_and_limit_are_never_exceeded(client: MemoryClient, namespace: str):
    key = "user-3"
    notes = client.long_term(namespace, key).get_or_create_memory_set("notes")
    notes.add([f"fact {i}: the user once visited city number {i} and liked its museums" for i in range(30)])
    for budget in (5, 30, 80, 400):
        result = client.recall(namespace, key, "which cities did the user visit?", limit=20, token_budget=budget)
        assert result.tokens <= budget
        assert client.tokens.count(result.context) == result.tokens
        assert len(result.items) <= 20
    assert client.recall(namespace, key, "cities", limit=3).items.__len__() == 3
    assert client.recall(namespace, key, "cities", limit=20, token_budget=5).items == []


def test_recency_and_importance_raise_the_score(client: MemoryClient, namespace: str):
    key = "user-4"
    notes = client.long_term(namespace, key).get_or_create_memory_set("notes")
    notes.add(["the user likes jazz music"], importance=0.1)
    notes.add(["the user likes jazz concerts"], importance=1.0)
    result = client.recall(namespace, key, "jazz", limit=5)
    by_text = {i.text: i for i in result.items}
    low, high = by_text["the user likes jazz music"], by_text["the user likes jazz concerts"]
    assert high.importance == 1.0
    assert low.importance == 0.1
    assert high.score - low.score == pytest.approx(
        0.7 * (high.relevance - low.relevance) + 0.2 * (high.recency - low.recency) + 0.1 * 0.9, abs=1e-4
    )
    assert all(0.99 < i.recency <= 1.0 for i in result.items)  # written seconds ago


def test_recall_is_scoped_to_the_namespace_and_key_and_checks_its_input(client: MemoryClient, namespace: str):
    client.long_term(namespace, "owner").get_or_create_memory_set("notes").add(["the owner's secret plan"])
    with client.short_term(namespace, "owner") as stm:
        stm.set("secret", "owner's short-term secret")
    assert client.recall(namespace, "someone-else", "secret plan").items == []
    assert client.recall(f"{namespace}-other", "owner", "secret plan").items == []
    assert client.recall(namespace, "owner", "secret plan", sets=["other-set"]).items[0].tier == "short_term"
    for kwargs in ({"limit": 0}, {"token_budget": 0}, {"sets": ["a:b"]}):
        with pytest.raises(InvalidRequestError):
            client.recall(namespace, "owner", "q", **kwargs)
    with pytest.raises(InvalidRequestError):
        client.recall(namespace, "owner", "  ")


def test_also_in_names_each_other_tier_once(client: MemoryClient, namespace: str):
    key = "user-3"
    session = client.session(namespace, "chat-3", key=key, promote="none")
    for _ in range(2):  # the same fact said twice in the session
        session.buffer().save({"input": "my locker code is 7312"}, {"output": "noted"})
    notes = client.long_term(namespace, key).get_or_create_memory_set("notes", dedup="none")
    notes.add(["user: my locker code is 7312", "user: my locker code is 7312"])  # and twice in a set
    result = client.recall(namespace, key, "locker code", session_id="chat-3", limit=10)
    (locker,) = [i for i in result.items if "7312" in i.text]
    assert len(locker.also_in) == len(set(locker.also_in)) == 1
    assert locker.tier not in locker.also_in


def test_a_recall_in_a_session_reads_the_query_in_its_conversation(client: MemoryClient, namespace: str):
    key = "user-ctx"
    meeting = "Alice's preferred meeting slot is Tuesday mornings before 10am."
    allergy = "Alice is allergic to peanuts and shellfish."
    facts = client.long_term(namespace, key).get_or_create_memory_set("facts")
    facts.add([meeting, allergy, "Alice's laptop is a ThinkPad X1 running Debian."])
    memory = client.session(namespace, "dinner", key=key, promote="none").buffer()
    memory.save({"input": "Can you book a table for two on Friday evening?"}, {"output": "Sure. Any dietary needs?"})
    memory.save(
        {"input": "Yes, no peanuts please, I am allergic."}, {"output": "Booked for 8pm, peanut allergy noted."}
    )

    def order(result: RecallReply) -> list[str]:
        return [i.text for i in result.items if i.text in (meeting, allergy)]

    # Alone, the query's words lean to the scheduling fact. Read in the conversation about peanuts, the
    # allergy gains relevance, the meeting slot (far from the talk) loses some, and the allergy comes first.
    alone = client.recall(namespace, key, "plan Friday dinner for Alice", limit=10)
    in_session = client.recall(namespace, key, "plan Friday dinner for Alice", session_id="dinner", limit=10)
    assert order(alone) == [meeting, allergy]
    assert order(in_session) == [allergy, meeting]
    before = {i.text: i.relevance for i in alone.items}
    after = {i.text: i.relevance for i in in_session.items}
    assert after[allergy] > before[allergy]
    assert after[meeting] < before[meeting]
    # The conversation's own messages are not scored against themselves.
    own = next(i for i in in_session.items if i.text == "user: Yes, no peanuts please, I am allergic.")
    assert own.relevance < 0.9
