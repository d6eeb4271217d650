"""The demo's questions, asked of the default mode through a real worker, get the answers a person would give."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from memory_core import ChatMessage, MemoryClient

from .processes import ROOT

ANSWERS = {
    "what does Alice like to drink?": "Alice prefers green tea over coffee, no sugar.",
    "where does Alice live now?": "Alice moved from Berlin to Lyon in May 2025.",
    "food allergies": "Alice is allergic to peanuts and shellfish.",
    "how should we contact her?": "Alice asked to be contacted by e-mail, never by phone.",
    "upcoming travel plans": "Alice is learning Japanese and plans a trip to Kyoto next spring.",
}


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    sys.path.insert(0, str(ROOT / "ops"))  # the demo imports its neighbour, ops/stack.py
    try:
        spec = importlib.util.spec_from_file_location("demo_script", ROOT / "ops" / "demo.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "ops"))


def test_every_search_of_the_demo_finds_its_answer_first(client: MemoryClient, namespace: str, demo: ModuleType):
    assert {query for query, _ in demo.QUERIES} == set(ANSWERS)
    facts = client.long_term(namespace, "alice").get_or_create_memory_set("facts", item_type=str, context_window=0)
    facts.add([text for text, _ in demo.FACTS], metadatas=[{"source": source} for _, source in demo.FACTS])
    for query, filters in demo.QUERIES:
        (first, *_) = facts.search(query, limit=3, filters=filters)
        assert first.value == ANSWERS[query], query


def test_recall_for_the_dinner_puts_the_allergy_first(client: MemoryClient, namespace: str, demo: ModuleType):
    alice = client.long_term(namespace, "alice")
    facts = alice.get_or_create_memory_set("facts", item_type=str, context_window=0)
    facts.add([text for text, _ in demo.FACTS])
    chat = alice.get_or_create_memory_set("chat", item_type=ChatMessage)
    chat.add([ChatMessage(role=role, content=text) for role, text in demo.CHAT])
    memory = client.session(namespace, "friday-dinner", key="alice", promote="none").buffer()
    for (_, question), (_, answer) in zip(demo.CHAT[::2], demo.CHAT[1::2], strict=True):
        memory.save({"input": question}, {"output": answer})
    memory.save({"input": "Make it somewhere near the river, please."}, {"output": "Noted: riverside."})
    result = client.recall(namespace, "alice", "plan Friday dinner for Alice", session_id="friday-dinner", limit=6)
    assert result.items[0].text == "Alice is allergic to peanuts and shellfish."
