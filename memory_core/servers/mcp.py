"""memory-core as an MCP server: the tools an assistant uses to remember, over stdio or streamable HTTP.

Every tool acts on one scope, (namespace, key), that the model cannot choose: over stdio it comes from
``MEMORY_MCP__NAMESPACE`` and ``MEMORY_MCP__KEY``; over HTTP the namespace is the one the caller's bearer
token grants (``MEMORY_AUTH__TOKENS``), and the client sends that same token to the workers, which check
it again. No tool takes a namespace argument.

Tools are plain functions over the synchronous client; the SDK runs them in worker threads, so a call
that waits for a worker never blocks the server's event loop. Each carries annotations (read-only,
destructive, idempotent) that clients use to ask before a call that changes memory, and its arguments
hold finite numbers only (``check_finite``), as every JSON body of the HTTP API.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import BaseModel, Field

from memory_core.client import LongTermMemory, MemoryClient
from memory_core.client.admin import Admin
from memory_core.core import routing
from memory_core.core.auth import TokenMap
from memory_core.core.dispatch import open_redis
from memory_core.core.errors import ConfigurationError, InvalidRequestError, MemoryCoreError, MemorySetNotFound
from memory_core.core.liveness import consumers
from memory_core.core.messages import FormationReport
from memory_core.core.models import MemorySetItem
from memory_core.core.settings import Settings
from memory_core.servers import version
from memory_core.servers.boundary import (
    LOOPBACK,
    MAX_TOKEN_BUDGET,
    check_finite,
    own_hosts,
    own_origins,
    state_json,
)

T = TypeVar("T")

INSTRUCTIONS = (
    "Long-term memory for this user. Search it before answering questions about the user or earlier work "
    "(search_memory, or recall for one ranked block across every tier); store durable facts, preferences "
    "and decisions with add_memory, one fact per item, or hand the conversation to remember, which forms the "
    "facts itself in the background (into the 'facts' set). Working memory holds scratch state for the current "
    "task."
)

FACTS = "facts"
"""The set ``remember`` forms facts into unless told otherwise: the client's default, made on the first formation
as a facts set (no compaction, no dedup), so formed facts never mix with ``add_memory``'s own set."""

SetName = Annotated[str | None, Field(description="A memory set of this scope; the default set when omitted.")]


class Memory(BaseModel):
    """One stored memory."""

    id: str
    text: str
    score: float | None = None
    metadata: dict[str, Any] = {}


class Memories(BaseModel):
    memories: list[Memory]


class Stored(BaseModel):
    ids: list[str]


class Deleted(BaseModel):
    deleted: int


class Recalled(BaseModel):
    context: str
    items: list[dict[str, Any]]


class Turn(BaseModel):
    """One message of the conversation to remember."""

    role: Literal["user", "assistant"] = Field(description="Who said it: the user, or you (assistant).")
    content: str = Field(description="What was said, as said.")


class FactDecision(BaseModel):
    """What a formation did with one fact."""

    decision: str
    fact_id: str
    text: str
    target: str | None = None


class Formation(BaseModel):
    """A formation operation: its receipt at first (pending), then its decisions once done."""

    op_id: str
    status: str
    set_name: str
    formed_by: str | None = None
    decisions: list[FactDecision] = []
    error: str | None = None
    notes: list[str] = []

    @classmethod
    def of(cls, report: FormationReport) -> Formation:
        decisions = [
            FactDecision(**d.model_dump(include={"decision", "fact_id", "text", "target"})) for d in report.decisions
        ]
        return cls(
            op_id=report.op_id,
            status=report.status,
            set_name=report.set_name,
            formed_by=report.formed_by,
            decisions=decisions,
            error=report.error,
            notes=report.notes,
        )


class SetSummary(BaseModel):
    name: str
    size: int
    capacity: int


class Sets(BaseModel):
    sets: list[SetSummary]


class Status(BaseModel):
    namespace: str
    key: str
    queues: dict[str, int]


class Scopes:
    """The (namespace, key) of the current call and a client acting with its credentials."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._tokens = TokenMap.from_secret(settings.auth.tokens)
        self._clients: dict[str | None, MemoryClient] = {}
        self._lock = threading.Lock()

    def current(self) -> tuple[MemoryClient, str]:
        """The client and namespace of this call: the bearer token's over HTTP, the configured one otherwise."""
        access = get_access_token()
        if access is not None:
            return self._client(access.token), access.client_id
        namespace = self.settings.mcp.namespace
        if namespace is None:  # checked at start-up; a call can only get here through a misuse of this class
            raise ConfigurationError("set MEMORY_MCP__NAMESPACE: the namespace every tool acts on")
        return self._client(None), namespace

    def _client(self, token: str | None) -> MemoryClient:
        with self._lock:
            if token not in self._clients:
                # The caller's own token goes to the workers, which check it again.
                self._clients[token] = MemoryClient(self.settings.with_token(token))
            return self._clients[token]

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's token check: the namespace ``token`` grants, as the access token's ``client_id``, or None."""
        if self._tokens is None:
            return None
        namespace = self._tokens.namespace_of(token)
        if namespace is None:
            return None
        return AccessToken(token=token, client_id=namespace, scopes=[])

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


class MemoryTools:
    """The tools. Each docstring's first line is the description the model reads."""

    def __init__(self, scopes: Scopes) -> None:
        self._scopes = scopes
        self._settings = scopes.settings.mcp

    def add_memory(
        self,
        texts: Annotated[list[str], Field(description="The memories to store, each a self-contained sentence.")],
        set_name: SetName = None,
        importance: Annotated[float | None, Field(ge=0, le=1, description="0..1; higher is kept longer.")] = None,
        pinned: Annotated[bool, Field(description="Never evicted or expired.")] = False,
    ) -> Stored:
        """Store facts, preferences or decisions exactly as given, one per text (remember forms them from a chat)."""
        ltm, name = self._scope(set_name)
        add = functools.partial(ltm.add, name, list(texts), importance=importance, pinned=pinned or None)
        try:
            return Stored(ids=add())  # the set's definition comes from the client's cache: no extra round trip
        except MemorySetNotFound:
            # The default set is made on the first write; any other must exist (MemorySetNotFound says so).
            if name != self._settings.set_name:
                raise
            ltm.get_or_create_memory_set(name, capacity=self._settings.set_capacity)
            return Stored(ids=add())

    def remember(
        self,
        messages: Annotated[list[Turn], Field(min_length=1, description="The conversation to remember, oldest first.")],
        set_name: Annotated[
            str | None,
            Field(description=f"The set the facts go to; {FACTS!r} when omitted (search_memory searches it by name)."),
        ] = None,
    ) -> Formation:
        """Remember a conversation: facts are formed from it in the background (add_memory stores text as given).

        The server extracts self-contained facts and reconciles them with those it holds (new, updated,
        contradicted, or already known). Returns at once with the operation's id and status "pending";
        memory_operation tells when it is done and what it decided. The same messages again are the same
        operation: nothing is formed twice.
        """
        ltm, _ = self._scope(None)
        turns = [turn.model_dump() for turn in messages]
        return Formation.of(ltm.remember(turns, set_name=set_name or FACTS))

    def memory_operation(
        self, op_id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$", description="The op_id remember returned.")]
    ) -> Formation:
        """Check a remember operation: pending, running, done (with the facts it decided), deferred or failed."""
        ltm, _ = self._scope(None)
        return Formation.of(ltm.operation(op_id))

    def search_memory(
        self,
        query: Annotated[str, Field(description="What to look for, in natural language.")],
        set_name: SetName = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 5,
        mode: Literal["hybrid", "dense", "lexical"] = "hybrid",
        rerank: Annotated[
            bool | None,
            Field(description="Rerank with the server's reranker: false turns it off, null leaves it as set."),
        ] = None,
    ) -> Memories:
        """Search long-term memory by meaning and words; best matches first."""
        ltm, name = self._scope(set_name)
        found = self._or_none(name, lambda: ltm.search(name, query, limit=limit, mode=mode, rerank=rerank)) or []
        return Memories(memories=[_memory(item) for item in found])

    def get_memories(self, ids: list[str] | None = None, set_name: SetName = None) -> Memories:
        """Read stored memories by id, or all of a set in the order they were stored."""
        ltm, name = self._scope(set_name)
        return Memories(memories=[_memory(item) for item in self._or_none(name, lambda: ltm.get(name, ids)) or []])

    def delete_memory(self, ids: list[str], set_name: SetName = None) -> Deleted:
        """Delete stored memories by id."""
        ltm, name = self._scope(set_name)
        return Deleted(deleted=self._or_none(name, lambda: ltm.delete(name, ids)) or 0)

    def recall(
        self,
        query: str,
        limit: Annotated[int, Field(ge=1, le=100)] = 8,
        token_budget: Annotated[int | None, Field(ge=1, le=MAX_TOKEN_BUDGET)] = None,
        session_id: str | None = None,
    ) -> Recalled:
        """One ranked block of what is relevant to a query, across every memory tier."""
        client, namespace = self._scopes.current()
        reply = client.recall(
            namespace, self._settings.key, query, limit=limit, token_budget=token_budget, session_id=session_id
        )
        return Recalled(context=reply.context, items=[item.model_dump(mode="json") for item in reply.items])

    def list_memory_sets(self) -> Sets:
        """The memory sets of this user, with their sizes."""
        client, namespace = self._scopes.current()
        infos = Admin(client).list_sets(namespace, self._settings.key)
        return Sets(
            sets=[SetSummary(name=i.definition.name, size=i.size, capacity=i.definition.capacity) for i in infos]
        )

    def get_working_memory(self, path: str | None = None) -> dict[str, Any]:
        """Read working memory (scratch state of the current task): one dotted path, or all of it."""
        client, namespace = self._scopes.current()
        state = client.short_term(namespace, self._settings.key)
        value = state.get(path) if path else state
        return {"path": path, "value": state_json(value)}

    def set_working_memory(self, path: str, value: Any) -> dict[str, Any]:
        """Set a value in working memory at a dotted path (like plan.step); it lasts a day unless set again."""
        client, namespace = self._scopes.current()
        with client.short_term(namespace, self._settings.key) as state:
            state.set(path, value)
        return {"path": path, "stored": True}

    def memory_status(self) -> Status:
        """Whether memory works: this scope, and how many live workers serve each queue."""
        client, namespace = self._scopes.current()
        queues = sorted(set(routing.ROUTES.values()))
        live = {queue: len(consumers(client.dispatcher_redis, client.keys, queue)) for queue in queues}
        return Status(namespace=namespace, key=self._settings.key, queues=live)

    def _scope(self, set_name: str | None) -> tuple[LongTermMemory, str]:
        client, namespace = self._scopes.current()
        return client.long_term(namespace, self._settings.key), set_name or self._settings.set_name

    def _or_none(self, name: str, read: Callable[[], T]) -> T | None:
        """What ``read`` returns; None when ``name`` is the default set or the facts set and it does not exist yet.

        The default set is made on the first ``add_memory``, and the facts set by the first formation, so before
        them nothing is stored: nothing to find, read or delete. A set the model names must exist:
        ``MemorySetNotFound`` tells it the name is wrong, where an empty answer would read as "nothing remembered".
        """
        try:
            return read()
        except MemorySetNotFound:
            if name not in (self._settings.set_name, FACTS):
                raise
            return None


def _hints(*, read_only: bool = False, destructive: bool = False, idempotent: bool = False) -> ToolAnnotations:
    # Memory is a closed world: no tool reaches anything but this deployment.
    if read_only:
        return ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
    return ToolAnnotations(
        read_only_hint=False, destructive_hint=destructive, idempotent_hint=idempotent, open_world_hint=False
    )


TOOLS: dict[str, ToolAnnotations] = {
    "add_memory": _hints(),  # adds, never overwrites; each call stores new items
    # The same messages are the same operation (its id hashes them): a repeated call forms nothing again. A fact
    # it supersedes is kept, marked superseded, so nothing is lost.
    "remember": _hints(idempotent=True),
    "memory_operation": _hints(read_only=True),
    "search_memory": _hints(read_only=True),
    "get_memories": _hints(read_only=True),
    "delete_memory": _hints(destructive=True, idempotent=True),
    "recall": _hints(read_only=True),
    "list_memory_sets": _hints(read_only=True),
    "get_working_memory": _hints(read_only=True),
    "set_working_memory": _hints(destructive=True, idempotent=True),  # replaces the value at its path
    "memory_status": _hints(read_only=True),
}
"""Every tool, with the hints clients read before calling it (and ask the user first for a destructive one)."""


class _MemoryServer(MCPServer[Any]):
    """The SDK's server, with every tool's arguments checked for non-finite numbers before validation."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            for argument, value in arguments.items():
                check_finite(value, argument)
        except InvalidRequestError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        return await super().call_tool(name, arguments, context)


def build_server(settings: Settings, *, http_url: str | None = None) -> tuple[MCPServer, Scopes]:
    """The MCP server and the scopes it serves. ``http_url``: served over HTTP there, with bearer tokens."""
    scopes = Scopes(settings)
    auth: dict[str, Any] = {}
    if http_url is not None and settings.auth.tokens is not None:
        # Our tokens are the deployment's own map, not tokens an authorization server issues for a resource:
        # Scopes.verify_token is the whole check.
        settings_of_auth = AuthSettings(
            issuer_url=http_url, resource_server_url=http_url, validate_token_resource=False
        )
        auth = {"token_verifier": scopes, "auth": settings_of_auth}
    server = _MemoryServer("memory-core", instructions=INSTRUCTIONS, version=version(), **auth)
    tools = MemoryTools(scopes)
    for name, hints in TOOLS.items():
        method = _reported(getattr(tools, name))
        description = (method.__doc__ or "").strip().splitlines()[0]
        server.tool(name=name, description=description, annotations=hints)(method)
    return server, scopes


def transport_security(host: str, port: int) -> TransportSecuritySettings | None:
    """Over HTTP on loopback, only requests sent to this server's own address (421 for another ``Host``)
    from no page or one of its own (403 for another ``Origin``): a web page cannot reach it by rebinding
    its DNS name. None (the SDK's own choice) on an open address, which needs tokens."""
    if host not in LOOPBACK:
        return None
    return TransportSecuritySettings(allowed_hosts=own_hosts(host, port), allowed_origins=own_origins(host, port))


def _reported(tool: Callable[..., Any]) -> Callable[..., Any]:
    """The tool, with our errors reported to the model as they are (the SDK hides other exceptions' text)."""

    @functools.wraps(tool)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return tool(*args, **kwargs)
        except MemoryCoreError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    return run


def _memory(item: MemorySetItem) -> Memory:
    value = item.value if isinstance(item.value, str) else item.value.content
    return Memory(id=item.id, text=value, score=item.score, metadata=item.additional_metadata)


def check(settings: Settings, *, http: bool, dev: bool, host: str) -> None:
    """Refuses a configuration that would serve the wrong tenant or anyone at all, before serving."""
    if not http and settings.mcp.namespace is None:
        raise ConfigurationError("memory-core mcp needs MEMORY_MCP__NAMESPACE: the namespace every tool acts on")
    if http and settings.auth.tokens is None:
        if not dev:
            raise ConfigurationError(
                "memory-core mcp --http needs MEMORY_AUTH__TOKENS (bearer token -> namespace), or --dev for a "
                "loopback-only server without auth on MEMORY_MCP__NAMESPACE"
            )
        if host not in LOOPBACK:
            raise ConfigurationError(f"--dev serves without auth on loopback only, not on {host!r}")
        if settings.mcp.namespace is None:
            raise ConfigurationError("memory-core mcp --dev needs MEMORY_MCP__NAMESPACE")
    open_redis(settings).ping()  # a wrong MEMORY_REDIS__URL fails here, with the CLI's one line
