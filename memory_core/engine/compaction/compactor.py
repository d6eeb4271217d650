"""Capacity-triggered compaction of a memory set into topic summaries.

Semantics follow Flink Agents' vector-store long-term memory, without its bugs:

* Single flight per set: a Redis lock with an owner token and expiry. A trigger that
  finds it taken marks the set dirty; the running compaction re-checks once at its end.
* It works on the items present when it starts; items written meanwhile are untouched,
  and a source rewritten meanwhile (same id, newer time) is kept.
* Every reply is validated as a whole before anything changes; items a reply leaves
  out stay as they are.
* Crash safety without a journal: each summary records the ids it covers
  (``compacted_from``) and is written *before* its sources are deleted. Every run first
  finishes interrupted ones (deletes sources a stored summary already covers), so a
  crash at any step neither loses an item nor leaves a duplicate, and nothing depends
  on Redis surviving.
* Summaries are written straight to the store, not through ``add``, so a compaction
  never triggers another (``capacity=1`` does not recurse).
* Sets larger than the model's context are folded in batches, oldest first, each within
  ``max_input_tokens``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import redis

from memory_core.core.coordination import Coordinator
from memory_core.core.errors import SummarizerError
from memory_core.core.keys import Keys
from memory_core.core.locks import RedisLock
from memory_core.core.messages import CompactionReport, CompactRequest
from memory_core.core.metrics import COMPACTION_ITEMS, COMPACTIONS, MODEL_TOKENS
from memory_core.core.models import ChatMessage, DatetimeRange, MemorySet, MemorySetItem, MessageRole, Scope
from memory_core.core.settings import CompactionSettings
from memory_core.core.tracing import tracer
from memory_core.core.validation import parse
from memory_core.engine.compaction.extractive import MODEL as EXTRACTIVE
from memory_core.engine.compaction.summarizer import Summarizer, Summary, Topic, validate_topics
from memory_core.engine.embedders import Embedder
from memory_core.engine.embedders.metering import charged_to
from memory_core.engine.stores import ItemRecord, VectorStore
from memory_core.engine.stores.base import require_set, versions_of

logger = logging.getLogger(__name__)

_SUMMARY_IDS = uuid.UUID("2b7f3f0e-5a8c-4a51-9d5e-8f1c0e6b7a44")
_PROMPT_OVERHEAD_TOKENS = 1_000


def _span(item: MemorySetItem) -> tuple[datetime, datetime]:
    created = item.created_time
    return (created.start, created.end) if isinstance(created, DatetimeRange) else (created, created)


def estimate_tokens(item: MemorySetItem) -> int:
    """A cautious token estimate for batching (about 3 characters a token, plus the JSON framing)."""
    return len(str(item.value)) // 3 + 12


class Compactor:
    """Folds a set's items into at most ``limit`` summaries per batch."""

    def __init__(
        self,
        *,
        store: VectorStore,
        embedder: Embedder,
        summarizer: Summarizer,
        redis_client: redis.Redis,
        keys: Keys,
        settings: CompactionSettings,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.summarizer = summarizer
        self.redis = redis_client
        self.keys = keys
        self.settings = settings
        self._coordinator = Coordinator(redis_client, keys)

    def compact(self, raw: dict[str, Any]) -> CompactionReport:
        """Runs one compaction of the requested set (or reports ``busy`` if one is running)."""
        request = parse(CompactRequest, raw, "compact request")
        scope = request.scope
        definition = require_set(self.store, scope)
        lock = RedisLock(self.redis, self.keys.compaction_lock(*scope), self.settings.lock_ttl)
        if not lock.acquire():
            # The running compaction re-checks once at its end; this task's trigger is handed over to it.
            with self.redis.pipeline() as pipe:
                pipe.set(self.keys.compaction_dirty(*scope), "1", ex=self.settings.lock_ttl)
                pipe.delete(self.keys.compaction_pending(*scope))
                pipe.execute()
            return CompactionReport(status="busy")
        try:
            self.redis.delete(self.keys.compaction_pending(*scope))
            # A remote embedder's tokens (summaries; the items, for the extractive summarizer) are the namespace's.
            with charged_to(scope.namespace):
                report = self._run(scope, definition, lock, force=request.force)
                if self.redis.getdel(self.keys.compaction_dirty(*scope)):
                    report = _combine(report, self._run(scope, definition, lock, force=False))
            COMPACTIONS.labels(report.status).inc()
            return report
        except SummarizerError:
            COMPACTIONS.labels("failed").inc()
            self.redis.hincrby(self.keys.usage(scope.namespace), "failures", 1)
            raise
        finally:
            lock.release()

    def _run(self, scope: Scope, definition: MemorySet, lock: RedisLock, *, force: bool) -> CompactionReport:
        recovered = self._finish_interrupted(scope)
        items = self.store.list_items(scope)
        report = CompactionReport(status="under_capacity", items_before=len(items), recovered=recovered)
        if len(items) < 2 or (len(items) < definition.capacity and not force):
            report.items_after = len(items)
            return report
        report.status = "compacted"
        for batch in self._batches(items):
            if len(batch) < 2:
                continue
            with tracer.start_as_current_span("summarize", attributes={"items": len(batch)}):
                summary = self.summarizer.summarize([item.value for item in batch], definition.compaction_config)
            self._apply(scope, definition, batch, summary, report)
            lock.extend()
        report.items_after = self.store.count(scope)
        logger.info("compacted %s: %d -> %d items", scope, report.items_before, report.items_after)
        return report

    def _apply(
        self,
        scope: Scope,
        definition: MemorySet,
        batch: Sequence[MemorySetItem],
        summary: Summary,
        report: CompactionReport,
    ) -> None:
        raw_topics = [{"summary": t.summary, "item_indices": list(t.item_indices)} for t in summary.topics]
        topics = validate_topics(raw_topics, len(batch), definition.compaction_config.limit)
        records = [self._summary_record(definition, batch, topic) for topic in topics]
        vectors = self.embedder.embed([str(r.item.value) for r in records])
        records = [ItemRecord(item=r.item, seq=r.seq, vector=v) for r, v in zip(records, vectors, strict=True)]
        self.store.upsert(scope, records)  # summaries first: from here on, every source is covered
        folded = self._delete_sources(scope, [batch[i] for t in topics for i in t.item_indices])
        self._coordinator.bump(scope)  # cached reads of this set are now stale, its size hint gone
        report.items_folded += folded
        report.summaries_written += len(records)
        report.model_calls += 1
        report.input_tokens += summary.input_tokens
        report.output_tokens += summary.output_tokens
        report.summarizer = summary.model
        wanted = definition.compaction_config.model
        if summary.model == EXTRACTIVE and not report.notes:
            report.notes.append(
                f"the set asks for model {wanted!r}; with no MEMORY_ANTHROPIC__API_KEY the offline extractive "
                "summarizer wrote these summaries (each keeps one sentence of every item it replaces)"
            )
        self._count_usage(scope.namespace, summary, folded, len(records))

    def _summary_record(self, definition: MemorySet, batch: Sequence[MemorySetItem], topic: Topic) -> ItemRecord:
        sources = [batch[i] for i in topic.item_indices]
        spans = [_span(s) for s in sources]
        start, end = min(s for s, _ in spans), max(e for _, e in spans)
        source_ids = sorted(s.id for s in sources)
        value: str | ChatMessage = topic.summary
        if definition.item_type is ChatMessage:
            value = ChatMessage(role=MessageRole.SYSTEM, content=topic.summary)
        item = MemorySetItem(
            memory_set_name=definition.name,
            # Deterministic over its sources: writing the same summary twice lands on one point.
            id=f"summary-{uuid.uuid5(_SUMMARY_IDS, chr(31).join(source_ids))}",
            value=value,
            compacted=True,
            created_time=DatetimeRange(start=start, end=end),
            last_accessed_time=max(s.last_accessed_time for s in sources),
            compacted_from=source_ids,
        )
        # Ordered where its first source was: the client's seq is nanoseconds since the epoch plus the item's
        # place in its add call, and a batch is in insertion order, so this keeps summaries in source order.
        return ItemRecord(item=item, seq=int(start.timestamp() * 1e9) + min(topic.item_indices), vector=())

    def _delete_sources(self, scope: Scope, sources: Sequence[MemorySetItem]) -> int:
        captured = versions_of(sources)
        current = self.store.retrieve(scope, list(captured))
        # A source rewritten since the run started (same id, newer seq) is newer than its summary: keep it.
        # The delete is as of each captured seq, so one rewritten between this read and the delete stays too.
        unchanged = {item.id: captured[item.id] for item in current if item.seq == captured[item.id]}
        if unchanged:
            self.store.delete(scope, unchanged)
        return len(unchanged)

    def _finish_interrupted(self, scope: Scope) -> int:
        items = self.store.list_items(scope)
        by_id = {item.id: item for item in items}
        leftovers = set()
        for summary in items:
            _, summary_end = _span(summary)
            for source_id in summary.compacted_from:
                source = by_id.get(source_id)
                if source is not None and source is not summary and _span(source)[1] <= summary_end:
                    leftovers.add(source_id)
        if leftovers:
            logger.warning("finishing an interrupted compaction of %s: %d sources left", scope, len(leftovers))
            self.store.delete(scope, versions_of(by_id[i] for i in sorted(leftovers)))
            self._coordinator.bump(scope)
        return len(leftovers)

    def _batches(self, items: Sequence[MemorySetItem]) -> list[list[MemorySetItem]]:
        budget = self.settings.max_input_tokens - _PROMPT_OVERHEAD_TOKENS
        batches: list[list[MemorySetItem]] = [[]]
        used = 0
        for item in items:  # oldest first
            cost = estimate_tokens(item)
            if batches[-1] and used + cost > budget:
                batches.append([])
                used = 0
            batches[-1].append(item)
            used += cost
        return batches

    def _count_usage(self, namespace: str, summary: Summary, folded: int, written: int) -> None:
        MODEL_TOKENS.labels(summary.model, "input").inc(summary.input_tokens)
        MODEL_TOKENS.labels(summary.model, "output").inc(summary.output_tokens)
        COMPACTION_ITEMS.inc(folded)
        with self.redis.pipeline() as pipe:
            key = self.keys.usage(namespace)
            pipe.hincrby(key, f"input_tokens:{summary.model}", summary.input_tokens)
            pipe.hincrby(key, f"output_tokens:{summary.model}", summary.output_tokens)
            pipe.hincrby(key, f"model_calls:{summary.model}", 1)
            pipe.hincrby(key, "items_folded", folded)
            pipe.hincrby(key, "summaries_written", written)
            pipe.hincrby(key, "compactions", 1)
            pipe.execute()


def _combine(first: CompactionReport, second: CompactionReport) -> CompactionReport:
    merged = first.model_copy()
    for field in ("items_folded", "summaries_written", "model_calls", "input_tokens", "output_tokens", "recovered"):
        setattr(merged, field, getattr(first, field) + getattr(second, field))
    merged.items_after = second.items_after
    merged.summarizer = second.summarizer or first.summarizer
    merged.notes = list(dict.fromkeys([*first.notes, *second.notes]))
    if second.status == "compacted":
        merged.status = "compacted"
    return merged
