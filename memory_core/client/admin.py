"""The operator API behind the ``memory-core`` CLI: listings, export and import, snapshots and restore,
and formation's deferred and verbatim operations.

Everything that touches items goes through the workers (only a worker opens the store);
restore of the embedded engine is the exception: it runs with the workers stopped, on the
data directory itself, and then makes every cached read stale.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import redis

from memory_core.client import MemoryClient
from memory_core.core import routing
from memory_core.core.coordination import stored_counters
from memory_core.core.errors import ConfigurationError, InvalidRequestError
from memory_core.core.files import copy_tree_sparse
from memory_core.core.keys import decoded
from memory_core.core.messages import (
    BackupReply,
    BackupRequest,
    ExportedItem,
    ExportReply,
    ExportRequest,
    FormationAdminReport,
    FormationReplayRequest,
    FormationResumeRequest,
    ImportRequest,
    ListSetsRequest,
    ReindexRequest,
    ReindexStatus,
    SetInfo,
    SetsReply,
)
from memory_core.core.models import Usage
from memory_core.core.redis_errors import redis_failure
from memory_core.core.settings import Settings, redact_url
from memory_core.core.store_owner import StoreOwner
from memory_core.core.validation import check_seconds, parse

PAGE = 200
"""Items per export or import task: big enough to amortize a message, small enough for the broker."""


class Admin:
    """Operator calls over a ``MemoryClient``."""

    def __init__(self, client: MemoryClient) -> None:
        self.client = client
        self.settings: Settings = client.settings
        self._where = redact_url(client.settings.redis.url)

    def namespaces(self) -> list[str]:
        """Namespaces with set definitions cached in Redis or usage counters (a hint for ``--all``)."""
        found: set[str] = set()
        prefix = self.settings.redis.key_prefix
        try:
            for pattern in (f"{prefix}:*:setdef:*", f"{prefix}:*:usage", f"{prefix}:*:version:*"):
                for key in self.client.dispatcher_redis.scan_iter(pattern, count=1000):
                    namespace = decoded(key).split(":")[1]
                    if not namespace.startswith("!"):
                        found.add(namespace)
        except redis.RedisError as exc:
            raise redis_failure(exc, "list the namespaces", self._where) from exc
        return sorted(found)

    def operator_usage(self) -> Usage:
        """Model usage that no namespace asked for (a reindex's embeddings), as the ``Usage`` of ``'!ops'``."""
        try:
            raw = self.client.dispatcher_redis.hgetall(self.client.keys.operator_usage())
        except redis.RedisError as exc:
            raise redis_failure(exc, "read the operator's usage", self._where) from exc
        return Usage.from_counters(routing.OPS_NAMESPACE, stored_counters(raw, "the operator's usage counters"))

    def list_sets(self, namespace: str, key: str | None = None) -> list[SetInfo]:
        """The namespace's sets (or one key's), with sizes."""
        request = parse(ListSetsRequest, {"namespace": namespace, "key": key}, "set listing")
        reply = self.client.dispatcher.call(routing.LIST_SETS, request, _summary(namespace, key=key))
        return SetsReply.model_validate(reply).sets

    def export_set(self, namespace: str, info: SetInfo, *, vectors: bool) -> Iterator[list[ExportedItem]]:
        """The set's items in insertion order, a page at a time."""
        base = {"namespace": namespace, "key": info.key, "set_name": info.definition.name}
        summary = _summary(namespace, key=info.key, set=info.definition.name)
        first = self.client.dispatcher.call(routing.EXPORT, parse(ExportRequest, base, "export"), summary)
        ids = ExportReply.model_validate(first).ids
        for start in range(0, len(ids), PAGE):
            page = {**base, "ids": ids[start : start + PAGE], "vectors": vectors}
            request = parse(ExportRequest, page, "export")
            reply = self.client.dispatcher.call(routing.EXPORT, request, summary)
            yield ExportReply.model_validate(reply).items

    def import_items(self, namespace: str, key: str, set_name: str, items: Sequence[ExportedItem]) -> int:
        """Writes exported items back as they were; returns how many."""
        fields = {"namespace": namespace, "key": key, "set_name": set_name, "items": list(items)}
        request = parse(ImportRequest, fields, "import")
        summary = _summary(namespace, key=key, set=set_name, items=len(items))
        return int(self.client.dispatcher.call(routing.IMPORT, request, summary)["count"])

    def formation_resume(self, namespace: str) -> FormationAdminReport:
        """Sends the namespace's deferred formation operations again; ``sent`` says how many, ``left`` how many
        stay deferred (a worker sends up to 1000 a call). An operation sent while the namespace is still over
        its daily tokens (``MEMORY_FORMATION__DAILY_TOKENS``) is deferred again."""
        request = parse(FormationResumeRequest, {"namespace": namespace}, "formation resume request")
        reply = self.client.dispatcher.call(routing.FORMATION_RESUME, request, _summary(namespace))
        return FormationAdminReport.model_validate(reply)

    def formation_replay(self, namespace: str, key: str, set_name: str = "facts") -> FormationAdminReport:
        """Has the model form again the facts one set kept verbatim (formed while the workers had no model);
        ``sent`` counts the formation operations sent (each up to ``MEMORY_FORMATION__MAX_MESSAGES`` facts).

        A worker without a model (no ``MEMORY_ANTHROPIC__API_KEY``) refuses it with ``FormationError``.
        """
        fields = {"namespace": namespace, "key": key, "set_name": set_name}
        request = parse(FormationReplayRequest, fields, "formation replay request")
        summary = _summary(namespace, key=key, set=set_name)
        return FormationAdminReport.model_validate(
            self.client.dispatcher.call(routing.FORMATION_REPLAY, request, summary)
        )

    def backup(self, label: str, timeout: float = 600.0) -> BackupReply:
        """Asks a worker for a consistent snapshot of the store, named ``label``, and waits for it.

        ``timeout``: seconds, above 0 and at most 604800 (a week).
        """
        check_seconds(timeout, "timeout")
        request = parse(BackupRequest, {"label": label}, "backup label")
        dispatcher = self.client.dispatcher
        dispatcher.require_worker(routing.BACKUP)
        task_id = dispatcher.send_raw(
            routing.BACKUP, {"request": request.model_dump(mode="json")}, json.dumps({"label": label})
        )
        return BackupReply.model_validate(dispatcher.wait(routing.OPS_NAMESPACE, task_id, timeout, task=routing.BACKUP))

    def reindex(
        self,
        action: str,
        *,
        to: str | None = None,
        path: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = None,
        roles: str | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        query_params: dict[str, str | int | float | bool] | None = None,
        document_params: dict[str, str | int | float | bool] | None = None,
        timeout: float = 120.0,
    ) -> ReindexStatus:
        """Starts (``to``: the target embedder, as ``MEMORY_EMBEDDER__MODEL`` takes it, with its other settings:
        ``path``, ``base_url``, ``dimensions``, ``roles`` and the query / document prefixes and fields, as the
        ``MEMORY_EMBEDDER__*`` settings of the same names), follows (``status``), aborts (``abort``) or finishes
        (``drop_old``) the re-embedding of the store; returns where it stands.

        A status call also resumes parts of the work that made no progress for a while (a killed worker's).
        ``timeout``: seconds to wait for a worker's answer, above 0 and at most 604800.
        """
        check_seconds(timeout, "timeout")
        fields = {
            "action": action,
            "to": to,
            "path": path,
            "base_url": base_url,
            "dimensions": dimensions,
            "roles": roles,
            "query_prefix": query_prefix,
            "document_prefix": document_prefix,
            "query_params": query_params,
            "document_params": document_params,
        }
        request = parse(ReindexRequest, {k: v for k, v in fields.items() if v is not None}, "reindex request")
        dispatcher = self.client.dispatcher
        dispatcher.require_worker(routing.REINDEX)
        summary = json.dumps({"action": action, "to": to})
        task_id = dispatcher.send_raw(
            routing.REINDEX, {"request": request.model_dump(mode="json", exclude_none=True)}, summary
        )
        reply = dispatcher.wait(routing.OPS_NAMESPACE, task_id, timeout, task=routing.REINDEX)
        return ReindexStatus.model_validate(reply)

    def restore(self, label: str) -> Path:
        """Puts the embedded engine's snapshot ``label`` in place of its data directory (workers stopped).

        The directory it replaces is kept next to it (``<path>.before-restore-<time>``). Every set's
        version is bumped, so no cache serves a read from before the restore.
        """
        qdrant = self.settings.qdrant
        if qdrant.backend != "edge":
            raise ConfigurationError(
                f"restore of MEMORY_QDRANT__BACKEND={qdrant.backend!r}: recover the snapshots with Qdrant's own "
                "API (PUT /collections/{name}/snapshots/recover), then run `memory-core restore --caches-only`"
            )
        source = self.settings.stack.backup_dir.resolve() / label
        if not source.is_dir():
            raise InvalidRequestError(f"no backup {label!r} at {source}")
        target = qdrant.path.resolve()
        if target.exists():
            # Raises, naming the process, when a worker holds the store.
            StoreOwner(target, if_taken="stop it first (memory-core down), then restore").release()
        _refuse_if_open(target, [p.name for p in source.iterdir()])
        if target.exists():
            target.rename(target.with_name(f"{target.name}.before-restore-{time.strftime('%Y%m%dT%H%M%S')}"))
        copy_tree_sparse(source, target)
        self.invalidate_caches()
        return target

    def invalidate_caches(self) -> int:
        """Bumps every set's version, drops cached definitions and size hints; returns how many sets were bumped."""
        r = self.client.dispatcher_redis
        prefix = self.settings.redis.key_prefix
        try:
            versions = _set_keys(r, prefix, "version")
            with r.pipeline(transaction=False) as pipe:
                for key in versions:
                    pipe.incr(key)
                # Definitions may differ, and sizes bounded before the restore bound nothing now.
                for key in _set_keys(r, prefix, "setdef") + _set_keys(r, prefix, "size"):
                    pipe.delete(key)
                pipe.execute()
        except redis.RedisError as exc:
            raise redis_failure(exc, "invalidate the read caches", self._where) from exc
        return len(versions)


def _set_keys(r: redis.Redis, prefix: str, kind: str) -> list[bytes]:
    """The keys ``{prefix}:{namespace}:{kind}:{key}:{set}``, and no other key the glob also matches.

    Names hold no ``:``, so a set's key has exactly four parts after the prefix. The glob alone would also
    match, say, the session of a user named like the kind (``…:session:version:…``), which must survive.
    """
    keys = []
    for key in r.scan_iter(f"{prefix}:*:{kind}:*", count=1000):
        parts = key.split(b":")
        if len(parts) == 5 and parts[0] == prefix.encode() and parts[2] == kind.encode():
            keys.append(key)
    return keys


def _refuse_if_open(path: Path, shards: list[str]) -> None:
    """Raises if a process has the embedded engine at ``path`` open: it holds a lock on each shard's WAL folder."""
    for shard in shards:
        wal = path / shard / "wal"
        if not wal.is_dir():
            continue
        descriptor = os.open(wal, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(descriptor, fcntl.LOCK_UN)
        except BlockingIOError as exc:
            raise ConfigurationError(
                f"a worker has the store at {path} open; stop it first (memory-core down)"
            ) from exc
        finally:
            os.close(descriptor)


def _summary(namespace: str, **fields: Any) -> str:
    return json.dumps({"namespace": namespace, **{k: v for k, v in fields.items() if v is not None}})
