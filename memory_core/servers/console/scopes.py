"""What a namespace holds, for the console's scope views: keys, and per key its sets, sessions, short-term
state, profile; the namespace's checkpoint threads. Sets come from the workers (``list_sets``); the Redis-only
tiers from bounded SCANs of the namespace's keys (names only: nothing here reads memory text).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import redis

from memory_core.client.admin import Admin
from memory_core.core.keys import Keys, decoded
from memory_core.core.messages import SetInfo
from memory_core.servers.console.access import Console

MAX_LISTED = 1_000
"""The most names one listing shows (a namespace with more says so)."""


@dataclass
class KeySummary:
    """One key of a namespace and what it holds."""

    key: str
    sets: list[SetInfo] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)
    short_term: bool = False
    sensory: bool = False
    profile: bool = False

    @property
    def items(self) -> int:
        return sum(info.size for info in self.sets)


@dataclass
class NamespaceSummary:
    """A namespace's keys, its checkpoint threads, and whether a listing was cut at ``MAX_LISTED``."""

    namespace: str
    keys: dict[str, KeySummary]
    threads: list[str]
    truncated: bool


def _scan(client: redis.Redis, pattern: str) -> Iterator[str]:
    for found in client.scan_iter(match=pattern, count=1000):
        yield decoded(found)


def namespaces(console: Console) -> list[str]:
    """Every namespace the deployment knows of (for the operator)."""
    return Admin(console.any_client()).namespaces()


def namespace_summary(console: Console, namespace: str) -> NamespaceSummary:
    """What ``namespace`` holds, key by key."""
    keys = Keys(console.keys.prefix)
    base = f"{keys.prefix}:{namespace}:"
    found: dict[str, KeySummary] = {}
    truncated = False

    def summary(key: str) -> KeySummary | None:
        nonlocal truncated
        if key not in found and len(found) >= MAX_LISTED:
            truncated = True
            return None
        return found.setdefault(key, KeySummary(key))

    for info in Admin(console.client(namespace)).list_sets(namespace):
        entry = summary(info.key)
        if entry is not None:
            entry.sets.append(info)
    for name in _scan(console.redis, f"{base}session:*:*:messages"):
        key, session_id = name[len(base) + len("session:") :].rsplit(":", 2)[:2]
        entry = summary(key)
        if entry is not None:
            entry.sessions.add(session_id)
    for kind in ("stm", "sensory", "profile"):
        for name in _scan(console.redis, f"{base}{kind}:*"):
            entry = summary(name[len(base) + len(kind) + 1 :])
            if entry is not None:
                setattr(entry, {"stm": "short_term"}.get(kind, kind), True)
    threads = sorted(
        {name[len(base) + len("ckpt:") :].split(":", 1)[0] for name in _scan(console.redis, f"{base}ckpt:*")}
    )
    if len(threads) > MAX_LISTED:
        threads, truncated = threads[:MAX_LISTED], True
    return NamespaceSummary(namespace, dict(sorted(found.items())), threads, truncated)
