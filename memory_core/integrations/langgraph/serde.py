"""Checkpoint values in and out of Redis: LangGraph's msgpack format, read back as data and nothing else.

LangGraph's ``JsonPlusSerializer`` writes an object msgpack cannot hold as an extension naming a module, a
name and arguments, and its reader calls ``module.name(*args)`` for whatever a stored value names (in strict
mode it skips names off its list, but silently hands back their raw arguments instead). Whoever can write a
checkpoint (Redis, or any door that reaches the checkpoint tier) could then run code in every app that
resumes the thread. ``DataOnlySerializer`` reads the same format with its own decoder:

* An extension is rebuilt only if its ``(module, name)`` is one of ``SAFE_TYPES`` (the data types LangGraph
  itself puts in checkpoints: messages, ``Send``, ``Interrupt``, ``Command``, datetimes, UUIDs, sets...) or
  one the app allowed (``allowed_types``). The check comes before anything is imported or called.
* Anything else (another type, an unknown extension, a method call other than ``datetime.fromisoformat``,
  a numpy array of Python objects, a malformed value) fails the read with ``InvalidRequestError`` naming it,
  and nothing is built: no import, no call.
* Writing runs the same check, so a value the saver could not read back is refused when it is stored,
  not when the thread resumes.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from memory_core.core.errors import InvalidRequestError

logger = logging.getLogger(__name__)

TypeKey = tuple[str, ...]
"""A type as LangGraph names it in a stored value: ``(module, name)``."""

SAFE_TYPES: frozenset[TypeKey] = frozenset(
    {
        *(("datetime", name) for name in ("datetime", "date", "time", "timedelta", "timezone")),
        ("uuid", "UUID"),
        ("decimal", "Decimal"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("collections", "deque"),
        *(("ipaddress", f"IPv{v}{kind}") for v in (4, 6) for kind in ("Address", "Interface", "Network")),
        *((module, name) for module in ("pathlib", "pathlib._local") for name in ("Path", "PosixPath", "WindowsPath")),
        ("zoneinfo", "ZoneInfo"),
        ("re", "compile"),
        *(
            (f"langchain_core.messages.{module}", f"{name}{chunk}")
            for module, name in (
                ("base", "BaseMessage"),
                ("human", "HumanMessage"),
                ("ai", "AIMessage"),
                ("system", "SystemMessage"),
                ("chat", "ChatMessage"),
                ("tool", "ToolMessage"),
                ("function", "FunctionMessage"),
            )
            for chunk in ("", "Chunk")
        ),
        ("langchain_core.messages.modifier", "RemoveMessage"),
        ("langchain_core.documents.base", "Document"),
        *(
            ("langgraph.types", name)
            for name in ("Send", "TimeoutPolicy", "Interrupt", "Command", "StateSnapshot", "PregelTask", "Overwrite")
        ),
        ("langgraph.store.base", "Item"),
        ("langgraph.store.base", "GetOp"),
    }
)
"""Types rebuilt with no configuration: LangGraph's own list of safe checkpoint types (``SAFE_MSGPACK_TYPES``
in langgraph-checkpoint 4.3), kept here so that what this package builds is decided in this package."""

_SAFE_METHODS = frozenset({("datetime", "datetime", "fromisoformat")})
_DATA_KINDS = frozenset({"null", "bytes", "bytearray", "msgpack"})

# LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus): the stored format.
_SINGLE_ARG, _POSITIONAL, _KEYWORDS, _METHOD, _PYDANTIC_V1, _PYDANTIC_V2, _NUMPY, _DELTA = range(8)
_CONSTRUCTORS = frozenset({_SINGLE_ARG, _POSITIONAL, _KEYWORDS, _PYDANTIC_V1, _PYDANTIC_V2})


def type_key(allowed: type | TypeKey) -> TypeKey:
    """``(module, name)`` of a class, as a stored value names it; a tuple is taken as it is."""
    if isinstance(allowed, type):
        return (allowed.__module__, allowed.__name__)
    if isinstance(allowed, tuple) and len(allowed) == 2 and all(isinstance(part, str) for part in allowed):
        return allowed
    raise InvalidRequestError(f"an allowed type must be a class or a (module, name) pair of strings, got {allowed!r}")


class DataOnlySerializer:
    """LangGraph's serializer protocol: writes with ``encoder`` (LangGraph's ``JsonPlusSerializer`` by default)
    and reads LangGraph's msgpack format building only ``SAFE_TYPES`` and ``allowed_types`` (see the module
    docstring). ``allowed_types`` are classes (or ``(module, name)`` pairs) of the app's own state: pydantic
    models, dataclasses, enums, named tuples."""

    def __init__(
        self, *, allowed_types: Iterable[type | TypeKey] = (), encoder: SerializerProtocol | None = None
    ) -> None:
        self._encoder = encoder or JsonPlusSerializer(allowed_msgpack_modules=None)
        # A class given as a class is used as it is (it may not be importable by name, e.g. a local class).
        self._classes: dict[TypeKey, type] = {}
        keys: set[TypeKey] = set()
        for allowed in allowed_types:
            keys.add(type_key(allowed))
            if isinstance(allowed, type):
                self._classes[type_key(allowed)] = allowed
        self.allowed_types: frozenset[TypeKey] = frozenset(keys)

    def with_types(self, extra: Iterable[type | TypeKey]) -> DataOnlySerializer:
        """This serializer, also allowing ``extra``."""
        merged = DataOnlySerializer(encoder=self._encoder)
        merged._classes = {**self._classes}
        for allowed in extra:
            if isinstance(allowed, type):
                merged._classes[type_key(allowed)] = allowed
        merged.allowed_types = self.allowed_types | {type_key(allowed) for allowed in extra}
        return merged

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """``obj`` encoded by the encoder; refused (``InvalidRequestError``) unless it reads back as data."""
        try:
            kind, data = self._encoder.dumps_typed(obj)
        except (TypeError, ValueError) as exc:  # ormsgpack's encode error is a TypeError
            raise InvalidRequestError(f"the saver cannot encode a {type(obj).__name__}: {exc}") from exc
        if kind not in _DATA_KINDS:
            raise InvalidRequestError(
                f"the saver's serde encoded a {type(obj).__name__} as {kind!r}; memory-core stores only the data "
                f"types {sorted(_DATA_KINDS)} (use a serializer without a code-running fallback)"
            )
        if kind == "msgpack":
            _Reading(self, build=False).unpack(data)
        return kind, data

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """The value of a stored ``(type, bytes)``; ``InvalidRequestError`` for anything but data (see above)."""
        kind, raw = data
        if kind == "null":
            return None
        if kind == "bytes":
            return bytes(raw)
        if kind == "bytearray":
            return bytearray(raw)
        if kind == "msgpack":
            return _Reading(self, build=True).unpack(raw)
        # "json" (LangGraph's older format, revived through LangChain's loader) and Python's object serialization are
        # never written by the saver: loading them could run what Redis holds.
        raise InvalidRequestError(
            f"a stored checkpoint value has the type {kind!r}; memory-core loads only {sorted(_DATA_KINDS)}"
        )

    def _resolve(self, key: TypeKey) -> Callable[..., Any]:
        if (cls := self._classes.get(key)) is not None:
            return cls
        module, name = key
        found: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return found


class _Reading:
    """One decode: the first refusal is kept, since ormsgpack replaces what an extension hook raises."""

    def __init__(self, serializer: DataOnlySerializer, *, build: bool) -> None:
        self._serializer, self._build = serializer, build
        self._refusal: InvalidRequestError | None = None

    def unpack(self, data: bytes) -> Any:
        try:
            return ormsgpack.unpackb(data, ext_hook=self._hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except (ValueError, TypeError, RecursionError) as exc:
            if self._refusal is not None:
                raise self._refusal from None
            raise self._refuse(f"is not in LangGraph's msgpack format ({exc})") from None

    def _refuse(self, reason: str, cause: BaseException | None = None) -> InvalidRequestError:
        what = "a stored checkpoint value" if self._build else "a value to checkpoint"
        refusal = InvalidRequestError(f"{what} {reason}")
        refusal.__cause__ = cause
        if self._refusal is None:
            self._refusal = refusal
        return refusal

    def _hook(self, code: int, data: bytes) -> Any:
        if code == _DELTA:
            return self._delta(self.unpack(data))
        if code == _NUMPY:
            return self._array(self.unpack(data))
        if code not in _CONSTRUCTORS and code != _METHOD:
            raise self._refuse(f"holds the msgpack extension {code}, which LangGraph does not write")
        parts = self.unpack(data)
        width = 4 if code in (_METHOD, _PYDANTIC_V2) else 3
        if not (isinstance(parts, list) and len(parts) == width and isinstance(parts[0], str)):
            raise self._refuse(f"holds a malformed msgpack extension {code}: {parts!r:.200}")
        key: TypeKey = (parts[0], parts[1]) if isinstance(parts[1], str) else ("", repr(parts[1]))
        name = ".".join(key)
        if code == _METHOD:
            if (*key, parts[3]) not in _SAFE_METHODS:
                raise self._refuse(f"calls {name}.{parts[3]!r}; memory-core builds only datetimes this way")
        elif key not in SAFE_TYPES and key not in self._serializer.allowed_types:
            raise self._refuse(
                f"is of the type {name!r}, which the saver does not rebuild: pass "
                f"allowed_types=[{name}] to MemoryCoreSaver if it is a data type of your graph's state"
            )
        if not self._build:
            return None
        try:
            return self._construct(code, key, parts)
        except InvalidRequestError:
            raise
        except Exception as exc:
            raise self._refuse(f"of the type {name!r} cannot be rebuilt from {parts[2]!r:.200}", exc) from exc

    def _delta(self, value: Any) -> Any:
        if not self._build:
            return None
        # LangGraph's wrapper of a delta channel's snapshot, private and absent before langgraph-checkpoint 4.1.
        types = importlib.import_module("langgraph.checkpoint.serde.types")
        if (snapshot := getattr(types, "_DeltaSnapshot", None)) is None:
            raise self._refuse("is a delta snapshot, which this langgraph-checkpoint does not know")
        return snapshot(value)

    def _construct(self, code: int, key: TypeKey, parts: list[Any]) -> Any:
        build = self._serializer._resolve(key)
        argument = parts[2]
        if code == _METHOD:
            return getattr(build, parts[3])(argument)
        if code == _SINGLE_ARG:
            return build(argument)
        if code == _POSITIONAL:
            if key == ("langgraph.types", "Send") and len(argument) == 3:
                return build(argument[0], argument[1], timeout=argument[2])
            return build(*argument)
        if not isinstance(argument, dict):
            raise self._refuse(f"of the type {'.'.join(key)!r} has arguments {argument!r:.200}, not a mapping")
        try:
            return build(**argument)
        except Exception:
            if code == _KEYWORDS:
                raise
            # As LangGraph does: a model whose dump does not validate again is rebuilt without validation.
            construct = getattr(build, "model_construct" if code == _PYDANTIC_V2 else "construct")
            return construct(**argument)

    def _array(self, parts: Any) -> Any:
        if not (isinstance(parts, list) and len(parts) == 4 and isinstance(parts[0], str)):
            raise self._refuse(f"holds a malformed numpy array: {parts!r:.200}")
        if not self._build:
            return None
        dtype, shape, order, buffer = parts
        try:
            numpy: Any = importlib.import_module("numpy")
            kind = numpy.dtype(dtype)
            if kind.hasobject:  # Python objects cannot come from bytes: refused, never guessed
                raise self._refuse(f"is a numpy array of Python objects ({dtype!r})")
            return numpy.frombuffer(buffer, dtype=kind).reshape(shape, order=order)
        except InvalidRequestError:
            raise
        except Exception as exc:
            raise self._refuse(f"is a numpy array that cannot be rebuilt ({dtype!r}, {shape!r})", exc) from exc
