"""Every Redis key memory-core uses is built here, and nowhere else.

Layout: ``{prefix}:{namespace}:{kind}:...``. Namespace, key and set names cannot
contain ``:`` (see ``models``), so a key built for one tenant can never equal or
glob-match a key of another. Operator-level keys (which name no tenant) live
under ``{prefix}:!ops:``; ``!`` is not a valid namespace character.
"""

from __future__ import annotations

_OPS = "!ops"


def decoded(value: object) -> str:
    """A Redis reply value as text (redis-py returns bytes unless asked to decode)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class Keys:
    """Builds Redis keys under one prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def set_definition(self, namespace: str, key: str, set_name: str) -> str:
        """The cached JSON definition of one memory set (L2)."""
        return f"{self.prefix}:{namespace}:setdef:{key}:{set_name}"

    def compaction_lock(self, namespace: str, key: str, set_name: str) -> str:
        """Single-flight lock of one set's compaction (value: the holder's token)."""
        return f"{self.prefix}:{namespace}:compaction-lock:{key}:{set_name}"

    def compaction_dirty(self, namespace: str, key: str, set_name: str) -> str:
        """Set when a trigger found the lock taken: the running compaction re-checks once at its end."""
        return f"{self.prefix}:{namespace}:compaction-dirty:{key}:{set_name}"

    def compaction_pending(self, namespace: str, key: str, set_name: str) -> str:
        """Set while a compaction task is queued, so writes past capacity enqueue one task, not one each."""
        return f"{self.prefix}:{namespace}:compaction-pending:{key}:{set_name}"

    def formation_operation(self, namespace: str, key: str, op_id: str) -> str:
        """JSON of one formation operation: its request, the model's stored reply, decisions and status."""
        return f"{self.prefix}:{namespace}:formation-op:{key}:{op_id}"

    def formation_lock(self, namespace: str, key: str, set_name: str) -> str:
        """Held by the one formation of a scope that snapshots, decides and applies (value: its token)."""
        return f"{self.prefix}:{namespace}:formation-lock:{key}:{set_name}"

    def formation_in_flight(self, namespace: str) -> str:
        """Sorted set of the namespace's formations running now (op ids, scored by when their claim lapses)."""
        return f"{self.prefix}:{namespace}:formation-running"

    def formation_deferred(self, namespace: str) -> str:
        """Sorted set of the namespace's deferred operations (``key:op_id``, scored by when they were deferred)."""
        return f"{self.prefix}:{namespace}:formation-deferred"

    def formation_deferred_namespaces(self) -> str:
        """Set of the namespaces holding deferred operations (beat's resume looks at these)."""
        return f"{self.prefix}:{_OPS}:formation-deferred"

    def formation_erased(self, namespace: str, key: str) -> str:
        """Set of the key's message ids erased by ``forget_sources``: a formation still queued leaves them out."""
        return f"{self.prefix}:{namespace}:formation-erased:{key}"

    def formation_tokens(self, namespace: str, day: str) -> str:
        """Model tokens the namespace's formations spent on one UTC day (``YYYYMMDD``)."""
        return f"{self.prefix}:{namespace}:formation-tokens:{day}"

    def console_session(self, session_id: str) -> str:
        """JSON of one console sign-in: who (a namespace or the operator, the token's id), CSRF token, expiry."""
        return f"{self.prefix}:{_OPS}:console-session:{session_id}"

    def console_failures(self, address: str) -> str:
        """Failed console sign-ins from one client address (a counter that expires)."""
        return f"{self.prefix}:{_OPS}:console-failures:{address}"

    def console_audit(self, namespace: str) -> str:
        """List of the namespace's console corrections, newest first (JSON: who, when, what, before, after)."""
        return f"{self.prefix}:{namespace}:console-audit"

    def usage(self, namespace: str) -> str:
        """Hash of counters: summarizer and embedding tokens per model, compactions, items folded, failures."""
        return f"{self.prefix}:{namespace}:usage"

    def operator_usage(self) -> str:
        """Hash of the model usage no tenant asked for (a reindex's embeddings), fields as in ``usage``."""
        return f"{self.prefix}:{_OPS}:usage"

    def quota_usage(self, namespace: str) -> str:
        """Hash of the namespace's measured long-term usage (items, bytes) and what was added since."""
        return f"{self.prefix}:{namespace}:quota"

    def write_rate(self, namespace: str) -> str:
        """Hash of the namespace's write-rate bucket (tokens left, when last refilled)."""
        return f"{self.prefix}:{namespace}:rate"

    def quota_count_lock(self, namespace: str) -> str:
        """Held while one worker measures the namespace's usage, so the others do not measure it too."""
        return f"{self.prefix}:{namespace}:quota-count"

    def set_version(self, namespace: str, key: str, set_name: str) -> str:
        """Counter bumped by every mutation of a set; part of every item and search cache key."""
        return f"{self.prefix}:{namespace}:version:{key}:{set_name}"

    def size_hint(self, namespace: str, key: str, set_name: str) -> str:
        """Hash bounding a set's size without counting it: an exact count, and the items added since."""
        return f"{self.prefix}:{namespace}:size:{key}:{set_name}"

    def cached_item(self, namespace: str, key: str, set_name: str, version: int, item_id: str) -> str:
        """One item as of a set version (L1 and L2)."""
        return f"{self.prefix}:{namespace}:item:{key}:{set_name}:{version}:{item_id}"

    def cached_search(self, namespace: str, key: str, set_name: str, version: int, digest: str) -> str:
        """A search result as of a set version; ``digest`` hashes query, limit, filters and mode."""
        return f"{self.prefix}:{namespace}:search:{key}:{set_name}:{version}:{digest}"

    def cached_embedding(self, namespace: str, model: str, digest: str) -> str:
        """An embedding by model and text hash, per namespace (no cross-tenant timing hints)."""
        return f"{self.prefix}:{namespace}:embedding:{model}:{digest}"

    def write_lock(self, namespace: str, key: str, set_name: str) -> str:
        """Serializes deduplicating writers of one set."""
        return f"{self.prefix}:{namespace}:write-lock:{key}:{set_name}"

    def access_log(self, namespace: str) -> str:
        """Hash of pending access times (``key\x1fset\x1fitem`` -> epoch seconds) for the flush task."""
        return f"{self.prefix}:{namespace}:access"

    def access_namespaces(self) -> str:
        """Namespaces with pending access times."""
        return f"{self.prefix}:{_OPS}:access-namespaces"

    def sweep_lock(self, name: str) -> str:
        """Held by the one sweep of ``name`` that runs per tick, however many beats enqueue it."""
        return f"{self.prefix}:{_OPS}:sweep-lock:{name}"

    def maintenance_stats(self) -> str:
        """Counters of maintenance runs: ``<sweep>:ran``, ``<sweep>:skipped``, items affected."""
        return f"{self.prefix}:{_OPS}:maintenance"

    def reply(self, namespace: str, task_id: str) -> str:
        """The list a worker pushes a task's outcome to, for a waiting client."""
        return f"{self.prefix}:{namespace}:reply:{task_id}"

    def dead_letters(self, namespace: str) -> str:
        """The list of failed task messages of one namespace, kept with their payload for replay."""
        return f"{self.prefix}:{namespace}:deadletters"

    def dead_letter_namespaces(self) -> str:
        """The set of namespaces that have dead letters (so operators need no SCAN)."""
        return f"{self.prefix}:{_OPS}:deadletter-namespaces"

    def unroutable_dead_letters(self) -> str:
        """Dead letters whose message named no valid namespace (malformed or hostile input)."""
        return f"{self.prefix}:{_OPS}:deadletters-unroutable"

    def worker(self, name: str) -> str:
        """One live worker's heartbeat (JSON about it), expiring unless refreshed."""
        return f"{self.prefix}:{_OPS}:worker:{name}"

    def workers(self) -> str:
        """The set of workers that have sent a heartbeat (members whose heartbeat expired are pruned by readers)."""
        return f"{self.prefix}:{_OPS}:workers"

    def queue_workers(self, queue: str) -> str:
        """The set of workers that have said they consume ``queue``."""
        return f"{self.prefix}:{_OPS}:queue-workers:{queue}"

    def short_term(self, namespace: str, key: str, kind: str = "stm") -> str:
        """Hash of one short-term state (``kind`` stm) or sensory memory (``kind`` sensory): path -> entry."""
        return f"{self.prefix}:{namespace}:{kind}:{key}"

    def session(self, namespace: str, key: str, session_id: str, part: str) -> str:
        """One part of a session: ``messages`` (stream), ``state`` (summary), ``entities``, ``lock``."""
        return f"{self.prefix}:{namespace}:session:{key}:{session_id}:{part}"

    def checkpoints(self, namespace: str, thread_id: str, checkpoint_ns: str) -> tuple[str, str]:
        """The hash (id -> snapshot) and sorted set (ids by time) of one thread's checkpoint namespace."""
        base = f"{self.prefix}:{namespace}:ckpt:{thread_id}:{checkpoint_ns}"
        return f"{base}:data", f"{base}:order"

    def checkpoint_pattern(self, namespace: str, thread_id: str) -> str:
        """A SCAN pattern matching every checkpoint key of one thread."""
        return f"{self.prefix}:{namespace}:ckpt:{thread_id}:*"

    def profile(self, namespace: str, user_id: str) -> str:
        """One user's profile document (JSON)."""
        return f"{self.prefix}:{namespace}:profile:{user_id}"

    def key_patterns(self, namespace: str, key: str) -> list[str]:
        """SCAN patterns matching the keys of one key (user, agent) in a namespace, kind by kind.

        Version counters are left out on purpose (see ``memory_core.engine.erasure``). Names cannot hold glob
        characters, so a pattern matches exactly that key.
        """
        kinds = (
            "setdef",
            "size",
            "item",
            "search",
            "compaction-dirty",
            "compaction-pending",
            "write-lock",
            "formation-op",
            "formation-lock",
            "session",
            "ckpt",
        )
        below = [f"{self.prefix}:{namespace}:{kind}:{key}:*" for kind in kinds]
        exact = [
            self.short_term(namespace, key),
            self.short_term(namespace, key, "sensory"),
            self.profile(namespace, key),
            self.formation_erased(namespace, key),
        ]
        return below + exact

    def namespace_pattern(self, namespace: str) -> str:
        """A SCAN pattern matching every key of one namespace (used by erasure and tests)."""
        return f"{self.prefix}:{namespace}:*"
