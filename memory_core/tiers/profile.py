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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import redis

from memory_core.core.errors import BrokerUnavailable, InvalidRequestError, MemorySetNotFound
from memory_core.core.models import MemorySet, utcnow
from memory_core.core.validation import check_metadata

if TYPE_CHECKING:
    from memory_core.client import MemoryClient

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


class UserProfile:
    """The profile of one user. ``update`` is atomic against concurrent updates of the same profile."""

    def __init__(self, client: MemoryClient, namespace: str, user_id: str) -> None:
        self._client = client
        self.namespace = namespace
        self.user_id = user_id
        self._key = client.keys.profile(namespace, user_id)
        self._redis = client.dispatcher_redis
        self._set: MemorySet | None = None

    def __repr__(self) -> str:
        return f"UserProfile(namespace={self.namespace!r}, user_id={self.user_id!r})"

    def get(self) -> dict[str, Any]:
        """The merged profile with ``last_updated``; ``{}`` when the user has none."""
        try:
            raw = self._redis.get(self._key)
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot read profile {self.user_id!r} from Redis: {exc}") from exc
        if raw is not None:
            document: dict[str, Any] = json.loads(raw)
            return document
        return self._restore()

    def update(self, partial: Mapping[str, Any]) -> dict[str, Any]:
        """Deep-merges ``partial`` into the profile, stamps ``last_updated``, stores it durably; returns it."""
        if not isinstance(partial, Mapping):
            raise InvalidRequestError(f"a profile update must be a dict, got {type(partial).__name__}")
        check_metadata(partial, "profile update", self._client.settings.limits)
        if "last_updated" in partial:
            raise InvalidRequestError("'last_updated' is set by update(); leave it out of the partial")
        current = self.get()  # restores from long-term memory first if Redis lost it
        updated: dict[str, Any] = {}

        def merge(pipe: Any) -> None:
            nonlocal updated
            raw = pipe.get(self._key)
            base = json.loads(raw) if raw is not None else current
            base.pop("last_updated", None)
            updated = {**merge_patch(base, partial), "last_updated": utcnow().isoformat()}
            check_metadata(updated, "profile", self._client.settings.limits)
            pipe.multi()
            pipe.set(self._key, json.dumps(updated))

        try:
            self._redis.transaction(merge, self._key)
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot update profile {self.user_id!r} in Redis: {exc}") from exc
        text = "\n".join(render({k: v for k, v in updated.items() if k != "last_updated"})) or "(empty profile)"
        self._profile_set().add([text], ids=[ITEM_ID], metadatas=[{"profile": updated}])
        return updated

    def delete(self) -> bool:
        """Removes the profile from Redis and long-term memory; False when there was none."""
        existed = bool(self.get())
        try:
            self._redis.delete(self._key)
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot delete profile {self.user_id!r} in Redis: {exc}") from exc
        ltm = self._client.long_term(self.namespace, self.user_id)
        try:
            ltm.delete(self._client.settings.profile.set_name, [ITEM_ID])
        except MemorySetNotFound:
            pass
        return existed

    def _restore(self) -> dict[str, Any]:
        ltm = self._client.long_term(self.namespace, self.user_id)
        try:
            items = ltm.get(self._client.settings.profile.set_name, [ITEM_ID])
        except MemorySetNotFound:
            return {}
        if not items:
            return {}
        document: dict[str, Any] = items[0].additional_metadata.get("profile", {})
        try:
            self._redis.set(self._key, json.dumps(document), nx=True)
        except redis.RedisError:
            pass  # served from the durable copy; Redis is refilled on the next read
        return document

    def _profile_set(self) -> MemorySet:
        if self._set is None:
            ltm = self._client.long_term(self.namespace, self.user_id)
            # Exact dedup would fold a profile that renders like another item of the set into it; the
            # profile is one item that is replaced, never merged.
            self._set = ltm.get_or_create_memory_set(self._client.settings.profile.set_name, dedup="none")
        return self._set
