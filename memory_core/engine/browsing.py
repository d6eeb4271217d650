"""What the console reads of long-term memory: a set page by page, and a search with each ranker's part.

Both only look: neither records access (a look at a set must not change which items eviction takes, nor their
``last_accessed_time``), and neither is cached by the client.
"""

from __future__ import annotations

import logging
from typing import Any

from memory_core.core.messages import BrowseRequest, ExplainReply, ExplainRequest, Page
from memory_core.core.validation import check_filters, parse
from memory_core.engine.rerankers import rerank_timed
from memory_core.engine.service import MemoryService, embedding_text
from memory_core.engine.stores.base import require_set

logger = logging.getLogger(__name__)


class Browsing:
    """Pages of a set and explained searches, over the memory service's store, embedder and reranker."""

    def __init__(self, memory: MemoryService) -> None:
        self.memory = memory

    def browse(self, raw: dict[str, Any]) -> Page:
        """One page of the set's visible items (superseded facts included) that the query lists, in its order,
        with the next page's cursor and the exact number of items that match."""
        request = parse(BrowseRequest, raw, "browse request")
        check_filters(request.query.metadata)
        store = self.memory.store
        require_set(store, request.scope)
        items, following = store.page_items(request.scope, request.query, request.cursor, request.limit)
        # Metadata has no index: counting its matches walks the whole set (~370 ms at 100k items, measured), while
        # a page stops at its 50th match. Such a page says no total rather than take that long.
        total = None if request.query.metadata else store.count_matching(request.scope, request.query)
        return Page(items=items, next_cursor=following, total=total)

    def explain(self, raw: dict[str, Any]) -> ExplainReply:
        """The hits ``memory.search`` would return for the request, each with every ranker's raw score and part.

        With a reranker the fused parts stay, and ``rerank`` (which is also ``item.score``) is its score of the hit.
        """
        request = parse(ExplainRequest, raw, "explain request")
        reranker, depth = self.memory.search_plan(request)
        (vector,) = self.memory.embed_queries(request.namespace, [request.query])
        hits = self.memory.store.explain(
            request.scope,
            vector,
            depth,
            request.filters,
            text=request.query,
            mode=request.mode,
            include_superseded=request.include_superseded,
        )
        if reranker is None:
            return ExplainReply(hits=hits[: request.limit])
        ranking = rerank_timed(reranker, request.query, [embedding_text(hit.item) for hit in hits], request.limit)
        reranked = [
            hits[index].model_copy(
                update={"item": hits[index].item.model_copy(update={"score": score}), "rerank": score}
            )
            for index, score in ranking
        ]
        return ExplainReply(hits=reranked)
