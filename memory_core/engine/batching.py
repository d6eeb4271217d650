"""Worker-side micro-batching of writes: many small ``add`` tasks, one embedder call.

The embedder is the write path's bottleneck, and it is several times faster per item in
batches (~32) than one text at a time. Writes, though, often arrive as many small tasks
(one ``add`` per chat turn). So each task validates its request in its own thread
(``prepare_add``: a bad request fails alone, at once), hands the prepared items to a
batcher, and blocks until they are durable. The batcher's threads (one per core) each
take whatever is queued, up to ``max_items``, waiting at most ``max_wait`` for more, embed
it all in one call (a small batch waits for more only while another batch thread is
busy, so an idle worker adds no latency), then write the requests of each set as one (one dedup pass, one
upsert, one version bump and capacity check), with the same result as writing them one
after another. A task therefore returns, and its message is
acknowledged, only after its own items are in the store: batching changes how writes are
embedded, never what is acknowledged.

A batch thread takes at most its fair share of what is queued (the queued items over the batch threads not
busy, itself included), so requests arriving together are spread over the idle threads, each embedding on a
core of its own, instead of one thread taking them all while the others wait. Batching must never cost
parallelism: on chat turns a local model embeds no faster per text in one call than alone (measured in
docs/benchmarks.md), and callers that wait for their adds have only as many in flight as there are callers.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from memory_core.core import tracing
from memory_core.core.messages import AddReply
from memory_core.core.metrics import BATCH_ITEMS
from memory_core.core.models import Scope
from memory_core.engine.service import MemoryService, PreparedAdd

logger = logging.getLogger(__name__)


@dataclass
class _Pending:
    prepared: PreparedAdd
    done: threading.Event = field(default_factory=threading.Event)
    trace: Any = field(default_factory=tracing.current)  # the task's trace, continued in the batch thread
    reply: AddReply | None = None
    error: BaseException | None = None


class AddBatcher:
    """Embeds the items of concurrent ``add`` requests together. Thread-safe; threads start on first use."""

    def __init__(self, service: MemoryService, *, max_items: int, max_wait: float, threads: int) -> None:
        self.service = service
        self.max_items = max_items
        self.max_wait = max_wait
        self._threads_wanted = max(1, threads)
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._busy = 0  # batch threads collecting, embedding or writing right now
        self._queued = 0  # items of the requests in the queue
        self.batches = 0
        self.items = 0

    def add(self, raw: dict[str, Any]) -> AddReply:
        """Like ``MemoryService.add``: returns once this request's items are durable, or raises its error."""
        pending = _Pending(self.service.prepare_add(raw))
        self._start()
        with self._lock:
            self._queued += len(pending.prepared.items)
        self._queue.put(pending)
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.reply is not None
        return pending.reply

    def close(self) -> None:
        """Stops the batch threads once the queued requests are done."""
        with self._lock:
            for _ in self._threads:
                self._queue.put(None)
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(timeout=30)

    def _start(self) -> None:
        if len(self._threads) >= self._threads_wanted:
            return
        with self._lock:
            while len(self._threads) < self._threads_wanted:
                thread = threading.Thread(target=self._run, name=f"add-batcher-{len(self._threads)}", daemon=True)
                thread.start()
                self._threads.append(thread)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, count = [first], len(first.prepared.items)
            with self._lock:
                self._queued -= count
                idle = max(1, len(self._threads) - self._busy)  # this thread among them
                self._busy += 1
                limit = min(self.max_items, math.ceil((count + self._queued) / idle))
            deadline = time.monotonic() + self.max_wait
            while count < limit:
                try:
                    following = self._queue.get_nowait()  # what is queued already joins, up to the fair share
                except queue.Empty:
                    # Wait for more only while another batch thread keeps the CPU busy: then waiting costs no
                    # parallelism, and short texts embed a little faster together. An idle worker starts at once.
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._busy <= 1:
                        break
                    try:
                        following = self._queue.get(timeout=remaining)
                    except queue.Empty:
                        break
                if following is None:
                    self._queue.put(None)  # another thread's stop signal, or ours after this batch
                    break
                batch.append(following)
                count += len(following.prepared.items)
                with self._lock:
                    self._queued -= len(following.prepared.items)
            try:
                # The batch's spans join the first task's trace (the others' traces end at their task span).
                with tracing.span_in(batch[0].trace, "add.batch", requests=len(batch), items=count):
                    self._process(batch)
            finally:
                with self._lock:
                    self._busy -= 1

    def _process(self, batch: list[_Pending]) -> None:
        pairs = [(p.prepared.request.namespace, text) for p in batch for text in p.prepared.texts]
        try:
            vectors = self.service.embed_many(pairs, written=True)
        except Exception as exc:  # noqa: BLE001  # handed to every waiting task, which raises (and retries) it
            for pending in batch:
                pending.error = exc
                pending.done.set()
            return
        self.batches += 1
        self.items += len(pairs)
        BATCH_ITEMS.observe(len(pairs))
        # Requests of one set are written as one (one dedup pass, one upsert, one version bump), in order.
        by_scope: dict[Scope, list[tuple[_Pending, list[list[float]]]]] = {}
        start = 0
        for pending in batch:
            size = len(pending.prepared.items)
            by_scope.setdefault(pending.prepared.request.scope, []).append((pending, vectors[start : start + size]))
            start += size
        for group in by_scope.values():
            try:
                replies = self.service.store_add_many([p.prepared for p, _ in group], [v for _, v in group])
                for (pending, _), reply in zip(group, replies, strict=True):
                    pending.reply = reply
            except Exception as exc:  # noqa: BLE001  # handed to the tasks of this set; each retries its own
                for pending, _ in group:
                    pending.error = exc
            finally:
                for pending, _ in group:
                    pending.done.set()
