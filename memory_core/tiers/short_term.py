"""Short-term memory: a path-addressed state object per ``(namespace, key)``, Flink Agents' ``MemoryObject``.

    with client.short_term("acme", "run-7") as stm:
        stm.set("plan.step", 2)                 # creates the object "plan"
        stm.get("plan").get_fields()            # {"step": 2}
    # leaving the block without an exception persists the writes; an exception discards them

Storage: one Redis hash per ``(namespace, key)`` with one field per full path
(``"plan.step"``). Objects are fields too (``{"o": 1}``), so listing an object's
fields needs no schema. Values are JSON with tags for what JSON lacks (bytes,
non-finite floats), and a user dict is always wrapped, so no user value can be
mistaken for a tag.

The L1 is this object's copy of the hash, read with one ``HGETALL`` on first use
and then served locally (a run sees one snapshot plus its own writes), and a
write-back buffer that ``persist()`` sends in one ``MULTI``. Per-path TTLs are
stored as an expiry time in the field (Redis 7.0 has no per-field expiry) and
honoured on every read, a path's expiry hiding everything under it; the object's
TTL is the hash's ``EXPIRE``, renewed by every ``persist()``.

Concurrency: one run owns a state at a time. Two runs persisting the same paths
resolve field by field, last writer wins.
"""

from __future__ import annotations

import base64
import json
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Self

import redis

from memory_core.core.errors import InvalidRequestError
from memory_core.core.jsoncodec import stored_object
from memory_core.core.keys import decoded
from memory_core.core.redis_errors import redis_failure
from memory_core.core.steps import Command, Operation, Pipeline, Step, on_redis, run
from memory_core.core.validation import MAX_TTL_SECONDS, check_text, short_repr

NESTED_OBJECT = "NestedObject"
"""What ``get_fields()`` reports for a field that is itself an object (Flink Agents' marker)."""

_MAX_DEPTH = 32
_MAX_PATH_CHARS = 1024
# json.dumps and json.loads refuse ints past sys.get_int_max_str_digits() (640 at the lowest setting, 4300 by
# default); a bigger one would be accepted by set() and then fail every persist(). 2048 bits is 617 digits.
_MAX_INT_BITS = 2048
_OBJECT = {"o": 1}


def encode_value(value: Any, path: str, depth: int = 0) -> Any:
    """``value`` as JSON-ready data; raises ``TypeError`` naming ``path`` for anything not storable.

    Storable: None, bool, int, float, str, bytes, and lists and str-keyed dicts of those. Types are
    checked exactly (a str enum or a bytes subclass is refused), so what is read back is what was set.
    Nesting past 32 levels and ints past 2048 bits raise ``InvalidRequestError``.
    """
    if depth > _MAX_DEPTH:
        raise InvalidRequestError(f"value at {path!r} nests deeper than {_MAX_DEPTH} levels")
    kind = type(value)
    if kind is int and value.bit_length() > _MAX_INT_BITS:
        raise InvalidRequestError(
            f"value at {path!r} is an int of {value.bit_length()} bits; at most {_MAX_INT_BITS} bits are allowed"
        )
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$f": repr(value)}
    if kind is bytes:
        return {"$b": base64.b64encode(value).decode("ascii")}
    if kind is list:
        return [encode_value(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if kind is dict:
        encoded = {}
        for k, v in value.items():
            if type(k) is not str:
                raise TypeError(f"value at {path!r} has a non-str key {k!r} ({type(k).__name__}); keys must be str")
            encoded[k] = encode_value(v, f"{path}[{k!r}]", depth + 1)
        return {"$d": encoded}
    raise TypeError(f"value at {path!r} is of type {kind.__name__}, which short-term memory cannot hold{_hint(value)}")


def _hint(value: Any) -> str:
    if isinstance(value, MemoryObject):
        return "; use new_object(path) to create an object"
    if isinstance(value, tuple | set | frozenset):
        return "; store list(value) instead"
    if hasattr(value, "model_dump"):
        return "; store value.model_dump(mode='json') instead"
    if isinstance(value, str | bytes | bytearray | int | float):
        return "; store the plain str, bytes, int or float instead"
    return (
        "; it holds None, bool, int, float, str, bytes, and lists and str-keyed dicts of those "
        "(store str(value) for ids and dates)"
    )


def decode_value(data: Any) -> Any:
    """The inverse of :func:`encode_value`."""
    if isinstance(data, list):
        return [decode_value(v) for v in data]
    if isinstance(data, dict):
        if "$d" in data:
            return {k: decode_value(v) for k, v in data["$d"].items()}
        if "$b" in data:
            return base64.b64decode(data["$b"])
        if "$f" in data:
            return float(data["$f"])
    return data


def _check_path(path: object) -> list[str]:
    if not isinstance(path, str):
        raise TypeError(f"path {path!r} is of type {type(path).__name__}; expected a str like 'a.b.c'")
    # A path is a Redis hash field, encoded as UTF-8 at persist(): a lone surrogate refused only there would
    # stay in the write-back buffer and fail every later persist() of the run.
    check_text(path, f"path {short_repr(path)}", _MAX_PATH_CHARS)
    parts = path.split(".")
    if not path or any(not part for part in parts):
        raise InvalidRequestError(f"path {path!r} is not valid: expected names separated by single dots, like 'a.b.c'")
    return parts


class _State:
    """The L1 of one ``(namespace, key)``: a snapshot of the Redis hash and the writes not yet persisted."""

    def __init__(
        self, perform: Callable[[Step], Any] | None, redis_key: str, ttl: int | None, where: str, max_value_bytes: int
    ) -> None:
        # Performs steps blocking; None for an asyncio client, which awaits ``loading()`` before any read.
        self.perform = perform
        self.max_value_bytes = max_value_bytes
        self.redis_key = redis_key
        self.ttl = ttl
        self.where = where  # the Redis URL without its password, for error messages
        self.lock = threading.RLock()
        self._snapshot: dict[str, dict[str, Any]] | None = None
        self._pending: dict[str, dict[str, Any] | None] = {}  # None: delete the field on persist
        self._cleared = False  # persist deletes the whole hash first

    # -- reads ------------------------------------------------------------------

    def loading(self) -> Operation[None]:
        """Reads the Redis hash into the snapshot."""
        try:
            raw = yield Command(lambda r: r.hgetall(self.redis_key))
        except redis.RedisError as exc:
            raise redis_failure(exc, "read short-term memory", self.where) from exc
        self._snapshot = {decoded(k): stored_object(v, f"short-term field {decoded(k)!r}") for k, v in raw.items()}

    def _loaded(self) -> dict[str, dict[str, Any]]:
        if self._snapshot is None:
            if self.perform is None:
                raise RuntimeError("load the short-term memory first: async with, or await memory.load()")
            run(self.loading(), self.perform)
        assert self._snapshot is not None
        return self._snapshot

    def entry(self, field: str) -> dict[str, Any] | None:
        """The live entry at ``field`` (L1 buffer, then the snapshot), None when absent or expired."""
        if field in self._pending:
            entry = self._pending[field]
        elif self._cleared:
            entry = None
        else:
            entry = self._loaded().get(field)
        if entry is None:
            return None
        expires = entry.get("x")
        return None if expires is not None and expires <= time.time() else entry

    def visible(self, field: str) -> dict[str, Any] | None:
        """The entry at ``field`` if it and every object above it are live."""
        parts = field.split(".")
        for depth in range(1, len(parts)):
            parent = self.entry(".".join(parts[:depth]))
            if parent is None or "o" not in parent:
                return None
        return self.entry(field)

    def fields(self) -> set[str]:
        """Every field name that may be live (the caller checks visibility)."""
        names = set() if self._cleared else set(self._loaded())
        names.update(f for f, e in self._pending.items() if e is not None)
        return {f for f in names if self._pending.get(f, True) is not None}

    # -- writes -----------------------------------------------------------------

    def put(self, field: str, entry: dict[str, Any]) -> None:
        self._pending[field] = entry

    def remove_tree(self, field: str) -> None:
        """Deletes ``field`` and everything under it (on persist)."""
        below = field + "."
        for name in self.fields():
            if name == field or name.startswith(below):
                self._pending[name] = None

    def clear(self) -> None:
        self._pending.clear()
        self._snapshot = {}
        self._cleared = True

    def discard(self) -> None:
        """Drops the writes not yet persisted and the snapshot (the next read sees Redis as it is)."""
        self._pending.clear()
        self._snapshot = None
        self._cleared = False

    def persisting(self) -> Operation[None]:
        """Writes the buffered changes in one transaction and renews the TTL."""
        if not self._pending and not self._cleared and self.ttl is None:
            return
        if self._snapshot is None and not self._cleared:
            yield from self.loading()
        now = time.time()
        snapshot = dict(self._loaded()) if not self._cleared else {}
        # Expired fields are dropped on the way, so the hash does not keep what nobody can read.
        dead = [f for f, e in snapshot.items() if e.get("x") is not None and e["x"] <= now]
        writes = {f: json.dumps(e) for f, e in self._pending.items() if e is not None}
        deletes = sorted({*(f for f, e in self._pending.items() if e is None), *dead} - set(writes))
        key, ttl = self.redis_key, self.ttl
        commands: list[Callable[[Any], Any]] = []
        if self._cleared:
            commands.append(lambda p: p.delete(key))
        if deletes:
            commands.append(lambda p: p.hdel(key, *deletes))
        if writes:
            commands.append(lambda p: p.hset(key, mapping=writes))
        if ttl is not None:
            commands.append(lambda p: p.expire(key, ttl))
        try:
            yield Pipeline(commands)
        except redis.RedisError as exc:
            # Nothing is lost: the buffer is kept, and persist() can be called again.
            raise redis_failure(exc, "persist short-term memory", self.where) from exc
        for field in deletes:
            snapshot.pop(field, None)
        snapshot.update({f: e for f, e in self._pending.items() if e is not None})
        self._snapshot, self._pending, self._cleared = snapshot, {}, False


class MemoryObject:
    """A node of short-term state: the root of a ``(namespace, key)``, or an object inside it.

    Paths are names joined by dots (``"a.b.c"``), relative to this object. Values are None, bool,
    int, float, str, bytes, and lists and str-keyed dicts of those; ``get`` returns copies.
    """

    def __init__(self, state: _State, prefix: str = "") -> None:
        self._state = state
        self._prefix = prefix

    def __repr__(self) -> str:
        return f"MemoryObject(path={self._prefix or '<root>'!r})"

    @property
    def path(self) -> str:
        """This object's absolute path; ``""`` for the root."""
        return self._prefix

    def _absolute(self, path: str) -> str:
        _check_path(path)
        return f"{self._prefix}.{path}" if self._prefix else path

    def _at(self, field: str) -> MemoryObject:
        return MemoryObject(self._state, field)

    def get(self, path: str) -> Any:
        """The value at ``path``, a ``MemoryObject`` when it is an object, or None when it does not exist."""
        field = self._absolute(path)
        with self._state.lock:
            entry = self._state.visible(field)
        if entry is None:
            return None
        return self._at(field) if "o" in entry else decode_value(entry["v"])

    def set(self, path: str, value: Any, *, ttl: float | None = None) -> None:
        """Sets ``path`` to ``value``, creating the objects above it; ``ttl`` seconds makes it expire (a finite
        number above 0 and at most 3153600000, 100 years).

        Raises ``ValueError`` when ``path`` (or a step above it) holds the other kind (object vs value),
        ``InvalidRequestError`` (a ``ValueError``) when ``path`` is not valid (empty names, not UTF-8) or
        ``value`` is out of bounds, and ``TypeError`` when ``value`` is not storable. Nothing is buffered then.
        """
        field = self._absolute(path)
        expiry = _expiry(ttl, field)  # before anything is buffered: a bad ttl leaves no parent objects behind
        encoded = encode_value(value, field)
        size = len(json.dumps(encoded).encode())
        if size > self._state.max_value_bytes:
            raise InvalidRequestError(
                f"value at {field!r} is {size:,} bytes as stored; at most {self._state.max_value_bytes:,} "
                "(MEMORY_SHORT_TERM__MAX_VALUE_BYTES); keep large documents in long-term memory or a blob store"
            )
        with self._state.lock:
            existing = self._state.visible(field)
            if existing is not None and "o" in existing:
                raise ValueError(f"{field!r} is an object; remove it first, or set a field inside it")
            self._make_parents(field)
            self._state.put(field, {"v": encoded, **expiry})

    def new_object(self, path: str, *, overwrite: bool = False, ttl: float | None = None) -> MemoryObject:
        """Creates an empty object at ``path`` (and the objects above it) and returns it.

        An existing object is returned as it is, unless ``overwrite=True`` replaces it with an empty one.
        An existing value raises ``ValueError`` unless ``overwrite=True``. ``ttl`` seconds (as for ``set``)
        makes the object, and everything in it, expire.
        """
        field = self._absolute(path)
        expiry = _expiry(ttl, field)
        with self._state.lock:
            existing = self._state.visible(field)
            if existing is not None and not overwrite:
                if "o" not in existing:
                    raise ValueError(f"{field!r} holds a value; pass overwrite=True to replace it with an object")
                return self._at(field)
            if existing is not None:
                self._state.remove_tree(field)
            self._make_parents(field)
            self._state.put(field, {**_OBJECT, **expiry})
        return self._at(field)

    def is_exist(self, path: str) -> bool:
        """Whether ``path`` holds a value or an object."""
        field = self._absolute(path)
        with self._state.lock:
            return self._state.visible(field) is not None

    def remove(self, path: str) -> bool:
        """Removes ``path`` (and, for an object, everything in it); False when it did not exist."""
        field = self._absolute(path)
        with self._state.lock:
            if self._state.visible(field) is None:
                return False
            self._state.remove_tree(field)
            return True

    def get_field_names(self) -> list[str]:
        """The names of this object's direct fields, sorted."""
        return sorted(self._direct())

    def get_fields(self) -> dict[str, Any]:
        """This object's direct fields: values, with ``"NestedObject"`` for fields that are objects."""
        return {
            name: (NESTED_OBJECT if "o" in e else decode_value(e["v"])) for name, e in sorted(self._direct().items())
        }

    def _direct(self) -> dict[str, dict[str, Any]]:
        below = f"{self._prefix}." if self._prefix else ""
        with self._state.lock:
            if self._prefix and self._state.visible(self._prefix) is None:
                return {}
            found = {}
            for field in self._state.fields():
                if field.startswith(below) and "." not in field[len(below) :]:
                    entry = self._state.visible(field)
                    if entry is not None:
                        found[field[len(below) :]] = entry
            return found

    def _make_parents(self, field: str) -> None:
        parts = field.split(".")
        for depth in range(1, len(parts)):
            parent = ".".join(parts[:depth])
            entry = self._state.visible(parent)
            if entry is None:
                self._state.put(parent, dict(_OBJECT))
            elif "o" not in entry:
                raise ValueError(f"cannot create {field!r}: {parent!r} holds a value, not an object")


class _Root(MemoryObject):
    """What both kinds of root share: the scope, and the buffer's controls that do no I/O."""

    def __init__(
        self,
        perform: Callable[[Step], Any] | None,
        redis_key: str,
        *,
        namespace: str,
        key: str,
        ttl: int | None,
        where: str,
        max_value_bytes: int = 1_048_576,
    ) -> None:
        super().__init__(_State(perform, redis_key, ttl, where, max_value_bytes))
        self.namespace = namespace
        self.key = key

    def __repr__(self) -> str:
        return f"{type(self).__name__}(namespace={self.namespace!r}, key={self.key!r})"

    def discard(self) -> None:
        """Drops the buffered changes; the next read sees Redis as it is."""
        with self._state.lock:
            self._state.discard()

    @property
    def dirty(self) -> bool:
        """Whether there are changes not yet persisted."""
        with self._state.lock:
            return bool(self._state._pending) or self._state._cleared


class ShortTermMemory(_Root):
    """The root object of one ``(namespace, key)``, with the write-back controls.

    Writes stay in this process until ``persist()``; as a context manager it persists on a clean exit
    and discards the buffered writes when the block raises. ``clear()`` empties both tiers at once.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        redis_key: str,
        *,
        namespace: str,
        key: str,
        ttl: int | None,
        where: str,
        on_exit: Callable[[ShortTermMemory, bool], None] | None = None,
        max_value_bytes: int = 1_048_576,
    ) -> None:
        self._perform = on_redis(redis_client)
        super().__init__(
            self._perform,
            redis_key,
            namespace=namespace,
            key=key,
            ttl=ttl,
            where=where,
            max_value_bytes=max_value_bytes,
        )
        self._on_exit = on_exit

    def persist(self) -> None:
        """Writes the buffered changes to Redis in one transaction and renews the object's TTL."""
        with self._state.lock:
            run(self._state.persisting(), self._perform)

    def refresh(self) -> None:
        """Re-reads Redis on the next access, keeping the buffered changes."""
        with self._state.lock:
            self._state._snapshot = None

    def clear(self) -> None:
        """Removes everything, in this process and in Redis, at once."""
        with self._state.lock:
            self._state.clear()
            run(self._state.persisting(), self._perform)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._on_exit is not None:
            self._on_exit(self, exc_type is None)
        elif exc_type is None:
            self.persist()
        else:
            self.discard()


class AsyncShortTermMemory(_Root):
    """``ShortTermMemory`` for asyncio code: the same object, read and written in memory, with the I/O awaited.

    Load it before reading (``async with`` does, or ``await memory.load()``); ``async with`` persists on
    a clean exit and discards when the block raises (sensory memory: clears, either way).
    """

    def __init__(
        self,
        redis_key: str,
        *,
        namespace: str,
        key: str,
        ttl: int | None,
        where: str,
        run_async: Callable[[Operation[None]], Awaitable[None]],
        clear_on_exit: bool = False,
        max_value_bytes: int = 1_048_576,
    ) -> None:
        super().__init__(
            None, redis_key, namespace=namespace, key=key, ttl=ttl, where=where, max_value_bytes=max_value_bytes
        )
        self._run = run_async
        self._clear_on_exit = clear_on_exit

    async def load(self) -> Self:
        """Reads the object from Redis (again), keeping the buffered changes; returns it."""
        await self._run(self._state.loading())
        return self

    async def persist(self) -> None:
        """Writes the buffered changes to Redis in one transaction and renews the object's TTL."""
        await self._run(self._state.persisting())

    async def refresh(self) -> None:
        """Re-reads Redis now, keeping the buffered changes."""
        await self.load()

    async def clear(self) -> None:
        """Removes everything, in this process and in Redis, at once."""
        self._state.clear()
        await self._run(self._state.persisting())

    async def __aenter__(self) -> Self:
        return await self.load()

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._clear_on_exit:
            await self.clear()
        elif exc_type is None:
            await self.persist()
        else:
            self.discard()


def end_of_run(memory: ShortTermMemory, clean: bool) -> None:
    """How sensory memory ends a run: cleared in both tiers, whether the run failed or not."""
    memory.clear()


def _expiry(ttl: float | None, field: str) -> dict[str, float]:
    if ttl is None:
        return {}
    # A range check, not math.isfinite: that raises OverflowError for an int past float range (10**400),
    # and NaN and inf fail the comparison anyway.
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_TTL_SECONDS:
        raise InvalidRequestError(
            f"ttl for {field!r} must be a positive number of seconds up to {MAX_TTL_SECONDS}, got {short_repr(ttl)}"
        )
    return {"x": time.time() + ttl}
