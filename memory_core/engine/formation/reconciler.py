"""The reconciler: the scope's facts the model decides against, and its proposal turned into decisions on ids.

The model sees the known facts as numbers 1..k (aliases), never as ids. ``decide`` maps them back; a number
the model invented (no such known fact, no such message) is never applied: a decision on an unknown target
becomes an ``add`` (the fact itself rests on the messages), and unknown message numbers are dropped from its
sources (a fact left without any is dropped). Every change is said in the decision's ``note``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from memory_core.core.messages import FormMessage, PlannedFact
from memory_core.core.models import MemorySetItem, MessageRole, Scope
from memory_core.engine.embedders import Embedder
from memory_core.engine.formation.extractor import Proposal
from memory_core.engine.stores import VectorStore

# Fixed forever: fact ids derive from it and the operation id, so a replayed operation lands on the same points.
_FACT_IDS = uuid.UUID("5d0c3a8e-2f9b-4c61-8e7a-1b4f6d2c9e30")
_PER_MESSAGE = 8
_MESSAGES_SEARCHED = 4
"""The latest user messages that each look for similar facts. Every query is an embedding and a hybrid search
on the worker that also serves adds and searches: a few recent turns find the facts a conversation touches,
while one query per message of a long conversation cost the other tasks' latency (measured: ``ops/bench
--formation``)."""


def fact_id(op_id: str, index: int) -> str:
    """The id of the ``index``-th fact an operation writes."""
    return f"fact-{uuid.uuid5(_FACT_IDS, f'{op_id}:{index}')}"


def known_facts(
    store: VectorStore, embedder: Embedder, scope: Scope, messages: Sequence[FormMessage], limit: int
) -> list[MemorySetItem]:
    """The ``limit`` live facts of the scope most like the messages, best first (a snapshot under the lock).

    Each of the last user messages is a query of its own (a conversation mixes subjects); a fact found by several
    keeps its best score. The user's turns, because facts are about the user; a conversation without one (an
    assistant's note) looks with its last messages.
    """
    if limit == 0:
        return []
    said = [m for m in messages if m.content.strip()]
    users = [m for m in said if m.role is MessageRole.USER] or said
    texts = [m.content for m in users][-_MESSAGES_SEARCHED:]
    if not texts or store.get_set(scope.namespace, scope.key, scope.set_name) is None:
        return []
    best: dict[str, MemorySetItem] = {}
    for text, vector in zip(texts, embedder.embed_queries(texts), strict=True):
        for hit in store.search(scope, vector, min(limit, _PER_MESSAGE), {}, text=text, mode="hybrid"):
            if hit.fact is None or not hit.fact.live:
                continue
            seen = best.get(hit.id)
            if seen is None or (hit.score or 0.0) > (seen.score or 0.0):
                best[hit.id] = hit
    return sorted(best.values(), key=lambda item: item.score or 0.0, reverse=True)[:limit]


def decide(
    op_id: str, proposal: Proposal, messages: Sequence[FormMessage], known: Sequence[MemorySetItem]
) -> list[PlannedFact]:
    """The proposal's facts as decisions on real ids, in the reply's order."""
    planned: list[PlannedFact] = []
    for index, proposed in enumerate(proposal.reply.facts):
        notes: list[str] = []
        sources = [messages[n - 1].id for n in dict.fromkeys(proposed.sources) if 1 <= n <= len(messages)]
        invented = [n for n in proposed.sources if not 1 <= n <= len(messages)]
        if invented:
            notes.append(f"message numbers {invented} do not exist: left out of the sources")
        if not sources:
            continue  # rests on nothing that was said
        decision, target = proposed.decision, None
        if decision != "add":
            if proposed.target is not None and 1 <= proposed.target <= len(known):
                target = known[proposed.target - 1].id
            else:
                notes.append(f"{decision} of known fact {proposed.target!r}, which does not exist: added instead")
                decision = "add"
        planned.append(
            PlannedFact(
                decision=decision,
                fact_id=target if decision == "same" and target is not None else fact_id(op_id, index),
                text=proposed.text,
                kind=proposed.kind,
                entities=proposed.entities,
                occurred_at=proposed.occurred_at,
                confidence=proposed.confidence,
                sources=sources,
                target=target,
                note="; ".join(notes) or None,
            )
        )
    return planned
