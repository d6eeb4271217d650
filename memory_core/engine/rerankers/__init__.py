"""Rerankers: the ``Reranker`` Protocol and one module per provider, chosen by ``MEMORY_RERANK__MODEL``.

``""`` (off, the default), ``fastembed:<cross-encoder>`` and ``http:<url>`` (a ``/rerank`` endpoint). Each
provider registers a builder in ``_PROVIDERS``; the service only sees the Protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from memory_core.core.errors import ConfigurationError
from memory_core.core.settings import RERANK_SPECS, Settings, redact_url
from memory_core.engine.rerankers.base import Ranking, Reranker, rerank_timed

__all__ = ["Ranking", "Reranker", "open_reranker", "rerank_timed"]

logger = logging.getLogger(__name__)


def _fastembed(settings: Settings, name: str) -> Reranker:
    from memory_core.engine.rerankers.fastembed import FastEmbedReranker

    # The cross-encoder shares the embedder's model cache and thread budget.
    return FastEmbedReranker(
        settings.rerank, name=name, cache_dir=settings.embedder.cache_dir, threads=settings.embedder.threads
    )


def _endpoint(settings: Settings, url: str) -> Reranker:
    from memory_core.engine.rerankers.endpoint import EndpointReranker

    return EndpointReranker(settings.rerank, url=url)


_PROVIDERS: Mapping[str, Callable[[Settings, str], Reranker]] = {"fastembed": _fastembed, "http": _endpoint}
"""Builders by the spec's prefix; each gets the settings and the rest of the spec. Imports are lazy: a
provider's library is loaded only by a worker that chose it."""


def open_reranker(settings: Settings) -> Reranker | None:
    """Builds the configured reranker, or None when reranking is off. Called once per worker process, after
    fork; a model that cannot load, or an endpoint that does not answer, raises (the worker refuses to start)."""
    spec = settings.rerank.model
    if not spec:
        return None
    prefix, _, rest = spec.partition(":")
    build = _PROVIDERS.get(prefix)
    if build is None or not rest:  # the setting's validator keeps this out; a spec built in code might not
        raise ConfigurationError(
            f"MEMORY_RERANK__MODEL={redact_url(spec)!r} names no reranker; expected {RERANK_SPECS}"
        )
    reranker = build(settings, rest)
    logger.info(
        "search results are reranked by %s (top %d candidates)", reranker.model_name, settings.rerank.candidates
    )
    return reranker
