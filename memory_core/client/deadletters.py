"""Dead letters: write tasks that failed for good, kept with their payload, listed, replayed or dropped.

Replaying re-publishes the original task with its original arguments. Writes are
idempotent and monotonic (point ids derive from the item ids; a store keeps each
item's newest ``seq``), so replaying a letter twice, or one whose write had partly
landed, changes nothing more, and never undoes a later write.

Letters that name no namespace (messages a worker could not decode or route) are
listed and dropped as those of ``!ops``; they cannot be replayed.
"""

from __future__ import annotations

import json
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memory_core.core.dispatch import Dispatcher
from memory_core.core.errors import CorruptDataError, InvalidRequestError
from memory_core.core.jsoncodec import stored_object
from memory_core.core.keys import Keys
from memory_core.core.redis_errors import redis_failure
from memory_core.core.routing import OPS_NAMESPACE


class DeadLetter(BaseModel):
    """One failed task: its name, id, arguments (the payload), error, retries and when it failed."""

    model_config = ConfigDict(populate_by_name=True)

    namespace: str | None
    task: str
    task_id: str
    payload: dict[str, Any] = Field(alias="kwargs")
    error: dict[str, Any]
    retries: int = 0
    failed_at: str


class DeadLetters:
    """Operator access to the per-namespace dead-letter lists."""

    def __init__(self, client: redis.Redis, keys: Keys, dispatcher: Dispatcher) -> None:
        self._redis = client
        self._keys = keys
        self._dispatcher = dispatcher

    def _key(self, namespace: str) -> str:
        if namespace == OPS_NAMESPACE:
            return self._keys.unroutable_dead_letters()
        return self._keys.dead_letters(namespace)

    def namespaces(self) -> list[str]:
        """Namespaces that have dead letters (``!ops`` for those that name none)."""
        try:
            members = self._redis.smembers(self._keys.dead_letter_namespaces())
            unroutable = self._redis.llen(self._keys.unroutable_dead_letters())
        except redis.RedisError as exc:
            raise redis_failure(exc, "list the dead letters' namespaces") from exc
        found = {m.decode("utf-8", "backslashreplace") if isinstance(m, bytes) else str(m) for m in members}
        if unroutable:
            found.add(OPS_NAMESPACE)
        return sorted(found)

    def entries(self, namespace: str) -> list[DeadLetter]:
        """The letters of one namespace, oldest first; ``CorruptDataError`` if one is not what a worker writes
        (``drop`` clears them)."""
        try:
            raw = self._redis.lrange(self._key(namespace), 0, -1)
        except redis.RedisError as exc:
            raise redis_failure(exc, f"list the dead letters of {namespace!r}") from exc
        return [_letter(namespace, entry) for entry in raw]

    def replay(self, namespace: str) -> list[str]:
        """Re-publishes every letter of ``namespace`` and removes it; returns the new task ids.

        Each letter is removed only after its task was accepted by the broker, so a failure midway
        leaves the rest in place for the next replay.
        """
        if namespace == OPS_NAMESPACE:
            raise InvalidRequestError(
                f"the dead letters of {OPS_NAMESPACE!r} name no namespace (malformed or unroutable messages) and "
                "cannot be replayed; read them with `dead-letters list`, then `drop` them"
            )
        key = self._keys.dead_letters(namespace)
        sent = []
        try:
            while True:
                entry = self._redis.lindex(key, 0)
                if entry is None:
                    break
                letter = _letter(namespace, entry)
                summary = json.dumps({"namespace": namespace, "replay_of": letter.task_id})
                sent.append(self._dispatcher.send_raw(letter.task, letter.payload, summary, namespace))
                self._redis.lrem(key, 1, entry.decode() if isinstance(entry, bytes) else str(entry))
            self._redis.srem(self._keys.dead_letter_namespaces(), namespace)
        except redis.RedisError as exc:
            raise redis_failure(exc, f"replay the dead letters of {namespace!r}") from exc
        return sent

    def drop(self, namespace: str) -> int:
        """Deletes the letters of ``namespace``; returns how many there were."""
        key = self._key(namespace)
        try:
            with self._redis.pipeline() as pipe:
                pipe.llen(key)
                pipe.delete(key)
                pipe.srem(self._keys.dead_letter_namespaces(), namespace)
                count, _, _ = pipe.execute()
        except redis.RedisError as exc:
            raise redis_failure(exc, f"drop the dead letters of {namespace!r}") from exc
        return int(count)


def _letter(namespace: str, entry: bytes | str) -> DeadLetter:
    fields = stored_object(entry, f"a dead letter of {namespace!r}")
    fields.pop("namespace", None)
    try:
        return DeadLetter(namespace=namespace, **fields)
    except (ValidationError, TypeError) as exc:  # a letter's fields are not what a worker writes
        raise CorruptDataError(f"a dead letter of {namespace!r} read back from Redis is malformed: {exc}") from exc
