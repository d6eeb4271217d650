from pathlib import Path

import pytest
import redis
from celery import Celery, signals
from kombu import Queue

import memory_core.workers.app
from memory_core.core import routing
from memory_core.core.dispatch import Dispatcher
from memory_core.core.errors import ConfigurationError
from memory_core.core.keys import Keys
from memory_core.core.settings import Settings
from memory_core.workers.app import create_app
from memory_core.workers.broker import Transport


def _settings(tmp_path: Path, **celery: object) -> Settings:
    return Settings(_env_file=None, qdrant={"path": tmp_path}, celery=celery)


def test_retry_policy_from_settings_reaches_every_task(tmp_path: Path):
    app = create_app(_settings(tmp_path, max_retries=7, retry_backoff_max=9))
    app.finalize()
    for name in routing.ROUTES:
        assert app.tasks[name].max_retries == 7
        assert getattr(app.tasks[name], "retry_backoff_max") == 9  # noqa: B009  # not in celery-types


def test_the_app_speaks_json_only_with_late_acks(tmp_path: Path):
    conf = create_app(_settings(tmp_path)).conf
    assert conf.accept_content == ["json"]
    assert conf.task_serializer == "json"
    assert conf.task_acks_late is True
    assert conf.worker_prefetch_multiplier == 1
    assert {q.name for q in conf.task_queues} == set(routing.QUEUES)
    assert conf.beat_schedule["compaction-sweep"]["task"] == routing.COMPACTION_SWEEP
    assert conf.beat_schedule["optimize"]["task"] == routing.OPTIMIZE


def test_prefork_is_refused_with_the_embedded_engine(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="threads"):
        create_app(_settings(tmp_path, pool="prefork", concurrency=2))


def test_broker_keys_carry_the_deployment_prefix(tmp_path: Path):
    settings = Settings(_env_file=None, qdrant={"path": tmp_path}, redis={"key_prefix": "acme"})
    options = create_app(settings).conf.broker_transport_options
    assert options["global_keyprefix"] == "acme/"
    amqp = Settings(_env_file=None, qdrant={"path": tmp_path}, celery={"broker_url": "amqp://guest@localhost//"})
    assert "global_keyprefix" not in create_app(amqp).conf.broker_transport_options


class _Worker:
    def __init__(self, app: Celery) -> None:
        self.app = app


def test_only_a_worker_consumes_through_the_fixed_transport_and_others_see_a_redis_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(memory_core.workers.app, "_observed", True)  # no metrics server from this fake worker
    app = create_app(_settings(tmp_path))
    with app.connection() as connection:  # what Flower reads queue lengths from
        assert connection.as_uri().startswith("redis://")
    signals.worker_init.send(sender=_Worker(app))  # what a WorkController sends before it connects
    with app.connection_for_read() as connection:
        assert isinstance(connection.transport, Transport)


def _declared(queue: Queue) -> tuple[object, ...]:
    # What RabbitMQ compares when a queue is declared again: a mismatch is PRECONDITION_FAILED.
    return (queue.name, queue.durable, queue.auto_delete, queue.exclusive, queue.queue_arguments)


def test_an_amqp_app_declares_durable_quorum_queues_with_publisher_confirms_as_the_client_does(tmp_path: Path):
    url = "amqp://guest:guest@localhost:5672/acme"
    settings = Settings(_env_file=None, qdrant={"path": tmp_path}, celery={"broker_url": url})
    conf = create_app(settings).conf
    assert {q.name for q in conf.task_queues} == set(routing.QUEUES)
    for queue in conf.task_queues:
        assert queue.durable is True
        assert queue.queue_arguments == {"x-queue-type": "quorum"}
        assert (queue.exchange.name, queue.exchange.type) == (routing.TASK_EXCHANGE, "topic")
    assert conf.broker_transport_options["confirm_publish"] is True
    assert conf.worker_detect_quorum_queues is True
    assert conf.task_acks_late is True
    assert conf.worker_prefetch_multiplier == 1
    dispatcher = Dispatcher(settings, redis.Redis(), Keys(settings.redis.key_prefix))
    try:
        client_queues = sorted(_declared(q) for q in dispatcher._queues.values())
        assert client_queues == sorted(_declared(q) for q in conf.task_queues)
        assert (dispatcher._connection.transport_options or {}).get("confirm_publish") is True
    finally:
        dispatcher.close()


def test_a_redis_app_declares_classic_queues_without_publisher_confirms(tmp_path: Path):
    conf = create_app(_settings(tmp_path)).conf
    for queue in conf.task_queues:
        assert not queue.queue_arguments
    assert "confirm_publish" not in conf.broker_transport_options


def test_the_checkouts_workers_app_entry_is_the_packaged_app():
    import workers.app as entry

    assert entry.create_app is memory_core.workers.app.create_app
    assert entry.__getattr__("_schedule") is memory_core.workers.app._schedule  # what `celery -A workers.app` reads
