"""The base class of every memory task: retry policy, replies to waiting clients, dead letters.

Business rules live in ``memory_core``; this class only carries outcomes:
a success or a final failure is pushed to the client's reply list, and a write
that fails for good is kept, payload and all, in its namespace's dead-letter list.
It also refuses, before any effect, a message of any shape but ours or whose token
does not grant its namespace; such a message is no failed write, and is kept, if at
all, with the unroutable letters, which are never replayed.

An embeddings endpoint that is unavailable (``TransientEmbedderError``) is ridden out by a write for
``MEMORY_EMBEDDER__OUTAGE_RETRY`` minutes, not for a count of retries: see ``MemoryTask.retry``.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import redis
from celery import Task
from celery.exceptions import Reject, Retry
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from memory_core.core import metrics, routing, tracing
from memory_core.core.auth import AUTH_HEADER, refusal
from memory_core.core.dispatch import SENT_AT_HEADER
from memory_core.core.errors import (
    CALLER_MISTAKES,
    FormationBusy,
    FormationError,
    InvalidRequestError,
    MemoryCoreError,
    TransientEmbedderError,
    TransientStoreError,
)
from memory_core.core.messages import SCHEMA_VERSION, ErrorInfo, Reply
from memory_core.core.models import Namespace
from memory_core.workers import services

logger = logging.getLogger(__name__)

_NAMESPACE: TypeAdapter[str] = TypeAdapter(Namespace)


def request_namespace(kwargs: Mapping[str, Any] | None) -> str | None:
    """The namespace a raw task message names, if it is a valid one (replies and dead letters go there)."""
    request = (kwargs or {}).get("request")
    if not isinstance(request, dict):
        return None
    try:
        return _NAMESPACE.validate_python(request.get("namespace"))
    except ValidationError:
        return None


OUTAGE_HEADER = "memory_embedder_outage"
"""The header a task riding out an embedding outage carries from one retry to the next (see ``Outage``)."""


def replay_command(namespace: str | None) -> str:
    """The command that replays the dead letters of ``namespace`` (a write's, or wherever it is kept)."""
    return f"memory-core dead-letters replay --namespace {namespace or '<namespace>'}"


class Outage(BaseModel):
    """What a task riding out an embeddings endpoint's outage carries through its retries (``OUTAGE_HEADER``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")  # a newer worker's fields are no reason to start over

    since: float = Field(allow_inf_nan=False)
    """When the outage first failed this task: epoch seconds, the worker's clock."""
    retries: int = Field(ge=0)
    """How many of the task's retries were the outage's (they do not count against ``max_retries``)."""
    told: bool = False
    """Whether the waiting caller was told already that the write is kept and goes on retrying."""


def outage_of(request: Any) -> Outage | None:
    """The outage a task request's header says it is riding out, if any (a malformed header counts as none)."""
    raw = getattr(request, OUTAGE_HEADER, None)
    if raw is None:
        return None
    try:
        return Outage.model_validate(raw)
    except ValidationError:
        return None


def kept_while_retrying(exc: TransientEmbedderError, until: float, minutes: float, namespace: str | None) -> str:
    """What a waiting caller is told when it stops waiting while the write goes on retrying."""
    at = datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f"the embedding endpoint is unavailable ({exc}); this call stops waiting, but the write is kept and goes on "
        f"retrying until {at} ({minutes:g} min after its first failure, MEMORY_EMBEDDER__OUTAGE_RETRY), then it is "
        f"dead-lettered (replay with `{replay_command(namespace)}`)"
    )


def retry_countdown(exc: BaseException | None, countdown: float | None, longest: float) -> float | None:
    """The delay before a retry: the backoff's, or longer where the endpoint's ``Retry-After`` asks for it, but
    never past ``longest`` (the longest backoff, which settings keep under the broker's visibility timeout, so
    a message waiting out a Retry-After is not handed to a second worker)."""
    wait = exc.retry_after if isinstance(exc, TransientEmbedderError) else None
    if wait is None:
        return countdown
    return max(countdown or 0.0, min(wait, longest))


# Marks an error as the refusal of a message as a whole (raised before the task had any effect).
_REFUSED = "memory_core_refused_before_any_effect"


def _refused(exc: MemoryCoreError) -> MemoryCoreError:
    setattr(exc, _REFUSED, True)
    return exc


def callers_mistake(exc: BaseException, kwargs: dict[str, Any] | None, *, told: bool) -> bool:
    """Whether ``exc`` is the caller's to fix (``CALLER_MISTAKES``) and ``told`` to them: then it is never
    dead-lettered, since replaying it would fail the same way.

    Kept all the same: a refused message (wrong shape, or a token that does not grant its namespace), with
    the unroutable letters for inspection; a failure nobody can be told of (the request names no valid
    namespace to reply to), with them too; and a request of a schema version this worker does not know,
    where it can be replayed, since it may come from a newer client and lands once the workers are upgraded.
    """
    if not told or not isinstance(exc, CALLER_MISTAKES) or getattr(exc, _REFUSED, False):
        return False
    request = (kwargs or {}).get("request")
    return not (isinstance(request, dict) and "v" in request and request["v"] != SCHEMA_VERSION)


def _shape(expected: set[str]) -> str:
    return "one keyword argument, request (an object)" if expected else "no arguments"


def _got(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """What a message carried, by position count, keyword names and the request's type: never its values."""
    got = f"{len(args)} positional argument(s) and keyword(s) {sorted(kwargs)!r}"
    if "request" in kwargs and not isinstance(kwargs["request"], dict):
        got += f", request of type {type(kwargs['request']).__name__}"
    return got


def error_info(exc: BaseException) -> ErrorInfo:
    """What a client is told about a failure: our typed errors as they are, anything else by type only."""
    if isinstance(exc, MemoryCoreError):
        return ErrorInfo(type=type(exc).__name__, message=str(exc))
    return ErrorInfo(type="MemoryCoreError", message=f"the worker failed with {type(exc).__name__}")


def outline(value: Any) -> Any:
    """``value`` with every string and list replaced by its length: its shape, without memory text."""
    if isinstance(value, dict):
        return {str(k): outline(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return f"[{len(value)}]"
    if isinstance(value, str):
        return f"str[{len(value)}]"
    return value


class MemoryTask(Task):  # type: ignore[type-arg]  # celery-types makes Task generic; we take JSON dicts
    """Base of all ``memory.*`` tasks."""

    # A Redis blip inside a task (a lock, a version bump) is retried like a store blip; if Redis is
    # down for longer, the unacknowledged message comes back after the visibility timeout anyway.
    # An embeddings endpoint that is busy or down (429, 5xx, timeout) is retried the same way, no sooner than
    # its Retry-After, and by a write for MEMORY_EMBEDDER__OUTAGE_RETRY minutes (see ``retry``): the wait is the
    # broker's, no worker thread sleeps through it.
    autoretry_for = (TransientStoreError, TransientEmbedderError, redis.ConnectionError, redis.TimeoutError)
    retry_backoff = True
    retry_backoff_max = 60
    retry_jitter = True
    max_retries = 5
    acks_late = True
    # Outcomes of normal operation, told to the caller: Celery logs them at INFO without a traceback (a
    # first profile read finding no set yet is no error of the worker's).
    throws = CALLER_MISTAKES

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        refused = self._refusal(args, kwargs)
        if refused is not None:
            raise refused
        sent_at = getattr(self.request, SENT_AT_HEADER, None)
        if isinstance(sent_at, float | int) and not self.request.retries:
            queue = routing.ROUTES.get(self.name, routing.WRITE_QUEUE)
            metrics.QUEUE_WAIT_SECONDS.labels(queue).observe(max(0.0, time.time() - sent_at))
        headers = {name: getattr(self.request, name, None) for name in tracing.HEADERS}
        with tracing.consumer_span(self.name, headers), metrics.timed(metrics.TASK_SECONDS, task=self.name):
            result = super().__call__(*args, **kwargs)
        metrics.TASKS.labels(self.name, "success").inc()
        # The caller gets the result through its reply list. Celery gets only its outline, because
        # what it gets ends up in worker logs and in task events, i.e. on Flower's screens.
        self._reply(kwargs, str(self.request.id), Reply(ok=True, result=result))
        return outline(result)

    @functools.cached_property
    def _takes_request(self) -> bool:
        """Whether this task takes a ``request`` (every task takes that or nothing)."""
        return "request" in inspect.signature(self.run).parameters

    @functools.cached_property
    def _namespaced(self) -> bool:
        """Whether this task's request names the namespace it acts on (all but the operator's, like backup)."""
        return self._takes_request and self.name not in routing.OPS_REPLIES

    def _refusal(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> MemoryCoreError | None:
        """Why this message must not run at all, or None; decided before the task has any effect.

        We take one shape: the request as the one keyword (``request=<object>``), or no arguments, so the
        namespace a token is checked against is read from one place, and a request passed positionally,
        nested or twice never slips past the check. The token is checked first, wherever the request
        keyword names a namespace: a message then leaves nothing in a namespace its token does not grant
        but the refusal, replied to whoever waits there (a client with a wrong token must hear it).
        """
        tokens = self.basics.tokens
        namespace = request_namespace(kwargs) if self._namespaced else None
        token = getattr(self.request, AUTH_HEADER, None)
        if tokens is not None and namespace is not None and not tokens.grants(token, namespace):
            return _refused(refusal(namespace))
        expected = {"request"} if self._takes_request else set()
        if args or set(kwargs) != expected or (expected and not isinstance(kwargs["request"], dict)):
            return _refused(InvalidRequestError(f"{self.name} takes {_shape(expected)}; got {_got(args, kwargs)}"))
        if tokens is not None and self._namespaced and namespace is None:
            named = kwargs["request"].get("namespace")
            return _refused(
                InvalidRequestError(f"{self.name} request names namespace {named!r:.80}, not a valid one; refused")
            )
        return None

    def retry(self, *args: Any, **kwargs: Any) -> Any:
        """Sends the task again after a transient failure, or raises it to fail for good.

        An embeddings endpoint's outage is ridden out by the tasks that are dead-lettered (writes) for
        ``MEMORY_EMBEDDER__OUTAGE_RETRY`` minutes from its first failure, however many retries that takes; a
        short outage then costs a write a delay, not a dead letter. Its retries do not count against
        ``max_retries`` (the limit of other transient failures), so Celery's ``retry``, which counts them all,
        is not used for such a task. Other tasks (searches, whose caller waits) keep the usual retries.
        """
        exc = kwargs.get("exc")  # autoretry passes exc and countdown by name
        if isinstance(exc, TransientEmbedderError):
            kwargs["countdown"] = retry_countdown(exc, kwargs.get("countdown"), self.retry_backoff_max)
        request = self.request
        if not request.called_directly and not args and isinstance(exc, FormationBusy):
            return self._wait_busy(exc)
        if not request.called_directly and not args and isinstance(exc, Exception):
            outage = outage_of(request)
            if isinstance(exc, TransientEmbedderError) and self._dead_lettered:
                return self._retry_through_outage(exc, kwargs.get("countdown"), outage)
            if outage is not None:  # a failure after an outage: only the retries of other failures count
                if request.retries - outage.retries >= (self.max_retries or 0):
                    raise exc
                return self._send_retry(exc, kwargs.get("countdown"), outage)
        # Celery drops a message for good (``Reject(requeue=False)``) when it cannot publish the
        # retry, i.e. exactly when the broker is in trouble. Put it back on its queue instead.
        try:
            return super().retry(*args, **kwargs)
        except Reject as exc:
            reason, requeue = exc.args  # celery-types does not declare Reject's attributes
            if requeue:
                raise
            raise Reject(reason, requeue=True) from exc

    def _wait_busy(self, exc: FormationBusy) -> Any:
        """Sends a formation that must wait (its scope, namespace or model busy) again after the wait it names.
        A wait is no failure: it is counted with the outage's retries, which ``max_retries`` leaves out, so
        waiting never ends in a dead letter (a wait within the longest backoff keeps it under the visibility
        timeout)."""
        outage = outage_of(self.request) or Outage(since=time.time(), retries=0, told=True)
        outage = outage.model_copy(update={"retries": outage.retries + 1})
        return self._send_retry(exc, min(exc.retry_after, float(self.retry_backoff_max)), outage)

    def _retry_through_outage(self, exc: TransientEmbedderError, countdown: float | None, outage: Outage | None) -> Any:
        """Retries an embedding outage until its window ends (then raises ``exc``: the task fails for good and is
        dead-lettered); tells a waiting caller, once, when it has waited its share."""
        now = time.time()
        outage = outage or Outage(since=now, retries=0)
        minutes = self.basics.settings.embedder.outage_retry
        until = outage.since + minutes * 60
        if now >= until:
            raise exc
        # The last try comes when the window ends, not after it (a Retry-After may ask for later).
        wait = min(countdown or 0.0, until - now)
        outage = outage.model_copy(update={"retries": outage.retries + 1})
        if not outage.told and self._caller_waited(outage, now + wait):
            info = ErrorInfo(type=type(exc).__name__, message=kept_while_retrying(exc, until, minutes, self._namespace))
            self._reply(self.request.kwargs, str(self.request.id), Reply(ok=False, error=info))
            outage = outage.model_copy(update={"told": True})
        return self._send_retry(exc, wait, outage)

    def _caller_waited(self, outage: Outage, next_try: float) -> bool:
        """Whether a caller waiting for this task has waited long enough to be told it goes on: after the usual
        retries (``max_retries``), or once the next try would come more than ``retry_backoff_max`` seconds after
        the call was sent (its clock) or the outage began."""
        sent_at = getattr(self.request, SENT_AT_HEADER, None)
        began = sent_at if isinstance(sent_at, float | int) and not isinstance(sent_at, bool) else outage.since
        return self.request.retries + 1 > (self.max_retries or 0) or next_try - began > self.retry_backoff_max

    def _send_retry(self, exc: Exception, countdown: float | None, outage: Outage) -> Any:
        """What Celery's ``retry`` does once it decided to retry, with ``outage`` in the message's headers: the
        message is sent again with an ETA (the broker's wait, no worker thread sleeps) and ``Retry`` raised."""
        request = self.request
        headers = {**(request.headers or {}), OUTAGE_HEADER: outage.model_dump()}
        signature = self.signature_from_request(
            request, countdown=countdown, eta=None, retries=request.retries + 1, headers=headers
        )
        try:
            signature.apply_async()
        except Exception as error:  # as Celery's retry would, but back on its queue (see ``retry``)
            raise Reject(error, requeue=True) from error
        # celery-types declares numbers.Real, which a float is at run time but not to mypy.
        raise Retry(exc=exc, when=countdown, sig=signature)  # type: ignore[arg-type]

    @property
    def _namespace(self) -> str | None:
        """The namespace the current request names, if a valid one (where its dead letters are kept)."""
        return request_namespace(self.request.kwargs)

    @functools.cached_property
    def _dead_lettered(self) -> bool:
        """Whether a task of this name that fails for good is dead-lettered (it carried data or work)."""
        return routing.ROUTES.get(self.name, routing.WRITE_QUEUE) in routing.DEAD_LETTER_QUEUES

    @property
    def basics(self) -> services.Basics:
        """This process's settings, keys, Redis and tokens: all that replies and dead letters need."""
        return services.basics(self.app)

    @property
    def services(self) -> services.Services:
        """This process's services for this task's app."""
        return services.get(self.app)

    def on_retry(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        metrics.TASKS.labels(self.name, "retry").inc()

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        metrics.TASKS.labels(self.name, "failure").inc()
        info = error_info(exc)
        level = logging.INFO if isinstance(exc, self.throws) else logging.WARNING
        logger.log(level, "task %s %s failed: %s", self.name, task_id, info.type)
        # The letter first: a caller told of the failure must find its payload already kept. A caller's
        # mistake (a missing set, a conflicting definition, a request that fails validation, a quota) is
        # told to the caller and kept nowhere: replaying it would fail the same way, and dead letters are
        # what operators alert on, for writes the system failed.
        told = self._reply_namespace(kwargs) is not None
        if not callers_mistake(exc, kwargs, told=told) and self._dead_lettered:
            letter = info
            if isinstance(exc, TransientEmbedderError):
                letter = info.model_copy(update={"message": self._outage_over(exc)})
            # A refused message never ran: it is no failed write, and replaying it from its namespace's
            # letters would send it again under the replaying operator's token (which may grant what the
            # sender's did not). It is kept for inspection with the unroutable letters, never replayed.
            raw_replies = exc.raw_replies if isinstance(exc, FormationError) else None
            refused = getattr(exc, _REFUSED, False)
            if self._dead_letter(args, kwargs, task_id, letter, replayable=not refused, raw_replies=raw_replies):
                info = letter  # the caller is told it is dead-lettered only once it is
        elif isinstance(exc, TransientEmbedderError):
            tries = self.request.retries + 1
            info = info.model_copy(update={"message": f"{exc}; tried {tries} times: try again once it answers"})
        self._reply(kwargs, task_id, Reply(ok=False, error=info))

    def _outage_over(self, exc: TransientEmbedderError) -> str:
        """What a write that rode out an embedding outage to the end of its window says as it is dead-lettered."""
        minutes = self.basics.settings.embedder.outage_retry
        return (
            f"the embedding endpoint is unavailable ({exc}); the write was retried for {minutes:g} min "
            f"(MEMORY_EMBEDDER__OUTAGE_RETRY) and is dead-lettered: replay it with "
            f"`{replay_command(self._namespace)}` once the endpoint answers"
        )

    def _reply_namespace(self, kwargs: Any) -> str | None:
        """Where a client waits for this task's outcome: its request's namespace, ``!ops`` for operator tasks
        (whose requests name none), nowhere for tasks that take no request (nobody waits for a sweep)."""
        if self.name in routing.OPS_REPLIES:
            return routing.OPS_NAMESPACE
        return request_namespace(kwargs) if self._takes_request else None

    def _reply(self, kwargs: Any, task_id: str, reply: Reply) -> None:
        namespace = self._reply_namespace(kwargs)
        if namespace is None:
            return
        svc = self.basics
        key = svc.keys.reply(namespace, task_id)
        # The caller of a write riding out an outage was told it goes on (see ``_retry_through_outage``): its
        # outcome replaces that word, so a receipt waited on later, or callers sharing it, read how it ended.
        outage = outage_of(self.request)
        replaces = outage is not None and outage.told

        def push(pipe: redis.client.Pipeline) -> None:
            if replaces:
                pipe.delete(key)
            pipe.rpush(key, reply.model_dump_json())
            pipe.expire(key, svc.settings.celery.reply_ttl)

        if not _write_through_restart(svc.redis, push, svc.settings.client.reconnect_window):
            # The write itself is durable; only the waiting client misses its answer (it times out).
            logger.warning("could not deliver the reply of task %s", task_id)

    def _dead_letter(
        self,
        args: Any,
        kwargs: Any,
        task_id: str,
        info: ErrorInfo,
        *,
        replayable: bool,
        raw_replies: list[str] | None = None,
    ) -> bool:
        """Keeps the failed task's message in the dead letters; False if Redis refused it (it is then lost)."""
        namespace = request_namespace(kwargs) if replayable else None
        svc = self.basics
        letter = {
            "task": self.name,
            "task_id": task_id,
            "kwargs": kwargs,
            "error": info.model_dump(),
            "retries": self.request.retries,
            "failed_at": datetime.now(UTC).isoformat(),
        }
        if args:
            letter["args"] = args  # only refused messages have any; kept so the letter shows what was sent
        if raw_replies:
            letter["raw_replies"] = raw_replies  # a model's unusable replies, beside the messages in the kwargs
        key = svc.keys.dead_letters(namespace) if namespace else svc.keys.unroutable_dead_letters()

        def push(pipe: redis.client.Pipeline) -> None:
            pipe.rpush(key, json.dumps(letter))
            if namespace:
                pipe.sadd(svc.keys.dead_letter_namespaces(), namespace)

        metrics.DEAD_LETTERS.labels(self.name).inc()
        # Longer than for a reply: this letter is the only copy of a write that failed for good.
        if _write_through_restart(svc.redis, push, 6 * svc.settings.client.reconnect_window):
            logger.error("task %s %s dead-lettered after %d retries", self.name, task_id, self.request.retries)
            return True
        logger.critical("task %s %s failed for good and Redis refused its dead letter", self.name, task_id)
        return False


def _write_through_restart(
    client: redis.Redis, commands: Callable[[redis.client.Pipeline], None], window: float
) -> bool:
    """Runs ``commands`` in one pipeline, retrying while Redis is unreachable for up to ``window`` seconds."""
    deadline = time.monotonic() + window
    delay = 0.1
    while True:
        try:
            with client.pipeline() as pipe:
                commands(pipe)
                pipe.execute()
            return True
        except redis.RedisError:
            if time.monotonic() + delay > deadline:
                logger.warning("Redis write failed for good", exc_info=True)
                return False
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
