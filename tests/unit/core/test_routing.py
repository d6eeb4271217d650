import pytest

from memory_core.core import routing


@pytest.mark.parametrize("url", ["amqp://guest@localhost//", "amqps://rabbit:5671/acme", "pyamqp://localhost/acme"])
def test_amqp_queues_are_durable_quorum_queues_on_a_topic_exchange(url: str):
    queues = routing.task_queues(url)
    assert [q.name for q in queues] == list(routing.QUEUES)
    for queue in queues:
        assert queue.durable is True
        assert queue.auto_delete is False
        assert queue.queue_arguments == {"x-queue-type": "quorum"}
        assert queue.routing_key == queue.name
        assert queue.exchange.name == routing.TASK_EXCHANGE
        assert queue.exchange.type == "topic"
    assert routing.broker_options(url) == {"confirm_publish": True}


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "rediss://h:6380/1", "unix:///run/redis.sock"])
def test_redis_queues_are_plain_lists_without_confirms(url: str):
    queues = routing.task_queues(url)
    assert [q.name for q in queues] == list(routing.QUEUES)
    for queue in queues:
        assert not queue.queue_arguments
        assert queue.exchange.name == ""
    assert routing.broker_options(url) == {}


def test_every_routed_queue_is_declared():
    assert set(routing.ROUTES.values()) <= set(routing.QUEUES)
