"""The ``/v1`` routes: each one call of the caller's ``AsyncMemoryClient``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import redis
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from memory_core import AsyncLongTermMemory
from memory_core.core import errors, routing
from memory_core.core.liveness import alive
from memory_core.core.messages import (
    CompactionReport,
    ForgetReceipt,
    ForgetSourcesReport,
    FormationReport,
    ListSetsRequest,
    RecallReply,
    SetInfo,
    SetsReply,
)
from memory_core.core.models import (
    ChatMessage,
    MemorySetItem,
    Usage,
)
from memory_core.core.steps import Call, Operation, command
from memory_core.servers.boundary import MAX_LISTED, state_json
from memory_core.servers.http.bodies import (
    AddItems,
    Checkpoints,
    Count,
    Deleted,
    ForgetSources,
    Items,
    NewCheckpoint,
    PathValue,
    RecallQuery,
    Remember,
    Search,
    SetDefinition,
    SetList,
    SetListing,
    SetOptions,
    Size,
    State,
    StatePatch,
    StateValue,
    Stored,
)
from memory_core.servers.http.serving import Client, GuardedRoute, route_class, server_of
from memory_core.tiers.checkpoints import AsyncCheckpointStore, Checkpoint
from memory_core.tiers.short_term import AsyncShortTermMemory

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
ListLimit = Annotated[
    int | None, Query(ge=1, le=MAX_LISTED, description=f"The most checkpoints to list, 1 to {MAX_LISTED:,}.")
]
OperationId = Annotated[
    str, Path(pattern=r"^[0-9a-f]{32}$", description="A formation operation's id, as remember answered it.")
]

_NS = "/v1/namespaces/{namespace}"
_KEY = _NS + "/keys/{key}"
_SET = _KEY + "/sets/{set_name}"
_THREAD = _NS + "/threads/{thread_id}"

set_routes = APIRouter(route_class=GuardedRoute, tags=["long-term sets"])
item_routes = APIRouter(route_class=route_class("items"), tags=["long-term items"])
state_routes = APIRouter(route_class=route_class("state"), tags=["short-term state"])
checkpoint_routes = APIRouter(route_class=route_class("checkpoints"), tags=["checkpoints"])
scope_routes = APIRouter(route_class=GuardedRoute, tags=["recall, forget, usage"])
probe_routes = APIRouter(tags=["probes"])


@set_routes.get(_NS + "/sets", summary="The namespace's sets, or one key's, with sizes")
async def list_sets(namespace: str, client: Client, key: str | None = None) -> SetList:
    found = await client.run(_listing(namespace, key))
    return SetList(sets=[SetListing(key=i.key, size=i.size, definition=SetDefinition.of(i.definition)) for i in found])


@set_routes.put(_SET, summary="Get or create a set: created with this definition, or checked against it (409)")
async def put_set(set_name: str, body: SetOptions, memory: LongTerm) -> SetDefinition:
    item_type: type[str | ChatMessage] = ChatMessage if body.item_type == "ChatMessage" else str
    options = {name: getattr(body, name) for name in SetOptions.model_fields if name not in ("item_type", "capacity")}
    options["eviction"] = body.eviction.policy_of() if body.eviction is not None else None
    return SetDefinition.of(await memory.get_or_create_memory_set(set_name, item_type, body.capacity, **options))


@set_routes.get(_SET, summary="A set's definition")
async def get_set(set_name: str, memory: LongTerm) -> SetDefinition:
    return SetDefinition.of(await memory.get_memory_set(set_name))


@set_routes.delete(_SET, summary="Delete a set and its items")
async def delete_set(set_name: str, memory: LongTerm) -> Deleted:
    return Deleted(deleted=await memory.delete_memory_set(set_name))


@set_routes.get(_SET + "/size", summary="How many items the set holds")
async def set_size(set_name: str, memory: LongTerm) -> Size:
    return Size(size=await memory.size(set_name))


@set_routes.post(_SET + "/compact", summary="Compact the set now, even below capacity")
async def compact_set(set_name: str, memory: LongTerm) -> CompactionReport:
    return await memory.compact(set_name)


@set_routes.post(_SET + "/search", summary="The items most relevant to a query, best first")
async def search(set_name: str, body: Search, memory: LongTerm) -> Items:
    found = await memory.search(
        set_name,
        body.query,
        body.limit,
        body.filters,
        mode=body.mode,
        rerank=body.rerank,
        include_superseded=body.include_superseded,
    )
    return Items(items=found)


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


_FORMING = ("pending", "running", "deferred")
"""Statuses of an operation whose facts are not formed yet: remember answers them 202."""


@item_routes.post(
    _KEY + "/remember",
    summary="Form facts from a conversation: 202 with the receipt, or 200 once formed (wait=true)",
    responses={202: {"model": FormationReport, "description": "Accepted: pending, or deferred past the budget"}},
)
async def remember(body: Remember, memory: LongTerm, response: Response) -> FormationReport:
    report = await memory.remember(body.message_dicts(), set_name=body.set_name, wait=body.wait, timeout=body.timeout)
    if report.status in _FORMING:
        response.status_code = 202
    return report


@item_routes.get(_KEY + "/operations/{op_id}", summary="Where a formation operation stands, with its decisions")
async def get_operation(op_id: OperationId, memory: LongTerm) -> FormationReport:
    return await memory.operation(op_id)


@item_routes.get(
    _SET + "/items/{item_id}/history",
    summary="A fact's chain, oldest first: what it superseded, and what superseded it",
)
async def fact_history(set_name: str, item_id: str, memory: LongTerm) -> Items:
    return Items(items=await memory.history(item_id, set_name=set_name))


@item_routes.post(_SET + "/forget-sources", summary="Erase messages from the set's facts, by message id")
async def forget_sources(set_name: str, body: ForgetSources, memory: LongTerm) -> ForgetSourcesReport:
    return await memory.forget_sources(body.source_ids, set_name=set_name)


@state_routes.get(_KEY + "/state", summary="The whole short-term state object")
async def get_state(memory: ShortTerm) -> State:
    return State(state=state_json(await memory.load()))


@state_routes.patch(_KEY + "/state", summary="Set several paths at once; all or none are written")
async def patch_state(body: StatePatch, memory: ShortTerm) -> State:
    root = await memory.load()
    with _conflicts():
        for path, value in body.values.items():
            root.set(path, value, ttl=body.ttl)
    await root.persist()
    return State(state=state_json(root))


@state_routes.delete(_KEY + "/state", summary="Clear the state object")
async def clear_state(memory: ShortTerm) -> Deleted:
    await memory.clear()
    return Deleted(deleted=True)


@state_routes.get(_KEY + "/state/{path}", summary="The value or object at a dotted path")
async def get_state_path(key: str, path: str, memory: ShortTerm) -> PathValue:
    root = await memory.load()
    value = root.get(path)
    if value is None and not root.is_exist(path):
        raise errors.NotFoundError(f"path {path!r} not found in the short-term state of key {key!r}")
    return PathValue(path=path, value=state_json(value))


@state_routes.put(_KEY + "/state/{path}", summary="Set the value at a dotted path")
async def put_state_path(path: str, body: StateValue, memory: ShortTerm) -> PathValue:
    root = await memory.load()
    with _conflicts():
        root.set(path, body.value, ttl=body.ttl)
    await root.persist()
    return PathValue(path=path, value=body.value)


@state_routes.delete(_KEY + "/state/{path}", summary="Remove a path (an object with everything in it)")
async def delete_state_path(path: str, memory: ShortTerm) -> Deleted:
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
    thread_id: str, threads: Threads, checkpoint_ns: CheckpointNs = "", limit: ListLimit = None, before: Before = None
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
async def get_usage(namespace: str, client: Client) -> Usage:
    return await client.usage(namespace)


@probe_routes.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@probe_routes.get("/readyz", summary="Redis answers and a live worker consumes each queue (503 otherwise)")
async def readyz(request: Request) -> JSONResponse:
    server = server_of(request)
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
