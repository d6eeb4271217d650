"""The worker-side half of session memory: folding old messages into the summary, and updating entities.

Both run as tasks on the compaction queue (they may call a model). Each takes the
session's lock, so two folds of one session never overlap, and each is safe to run
twice: a fold re-reads the cursor under the lock, and entity summaries are upserts.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from memory_core.core.errors import TransientStoreError
from memory_core.core.keys import Keys
from memory_core.core.locks import RedisLock
from memory_core.core.messages import EntitiesReport, EntitiesRequest, FoldReport, FoldRequest
from memory_core.core.models import ChatMessage, CompactionConfig, MessageRole
from memory_core.core.tokens import TokenCounter
from memory_core.core.validation import parse
from memory_core.engine.compaction.summarizer import Summarizer
from memory_core.engine.embedders.metering import charged_to
from memory_core.engine.session.entities import EntityExtractor
from memory_core.tiers.session.history import SessionKeys, SessionMessage, SummaryState, parse_entries, text

logger = logging.getLogger(__name__)

_LOCK_TTL = 300
# A fold or extraction of the same session is short: wait for it rather than spend a task retry.
_LOCK_WAIT = 30.0


def render(message: ChatMessage, prefixes: tuple[str, str]) -> str:
    """A message as a buffer line, with the strategy's prefixes."""
    labels = {MessageRole.USER: prefixes[0], MessageRole.ASSISTANT: prefixes[1]}
    return f"{labels.get(message.role, message.role.value.capitalize())}: {message.content}"


class SessionService:
    """Runs ``memory.session_fold`` and ``memory.session_entities`` in the worker."""

    def __init__(
        self,
        *,
        redis_client: redis.Redis,
        keys: Keys,
        summarizer: Summarizer,
        extractor: EntityExtractor,
        tokens: TokenCounter,
        default_model: str,
    ) -> None:
        self.redis = redis_client
        self.keys = keys
        self.summarizer = summarizer
        self.extractor = extractor
        self.tokens = tokens
        self.default_model = default_model

    def fold(self, raw: dict[str, Any]) -> FoldReport:
        """Folds the oldest unsummarized messages into the summary until the rest fit ``max_tokens``."""
        request = parse(FoldRequest, raw, "session fold request")
        keys = SessionKeys(self.keys, request.namespace, request.key, request.session_id)
        prefixes = (request.human_prefix, request.ai_prefix)
        with self._locked(keys):
            state = SummaryState.from_hash(self.redis.hgetall(keys.state))
            start = f"({state.cursor}" if state.cursor else "-"
            entries = parse_entries(self.redis.xrange(keys.messages, start, "+"))
            fold = self._oldest_over_budget(entries, request.max_tokens, prefixes)
            if not fold:
                return FoldReport(status="within_budget", summary=state.summary)
            items: list[str | ChatMessage] = []
            if state.summary:
                items.append(ChatMessage(role=MessageRole.SYSTEM, content=f"Summary so far: {state.summary}"))
            items.extend(e.message for e in fold)
            config = CompactionConfig(model=request.model or self.default_model, prompt="conversation", limit=1)
            with charged_to(request.namespace):  # the extractive summarizer embeds the messages
                result = self.summarizer.summarize(items, config)
            summary = " ".join(t.summary for t in result.topics).strip()
            if not summary:  # the model left everything out: keep it all as text rather than lose it
                summary = "\n".join(filter(None, [state.summary, *(render(e.message, prefixes) for e in fold)]))
            folded_tokens = sum(self.tokens.count(render(e.message, prefixes)) for e in fold)
            with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(
                    keys.state,
                    mapping={
                        "summary": summary,
                        "cursor": str(fold[-1].cursor),
                        "folded_messages": state.folded_messages + len(fold),
                        "folded_tokens": state.folded_tokens + folded_tokens,
                    },
                )
                if request.ttl is not None:
                    pipe.expire(keys.state, request.ttl)
                usage = self.keys.usage(request.namespace)
                pipe.hincrby(usage, f"input_tokens:{result.model}", result.input_tokens)
                pipe.hincrby(usage, f"output_tokens:{result.model}", result.output_tokens)
                pipe.hincrby(usage, f"model_calls:{result.model}", 1)
                pipe.execute()
        logger.info("folded %d session messages into the summary of %s", len(fold), request.namespace)
        return FoldReport(status="folded", folded=len(fold), summary=summary)

    def _oldest_over_budget(
        self, entries: list[SessionMessage], max_tokens: int, prefixes: tuple[str, str]
    ) -> list[SessionMessage]:
        costs = [self.tokens.count(render(e.message, prefixes)) + 1 for e in entries]
        total, cut = sum(costs), 0
        while cut < len(entries) and total > max_tokens:
            total -= costs[cut]
            cut += 1
        return entries[:cut]

    def entities(self, raw: dict[str, Any]) -> EntitiesReport:
        """Extracts the entities of the messages ``first``..``last`` and upserts their summaries."""
        request = parse(EntitiesRequest, raw, "session entities request")
        keys = SessionKeys(self.keys, request.namespace, request.key, request.session_id)
        with self._locked(keys):
            entries = parse_entries(self.redis.xrange(keys.messages, request.first, request.last))
            known = {text(k): text(v) for k, v in self.redis.hgetall(keys.entities).items()}
            updates = self.extractor.update([e.message for e in entries], known)
            if updates:
                with self.redis.pipeline(transaction=True) as pipe:
                    pipe.hset(keys.entities, mapping=updates)  # type: ignore[arg-type]  # str -> str is accepted
                    if request.ttl is not None:
                        pipe.expire(keys.entities, request.ttl)
                    pipe.execute()
        return EntitiesReport(updated=sorted(updates))

    def _locked(self, keys: SessionKeys) -> _Held:
        return _Held(RedisLock(self.redis, keys.lock, _LOCK_TTL))


class _Held:
    """Holds a session lock for a block, waiting for another holder first; still busy, the task retries."""

    def __init__(self, lock: RedisLock) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        if not self.lock.acquire(wait=_LOCK_WAIT):
            raise TransientStoreError(f"session lock {self.lock.key!r} was held for {_LOCK_WAIT:.0f}s; retrying")

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()
