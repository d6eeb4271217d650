"""Every Redis key memory-core uses is built here, and nowhere else.

Layout: ``{prefix}:{namespace}:{kind}:...``. Namespace, key and set names cannot
contain ``:`` (see ``models``), so a key built for one tenant can never equal or
glob-match a key of another. Operator-level keys (which name no tenant) live
under ``{prefix}:!ops:``; ``!`` is not a valid namespace character.
"""

from __future__ import annotations

_OPS = "!ops"


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

    def usage(self, namespace: str) -> str:
        """Hash of counters: tokens per model, compactions, items folded, failures."""
        return f"{self.prefix}:{namespace}:usage"

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

    def namespace_pattern(self, namespace: str) -> str:
        """A SCAN pattern matching every key of one namespace (used by erasure and tests)."""
        return f"{self.prefix}:{namespace}:*"
