"""Recall across tiers: one ranked, deduplicated, budget-trimmed list from short-term, session and long-term memory.

Runs in the worker (``memory.recall``), which has the embedder and the store. The client
sends what it found in the volatile tiers; the worker adds the hits of every long-term set
of the key, then for each candidate:

    score = relevance_weight * relevance + recency_weight * recency + importance_weight * importance

``relevance`` is the cosine of the query and the candidate (0..1). When the recall names a session, the
query is read in its conversation, the session's newest ``context_messages``: each long-term set is also
searched (dense) with the mean of those messages' vectors, and a candidate other than those messages gets
``(1 - context_weight) * cosine(query) + context_weight * max(cosine(message))``, so what the talk just
touched on (an allergy, before "plan Friday dinner") ranks with what the words ask for. ``recency`` halves every
``half_life_hours`` (state with no time, i.e. the live short-term state, counts as new),
``importance`` is the item's (0.5 unless set). Candidates are then taken best first; one whose
embedding is within ``dedup_threshold`` of a kept one is the same fact seen again (a session
message that was also promoted, a fact stated twice) and only adds its tier to ``also_in`` (each
other tier once).
Finally the list is cut to ``limit`` and to what fits ``token_budget`` in the context block.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np

from memory_core.core.errors import InvalidRequestError
from memory_core.core.messages import RecallCandidate, RecalledItem, RecallReply, RecallRequest
from memory_core.core.models import DatetimeRange, MemorySetItem, Scope, utcnow
from memory_core.core.settings import RecallSettings
from memory_core.core.tokens import TokenCounter
from memory_core.core.validation import check_text, parse
from memory_core.engine.service import MemoryService, embedding_text

CONTEXT_HEADER = "Relevant memory (most relevant first):"


class Recaller:
    """Runs ``memory.recall`` over one worker's memory service."""

    def __init__(self, *, memory: MemoryService, tokens: TokenCounter, settings: RecallSettings) -> None:
        self.memory = memory
        self.tokens = tokens
        self.settings = settings

    def recall(self, raw: dict[str, Any]) -> RecallReply:
        """The request's candidates and the key's long-term hits, scored, deduplicated and trimmed."""
        request = parse(RecallRequest, raw, "recall request")
        limits = self.memory.limits
        check_text(request.query, "query", limits.max_query_chars)
        if request.limit > limits.max_search_limit:
            raise InvalidRequestError(f"limit {request.limit} is above the maximum {limits.max_search_limit}")
        conversation = self._conversation(request)
        volatile = [_Candidate.volatile(c) for c in request.candidates]
        # The query as a query; the volatile tiers (the conversation's messages among them) as documents, in one
        # embedder call, like the stored items they are compared with.
        (query,) = np.asarray(self.memory.embed_queries(request.namespace, [request.query]), dtype=np.float32)
        texts = [c.text for c in volatile]
        volatile_vectors = np.asarray(self.memory.embed(request.namespace, texts), dtype=np.float32).reshape(
            len(texts), query.shape[0]
        )
        talked = np.asarray([c.text in conversation for c in volatile], dtype=bool)
        talk = volatile_vectors[talked] if conversation else np.empty((0, query.shape[0]), dtype=np.float32)
        stored = self._long_term(request, query, _unit(talk.mean(axis=0)) if len(talk) else None)
        if not volatile and not stored:
            return RecallReply(items=[], context="", tokens=0)
        pool = [*volatile, *stored]
        later = self.memory.embed(request.namespace, [c.text for c in stored]) if stored else []
        vectors = np.concatenate([volatile_vectors, np.asarray(later, dtype=np.float32).reshape(-1, query.shape[0])])
        relevance = vectors @ query
        if len(talk):
            w = self.settings.context_weight
            blended = (1 - w) * relevance + w * (vectors @ talk.T).max(axis=1)
            # The conversation's messages (and stored copies of them) would match themselves: they keep their
            # cosine to the query.
            relevance = np.where([c.text in conversation for c in pool], relevance, blended)
        now = utcnow()
        scores = [self._score(c, float(r), now) for c, r in zip(pool, relevance, strict=True)]
        order = sorted(range(len(pool)), key=lambda i: scores[i].score, reverse=True)
        kept: list[int] = []
        for i in order:
            twin = next(
                (k for k in kept if float(np.dot(vectors[i], vectors[k])) >= self.settings.dedup_threshold), None
            )
            if twin is None:
                kept.append(i)
            elif pool[i].label != pool[twin].label and pool[i].label not in scores[twin].also_in:
                # The other tiers it was found in, each once: a fact stated twice in one tier adds nothing.
                scores[twin].also_in.append(pool[i].label)
        items = [scores[i] for i in kept[: request.limit]]
        items, context = self._within_budget(items, request.token_budget)
        return RecallReply(items=items, context=context, tokens=self.tokens.count(context) if context else 0)

    def _conversation(self, request: RecallRequest) -> list[str]:
        """The session's newest messages, oldest first; none without a session."""
        # Session candidates come newest first; the summary is the past, not what is being talked about.
        messages = [c.text for c in request.candidates if c.tier == "session" and c.ref != "summary"]
        return list(reversed(messages[: self.settings.context_messages]))

    def _long_term(self, request: RecallRequest, query: np.ndarray, talk: np.ndarray | None) -> list[_Candidate]:
        """Hybrid hits of the query in every long-term set of the key, and dense hits of the conversation."""
        store = self.memory.store
        names = {d.name for d in store.sets_of(request.namespace, request.key)}
        if request.sets is not None:
            names &= set(request.sets)
        found: list[_Candidate] = []
        for name in sorted(names):
            scope = Scope(request.namespace, request.key, name)
            hits = {
                h.id: h
                for h in store.search(
                    scope, query.tolist(), self.settings.per_set, {}, text=request.query, mode="hybrid"
                )
            }
            if talk is not None:  # what the conversation is about, which the query's words may not reach
                for hit in store.search(scope, talk.tolist(), self.settings.per_set, {}, mode="dense"):
                    hits.setdefault(hit.id, hit)
            self.memory.record_access(scope, list(hits.values()))
            found.extend(_Candidate.stored(name, hit) for hit in hits.values())
        return found

    def _score(self, candidate: _Candidate, cosine: float, now: datetime) -> RecalledItem:
        relevance = min(1.0, max(0.0, cosine))
        if candidate.created_at is None:
            recency = 1.0
        else:
            age_hours = max(0.0, (now - candidate.created_at).total_seconds() / 3600)
            recency = math.pow(0.5, age_hours / self.settings.half_life_hours)
        s = self.settings
        score = s.relevance_weight * relevance + s.recency_weight * recency + s.importance_weight * candidate.importance
        return RecalledItem(
            tier=candidate.tier,
            text=candidate.text,
            score=round(score, 6),
            relevance=round(relevance, 6),
            recency=round(recency, 6),
            importance=candidate.importance,
            ref=candidate.ref,
            set_name=candidate.set_name,
            created_at=candidate.created_at,
        )

    def _within_budget(self, items: list[RecalledItem], budget: int | None) -> tuple[list[RecalledItem], str]:
        """The best items whose context block fits ``budget`` tokens (one that does not fit is skipped)."""
        lines: list[str] = []
        chosen: list[RecalledItem] = []
        for item in items:
            trial = context_block([*lines, context_line(item)])
            if budget is not None and self.tokens.count(trial) > budget:
                continue
            lines.append(context_line(item))
            chosen.append(item)
        return chosen, context_block(lines) if lines else ""


def _unit(vector: np.ndarray) -> np.ndarray:
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


def context_line(item: RecalledItem) -> str:
    """One line of the context block: where the memory comes from, then its text on one line."""
    where = f"long-term:{item.set_name}" if item.set_name else item.tier.replace("_", "-")
    return f"- [{where}] {' '.join(item.text.split())}"


def context_block(lines: list[str]) -> str:
    return "\n".join([CONTEXT_HEADER, *lines])


class _Candidate:
    __slots__ = ("created_at", "importance", "label", "ref", "set_name", "text", "tier")

    def __init__(
        self,
        *,
        tier: Any,
        text: str,
        ref: str,
        created_at: datetime | None,
        importance: float,
        set_name: str | None = None,
    ) -> None:
        self.tier = tier
        self.text = text
        self.ref = ref
        self.created_at = created_at
        self.importance = importance
        self.set_name = set_name
        self.label = f"long_term:{set_name}" if set_name else str(tier)

    @classmethod
    def volatile(cls, candidate: RecallCandidate) -> _Candidate:
        return cls(
            tier=candidate.tier,
            text=candidate.text,
            ref=candidate.ref,
            created_at=candidate.created_at,
            importance=candidate.importance,
        )

    @classmethod
    def stored(cls, set_name: str, item: MemorySetItem) -> _Candidate:
        created = item.created_time.end if isinstance(item.created_time, DatetimeRange) else item.created_time
        return cls(
            tier="long_term",
            text=embedding_text(item),
            ref=f"{set_name}/{item.id}",
            created_at=created,
            importance=item.importance,
            set_name=set_name,
        )
