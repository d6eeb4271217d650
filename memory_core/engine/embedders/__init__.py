"""Embedders: the ``Embedder`` Protocol and one module per provider, chosen by ``MEMORY_EMBEDDER__MODEL``.

``minilm`` (``all-MiniLM-L6-v2``: ONNX, shipped, the default), ``fastembed:<name>``, ``openai:<model>``, and
``hashing`` (tests only); ``embedder_spec`` (in the settings) checks a spec and says what a near miss meant.
Each provider registers a builder in ``_PROVIDERS``; the rest of the engine only sees the Protocol and the
embedder's ``fingerprint``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from memory_core.core.errors import ConfigurationError
from memory_core.core.settings import EmbedderSettings, embedder_spec
from memory_core.engine.embedders.base import Embedder, EmbedderFingerprint, UsageHook
from memory_core.engine.embedders.roles import Roles, roles_of

__all__ = ["Embedder", "EmbedderFingerprint", "open_embedder", "pre_fingerprint_models"]


def _minilm(settings: EmbedderSettings, _: str, __: UsageHook | None) -> Embedder:
    from memory_core.engine.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(threads=settings.threads, batch_size=settings.batch_size, max_tokens=settings.max_tokens)


def _hashing(settings: EmbedderSettings, _: str, __: UsageHook | None) -> Embedder:
    from memory_core.engine.embedders.hashing import HashingEmbedder

    return HashingEmbedder(settings.dimensions or 384)


def _fastembed(settings: EmbedderSettings, name: str, _: UsageHook | None) -> Embedder:
    from memory_core.engine.embedders.fastembed import FastEmbedEmbedder

    return FastEmbedEmbedder(settings, name=name)


def _openai(settings: EmbedderSettings, model: str, on_usage: UsageHook | None) -> Embedder:
    from memory_core.engine.embedders.openai import OpenAIEmbedder

    return OpenAIEmbedder(settings, model=model, on_usage=on_usage)


_PROVIDERS: Mapping[str, Callable[[EmbedderSettings, str, UsageHook | None], Embedder]] = {
    "all-MiniLM-L6-v2": _minilm,
    "hashing": _hashing,
    "fastembed": _fastembed,
    "openai": _openai,
}
"""Builders by the spec's prefix (the part before ``:``, or the whole spec for the fixed ones); each gets the
settings, the rest of the spec (the model's name, ``""`` for fixed ones) and the usage hook, which only
embedders paid per token take. Imports are lazy: a provider's library is loaded only by a worker that chose it."""


def open_embedder(settings: EmbedderSettings, *, on_usage: UsageHook | None = None) -> Embedder:
    """Builds the configured embedder. Called once per worker process, after fork.

    ``on_usage``: called with each endpoint request's tokens by a remote embedder (``openai:``); local models
    cost nothing per token and never call it (``metering``).
    """
    try:  # the setting's validator keeps a bad spec out; one built in code (model_construct) might not be
        spec = embedder_spec(settings.model)
    except ValueError as exc:
        raise ConfigurationError(f"MEMORY_EMBEDDER__MODEL={settings.model!r} names no embedder: {exc}") from None
    prefix, _, name = spec.partition(":")
    if prefix not in _WITH_ROLES and roles_of(settings) != Roles():
        raise ConfigurationError(
            f"MEMORY_EMBEDDER__MODEL={spec!r} embeds queries and documents alike by design; MEMORY_EMBEDDER__ROLES "
            "and the query / document prefixes and fields are for asymmetric models (fastembed: or openai:): "
            "unset them"
        )
    return _PROVIDERS[prefix](settings, name, on_usage)


_WITH_ROLES = frozenset({"fastembed", "openai"})
"""Providers that take ``roles`` (the shipped MiniLM and the test embedder are symmetric)."""


def pre_fingerprint_models() -> dict[str, Callable[[], EmbedderFingerprint]]:
    """The fingerprints of the models that filled stores before stores recorded one, by model name (what
    their collections are named after). Until then the workers ran all-MiniLM-L6-v2, or ``hashing`` (384
    dimensions) in tests. Built on call: MiniLM's hashes its weights file."""
    from memory_core.engine.embedders.hashing import hashing_fingerprint
    from memory_core.engine.embedders.minilm import MODEL_NAME, minilm_fingerprint

    return {MODEL_NAME: minilm_fingerprint, "hashing-384": lambda: hashing_fingerprint(384)}
