"""A real Celery worker in a thread of the test process, that stops alone.

``celery.contrib.testing.worker.start_worker`` stops its worker by setting the process-wide
``celery.worker.state.should_terminate``: every in-thread worker of the process sees it, so a test that
started and stopped a second worker also stopped the session's consumer (its heartbeat with it, and the
tests after it found no worker). This one stops its own worker and no other.

Celery runs a task in a pool thread with the process's *default* app's task (``trace_task_ret`` gets no
app), and its test helper makes each new worker's app the default: the session's worker then ran its
tasks as the second worker's (that app's services, store and reply Redis). Here no app becomes the
default; each worker's pool threads take their own app as their current one.

Celery's Hub bootstep also reuses kombu's process-wide event loop when one is set, so a second worker
would run the first one's loop from another thread (and share its Redis connections): each worker here
builds its own, and the global is put back.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import Celery
from celery.concurrency.thread import TaskPool
from celery.contrib.testing.worker import TestWorkController
from celery.exceptions import WorkerShutdown
from celery.utils.nodenames import anon_nodename
from kombu.asynchronous import get_event_loop, set_event_loop


class _OwnAppThreads(TaskPool):
    """Celery's thread pool, whose threads run their tasks as this pool's app's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.executor = ThreadPoolExecutor(max_workers=self.limit, initializer=self.app.set_current)


@contextlib.contextmanager
def in_thread_worker(
    app: Celery, *, concurrency: int = 2, shutdown_timeout: float = 30, **options: Any
) -> Iterator[TestWorkController]:
    """``app``'s worker (threads pool, every queue) in a thread, consuming once this yields."""
    app.finalize()
    hostname = options.pop("hostname", anon_nodename())
    previous = get_event_loop()
    set_event_loop(None)  # the worker's Hub step, run as it is built, makes a loop of its own
    try:
        worker = TestWorkController(
            app=app,
            concurrency=concurrency,
            hostname=hostname,
            pool=_OwnAppThreads,
            loglevel="WARNING",
            ready_callback=None,
            without_heartbeat=True,  # Celery's own event heartbeats; memory-core's liveness beats regardless
            without_mingle=True,
            without_gossip=True,
            **options,
        )
        thread = threading.Thread(target=worker.start, name=f"worker-{hostname}", daemon=True)
        thread.start()
        worker.ensure_started()
    finally:
        set_event_loop(previous)
    try:
        yield worker
    finally:
        _stop_from_its_own_thread(worker)
        thread.join(shutdown_timeout)
        if thread.is_alive():
            raise RuntimeError(f"in-thread worker {hostname} did not stop within {shutdown_timeout}s")


def _stop_from_its_own_thread(worker: TestWorkController) -> None:
    # Stopping it from this thread closed its event loop under the running loop ("I/O operation on
    # closed epoll object"). Raised from a callback of its own loop, WorkerShutdown unwinds the loop
    # first, then the worker stops itself warm, in its thread: Celery's own path for a shutdown signal.
    hub = getattr(worker, "hub", None)
    if hub is None:  # a transport without an event loop: nothing runs under the stop
        worker.stop()
        return

    def shutdown() -> None:
        raise WorkerShutdown(0)

    hub.call_soon(shutdown)
