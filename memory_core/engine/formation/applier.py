"""The applier: an operation's decisions written to the store, idempotently (a replay changes nothing twice).

Order makes a crash at any point safe to replay: new facts first (their ids derive from the operation, so a
second write lands on the same points), then the supersession of their targets and the evidence of confirmed
facts, each a conditional field update on the ``seq`` just read, skipped when this operation's event is
already there. Facts are never deleted here: a superseded fact keeps its text, gains ``valid_to`` and
``superseded_by`` and leaves default searches.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memory_core.core.coordination import Coordinator
from memory_core.core.errors import InvalidRequestError
from memory_core.core.messages import PlannedFact
from memory_core.core.models import ChatMessage, EventKind, FactEvent, FactInfo, MemorySet, MemorySetItem, Scope, utcnow
from memory_core.engine.embedders import Embedder
from memory_core.engine.embedders.base import embed_timed
from memory_core.engine.stores import ItemRecord, VectorStore
from memory_core.engine.stores.base import fact_payload

logger = logging.getLogger(__name__)

FACTS_CAPACITY = 1_000_000
"""The capacity of a facts set formation creates: the most a set may have, so compaction never folds facts
(a summary would lose their provenance and supersession)."""


@dataclass(frozen=True)
class Origin:
    """Where the decisions come from: the operation, its model and prompt, its place in the set's order."""

    op_id: str
    formed_by: str
    prompt_version: str
    seq: int
    received_at: datetime

    def event(self, decision: EventKind, sources: list[str], at: datetime) -> FactEvent:
        """This operation's step in a fact's provenance."""
        return FactEvent(
            op_id=self.op_id,
            decision=decision,
            sources=sources,
            model=self.formed_by,
            prompt_version=self.prompt_version,
            at=at,
        )


def facts_set(store: VectorStore, scope: Scope) -> MemorySet:
    """The scope's set, created as a facts set (text, no compaction, no dedup, no context) if it is new."""
    definition = store.get_set(scope.namespace, scope.key, scope.set_name)
    if definition is None:
        definition = MemorySet(
            name=scope.set_name, item_type=str, capacity=FACTS_CAPACITY, dedup="none", context_window=0
        )
        store.put_set(scope.namespace, scope.key, definition)
    if definition.item_type is ChatMessage:
        raise InvalidRequestError(
            f"memory set {scope.set_name!r} holds chat messages; facts are text: remember into another set"
        )
    return definition


class Applier:
    """Writes decisions to one store."""

    def __init__(self, *, store: VectorStore, embedder: Embedder, coordinator: Coordinator) -> None:
        self.store = store
        self.embedder = embedder
        self.coordinator = coordinator

    def apply(self, scope: Scope, definition: MemorySet, plan: Sequence[PlannedFact], origin: Origin) -> list[str]:
        """Applies ``plan``; returns notes on decisions that could not apply as planned (a target gone)."""
        notes: list[str] = []
        written = self._write_new(scope, definition, [p for p in plan if p.decision != "same"], origin)
        for planned in plan:
            if planned.target is None:
                continue
            if planned.decision == "same":
                notes += self._confirm(scope, planned, origin)
            else:
                notes += self._supersede(scope, planned, origin, written)
        self.coordinator.bump(scope)
        return notes

    def _write_new(self, scope: Scope, definition: MemorySet, plan: Sequence[PlannedFact], origin: Origin) -> set[str]:
        if not plan:
            return set()
        stored = {item.id for item in self.store.retrieve(scope, [p.fact_id for p in plan])}
        missing = [(i, p) for i, p in enumerate(plan) if p.fact_id not in stored]
        if missing:
            now = utcnow()
            vectors = embed_timed(self.embedder, [p.text for _, p in missing])
            records = [
                ItemRecord(item=self._item(definition, planned, origin, now), seq=origin.seq + i, vector=vector)
                for (i, planned), vector in zip(missing, vectors, strict=True)
            ]
            self.store.upsert(scope, records, context_window=definition.context_window)
        return {p.fact_id for p in plan}

    @staticmethod
    def _item(definition: MemorySet, planned: PlannedFact, origin: Origin, now: datetime) -> MemorySetItem:
        event = origin.event(planned.decision, planned.sources, now)
        return MemorySetItem(
            memory_set_name=definition.name,
            id=planned.fact_id,
            value=planned.text,
            created_time=origin.received_at,
            last_accessed_time=now,
            source="formation",
            fact=FactInfo(
                kind=planned.kind,
                entities=planned.entities,
                occurred_at=planned.occurred_at,
                confidence=planned.confidence,
                sources=planned.sources,
                formed_by=origin.formed_by,
                prompt_version=origin.prompt_version,
                op_id=origin.op_id,
                valid_from=origin.received_at,
                supersedes=planned.target,
                events=[event],
            ),
        )

    def _target(self, scope: Scope, fact_id: str) -> MemorySetItem | None:
        found = self.store.retrieve(scope, [fact_id])
        return found[0] if found and found[0].fact is not None else None

    def _confirm(self, scope: Scope, planned: PlannedFact, origin: Origin) -> list[str]:
        target = self._target(scope, planned.fact_id)
        if target is None or target.fact is None:
            return [f"fact {planned.fact_id} to confirm is gone; nothing confirmed"]
        fact = target.fact
        if any(e.op_id == origin.op_id for e in fact.events):
            return []  # applied before this replay
        event = origin.event("same", planned.sources, utcnow())
        sources = list(dict.fromkeys([*fact.sources, *planned.sources]))
        changed = fact.model_copy(update={"sources": sources, "events": [*fact.events, event]})
        self.store.set_fields(scope, [target.id], fact_payload(changed), seq=target.seq)
        return []

    def _supersede(self, scope: Scope, planned: PlannedFact, origin: Origin, written: set[str]) -> list[str]:
        assert planned.target is not None
        target = self._target(scope, planned.target)
        if target is None or target.fact is None:
            return [f"fact {planned.target} that {planned.fact_id} replaces is gone; it stands alone"]
        fact = target.fact
        if fact.superseded_by == planned.fact_id:
            return []  # applied before this replay
        if not fact.live:
            return [f"fact {planned.target} was superseded meanwhile by {fact.superseded_by}; both stay"]
        if planned.fact_id not in written:
            return []
        now = utcnow()
        event = origin.event("superseded", planned.sources, now)
        changed = fact.model_copy(
            update={"valid_to": now, "superseded_by": planned.fact_id, "events": [*fact.events, event]}
        )
        self.store.set_fields(scope, [target.id], fact_payload(changed), seq=target.seq)
        return []

    def retire(self, scope: Scope, fact_ids: Sequence[str], plan: Sequence[PlannedFact], origin: Origin) -> list[str]:
        """Supersedes facts kept verbatim that ``plan`` formed again (a replay); the first fact formed from the same
        message, if any, is named as their successor. Idempotent like the rest."""
        if not fact_ids:
            return []
        by_source: dict[str, str] = {}
        for planned in plan:
            for source in planned.sources:
                by_source.setdefault(source, planned.fact_id)
        now = utcnow()
        for item in self.store.retrieve(scope, list(fact_ids)):
            fact = item.fact
            if fact is None or not fact.live:
                continue
            event = origin.event("superseded", fact.sources, now)
            successor = next((by_source[s] for s in fact.sources if s in by_source), None)
            changed = fact.model_copy(
                update={"valid_to": now, "superseded_by": successor, "events": [*fact.events, event]}
            )
            self.store.set_fields(scope, [item.id], fact_payload(changed), seq=item.seq)
        self.coordinator.bump(scope)
        return []
