"""The former: one formation operation from request to facts, exactly once.

    read the operation's record ─ done? ──────────────────────────────▶ its report (a replay: no model call)
      │ no reply stored yet and the namespace over its daily budget ──▶ deferred (messages kept)
      ▼
    hold a worker slot, a namespace slot and the scope's lock (else FormationBusy: the queue retries later)
      │ reply stored?  no ─▶ snapshot the scope's similar live facts ─▶ the model ─▶ decisions on ids
      │                      ─▶ store reply + decisions + tokens in one MULTI, *before* any write
      ▼
    apply the decisions (idempotent: fact ids derive from the operation) ─▶ record done

A worker killed anywhere in this is redelivered the same message: before the reply is stored it forms again
(the model is called again, nothing was written); after, it replays the stored decisions. The lock makes
formations of one scope take turns over snapshot → decide → apply, so two of them cannot both add one fact.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from pydantic import ValidationError

from memory_core.core import routing
from memory_core.core.coordination import Coordinator
from memory_core.core.dispatch import Dispatcher
from memory_core.core.errors import FormationBusy, FormationError, InvalidRequestError, NotFoundError
from memory_core.core.formation import operation_id
from memory_core.core.keys import Keys
from memory_core.core.locks import RedisLock
from memory_core.core.messages import (
    FormationAdminReport,
    FormationRecord,
    FormationReplayRequest,
    FormationReport,
    FormationResumeRequest,
    FormMessage,
    OperationRequest,
    PlannedFact,
    RememberRequest,
)
from memory_core.core.metrics import FORMATION_TOKENS, FORMATIONS
from memory_core.core.models import FORMATION_PROMPT_VERSION, VERBATIM, MemorySetItem, MessageRole, Scope, utcnow
from memory_core.core.settings import FormationSettings
from memory_core.core.validation import parse
from memory_core.engine.embedders import Embedder
from memory_core.engine.embedders.metering import charged_to
from memory_core.engine.formation.applier import Applier, Origin, facts_set
from memory_core.engine.formation.budget import FormationBudget
from memory_core.engine.formation.extractor import Extractor, FormationReply, Proposal, has_prompt
from memory_core.engine.formation.reconciler import decide, known_facts
from memory_core.engine.stores import VectorStore

logger = logging.getLogger(__name__)


class Former:
    """Runs formation operations against one store (the worker's side of ``remember``)."""

    def __init__(
        self,
        *,
        store: VectorStore,
        embedder: Embedder,
        extractor: Extractor,
        redis_client: redis.Redis,
        keys: Keys,
        settings: FormationSettings,
        coordinator: Coordinator,
        dispatcher: Dispatcher,
        verbatim: bool,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.extractor = extractor
        self.redis = redis_client
        self.keys = keys
        self.settings = settings
        self.budget = FormationBudget(redis_client=redis_client, keys=keys, settings=settings)
        self.applier = Applier(store=store, embedder=embedder, coordinator=coordinator)
        self.dispatcher = dispatcher
        self.verbatim = verbatim
        """True when no model is configured: the user's turns are kept as said."""

    # -- one operation -----------------------------------------------------------

    def form(self, raw: dict[str, Any]) -> FormationReport:
        """Forms the request's facts (or replays, defers, or raises ``FormationBusy`` to come back later)."""
        request = parse(RememberRequest, raw, "remember request")
        if not has_prompt(request.prompt_version):
            raise InvalidRequestError(
                f"formation prompt version {request.prompt_version!r} is not known to this worker (it has "
                f"{FORMATION_PROMPT_VERSION!r}); upgrade the workers to the clients' release"
            )
        record = self.read(request.namespace, request.key, request.op_id)
        if record is not None and record.report.status == "done":
            FORMATIONS.labels("replayed").inc()
            return record.report
        if not _decided(record) and not self.verbatim and not self.budget.allows(request.namespace):
            return self._defer(request, record)
        with self.budget.running(request.namespace, request.op_id), self._scope_lock(request):
            record = self.read(request.namespace, request.key, request.op_id)  # another delivery may have run
            if record is not None and record.report.status == "done":
                return record.report
            definition = facts_set(self.store, request.scope)
            if not _decided(record):
                request = self._without_erased(request)
                with charged_to(request.namespace):  # a remote embedder's tokens for the snapshot's queries
                    record = self._decide(request, record)
            assert record is not None  # _decide returns the stored record; a decided one was read back
            origin = Origin(
                op_id=request.op_id,
                formed_by=record.report.formed_by or request.model,
                prompt_version=request.prompt_version,
                seq=request.seq,
                received_at=request.received_at,
            )
            with charged_to(request.namespace):
                notes = self.applier.apply(request.scope, definition, record.report.decisions, origin)
            notes += self.applier.retire(request.scope, request.replaces, record.report.decisions, origin)
            report = record.report.model_copy(
                update={"status": "done", "notes": [*record.report.notes, *notes], "updated_at": utcnow()}
            )
            self._write(record.model_copy(update={"report": report}), ttl=self.settings.operation_ttl)
        FORMATIONS.labels("done").inc()
        logger.info("formation %s of %s: %d decisions", request.op_id, request.scope, len(report.decisions))
        return report

    def _without_erased(self, request: RememberRequest) -> RememberRequest:
        """The request without the messages ``forget_sources`` erased since it was sent (its message on the queue
        still carries them); a request left with none forms nothing."""
        ids = [m.id for m in request.messages]
        flags = self.redis.smismember(self.keys.formation_erased(request.namespace, request.key), ids)
        erased = {i for i, flag in zip(ids, flags, strict=True) if flag}
        if not erased:
            return request
        logger.info("formation %s: %d of its messages were erased before it ran", request.op_id, len(erased))
        return request.model_copy(update={"messages": [m for m in request.messages if m.id not in erased]})

    def _decide(self, request: RememberRequest, record: FormationRecord | None) -> FormationRecord:
        """Asks the model (or keeps the user's turns) and stores its reply and decisions before any write."""
        created = record.report.created_at if record is not None else utcnow()
        replaced = set(request.replaces)
        known = [
            fact
            for fact in known_facts(
                self.store, self.embedder, request.scope, request.messages, self.settings.candidates
            )
            if fact.id not in replaced
        ]
        try:
            extractor = self.extractor if request.messages else _NOTHING_LEFT
            proposal = extractor.propose(
                request.messages,
                [str(fact.value) for fact in known],
                model=request.model,
                prompt_version=request.prompt_version,
                received_at=request.received_at,
            )
        except FormationBusy:
            FORMATIONS.labels("busy").inc()
            raise
        except FormationError as exc:
            self._fail(request, created, exc)
            raise
        plan = decide(request.op_id, proposal, request.messages, known)
        if request.replaces:
            plan = _with_replaced_sources(plan, self.store.retrieve(request.scope, list(request.replaces)))
        report = FormationReport(
            op_id=request.op_id,
            namespace=request.namespace,
            key=request.key,
            set_name=request.set_name,
            status="running",
            formed_by=proposal.model,
            decisions=plan,
            model_calls=proposal.calls,
            input_tokens=proposal.input_tokens,
            output_tokens=proposal.output_tokens,
            notes=_notes(proposal),
            created_at=created,
            updated_at=utcnow(),
        )
        decided = FormationRecord(
            report=report,
            request=request,
            reply=proposal.reply.model_dump(mode="json"),
            raw_replies=proposal.rejected,
        )
        with self.redis.pipeline() as pipe:  # MULTI: the reply and what it cost are kept together or not at all
            pipe.set(self._key(request.namespace, request.key, request.op_id), decided.model_dump_json())
            self._count(pipe, request.namespace, proposal, facts=sum(p.decision != "same" for p in plan))
            pipe.execute()
        return decided

    def _count(self, pipe: redis.client.Pipeline, namespace: str, proposal: Proposal, *, facts: int) -> None:
        usage = self.keys.usage(namespace)
        pipe.hincrby(usage, "facts_formed", facts)
        if proposal.calls == 0:
            return
        tokens = proposal.input_tokens + proposal.output_tokens
        self.budget.charge(pipe, namespace, tokens)
        pipe.hincrby(usage, f"input_tokens:{proposal.model}", proposal.input_tokens)
        pipe.hincrby(usage, f"output_tokens:{proposal.model}", proposal.output_tokens)
        pipe.hincrby(usage, f"model_calls:{proposal.model}", proposal.calls)
        pipe.hincrby(usage, "formations", 1)
        pipe.hincrby(usage, "formation_tokens", tokens)
        FORMATION_TOKENS.labels(proposal.model, "input").inc(proposal.input_tokens)
        FORMATION_TOKENS.labels(proposal.model, "output").inc(proposal.output_tokens)

    def _fail(self, request: RememberRequest, created: Any, exc: FormationError) -> None:
        """Records the failure with the raw replies and the messages (the dead letter keeps them too)."""
        FORMATIONS.labels("failed").inc()
        raw = exc.raw_replies
        report = FormationReport(
            op_id=request.op_id,
            namespace=request.namespace,
            key=request.key,
            set_name=request.set_name,
            status="failed",
            error=str(exc),
            created_at=created,
            updated_at=utcnow(),
        )
        self._write(FormationRecord(report=report, request=request, raw_replies=raw))

    def _defer(self, request: RememberRequest, record: FormationRecord | None) -> FormationReport:
        now = utcnow()
        spent, limit = self.budget.spent_today(request.namespace), self.settings.daily_tokens
        report = FormationReport(
            op_id=request.op_id,
            namespace=request.namespace,
            key=request.key,
            set_name=request.set_name,
            status="deferred",
            notes=[
                (
                    f"namespace {request.namespace!r} spent {spent} of its {limit} formation tokens today "
                    "(MEMORY_FORMATION__DAILY_TOKENS): the messages are kept and formed when the budget allows, "
                    "or on `memory-core formation resume`"
                )
            ],
            created_at=record.report.created_at if record is not None else now,
            updated_at=now,
        )
        with self.redis.pipeline() as pipe:
            pipe.set(
                self._key(request.namespace, request.key, request.op_id),
                FormationRecord(report=report, request=request).model_dump_json(),
            )
            pipe.zadd(
                self.keys.formation_deferred(request.namespace), {f"{request.key}:{request.op_id}": now.timestamp()}
            )
            pipe.sadd(self.keys.formation_deferred_namespaces(), request.namespace)
            pipe.execute()
        FORMATIONS.labels("deferred").inc()
        return report

    # -- records -----------------------------------------------------------------

    def operation(self, raw: dict[str, Any]) -> FormationReport:
        """Where an operation stands; ``NotFoundError`` for one this key never had (or that expired)."""
        request = parse(OperationRequest, raw, "operation request")
        record = self.read(request.namespace, request.key, request.op_id)
        if record is None:
            raise NotFoundError(
                f"formation operation {request.op_id!r} not found in namespace {request.namespace!r}, key "
                f"{request.key!r}: it was never sent for this key, or finished more than "
                "MEMORY_FORMATION__OPERATION_TTL seconds ago"
            )
        return record.report

    def read(self, namespace: str, key: str, op_id: str) -> FormationRecord | None:
        """The stored record of an operation; a malformed one counts as none (it is formed again)."""
        raw = self.redis.get(self._key(namespace, key, op_id))
        if raw is None:
            return None
        try:
            record = FormationRecord.model_validate_json(raw)
        except ValidationError:
            logger.warning("formation record of %s in %s is malformed; forming it again", op_id, namespace)
            return None
        report = record.report
        if (report.namespace, report.key, report.op_id) != (namespace, key, op_id):
            logger.warning("formation record of %s in %s names another operation; ignored", op_id, namespace)
            return None
        return record

    def _write(self, record: FormationRecord, ttl: int | None = None) -> None:
        report = record.report
        self.redis.set(self._key(report.namespace, report.key, report.op_id), record.model_dump_json(), ex=ttl)

    def _key(self, namespace: str, key: str, op_id: str) -> str:
        return self.keys.formation_operation(namespace, key, op_id)

    @contextmanager
    def _scope_lock(self, request: RememberRequest) -> Iterator[None]:
        """The scope's lock, renewed (with the namespace's in-flight claim) every third of its TTL while the
        formation runs: a model slower than ``lock_ttl`` must not let a second formation of the scope snapshot
        the facts this one is about to add. A killed worker stops renewing, so its lock lapses within the TTL."""
        ttl = self.settings.lock_ttl
        lock = RedisLock(self.redis, self.keys.formation_lock(*request.scope), ttl)
        if not lock.acquire():
            raise FormationBusy(
                f"another formation of {request.scope} is running", retry_after=self.settings.busy_retry
            )
        done = threading.Event()

        def keep() -> None:
            while not done.wait(ttl / 3):
                try:
                    if not lock.extend():
                        logger.warning("formation %s lost the lock of %s", request.op_id, request.scope)
                        return
                    self.budget.extend(request.namespace, request.op_id)
                except redis.RedisError as exc:  # a blip: the next round tries again before the TTL runs out
                    logger.warning("formation %s could not renew its lock: %s", request.op_id, exc)

        keeper = threading.Thread(target=keep, name=f"keep {lock.key}", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            done.set()
            keeper.join()
            lock.release()

    # -- deferred and verbatim operations ------------------------------------------

    def resume(self, raw: dict[str, Any]) -> FormationAdminReport:
        """Sends a namespace's deferred operations again (they defer again while it is over its budget)."""
        request = parse(FormationResumeRequest, raw, "formation resume request")
        return self._resume(request.namespace)

    def resume_due(self) -> FormationAdminReport:
        """Beat: sends the deferred operations of every namespace that has budget again."""
        sent = left = 0
        for member in self.redis.smembers(self.keys.formation_deferred_namespaces()):
            namespace = member.decode() if isinstance(member, bytes) else str(member)
            if self.budget.allows(namespace):
                report = self._resume(namespace)
                sent, left = sent + report.sent, left + report.left
        return FormationAdminReport(sent=sent, left=left)

    def _resume(self, namespace: str) -> FormationAdminReport:
        deferred = self.keys.formation_deferred(namespace)
        members = [m.decode() if isinstance(m, bytes) else str(m) for m in self.redis.zrange(deferred, 0, 999)]
        sent = 0
        for member in members:
            key, _, op_id = member.partition(":")
            # Out of the set before it is sent: a worker that defers it again at once puts it back, and that
            # entry must stay (removing after sending could take it away, and nothing would resume it).
            if not self.redis.zrem(deferred, member):
                continue  # another resume took it
            record = self.read(namespace, key, op_id)
            if record is not None and record.report.status == "deferred" and record.request is not None:
                summary = json.dumps({"namespace": namespace, "key": key, "set": record.request.set_name})
                try:
                    self.dispatcher.send(routing.FORM, record.request, summary)
                except Exception:
                    self.redis.zadd(deferred, {member: time.time()})  # kept for the next resume
                    raise
                sent += 1
        left = int(self.redis.zcard(deferred))
        if left == 0:
            self.redis.srem(self.keys.formation_deferred_namespaces(), namespace)
        return FormationAdminReport(sent=sent, left=left)

    def replay(self, raw: dict[str, Any]) -> FormationAdminReport:
        """Forms again, with the model, the live facts of a set that were kept verbatim (no model then)."""
        request = parse(FormationReplayRequest, raw, "formation replay request")
        if self.verbatim:  # the operator's to fix, not a failed write: told, never dead-lettered
            raise InvalidRequestError(
                "formation replay needs a model: set MEMORY_ANTHROPIC__API_KEY on the workers, then replay"
            )
        scope = request.scope
        kept = [
            item
            for item in self.store.list_items(scope)
            if item.fact is not None and item.fact.live and item.fact.formed_by == VERBATIM
        ]
        sent = 0
        size = self.settings.max_messages
        for start in range(0, len(kept), size):
            batch = kept[start : start + size]
            messages = [
                FormMessage(
                    id=(item.fact.sources[0] if item.fact and item.fact.sources else item.id),
                    role=MessageRole.USER,
                    content=str(item.value),
                    at=item.fact.valid_from if item.fact else None,
                )
                for item in batch
            ]
            remember = replay_request(scope, messages, [item.id for item in batch], self.settings.model)
            summary = json.dumps({"namespace": scope.namespace, "key": scope.key, "set": scope.set_name})
            self.dispatcher.send(routing.FORM, remember, summary)
            sent += 1
        notes = [] if kept else [f"no facts kept verbatim in {scope.set_name!r}"]
        return FormationAdminReport(sent=sent, notes=notes)


def replay_request(scope: Scope, messages: list[FormMessage], replaces: list[str], model: str) -> RememberRequest:
    """The operation that forms verbatim facts again and retires them (its id differs from the first one's)."""
    now = utcnow()
    return RememberRequest(
        namespace=scope.namespace,
        key=scope.key,
        set_name=scope.set_name,
        op_id=operation_id(scope, [m.id for m in messages], FORMATION_PROMPT_VERSION, model, salt="replay"),
        messages=messages,
        model=model,
        prompt_version=FORMATION_PROMPT_VERSION,
        seq=int(now.timestamp() * 1e9),
        received_at=now,
        replaces=replaces,
    )


def _with_replaced_sources(plan: list[PlannedFact], replaced: list[MemorySetItem]) -> list[PlannedFact]:
    """A replay's decisions, each resting on every message its verbatim fact rested on.

    A replay sends one message per verbatim fact, with the id of its first source; a confirmation may have
    added more (the same turn said again). Without them, the formed fact would lose that evidence, and
    ``forget_sources`` of the first message alone would erase a fact another message still supports.
    """
    rested = {item.fact.sources[0]: item.fact.sources for item in replaced if item.fact and item.fact.sources}
    return [
        planned.model_copy(
            update={
                "sources": list(dict.fromkeys(s for source in planned.sources for s in rested.get(source, [source])))
            }
        )
        for planned in plan
    ]


class _NothingLeft:
    """The proposal for a request whose messages were all erased before it ran: nothing, and no model call."""

    def propose(self, messages: Any, known: Any, *, model: str, prompt_version: str, received_at: Any) -> Proposal:
        return Proposal(reply=FormationReply(facts=[]), model=model)


_NOTHING_LEFT = _NothingLeft()


def _decided(record: FormationRecord | None) -> bool:
    """Whether the model's reply (and so the decisions) is stored: from here on, nothing calls the model."""
    return record is not None and record.reply is not None and record.report.status in ("running", "done")


def _notes(proposal: Proposal) -> list[str]:
    notes = []
    if proposal.model == VERBATIM:
        notes.append(
            "no model is configured (MEMORY_ANTHROPIC__API_KEY): the user's own turns are kept verbatim as facts "
            "marked formed_by='verbatim'; `memory-core formation replay` forms them once a key is set"
        )
    if proposal.rejected:
        notes.append(f"{len(proposal.rejected)} reply(s) failed validation and were repaired")
    return notes
