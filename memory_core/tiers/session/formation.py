"""Feeding a session's messages to formation (``client.session(..., form_into="facts")``), debounced per session.

Every save sends the session's messages that no formation covers yet (at the first save that feeds a session,
all it holds) to formation as one operation, delayed on the queue by a trailing ``debounce`` (seconds after
the newest save) that never runs past ``max_wait`` seconds after the oldest of them was saved. A save that comes
while that operation still waits replaces it: the new one covers the waiting one's messages and its own, and the
waiting one is marked done before a worker takes it (its task still reaches a worker, which finds nothing to
do and calls no model). Within ``closing_margin(debounce)`` seconds of its due time an operation is left to run,
and the next save starts a new one after its last message. So each message is in exactly one operation that
runs (m1..m3, then m4..m5; never m1..m3 and m1..m5), a burst of saves becomes one formation, and a stream of
saves that never pauses is formed at least every ``max_wait`` seconds. One operation takes at most
``MEMORY_FORMATION__MAX_MESSAGES`` messages: a longer backlog is sent in full batches at once, and the rest waits.

The state lives in one Redis hash per session (``SessionKeys.formation``) and the delay in the task message
(Celery's ETA), so it holds across the app processes that save into one session and after they exit. Each
save changes the hash with one script, a compare-and-set on its version: the script decides by Redis's own
clock whether the waiting operation may still be replaced, and marks it replaced in the same step, so two
processes never both extend one operation, nor extend one a worker has started.

The hash's fields:

    version   bumped by every change (the compare-and-set)
    formed    stream cursor of the last message of the newest operation left to run ('' for none yet)
    op        the operation waiting (its id), with first/last (its messages' cursors), since (when the oldest
              of them was saved), due (when it runs; Redis clock, epoch seconds), sent ('1' once published)

An operation whose sender died between writing the hash and publishing it would hold its messages forever;
a later save finds it due but unsent, claims its record first (``SET NX``: a publish after that finds the
operation done) and forms its messages with the newer ones.

The message ids formation gets are the session's own (``SessionMessage.id``), with the time each was saved,
so a fact's sources name session messages and ``forget_sources`` of one removes the facts resting on it alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from operator import methodcaller
from typing import Any, TypeVar

import redis
from pydantic import TypeAdapter, ValidationError

from memory_core.core.errors import CorruptDataError, InvalidRequestError
from memory_core.core.formation import operation_id
from memory_core.core.keys import Keys
from memory_core.core.messages import FormationRecord, FormationReport, NamespaceRequest
from memory_core.core.models import FORMATION_PROMPT_VERSION, Scope, SetName, utcnow
from memory_core.core.redis_errors import redis_failure
from memory_core.core.steps import Command, Operation, Send
from memory_core.core.validation import check_seconds, short_repr
from memory_core.tiers.session.history import HistoryOperations, SessionMessage, parse_entries, text

logger = logging.getLogger(__name__)

T = TypeVar("T")

Remember = Callable[..., Operation[FormationReport]]
"""The client's ``remember`` operation of the session's key: ``(messages, set_name, *, wait, timeout)``."""
Publish = Callable[[str, NamespaceRequest, str, float], Any]
"""Publishes a task to run ``countdown`` seconds from now: ``(task, request, summary, countdown)`` -> its id (the
blocking client), or an awaitable of it (the asyncio one)."""

MAX_DELAY = 3600.0
"""The longest ``debounce`` or ``max_wait``, in seconds: a worker holds a delayed task in its memory until due."""

_ROUNDS = 100
"""Compare-and-set attempts of one save before it leaves its messages to the next save (other processes kept
changing the session's state in between)."""

_SET_NAME: TypeAdapter[str] = TypeAdapter(SetName)

# KEYS: the state hash, the record of the operation waiting (the state key when none waits).
# ARGV: 1 expected version, 2 debounce, 3 max_wait, 4 closing margin, 5 state TTL (0: none), 6 the replaced
# operation's record, 7 its TTL, 8-10 the replacing candidate (op id, first, last; '' op: none), 11-13 the
# candidate after the waiting operation (op id, first, last; '' op: nothing formable in it), 14 '1' when that
# candidate is a full batch (due at once, the rest follows).
# Returns {0} when the state changed since it was read, else {1, 'replace'|'after', seconds until due}.
_CLAIM = """
local state = KEYS[1]
local version = redis.call('HGET', state, 'version') or '0'
if version ~= ARGV[1] then return {0} end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local formed = redis.call('HGET', state, 'formed') or ''
local waiting = redis.call('HGET', state, 'op')
local mode = 'after'
local since = now
if waiting and waiting ~= '' then
  local due = tonumber(redis.call('HGET', state, 'due'))
  local sent = redis.call('HGET', state, 'sent') == '1'
  if ARGV[8] ~= '' and now < due - tonumber(ARGV[4]) then
    redis.call('SET', KEYS[2], ARGV[6], 'EX', ARGV[7])
    mode = 'replace'
  elseif ARGV[8] ~= '' and not sent and redis.call('SET', KEYS[2], ARGV[6], 'NX', 'EX', ARGV[7]) then
    mode = 'replace'
  end
  if mode == 'replace' then
    since = tonumber(redis.call('HGET', state, 'since'))
  else
    formed = redis.call('HGET', state, 'last')
  end
end
local pick = 11
if mode == 'replace' then pick = 8 end
local op, first, last = ARGV[pick], ARGV[pick + 1], ARGV[pick + 2]
local due = math.min(now + tonumber(ARGV[2]), since + tonumber(ARGV[3]))
if mode == 'after' and ARGV[14] == '1' then due = now end
redis.call('HSET', state, 'version', tostring(tonumber(version) + 1), 'formed', formed)
if op == '' then
  redis.call('HSET', state, 'formed', last)
  redis.call('HDEL', state, 'op', 'first', 'last', 'since', 'due', 'sent')
else
  redis.call('HSET', state, 'op', op, 'first', first, 'last', last, 'since', tostring(since), 'due', tostring(due),
    'sent', '0')
end
if tonumber(ARGV[5]) > 0 then redis.call('EXPIRE', state, ARGV[5]) end
return {1, mode, tostring(math.max(0, due - now))}
"""

_SENT = """
if redis.call('HGET', KEYS[1], 'op') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'sent', '1')
  return 1
end
return 0
"""


def check_feed(form_into: object, debounce: object, max_wait: object) -> tuple[str | None, float, float]:
    """The checked ``form_into`` (a set name or None), ``debounce`` and ``max_wait`` of a session."""
    name = None
    if form_into is not None:
        try:
            name = _SET_NAME.validate_python(form_into)
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"]
            raise InvalidRequestError(f"form_into {short_repr(form_into)} is invalid: {reason}") from exc
    wait = check_seconds(debounce, "debounce", MAX_DELAY)
    most = check_seconds(max_wait, "max_wait", MAX_DELAY)
    if most < wait:
        raise InvalidRequestError(f"max_wait must be at least debounce ({wait:g}s), got {max_wait!r}")
    return name, wait, most


@dataclass(frozen=True)
class _Waiting:
    op_id: str
    first: str
    last: str


@dataclass(frozen=True)
class _State:
    version: str
    formed: str | None
    waiting: _Waiting | None

    @classmethod
    def from_hash(cls, raw: Any) -> _State:
        values = {text(k): text(v) for k, v in (raw or {}).items()}
        try:
            version = str(int(values.get("version", "0")))
            waiting = _Waiting(values["op"], values["first"], values["last"]) if values.get("op") else None
            formed = values.get("formed") or None
            # Cursors are compared as numbers later: a malformed one must fail here, named as what it is.
            for cursor in (formed, *((waiting.first, waiting.last) if waiting else ())):
                if cursor is not None:
                    _order(cursor)
        except (KeyError, ValueError) as exc:
            raise CorruptDataError(f"the session's formation state read back from Redis is malformed: {exc}") from exc
        return cls(version, formed, waiting)


@dataclass(frozen=True)
class _Batch:
    """Consecutive messages of the session, and the operation that forms those with text ('' when none has)."""

    entries: list[SessionMessage]
    op_id: str

    @property
    def first(self) -> str:
        return self.entries[0].cursor or ""

    @property
    def last(self) -> str:
        return self.entries[-1].cursor or ""

    @property
    def formable(self) -> list[SessionMessage]:
        return [entry for entry in self.entries if _formable(entry)]


class FormationFeed:
    """Sends what one session saves to formation into the set ``set_name`` of its key, debounced (see the module)."""

    def __init__(
        self,
        history: HistoryOperations,
        *,
        keys: Keys,
        scope: Scope,
        session_id: str,
        debounce: float,
        max_wait: float,
        model: str,
        max_messages: int,
        operation_ttl: int,
        remember: Remember,
        publish: Publish,
    ) -> None:
        self.history = history
        self._keys = keys
        self.scope = scope
        self.session_id = session_id
        self.set_name = scope.set_name
        self.debounce = debounce
        self.max_wait = max_wait
        self.closing = closing_margin(debounce)
        self._model = model
        self._max_messages = max_messages
        self._operation_ttl = operation_ttl
        self._remember = remember
        self._publish = publish

    def feed(self) -> Operation[list[FormationReport]]:
        """Sends the messages no formation covers yet (after a save); returns the receipts of what it sent."""
        receipts: list[FormationReport] = []
        keys = self.history.keys
        for _ in range(_ROUNDS):
            state = _State.from_hash((yield from self._read(methodcaller("hgetall", keys.formation))))
            bound = f"({state.formed}" if state.formed else "-"
            entries = parse_entries((yield from self._read(methodcaller("xrange", keys.messages, bound, "+"))))
            waiting = state.waiting
            newer = [e for e in entries if waiting is None or _order(e.cursor) > _order(waiting.last)]
            if not newer:
                return receipts  # nothing new: another process's save already sent these messages
            after, full = self._batch(newer)
            replacing = None
            # The waiting operation can be replaced only by one holding all its messages (none trimmed since)
            # that formation takes in one call.
            if waiting is not None and entries[0].cursor == waiting.first:
                candidate = self._batch(entries)
                replacing = candidate[0] if not candidate[1] else None
            claim = yield from self._claim(state, replacing, after, full)
            if claim is None:
                continue  # another save changed the state since it was read: read it again
            mode, countdown = claim
            batch = replacing if mode == "replace" and replacing is not None else after
            if batch.op_id:
                receipts.append((yield from self._send(batch, countdown)))
            if mode == "replace" or not full:
                return receipts
        logger.warning(
            "session %s of %s: its formation state kept changing under %d attempts; the next save sends its messages",
            self.session_id,
            self.scope,
            _ROUNDS,
        )
        return receipts

    def _batch(self, entries: list[SessionMessage]) -> tuple[_Batch, bool]:
        """The first messages of ``entries`` formation takes in one call, and whether more are left."""
        taken = 0
        end = len(entries)
        for position, entry in enumerate(entries):
            if _formable(entry):
                if taken == self._max_messages:
                    end = position
                    break
                taken += 1
        chosen = entries[:end]
        ids = [entry.id for entry in chosen if _formable(entry)]
        op_id = operation_id(self.scope, ids, FORMATION_PROMPT_VERSION, self._model) if ids else ""
        return _Batch(chosen, op_id), end < len(entries)

    def _claim(
        self, state: _State, replacing: _Batch | None, after: _Batch, full: bool
    ) -> Operation[tuple[str, float] | None]:
        waiting = state.waiting
        keys = [self.history.keys.formation]
        keys.append(self._record_key(waiting.op_id) if waiting is not None else keys[0])
        args: list[Any] = [
            state.version,
            repr(self.debounce),
            repr(self.max_wait),
            repr(self.closing),
            self.history.ttl or 0,
            self._replaced(waiting, replacing),
            self._operation_ttl,
            *((replacing.op_id, replacing.first, replacing.last) if replacing is not None else ("", "", "")),
            after.op_id,
            after.first,
            after.last,
            "1" if full else "0",
        ]
        try:
            reply = yield Command(partial(_evaluate, _CLAIM, keys, args))
        except redis.RedisError as exc:
            raise redis_failure(exc, "update the session's formation state") from exc
        if not reply or int(reply[0]) == 0:
            return None
        return text(reply[1]), float(text(reply[2]))

    def _send(self, batch: _Batch, countdown: float) -> Operation[FormationReport]:
        messages = [
            {"role": e.role.value, "content": e.content, "id": e.id, "at": e.created_at} for e in batch.formable
        ]
        remembering = self._remember(messages, self.set_name, wait=False, timeout=None)
        receipt = yield from delayed(remembering, self._publish, countdown)
        if receipt.op_id != batch.op_id:  # both derive it with core.formation.operation_id from the same fields
            raise RuntimeError(f"formation derived operation {receipt.op_id!r}, the session {batch.op_id!r}")
        key = self.history.keys.formation
        try:
            yield Command(partial(_evaluate, _SENT, [key], [batch.op_id]))
        except redis.RedisError as exc:
            raise redis_failure(exc, "update the session's formation state") from exc
        logger.debug(
            "session %s: formation %s of %d messages due in %.2fs",
            self.session_id,
            batch.op_id,
            len(messages),
            countdown,
        )
        return receipt

    def _replaced(self, waiting: _Waiting | None, replacing: _Batch | None) -> str:
        """The record a replaced operation is left with: done, with nothing to do, saying what replaced it."""
        if waiting is None or replacing is None:
            return ""
        now = utcnow()
        report = FormationReport(
            op_id=waiting.op_id,
            namespace=self.scope.namespace,
            key=self.scope.key,
            set_name=self.set_name,
            status="done",
            notes=[
                (
                    f"replaced before it ran by operation {replacing.op_id} of session {self.session_id!r}, which "
                    "forms these messages together with the ones saved after them"
                )
            ],
            created_at=now,
            updated_at=now,
        )
        return FormationRecord(report=report).model_dump_json()

    def _record_key(self, op_id: str) -> str:
        return self._keys.formation_operation(self.scope.namespace, self.scope.key, op_id)

    def _read(self, call: Callable[[Any], Any]) -> Operation[Any]:
        try:
            return (yield Command(call))
        except redis.RedisError as exc:
            raise redis_failure(exc, "read the session's formation state") from exc


def closing_margin(debounce: float) -> float:
    """How long before it is due a waiting operation stops taking newer messages: a worker whose clock runs that
    much ahead of Redis's may start it then. A quarter of the debounce, at most a second."""
    return min(debounce / 4, 1.0)


def delayed(operation: Operation[T], publish: Publish, countdown: float) -> Operation[T]:
    """``operation`` with each task it sends published to run ``countdown`` seconds from now.

    The publish is a ``Command`` that calls ``publish`` (the client's dispatcher) and not the Redis client it is
    given: both drivers perform it, the asyncio one awaiting what it returns.
    """
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            step = operation.send(value) if error is None else operation.throw(error)
        except StopIteration as done:
            result: T = done.value
            return result
        if isinstance(step, Send):
            step = Command(partial(_publish_later, publish, step, countdown))
        value, error = None, None
        try:
            value = yield step
        except Exception as exc:  # noqa: BLE001  # handed to the operation, as the drivers do
            error = exc


def _evaluate(script: str, keys: list[str], args: list[Any], redis_client: Any) -> Any:
    return redis_client.eval(script, len(keys), *keys, *args)


def _publish_later(publish: Publish, send: Send, countdown: float, _redis: Any) -> Any:
    return publish(send.task, send.request, send.summary, countdown)


def _formable(entry: SessionMessage) -> bool:
    # A message with tool calls and no text has nothing formation could read.
    return bool(entry.content.strip())


def _order(cursor: str | None) -> tuple[int, int]:
    """A stream entry id as comparable numbers (``"1700000000000-3"`` -> ``(1700000000000, 3)``)."""
    millis, _, seq = (cursor or "").partition("-")
    return int(millis), int(seq or 0)
