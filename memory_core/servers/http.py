"""memory-core over HTTP (``memory-core serve``): versioned JSON routes over the asyncio client.

Each request becomes one call of an ``AsyncMemoryClient``: the same validation, scoping, messages and
errors as in-process callers; this layer keeps no data of its own. A bearer token from
``MEMORY_AUTH__TOKENS`` grants one namespace: every route names a namespace, and the token is checked
against it before the body is read (401 without a known token, 403 for another namespace). Each token
has a client of its own that sends that token to the workers, which check it again.

Bodies are capped per route family (``body_limits``), and every error is one JSON shape with a stable
code (``ERRORS``): ``{"error": {"code": "memory_set_not_found", "message": "..."}}``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, ClassVar, Literal, cast

import redis
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message, Receive

from memory_core import AsyncLongTermMemory, AsyncMemoryClient
from memory_core.core import errors, routing
from memory_core.core.auth import TokenMap, refusal
from memory_core.core.dispatch import open_redis
from memory_core.core.liveness import alive
from memory_core.core.messages import CompactionReport, ForgetReceipt, ListSetsRequest, RecallReply, SetInfo, SetsReply
from memory_core.core.models import (
    ChatMessage,
    CompactionConfig,
    DedupMode,
    EvictionPolicy,
    MemorySet,
    MemorySetItem,
    SearchMode,
    Usage,
    describe,
)
from memory_core.core.settings import Settings
from memory_core.core.steps import Call, Operation, command
from memory_core.tiers.checkpoints import AsyncCheckpointStore, Checkpoint
from memory_core.tiers.short_term import AsyncShortTermMemory, MemoryObject

logger = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")

ERRORS: tuple[tuple[type[errors.MemoryCoreError], int, str], ...] = (
    (errors.SetDefinitionConflict, 409, "set_definition_conflict"),
    (errors.ConflictError, 409, "conflict"),
    (errors.InvalidRequestError, 400, "invalid_request"),
    (errors.MemorySetNotFound, 404, "memory_set_not_found"),
    (errors.NotFoundError, 404, "not_found"),
    (errors.AuthorizationError, 403, "forbidden"),
    (errors.NoWorkerAvailable, 503, "no_worker_available"),
    (errors.ReplyTimeout, 504, "reply_timeout"),
    (errors.BrokerUnavailable, 503, "broker_unavailable"),
    (errors.TransientStoreError, 503, "store_unavailable"),
    (errors.StoreError, 500, "store_error"),
    (errors.EmbedderError, 500, "embedder_error"),
    (errors.SummarizerError, 502, "summarizer_error"),
    (errors.CompactionError, 500, "compaction_error"),
    (errors.ConfigurationError, 500, "configuration_error"),
)
"""Our errors as (class, HTTP status, code); the first class the error is an instance of wins. The codes are
a contract: clients branch on them. Anything else is 500 ``internal_error``."""

HTTP_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
}
"""Codes of the errors the HTTP layer itself answers (no token, an unknown route, a body over its limit)."""

_SLACK = 64 * 1024
"""Bytes of a body beyond its payload: field names, ids, lifecycle values, JSON punctuation."""
_SMALL_BODY = 1024 * 1024
"""Every body that carries no items, state or snapshot (a set definition, a search, a recall)."""


def body_limits(settings: Settings) -> dict[str, int]:
    """The largest body each route family reads, in bytes, derived from the limits the client enforces.

    ``items``: a full add (``max_items_per_call`` items of ``max_value_chars`` characters and
    ``max_metadata_bytes`` of metadata; characters counted as one byte, so a full batch of non-ASCII text
    must be split). ``state``: one value at ``MEMORY_SHORT_TERM__MAX_VALUE_BYTES``. ``checkpoints``: a
    snapshot at its limit (four times ``max_value_chars``) with its metadata.
    """
    limits = settings.limits
    per_item = limits.max_value_chars + limits.max_metadata_bytes + 1024
    snapshot = max(limits.max_metadata_bytes, limits.max_value_chars * 4) + limits.max_metadata_bytes
    return {
        "items": limits.max_items_per_call * per_item + _SLACK,
        "state": settings.short_term.max_value_bytes + _SLACK,
        "checkpoints": snapshot + _SLACK,
        "small": _SMALL_BODY,
    }


# -- serving: tokens, clients, limits -------------------------------------------


class _Server:
    """What one app serves with: the token map, an ``AsyncMemoryClient`` per token, and the body limits."""

    def __init__(self, settings: Settings, *, dev: bool) -> None:
        self.settings = settings
        self.tokens = TokenMap.from_secret(settings.auth.tokens)
        if self.tokens is None and not dev:
            raise errors.ConfigurationError(
                "memory-core serve needs MEMORY_AUTH__TOKENS (bearer token -> namespace), or --dev for a "
                "loopback-only server without auth"
            )
        self.limits = body_limits(settings)
        # Keyed by token, so bounded by the tokens configured: a client is made only for a known token.
        self._clients: dict[str | None, AsyncMemoryClient] = {}

    def client(self, token: str | None) -> AsyncMemoryClient:
        """The client acting with ``token`` (None: the configured client token, if any)."""
        if token not in self._clients:
            # The caller's own token goes to the workers, which check it again.
            self._clients[token] = AsyncMemoryClient(self.settings.with_token(token))
        return self._clients[token]

    def admit(self, request: Request) -> AsyncMemoryClient:
        """The client for this request; 401 without a known bearer token, 403 for another namespace."""
        if self.tokens is None:
            return self.client(None)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("send a bearer token: Authorization: Bearer <token>")
        token = token.strip()
        granted = self.tokens.namespace_of(token)
        if granted is None:
            raise _unauthorized("the bearer token is not known")
        namespace = request.path_params.get("namespace")
        if namespace != granted:
            raise refusal(str(namespace))
        return self.client(token)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


def _server(request: Request) -> _Server:
    return cast(_Server, request.app.state.memory_core)


class _Route(APIRoute):
    """A ``/v1`` route: the token is checked before the body is read, and the body is read up to its limit."""

    family: ClassVar[str] = "small"

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        family = self.family

        async def guarded(request: Request) -> Response:
            server = _server(request)
            request.state.client = server.admit(request)
            return await handler(Request(request.scope, _capped(request, server.limits[family])))

        return guarded


def _route_class(family: str) -> type[_Route]:
    """A route class whose bodies are capped at the limit of ``family`` (see ``body_limits``)."""
    return type(f"_{family.title()}Route", (_Route,), {"family": family})


def _capped(request: Request, limit: int) -> Receive:
    """The request's body stream, refused with 413 once past ``limit`` bytes (declared or counted)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    upstream = request.receive
    seen = 0

    async def receive() -> Message:
        nonlocal seen
        message = await upstream()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _too_large(limit)
        return message

    return receive


def _too_large(limit: int) -> HTTPException:
    return HTTPException(413, f"request body over this route's limit of {limit:,} bytes; split it into smaller calls")


def _client(request: Request) -> AsyncMemoryClient:
    return cast(AsyncMemoryClient, request.state.client)


Client = Annotated[AsyncMemoryClient, Depends(_client)]
_bearer = HTTPBearer(auto_error=False, description="A token of MEMORY_AUTH__TOKENS; it grants one namespace.")


# -- bodies -----------------------------------------------------------------------


class _Body(BaseModel):
    # Strict like the client's own models: "0.5" is not a number and "yes" is not a bool.
    model_config = ConfigDict(extra="forbid", strict=True)


def _example(**fields: Any) -> ConfigDict:
    """A request model's example, shown in the OpenAPI document."""
    return ConfigDict(json_schema_extra={"examples": [fields]})


class ErrorDetail(BaseModel):
    code: str = Field(examples=["memory_set_not_found"])
    message: str = Field(examples=["memory set 'notes' not found in namespace 'acme', key 'alice'"])
    field: str | None = Field(default=None, description="The offending field, for a request that fails its schema.")


class ErrorBody(BaseModel):
    """Every error response."""

    error: ErrorDetail


class SetOptions(_Body):
    """A memory set's definition (its name is in the path); an existing set must match it."""

    model_config = _example(capacity=200, ttl_seconds=2_592_000, dedup="exact")

    item_type: Literal["str", "ChatMessage"] = "str"
    capacity: int = Field(default=100, description="Items before a compaction runs.")
    compaction_config: CompactionConfig | None = None
    ttl_seconds: int | None = Field(default=None, description="Default time to live of its items.")
    eviction: EvictionPolicy | None = None
    dedup: DedupMode | None = None
    dedup_threshold: float = 0.95
    context_window: int = 2


class SetDefinition(BaseModel):
    """A memory set's definition as stored."""

    name: str
    item_type: Literal["str", "ChatMessage"]
    capacity: int
    compaction_config: CompactionConfig
    ttl_seconds: int | None
    eviction: EvictionPolicy | None
    dedup: DedupMode | None
    dedup_threshold: float
    context_window: int

    @classmethod
    def of(cls, definition: MemorySet) -> SetDefinition:
        return cls.model_validate(definition.model_dump(mode="json"))


class SetListing(BaseModel):
    key: str
    size: int
    definition: SetDefinition


class SetList(BaseModel):
    sets: list[SetListing]


class AddItems(_Body):
    """Items to add. Lifecycle fields are one value for every item, or a list with one per item."""

    model_config = _example(
        items=["Alice prefers green tea", "Alice is allergic to peanuts"],
        metadatas=[{"source": "chat"}, {"source": "chat"}],
        importance=0.8,
    )

    items: list[str | ChatMessage]
    ids: list[str] | None = Field(default=None, description="One id per item; generated when omitted.")
    metadatas: list[dict[str, JsonValue]] | None = None
    wait: bool = Field(default=True, description="Answer once stored durably (200), or once enqueued (202).")
    importance: float | list[float] | None = None
    source: str | list[str] | None = None
    pinned: bool | list[bool] | None = None
    ttl: int | list[int] | None = Field(default=None, description="Seconds to live.")
    expires_at: datetime | list[datetime] | None = None

    def lifecycle(self) -> dict[str, Any]:
        fields = ("importance", "source", "pinned", "ttl", "expires_at")
        return {name: getattr(self, name) for name in fields if getattr(self, name) is not None}


class Stored(BaseModel):
    ids: list[str]


class Search(_Body):
    model_config = _example(query="what does Alice drink?", limit=5, filters={"source": "chat"})

    query: str
    limit: int = 10
    filters: dict[str, str | int | list[str | int]] | None = Field(
        default=None, description="Metadata keys matched exactly; a list matches any of its values."
    )
    mode: SearchMode = "hybrid"


class Items(BaseModel):
    items: list[MemorySetItem]


class Count(BaseModel):
    deleted: int


class Deleted(BaseModel):
    deleted: bool


class Size(BaseModel):
    size: int


class StateValue(_Body):
    model_config = _example(value="book a table", ttl=3600)

    value: JsonValue
    ttl: float | None = Field(default=None, description="Seconds until this path expires.")


class StatePatch(_Body):
    """Values to set, by dotted path; all or none are written."""

    model_config = _example(values={"plan.step": "book a table", "plan.guests": 4})

    values: dict[str, JsonValue]
    ttl: float | None = Field(default=None, description="Seconds until each of these paths expires.")


class State(BaseModel):
    """A short-term state object: nested objects as JSON objects; bytes as ``{"base64": ...}``."""

    state: dict[str, Any]


class PathValue(BaseModel):
    path: str
    value: Any


class NewCheckpoint(_Body):
    model_config = _example(checkpoint={"step": 3, "messages": []}, metadata={"source": "loop"})

    checkpoint: dict[str, JsonValue]
    checkpoint_ns: str = ""
    checkpoint_id: str | None = Field(default=None, description="Generated when omitted; 'latest' is reserved.")
    parent_id: str | None = Field(default=None, description="The thread's newest checkpoint when omitted.")
    metadata: dict[str, JsonValue] | None = None


class Checkpoints(BaseModel):
    checkpoints: list[Checkpoint]


class RecallQuery(_Body):
    model_config = _example(query="plan dinner for Alice", limit=5, token_budget=500)

    query: str
    limit: int = 10
    token_budget: int | None = None
    session_id: str | None = None
    sets: list[str] | None = Field(default=None, description="Only these long-term sets; every set when omitted.")


# -- routes -----------------------------------------------------------------------


def _long_term(namespace: str, key: str, client: Client) -> AsyncLongTermMemory:
    return client.long_term(namespace, key)


def _short_term(namespace: str, key: str, client: Client) -> AsyncShortTermMemory:
    return client.short_term(namespace, key)


def _checkpoints(namespace: str, client: Client) -> AsyncCheckpointStore:
    return client.checkpoints(namespace)


LongTerm = Annotated[AsyncLongTermMemory, Depends(_long_term)]
ShortTerm = Annotated[AsyncShortTermMemory, Depends(_short_term)]
Threads = Annotated[AsyncCheckpointStore, Depends(_checkpoints)]
ItemIds = Annotated[list[str] | None, Query(alias="id", description="Item ids (repeat the parameter).")]
Every = Annotated[bool, Query(alias="all", description="Every item of the set.")]
CheckpointNs = Annotated[str, Query(description="The checkpoint namespace inside the thread.")]
Before = Annotated[str | None, Query(description="A checkpoint id: list those older than it.")]

_NS = "/v1/namespaces/{namespace}"
_KEY = _NS + "/keys/{key}"
_SET = _KEY + "/sets/{set_name}"
_THREAD = _NS + "/threads/{thread_id}"

set_routes = APIRouter(route_class=_Route, tags=["long-term sets"])
item_routes = APIRouter(route_class=_route_class("items"), tags=["long-term items"])
state_routes = APIRouter(route_class=_route_class("state"), tags=["short-term state"])
checkpoint_routes = APIRouter(route_class=_route_class("checkpoints"), tags=["checkpoints"])
scope_routes = APIRouter(route_class=_Route, tags=["recall, forget, usage"])
probe_routes = APIRouter(tags=["probes"])


@set_routes.get(_NS + "/sets", summary="The namespace's sets, or one key's, with sizes")
async def list_sets(namespace: str, client: Client, key: str | None = None) -> SetList:
    found = await client.run(_listing(namespace, key))
    return SetList(sets=[SetListing(key=i.key, size=i.size, definition=SetDefinition.of(i.definition)) for i in found])


@set_routes.put(_SET, summary="Get or create a set: created with this definition, or checked against it (409)")
async def put_set(set_name: str, body: SetOptions, memory: LongTerm) -> SetDefinition:
    item_type: type[str | ChatMessage] = ChatMessage if body.item_type == "ChatMessage" else str
    options = {name: getattr(body, name) for name in SetOptions.model_fields if name not in ("item_type", "capacity")}
    return SetDefinition.of(await memory.get_or_create_memory_set(set_name, item_type, body.capacity, **options))


@set_routes.get(_SET, summary="A set's definition")
async def get_set(set_name: str, memory: LongTerm) -> SetDefinition:
    return SetDefinition.of(await memory.get_memory_set(set_name))


@set_routes.delete(_SET, summary="Delete a set and its items")
async def delete_set(set_name: str, memory: LongTerm) -> Deleted:
    return Deleted(deleted=await memory.delete_memory_set(set_name))


@set_routes.get(_SET + "/size", summary="How many items the set holds")
async def size(set_name: str, memory: LongTerm) -> Size:
    return Size(size=await memory.size(set_name))


@set_routes.post(_SET + "/compact", summary="Compact the set now, even below capacity")
async def compact(set_name: str, memory: LongTerm) -> CompactionReport:
    return await memory.compact(set_name)


@set_routes.post(_SET + "/search", summary="The items most relevant to a query, best first")
async def search(set_name: str, body: Search, memory: LongTerm) -> Items:
    return Items(items=await memory.search(set_name, body.query, body.limit, body.filters, mode=body.mode))


@item_routes.post(
    _SET + "/items",
    summary="Add items: 200 once durable, or 202 once enqueued (wait=false)",
    responses={202: {"model": Stored, "description": "Enqueued, not yet durable"}},
)
async def add_items(set_name: str, body: AddItems, memory: LongTerm, response: Response) -> Stored:
    ids = await memory.add(set_name, body.items, body.ids, body.metadatas, wait=body.wait, **body.lifecycle())
    if not body.wait:
        response.status_code = 202
    return Stored(ids=ids)


@item_routes.get(_SET + "/items", summary="Items by id (?id=a&id=b), or all; insertion order")
async def get_items(set_name: str, memory: LongTerm, ids: ItemIds = None) -> Items:
    return Items(items=await memory.get(set_name, ids))


@item_routes.get(_SET + "/items/{item_id}", summary="One item")
async def get_item(set_name: str, item_id: str, memory: LongTerm) -> MemorySetItem:
    found = await memory.get(set_name, [item_id])
    if not found:
        raise errors.NotFoundError(f"item {item_id!r} not found in memory set {set_name!r}")
    return found[0]


@item_routes.delete(_SET + "/items", summary="Delete items by id (?id=a&id=b), or every item (?all=true)")
async def delete_items(set_name: str, memory: LongTerm, ids: ItemIds = None, every: Every = False) -> Count:
    if (ids is None) == (not every):
        raise errors.InvalidRequestError("give the ids to delete (?id=a&id=b) or all=true, not both and not neither")
    return Count(deleted=await memory.delete(set_name, ids))


@item_routes.delete(_SET + "/items/{item_id}", summary="Delete one item")
async def delete_item(set_name: str, item_id: str, memory: LongTerm) -> Count:
    return Count(deleted=await memory.delete(set_name, [item_id]))


@state_routes.get(_KEY + "/state", summary="The whole short-term state object")
async def get_state(memory: ShortTerm) -> State:
    return State(state=_tree(await memory.load()))


@state_routes.patch(_KEY + "/state", summary="Set several paths at once; all or none are written")
async def patch_state(body: StatePatch, memory: ShortTerm) -> State:
    root = await memory.load()
    with _conflicts():
        for path, value in body.values.items():
            root.set(path, value, ttl=body.ttl)
    await root.persist()
    return State(state=_tree(root))


@state_routes.delete(_KEY + "/state", summary="Clear the state object")
async def clear_state(memory: ShortTerm) -> Deleted:
    await memory.clear()
    return Deleted(deleted=True)


@state_routes.get(_KEY + "/state/{path}", summary="The value or object at a dotted path")
async def get_path(key: str, path: str, memory: ShortTerm) -> PathValue:
    root = await memory.load()
    value = root.get(path)
    if value is None and not root.is_exist(path):
        raise errors.NotFoundError(f"path {path!r} not found in the short-term state of key {key!r}")
    return PathValue(path=path, value=_tree(value) if isinstance(value, MemoryObject) else _plain(value))


@state_routes.put(_KEY + "/state/{path}", summary="Set the value at a dotted path")
async def put_path(path: str, body: StateValue, memory: ShortTerm) -> PathValue:
    root = await memory.load()
    with _conflicts():
        root.set(path, body.value, ttl=body.ttl)
    await root.persist()
    return PathValue(path=path, value=body.value)


@state_routes.delete(_KEY + "/state/{path}", summary="Remove a path (an object with everything in it)")
async def delete_path(path: str, memory: ShortTerm) -> Deleted:
    root = await memory.load()
    removed = root.remove(path)
    await root.persist()
    return Deleted(deleted=removed)


@checkpoint_routes.post(_THREAD + "/checkpoints", status_code=201, summary="Store a checkpoint")
async def put_checkpoint(thread_id: str, body: NewCheckpoint, threads: Threads) -> Checkpoint:
    if body.checkpoint_id == "latest":
        raise errors.InvalidRequestError(
            "checkpoint_id 'latest' is reserved: GET .../checkpoints/latest names the newest"
        )
    return await threads.put(thread_id, body.checkpoint, **body.model_dump(exclude={"checkpoint"}))


@checkpoint_routes.get(_THREAD + "/checkpoints", summary="The thread's checkpoints, newest first")
async def list_checkpoints(
    thread_id: str, threads: Threads, checkpoint_ns: CheckpointNs = "", limit: int | None = None, before: Before = None
) -> Checkpoints:
    found = await threads.list(thread_id, checkpoint_ns=checkpoint_ns, limit=limit, before=before)
    return Checkpoints(checkpoints=found)


@checkpoint_routes.get(_THREAD + "/checkpoints/latest", summary="The thread's newest checkpoint")
async def latest_checkpoint(thread_id: str, threads: Threads, checkpoint_ns: CheckpointNs = "") -> Checkpoint:
    return _found(await threads.get(thread_id, checkpoint_ns=checkpoint_ns), thread_id, None)


@checkpoint_routes.get(_THREAD + "/checkpoints/{checkpoint_id}", summary="One checkpoint")
async def get_checkpoint(
    thread_id: str, checkpoint_id: str, threads: Threads, checkpoint_ns: CheckpointNs = ""
) -> Checkpoint:
    return _found(await threads.get(thread_id, checkpoint_id, checkpoint_ns=checkpoint_ns), thread_id, checkpoint_id)


@checkpoint_routes.delete(_THREAD, summary="Delete every checkpoint of the thread")
async def delete_thread(thread_id: str, threads: Threads) -> Count:
    return Count(deleted=await threads.delete_thread(thread_id))


@scope_routes.post(_KEY + "/recall", summary="One ranked block of what is relevant to a query, across every tier")
async def recall(namespace: str, key: str, body: RecallQuery, client: Client) -> RecallReply:
    options = body.model_dump(exclude={"query"})
    return await client.recall(namespace, key, body.query, **options)


@scope_routes.delete(_NS, summary="Forget a namespace: erase everything of it, everywhere")
async def forget_namespace(namespace: str, client: Client) -> ForgetReceipt:
    return await client.forget(namespace)


@scope_routes.delete(_KEY, summary="Forget one key of a namespace, everywhere")
async def forget_key(namespace: str, key: str, client: Client) -> ForgetReceipt:
    return await client.forget(namespace, key)


@scope_routes.get(_NS + "/usage", summary="Compaction counters and model tokens of the namespace")
async def usage(namespace: str, client: Client) -> Usage:
    return await client.usage(namespace)


@probe_routes.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@probe_routes.get("/readyz", summary="Redis answers and a live worker consumes each queue (503 otherwise)")
async def readyz(request: Request) -> JSONResponse:
    server = _server(request)
    client = server.client(None)
    queues: dict[str, int] = {}
    try:
        async with asyncio.timeout(server.settings.redis.socket_timeout):
            await client.dispatcher.run(command(lambda r: r.ping()))
            for queue in routing.QUEUES:
                workers = await client.dispatcher.run(alive(client.keys, client.keys.queue_workers(queue)))
                queues[queue] = len(workers)
    except (redis.RedisError, OSError, TimeoutError) as exc:
        reason = f"Redis does not answer ({type(exc).__name__}); check MEMORY_REDIS__URL"
        return JSONResponse({"ready": False, "reason": reason, "queues": queues}, status_code=503)
    idle = [queue for queue, count in queues.items() if count == 0]
    waiting = f"no live worker consumes {', '.join(idle)}" if idle else None
    return JSONResponse({"ready": not idle, "reason": waiting, "queues": queues}, status_code=503 if idle else 200)


# -- helpers ----------------------------------------------------------------------


def _listing(namespace: str, key: str | None) -> Operation[list[SetInfo]]:
    request = ListSetsRequest(namespace=namespace, key=key)
    reply = yield Call(routing.LIST_SETS, request, json.dumps({"namespace": namespace, "key": key}))
    return SetsReply.model_validate(reply).sets


def _found(checkpoint: Checkpoint | None, thread_id: str, checkpoint_id: str | None) -> Checkpoint:
    if checkpoint is None:
        which = "no checkpoint" if checkpoint_id is None else f"checkpoint {checkpoint_id!r} not"
        raise errors.NotFoundError(f"{which} found in thread {thread_id!r}")
    return checkpoint


@contextmanager
def _conflicts() -> Iterator[None]:
    """Turns short-term state's ``ValueError`` (a value where an object is, or the reverse) into a 409."""
    try:
        yield
    except errors.InvalidRequestError:
        raise
    except ValueError as exc:
        raise errors.ConflictError(str(exc)) from exc


def _tree(node: MemoryObject) -> dict[str, Any]:
    """An object of short-term state with everything under it, as JSON."""
    out: dict[str, Any] = {}
    for name in node.get_field_names():
        value = node.get(name)
        out[name] = _tree(value) if isinstance(value, MemoryObject) else _plain(value)
    return out


def _plain(value: Any) -> Any:
    # Short-term state can hold bytes (set by a Python caller); JSON cannot.
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# -- errors -----------------------------------------------------------------------


def _error(status: int, code: str, message: str, field: str | None = None, **headers: str) -> JSONResponse:
    detail: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        detail["field"] = field
    return JSONResponse({"error": detail}, status_code=status, headers=headers or None)


async def _on_memory_error(request: Request, exc: Exception) -> JSONResponse:
    for cls, status, code in ERRORS:
        if isinstance(exc, cls):
            return _error(status, code, str(exc))
    logger.error("%s %s failed: %s", request.method, request.url.path, type(exc).__name__)
    return _error(500, "internal_error", f"{type(exc).__name__}: {exc}")


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    message = str(exc.detail)
    if exc.status_code in (404, 405) and message in ("Not Found", "Method Not Allowed"):  # routing's own
        message = f"no route {request.method} {request.url.path}"
    return _error(exc.status_code, HTTP_CODES.get(exc.status_code, "http_error"), message, **(exc.headers or {}))


async def _on_invalid(request: Request, exc: Exception) -> JSONResponse:
    # FastAPI's 422 (a body or parameter outside its schema) becomes our 400, naming the field.
    if isinstance(exc, ValidationError):  # a request to the workers the client built from the path
        return _error(400, "invalid_request", describe(exc, "request"))
    assert isinstance(exc, RequestValidationError)
    problems: dict[str, str] = {}
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            reason = err.get("ctx", {}).get("error", "")
            return _error(400, "invalid_request", f"the body is not valid JSON: {reason}", field="body")
        field = _field(err.get("loc", ()))
        problems.setdefault(field, f"{field}: {err.get('msg', 'invalid')}")  # a union's first complaint
    message = "invalid request: " + "; ".join(list(problems.values())[:5])
    return _error(400, "invalid_request", message, field=next(iter(problems), None))


_TYPE_NAMES = {"str", "int", "float", "bool", "datetime", "list", "dict"}


def _field(loc: Sequence[Any]) -> str:
    """``("body", "items", 0, "ChatMessage", "role")`` as ``items.0.role``: no source, no union branches."""
    parts = [str(part) for part in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    # A union names the branch it tried ("float", "list[float]", "ChatMessage"); our fields are snake_case.
    kept = [p for p in parts if not ("[" in p or p in _TYPE_NAMES or p[:1].isupper())]
    return ".".join(kept) or "body"


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("%s %s failed", request.method, request.url.path)
    return _error(500, "internal_error", "internal error; the server's log has the details")


# -- the app ----------------------------------------------------------------------


class _App(FastAPI):
    def openapi(self) -> dict[str, Any]:
        # Validation errors answer 400 with ErrorBody (see _on_invalid), never FastAPI's 422.
        if self.openapi_schema is None:
            schema = super().openapi()
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
        return cast(dict[str, Any], self.openapi_schema)


def _documented_errors() -> dict[int | str, dict[str, Any]]:
    """The error responses of every ``/v1`` route in the OpenAPI document: status -> the codes it carries."""
    codes: dict[int, list[str]] = {}
    for status, code in [*((status, code) for _, status, code in ERRORS), *HTTP_CODES.items()]:
        codes.setdefault(status, []).append(code)
    return {status: {"model": ErrorBody, "description": ", ".join(codes[status])} for status in sorted(codes)}


def create_app(settings: Settings, *, dev: bool = False) -> FastAPI:
    """The HTTP API over ``settings``' deployment.

    Refuses (``ConfigurationError``) to serve without ``MEMORY_AUTH__TOKENS`` unless ``dev``, which serves
    every namespace without auth; ``memory-core serve --dev`` binds loopback only (see ``check``).
    """
    server = _Server(settings, dev=dev)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await server.close()

    app = _App(
        title="memory-core",
        version=_version(),
        summary="Distributed memory for AI agents: long-term sets, short-term state, checkpoints, recall.",
        lifespan=lifespan,
    )
    app.state.memory_core = server
    auth: list[Any] = [Depends(_bearer)] if server.tokens is not None else []  # declares the scheme; _Route checks it
    for router in (set_routes, item_routes, state_routes, checkpoint_routes, scope_routes):
        app.include_router(router, dependencies=auth, responses=_documented_errors())
    app.include_router(probe_routes)
    app.add_exception_handler(errors.MemoryCoreError, _on_memory_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)  # routing's 404 and 405 are Starlette's
    app.add_exception_handler(RequestValidationError, _on_invalid)
    app.add_exception_handler(ValidationError, _on_invalid)
    app.add_exception_handler(Exception, _on_unexpected)
    return app


def check(settings: Settings, *, dev: bool, host: str) -> None:
    """Refuses, before serving, what ``create_app`` cannot see: an open address in dev mode, an unreachable Redis."""
    if dev and host not in LOOPBACK:
        raise errors.ConfigurationError(f"--dev serves on loopback only, not on {host!r}")
    probe = open_redis(settings)
    try:
        probe.ping()  # a wrong MEMORY_REDIS__URL fails here too
    finally:
        probe.close()


def _version() -> str:
    try:
        return version("memory-core")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"
