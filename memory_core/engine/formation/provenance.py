"""What facts rest on: the supersession chain of a fact (``history``), and erasure that follows provenance
(``forget_sources``: a fact resting only on erased messages goes, the others lose them from their evidence).
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from memory_core.core.coordination import Coordinator
from memory_core.core.errors import FormationBusy, NotFoundError
from memory_core.core.keys import Keys
from memory_core.core.locks import RedisLock
from memory_core.core.messages import (
    ForgetSourcesReport,
    ForgetSourcesRequest,
    FormationRecord,
    HistoryRequest,
    ItemsReply,
    PlannedFact,
)
from memory_core.core.models import FactEvent, MemorySetItem, Scope, utcnow
from memory_core.core.settings import FormationSettings
from memory_core.core.validation import parse
from memory_core.engine.stores import VectorStore
from memory_core.engine.stores.base import fact_payload

logger = logging.getLogger(__name__)

_LONGEST_CHAIN = 1_000


class Provenance:
    """Reads and erases along the provenance of facts."""

    def __init__(
        self,
        *,
        store: VectorStore,
        redis_client: redis.Redis,
        keys: Keys,
        coordinator: Coordinator,
        settings: FormationSettings,
    ) -> None:
        self.store = store
        self.redis = redis_client
        self.keys = keys
        self.coordinator = coordinator
        self.settings = settings

    def history(self, raw: dict[str, Any]) -> ItemsReply:
        """The chain a fact belongs to, oldest first: what it superseded, itself, and what superseded it."""
        request = parse(HistoryRequest, raw, "history request")
        scope = request.scope
        found = self.store.retrieve(scope, [request.fact_id])
        if not found or found[0].fact is None:
            raise NotFoundError(
                f"fact {request.fact_id!r} not found in set {scope.set_name!r} of namespace {scope.namespace!r}, "
                f"key {scope.key!r}"
            )
        chain = [found[0]]
        seen = {found[0].id}
        while chain[0].fact and chain[0].fact.supersedes and len(chain) < _LONGEST_CHAIN:
            earlier = self._fact(scope, chain[0].fact.supersedes, seen)
            if earlier is None:
                break
            chain.insert(0, earlier)
        while chain[-1].fact and chain[-1].fact.superseded_by and len(chain) < _LONGEST_CHAIN:
            later = self._fact(scope, chain[-1].fact.superseded_by, seen)
            if later is None:
                break
            chain.append(later)
        return ItemsReply(items=chain)

    def _fact(self, scope: Scope, fact_id: str, seen: set[str]) -> MemorySetItem | None:
        if fact_id in seen:
            return None  # a cycle is not ours to follow (stored data is data)
        seen.add(fact_id)
        found = self.store.retrieve(scope, [fact_id])
        return found[0] if found and found[0].fact is not None else None

    def forget_sources(self, raw: dict[str, Any]) -> ForgetSourcesReport:
        """Erases messages from the set's facts and from the key's kept operations."""
        request = parse(ForgetSourcesRequest, raw, "forget sources request")
        scope = request.scope
        erased = set(request.source_ids)
        # First, for a formation of these messages still on the queue (its message carries their text): it
        # leaves them out when it runs, whenever that is within the operations' lifetime.
        tombstones = self.keys.formation_erased(scope.namespace, scope.key)
        with self.redis.pipeline() as pipe:
            pipe.sadd(tombstones, *sorted(erased))
            pipe.expire(tombstones, self.settings.operation_ttl)
            pipe.execute()
        lock = RedisLock(self.redis, self.keys.formation_lock(*scope), self.settings.lock_ttl)
        if not lock.acquire():
            raise FormationBusy(f"a formation of {scope} is running", retry_after=self.settings.busy_retry)
        try:
            removed: dict[str, int] = {}
            updated = 0
            for item in self.store.list_items(scope):
                fact = item.fact
                if fact is None or not erased & set(fact.sources):
                    continue
                left = [source for source in fact.sources if source not in erased]
                if not left:
                    removed[item.id] = max(request.seq, item.seq or 0)
                    continue
                event = FactEvent(
                    op_id=fact.op_id, decision="source_removed", sources=sorted(erased & set(fact.sources)), at=utcnow()
                )
                events = [
                    e.model_copy(update={"sources": [s for s in e.sources if s not in erased]}) for e in fact.events
                ]
                changed = fact.model_copy(update={"sources": left, "events": [*events, event]})
                self.store.set_fields(scope, [item.id], fact_payload(changed), seq=item.seq)
                updated += 1
            if removed:
                self.store.delete(scope, removed)
            self._erase_from_operations(scope, erased)
            self.coordinator.bump(scope)
        finally:
            lock.release()
        return ForgetSourcesReport(removed=len(removed), updated=updated)

    def _erase_from_operations(self, scope: Scope, erased: set[str]) -> None:
        """Drops the erased messages from the kept requests of the key's operations (their text must go too), and
        the decisions resting on them alone from their stored decisions and reply: an operation whose worker died
        after storing the reply is replayed from them, and must not write a fact of a forgotten message."""
        pattern = self.keys.formation_operation(scope.namespace, scope.key, "*")
        for key in self.redis.scan_iter(match=pattern, count=500):
            raw = self.redis.get(key)
            if raw is None:
                continue
            try:
                record = FormationRecord.model_validate_json(raw)
            except ValueError:
                continue
            request = record.request
            rested_on = {s for decision in record.report.decisions for s in decision.sources}
            if not erased & ({m.id for m in request.messages} if request else set()) and not erased & rested_on:
                continue
            kept = [m for m in request.messages if m.id not in erased] if request is not None else []
            decisions, dropped = _without_sources(record.report.decisions, erased)
            changed = record.model_copy(
                update={
                    "request": request.model_copy(update={"messages": kept}) if request and kept else None,
                    "raw_replies": [],
                    "report": record.report.model_copy(update={"decisions": decisions}),
                    "reply": _without_texts(record.reply, dropped - {d.text for d in decisions}),
                }
            )
            ttl = self.redis.ttl(key)
            self.redis.set(key, changed.model_dump_json(), ex=ttl if isinstance(ttl, int) and ttl > 0 else None)


def _without_sources(decisions: list[PlannedFact], erased: set[str]) -> tuple[list[PlannedFact], set[str]]:
    """The decisions with the erased messages left out of their sources, those resting on nothing else dropped;
    and the texts of the dropped ones."""
    kept: list[PlannedFact] = []
    dropped: set[str] = set()
    for decision in decisions:
        left = [source for source in decision.sources if source not in erased]
        if not left:
            dropped.add(decision.text)
        else:
            kept.append(decision.model_copy(update={"sources": left}) if left != decision.sources else decision)
    return kept, dropped


def _without_texts(reply: dict[str, Any] | None, texts: set[str]) -> dict[str, Any] | None:
    """The stored model reply without the proposed facts of ``texts`` (kept a reply: it marks the operation as
    decided, so a redelivery replays the decisions left instead of asking the model about the rest again)."""
    if reply is None or not texts or not isinstance(reply.get("facts"), list):
        return reply
    facts = [fact for fact in reply["facts"] if not (isinstance(fact, dict) and fact.get("text") in texts)]
    return {**reply, "facts": facts}
