"""User profiles: one merged JSON document per ``(namespace, user_id)``, searchable through long-term memory.

    profile = client.profile("acme", "user-42")
    profile.update({"name": "Ana", "preferences": {"drink": "green tea"}})
    profile.update({"preferences": {"drink": None, "food": "ramen"}})   # None removes a key
    profile.get()   # {"name": "Ana", "preferences": {"food": "ramen"}, "last_updated": "..."}

``update`` merges like JSON Merge Patch (RFC 7396): objects merge key by key, ``None``
removes a key, anything else replaces. The document lives in Redis (read fast) and every
update also writes it, rendered as text and with the document in its metadata, as the item
``profile`` of the user's long-term set ``profile``: it is searchable, and it is the durable
copy that ``get`` falls back to when Redis has lost it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import redis

from memory_core.core.errors import InvalidRequestError, MemorySetNotFound
from memory_core.core.jsoncodec import stored_object
from memory_core.core.models import MemorySet, utcnow
from memory_core.core.redis_errors import redis_failure
from memory_core.core.settings import LimitsSettings
from memory_core.core.steps import Command, LongTermSteps, Operation, Optimistic
from memory_core.core.validation import check_metadata

ITEM_ID = "profile"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: ``patch`` applied to ``target`` (neither is changed)."""
    if not isinstance(patch, Mapping):
        return patch
    merged = dict(target) if isinstance(target, Mapping) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = merge_patch(merged.get(name), value)
    return merged


def render(document: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The document as ``"a.b: value"`` lines, the text that is embedded and searched."""
    lines = []
    for name, value in document.items():
        path = f"{prefix}{name}"
        if isinstance(value, Mapping):
            lines.extend(render(value, f"{path}."))
        else:
            lines.append(f"{path}: {value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}")
    return lines


class ProfileOperations:
    """The logic of one user's profile, as operations (``core.steps``) for both clients."""

    def __init__(
        self,
        *,
        redis_key: str,
        namespace: str,
        user_id: str,
        long_term: LongTermSteps,
        set_name: str,
        limits: LimitsSettings,
    ) -> None:
        self._key = redis_key
        self.namespace = namespace
        self.user_id = user_id
        self._long_term = long_term
        self._set_name = set_name
        self._limits = limits
        self._set: MemorySet | None = None

    def get(self) -> Operation[dict[str, Any]]:
        try:
            raw = yield Command(lambda r: r.get(self._key))
        except redis.RedisError as exc:
            raise redis_failure(exc, f"read profile {self.user_id!r}") from exc
        if raw is not None:
            document = stored_object(raw, f"profile {self.user_id!r}")
            return document
        return (yield from self._restore())

    def update(self, partial: Mapping[str, Any]) -> Operation[dict[str, Any]]:
        if not isinstance(partial, Mapping):
            raise InvalidRequestError(f"a profile update must be a dict, got {type(partial).__name__}")
        check_metadata(partial, "profile update", self._limits)
        if "last_updated" in partial:
            raise InvalidRequestError("'last_updated' is set by update(); leave it out of the partial")
        current = yield from self.get()  # restores from long-term memory first if Redis lost it
        updated: dict[str, Any] = {}

        def merged(raw: Any) -> list[Callable[[Any], Any]]:
            nonlocal updated
            base = stored_object(raw, f"profile {self.user_id!r}") if raw is not None else dict(current)
            base.pop("last_updated", None)
            updated = {**merge_patch(base, partial), "last_updated": utcnow().isoformat()}
            check_metadata(updated, "profile", self._limits)
            document = json.dumps(updated)
            return [lambda p: p.set(self._key, document)]

        try:
            yield Optimistic(self._key, merged)
        except redis.RedisError as exc:
            raise redis_failure(exc, f"update profile {self.user_id!r}") from exc
        text = "\n".join(render({k: v for k, v in updated.items() if k != "last_updated"})) or "(empty profile)"
        profile_set = yield from self._profile_set()
        yield from self._long_term.add(profile_set, [text], [ITEM_ID], [{"profile": updated}], {}, wait=True)
        return updated

    def delete(self) -> Operation[bool]:
        existed = bool((yield from self.get()))
        try:
            yield Command(lambda r: r.delete(self._key))
        except redis.RedisError as exc:
            raise redis_failure(exc, f"delete profile {self.user_id!r}") from exc
        try:
            yield from self._long_term.delete(self._set_name, [ITEM_ID])
        except MemorySetNotFound:
            pass
        return existed

    def _restore(self) -> Operation[dict[str, Any]]:
        try:
            items = yield from self._long_term.get(self._set_name, [ITEM_ID])
        except MemorySetNotFound:
            return {}
        if not items:
            return {}
        document: dict[str, Any] = items[0].additional_metadata.get("profile", {})
        try:
            yield Command(lambda r: r.set(self._key, json.dumps(document), nx=True))
        except redis.RedisError:
            pass  # served from the durable copy; Redis is refilled on the next read
        return document

    def _profile_set(self) -> Operation[MemorySet]:
        if self._set is None:
            # Exact dedup would fold a profile that renders like another item of the set into it; the
            # profile is one item that is replaced, never merged.
            self._set = yield from self._long_term.get_or_create_memory_set(self._set_name, str, 100, 2, dedup="none")
        return self._set


class UserProfile:
    """The profile of one user. ``update`` is atomic against concurrent updates of the same profile."""

    def __init__(self, operations: ProfileOperations, run: Callable[[Operation[Any]], Any]) -> None:
        self.ops = operations
        self.namespace = operations.namespace
        self.user_id = operations.user_id
        self._run = run

    def __repr__(self) -> str:
        return f"{type(self).__name__}(namespace={self.namespace!r}, user_id={self.user_id!r})"

    def get(self) -> dict[str, Any]:
        """The merged profile with ``last_updated``; ``{}`` when the user has none."""
        document: dict[str, Any] = self._run(self.ops.get())
        return document

    def update(self, partial: Mapping[str, Any]) -> dict[str, Any]:
        """Deep-merges ``partial`` into the profile, stamps ``last_updated``, stores it durably; returns it."""
        document: dict[str, Any] = self._run(self.ops.update(partial))
        return document

    def delete(self) -> bool:
        """Removes the profile from Redis and long-term memory; False when there was none."""
        return bool(self._run(self.ops.delete()))


class AsyncUserProfile(UserProfile):
    """``UserProfile`` for asyncio code: the same calls, awaited."""

    async def get(self) -> dict[str, Any]:  # type: ignore[override]  # the same call, awaited
        """The merged profile with ``last_updated``; ``{}`` when the user has none."""
        document: dict[str, Any] = await self._run(self.ops.get())
        return document

    async def update(self, partial: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        """Deep-merges ``partial`` into the profile, stamps ``last_updated``, stores it durably; returns it."""
        document: dict[str, Any] = await self._run(self.ops.update(partial))
        return document

    async def delete(self) -> bool:  # type: ignore[override]
        """Removes the profile from Redis and long-term memory; False when there was none."""
        return bool(await self._run(self.ops.delete()))
