"""The Celery app: ``celery -A memory_core.workers.app worker`` serves every queue (``-Q`` picks some).

``create_app(settings)`` sets every Celery option explicitly from ``Settings``.
The module-level ``app`` (what the ``celery`` CLI loads) is built on first access,
from the environment.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import redis
from celery import Celery, bootsteps, signals
from prometheus_client import REGISTRY

import memory_core.workers.tasks  # noqa: F401  # registers the shared tasks with every app created here
from memory_core.core import metrics, routing, tracing
from memory_core.core.dispatch import open_redis
from memory_core.core.errors import ConfigurationError, MemoryCoreError
from memory_core.core.keys import Keys
from memory_core.core.liveness import Heartbeat, WorkerInfo, reranker_of, store_fields
from memory_core.core.metrics import NamespaceItems
from memory_core.core.models import VERBATIM
from memory_core.core.settings import Settings, get_settings
from memory_core.workers import beat_schedule, services
from memory_core.workers.base import MemoryTask
from memory_core.workers.broker import keep_poison_in, transport_for
from memory_core.workers.logging import on_setup_logging, redact_secrets_of

signals.setup_logging.connect(on_setup_logging, weak=False)

logger = logging.getLogger(__name__)


def create_app(settings: Settings) -> Celery:
    """A Celery app for these settings: JSON only, late acks, prefetch 1, explicit queues and routes."""
    if settings.qdrant.backend == "edge" and settings.celery.pool == "prefork" and settings.celery.concurrency > 1:
        raise ConfigurationError(
            "MEMORY_CELERY__POOL='prefork' cannot share the embedded Qdrant engine between processes; "
            "use MEMORY_CELERY__POOL=threads, or a Qdrant server (MEMORY_QDRANT__BACKEND=server)"
        )
    redact_secrets_of(settings)  # from every line this process logs, whoever logs it
    app = Celery("memory_core", set_as_current=False)
    app.conf.update(
        broker_url=settings.broker_url,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.celery.visibility_timeout,
            # kombu scans for messages past their visibility timeout only every 10 x 10 s by default;
            # scan every interval instead, so a task lost with a worker or a connection comes back
            # within about visibility_timeout + 10 s (one cheap ZRANGE per scan).
            "unacked_restore_interval": max(1, min(10, settings.celery.visibility_timeout // 5)),
            "unacked_restore_throttle": 1,
            # Restores take a Redis mutex that expires after 300 s by default. Redis killed mid-restore
            # keeps it in its AOF, and then nothing was redelivered for 5 minutes after the restart
            # (tests/faults/test_redis_restart.py stalled on it). A pass takes milliseconds.
            "unacked_mutex_expire": 30,
            # Queues and the unacked index under this deployment's prefix: another deployment on the
            # same Redis database (its own MEMORY_REDIS__KEY_PREFIX) never takes these tasks. On RabbitMQ a
            # deployment is a vhost of its own (in the broker URL), and the options above go unused.
            **({"global_keyprefix": settings.broker_key_prefix} if settings.broker_key_prefix else {}),
            # On RabbitMQ, publisher confirms for what the worker publishes (retries): as the client's.
            **routing.broker_options(settings.broker_url),
        },
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        event_serializer="json",
        # Outcomes go to the caller through namespaced reply lists (memory_core.workers.base), not a result backend.
        task_ignore_result=True,
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        # On a broker connection loss, cancel tasks in flight so their (idempotent) messages are redelivered,
        # instead of leaving unackable messages holding the worker's prefetch slots (the Celery 6 default).
        worker_cancel_long_running_tasks_on_connection_loss=True,
        # The client declares the same queues (memory_core.core.dispatch): durable quorum queues on RabbitMQ.
        task_queues=list(routing.task_queues(settings.broker_url)),
        # Quorum queues refuse a global (channel-wide) prefetch: with this on, the worker sees them and sets
        # its prefetch per consumer (concurrency x 1), and Celery binds the queues to its delayed-delivery
        # exchanges, so a retry's countdown is kept by the broker and not by a worker holding the message.
        worker_detect_quorum_queues=True,
        task_default_queue=routing.WRITE_QUEUE,
        task_routes={name: {"queue": queue} for name, queue in routing.ROUTES.items()},
        worker_pool=settings.celery.pool,
        worker_concurrency=settings.celery.concurrency,
        worker_send_task_events=settings.celery.task_events,
        worker_hijack_root_logger=False,
        beat_schedule=_schedule(settings),
        timezone="UTC",
        enable_utc=True,
    )
    services.register(app, settings)
    app.steps["consumer"].add(HeartbeatStep)

    # weak=False: a local function held weakly would be collected before the app finalizes.
    @app.on_after_finalize.connect(weak=False)
    def _apply_retry_policy(sender: Celery, **_: Any) -> None:
        for task in sender.tasks.values():
            if isinstance(task, MemoryTask):
                task.max_retries = settings.celery.max_retries
                task.retry_backoff_max = settings.celery.retry_backoff_max

    return app


def _schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    schedule = {name: dict(entry) for name, entry in beat_schedule.BEAT_SCHEDULE.items()}
    intervals = {
        "ttl-sweep": settings.maintenance.ttl_sweep_interval,
        "flush-access": settings.maintenance.flush_access_interval,
        "evict": settings.maintenance.evict_interval,
        "optimize": settings.maintenance.optimize_interval,
        "compaction-sweep": settings.compaction.sweep_interval,
        "formation-resume": settings.formation.resume_interval,
    }
    for name, seconds in intervals.items():
        schedule[name]["schedule"] = seconds
    return schedule


class HeartbeatStep(bootsteps.StartStopStep):
    """While the consumer runs, the worker tells Redis it is alive and which queues it consumes.

    A consumer step, not a worker signal: it starts once the task queues are consumed, stops when the
    consumer stops (a lost broker connection restarts it), and runs the same in ``celery worker`` and
    in an in-process worker.
    """

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.heartbeat: Heartbeat | None = None

    def start(self, parent: Any) -> None:
        base = services.basics(parent.app)
        settings = base.settings
        queues = tuple(sorted(queue.name for queue in parent.task_consumer.queues))
        info = WorkerInfo(
            hostname=parent.hostname,
            queues=queues,
            embedder=services.embedder_of(parent.app),  # loaded by the preflight, before the consumer starts
            reranker=reranker_of(settings.rerank.model),  # the setting: a worker whose reranker cannot load never runs
            former=settings.formation.model if settings.anthropic.api_key is not None else VERBATIM,
            **store_fields(settings.qdrant),
        )
        self.heartbeat = Heartbeat(base.redis, base.keys, info, interval=settings.celery.heartbeat_interval)
        try:
            self.heartbeat.start()
        except redis.RedisError as exc:  # beats go on from the thread once Redis answers
            logger.warning("first heartbeat not written: %s", exc)

    def stop(self, parent: Any) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None

    shutdown = stop


@signals.celeryd_init.connect
def _refuse_unknown_queues(options: dict[str, Any] | None = None, **_: Any) -> None:
    # Celery creates any queue named with -Q: a misspelt name gave a worker that consumed nothing, silently.
    # Only the `celery worker` program sends this signal (in-process test workers choose no queues).
    for option, flag in (("queues", "-Q"), ("exclude_queues", "-X")):
        unknown = [name for name in _queue_names((options or {}).get(option)) if name not in routing.QUEUES]
        if unknown:
            print(
                f"memory-core worker: unknown queue {', '.join(map(repr, unknown))} in {flag}; "
                f"the queues are {', '.join(routing.QUEUES)}",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(2)


def _queue_names(value: object) -> list[str]:
    """The names given with -Q or -X: a comma-separated string, or a list of them."""
    parts = [str(v) for v in value] if isinstance(value, list | tuple | set) else [str(value or "")]
    return [name.strip() for part in parts for name in part.split(",") if name.strip()]


@signals.worker_init.connect
def _preflight(sender: Any = None, **_: Any) -> None:
    # Open the store, load the embedder and the summarizer before a single message is taken: a worker
    # that cannot work exits now, with one line saying why, instead of failing every task it takes.
    app = getattr(sender, "app", None)
    if app is None or not services.registered(app):
        return
    settings = services.settings_of(app)
    try:
        services.get(app)
    except (MemoryCoreError, ImportError, OSError) as exc:
        reason = (
            f"missing package {exc.name!r}: pip install 'memory-core[worker]'"
            if isinstance(exc, ImportError)
            else str(exc)
        )
        raise SystemExit(f"memory-core worker cannot start: {reason}") from None
    if settings.celery.pool == "prefork":
        services.close(app)  # each pool process builds its own after the fork


_observed = False


@signals.worker_init.connect
def _observe(sender: Any = None, **_: Any) -> None:
    # Metrics are served by the process that runs the tasks: the worker itself with the threads pool.
    global _observed
    app = getattr(sender, "app", None)
    if app is None or _observed:
        return
    _observed = True
    settings = services.settings_of(app)
    tracing.configure(settings.tracing)
    if settings.metrics.enabled:
        top = settings.metrics.top_namespaces
        REGISTRY.register(NamespaceItems(lambda: services.get(app).memory.store.namespace_counts(10_000), top=top))
        metrics.serve(settings.metrics.address, settings.metrics.port)


@signals.worker_init.connect
def _consume_with_fixed_transport(sender: Any = None, **_: Any) -> None:
    # Only a worker consumes, so only a worker needs kombu's Redis transport with its lost-connection
    # fixes (memory_core.workers.broker); it is set before the worker opens its broker connection. Everything else
    # (clients, beat, Flower) keeps the stock transport: kombu names a custom transport's URL after its
    # import path, and Flower then refused to read queue lengths ("'redis' broker is not supported").
    app = getattr(sender, "app", None)
    if app is None:
        return
    transport = transport_for(app.conf.broker_url)
    if transport is not None:
        app.conf.broker_transport = transport
        settings = services.settings_of(app)
        keep_poison_in(lambda: open_redis(settings), Keys(settings.redis.key_prefix).unroutable_dead_letters())


@signals.worker_process_init.connect
def _trace_in_child(**_: Any) -> None:
    # A forked pool process needs its own tracer provider (the parent's export thread did not fork).
    tracing.configure(get_settings().tracing)


@signals.worker_shutdown.connect
def _close_services(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    if app is not None:
        services.close(app)


_app: Celery | None = None


def __getattr__(name: str) -> Celery:
    # Built on first access so importing this module (tests, ops) reads no environment.
    global _app
    if name != "app":
        raise AttributeError(name)
    if _app is None:
        _app = create_app(get_settings())
    return _app
