from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memory_core.core.messages import FormMessage
from memory_core.core.models import FactInfo, MemorySetItem, MessageRole
from memory_core.engine.formation.extractor import FormationReply, Proposal
from memory_core.engine.formation.reconciler import decide, fact_id

NOW = datetime(2024, 5, 20, tzinfo=UTC)
MESSAGES = [FormMessage(id=f"m{i}", role=MessageRole.USER, content=f"text {i}") for i in (1, 2)]


def known(item_id: str) -> MemorySetItem:
    fact = FactInfo(formed_by="m", op_id="op0", valid_from=NOW, sources=["m0"])
    return MemorySetItem(
        memory_set_name="facts", id=item_id, value="old", created_time=NOW, last_accessed_time=NOW, fact=fact
    )


def proposal(*facts: dict[str, Any]) -> Proposal:
    return Proposal(reply=FormationReply.model_validate({"facts": list(facts)}), model="m")


def test_fact_ids_derive_from_the_operation_and_the_place():
    assert fact_id("a" * 32, 0) == fact_id("a" * 32, 0)
    assert len({fact_id("a" * 32, 0), fact_id("a" * 32, 1), fact_id("b" * 32, 0)}) == 3


def test_numbers_map_back_to_ids():
    plan = decide(
        "a" * 32,
        proposal(
            {"text": "x", "sources": [2], "decision": "update", "target": 1},
            {"text": "y", "sources": [1, 2], "decision": "same", "target": 2},
        ),
        MESSAGES,
        [known("f1"), known("f2")],
    )
    assert [(p.decision, p.target, p.sources) for p in plan] == [("update", "f1", ["m2"]), ("same", "f2", ["m1", "m2"])]
    assert plan[0].fact_id == fact_id("a" * 32, 0)
    assert plan[1].fact_id == "f2"  # a confirmation writes no new fact: it names the one it confirms
    assert all(p.note is None for p in plan)


def test_an_invented_target_is_never_applied_and_invented_sources_are_dropped():
    plan = decide(
        "a" * 32,
        proposal(
            {"text": "x", "sources": [1, 5], "decision": "contradict", "target": 9},
            {"text": "only invented sources", "sources": [7]},
            {"text": "no target", "sources": [2], "decision": "same"},
        ),
        MESSAGES,
        [known("f1")],
    )
    assert [(p.decision, p.target, p.sources) for p in plan] == [("add", None, ["m1"]), ("add", None, ["m2"])]
    assert plan[0].note is not None
    assert "9" in plan[0].note
    assert "[5]" in plan[0].note
