"""``RedisLock.kept``: the lock workers hold while they open (and may migrate or switch) a store on a Qdrant
server. It is held as long as the block runs, however long past its ttl, and a second holder waits for it."""

from __future__ import annotations

import threading
import time
import uuid

import redis

from memory_core.core.locks import RedisLock


def test_a_kept_lock_outlives_its_ttl_and_the_next_holder_waits_for_the_block_to_end(raw_redis: redis.Redis):
    key = f"mctest:!ops:lock-test:{uuid.uuid4().hex}"
    order: list[str] = []
    entered, done = threading.Event(), threading.Event()

    def first() -> None:
        with RedisLock(raw_redis, key, ttl_seconds=2).kept(waiting="the test's first holder"):
            order.append("first in")
            entered.set()
            done.wait(60)  # the block ends when the test says, not after a time a slow machine may outrun
            order.append("first out")

    holder = threading.Thread(target=first)
    holder.start()
    assert entered.wait(30)
    time.sleep(3)  # past the ttl: only the keeper's extensions hold the lock this long
    assert not RedisLock(raw_redis, key, ttl_seconds=2).acquire(), "the lock expired while its block ran"
    threading.Timer(1, done.set).start()  # the block ends while the second holder waits (or before it asks)
    with RedisLock(raw_redis, key, ttl_seconds=2).kept(waiting="the test's second holder"):
        order.append("second in")
    holder.join()
    assert order == ["first in", "first out", "second in"]
    assert raw_redis.get(key) is None  # released, not left to expire
