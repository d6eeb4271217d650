"""Embedding tokens in the usage ledger, per namespace and model, for embedders that are paid per token.

A remote embedder (``openai:``) reports what each endpoint request used through its ``on_usage`` hook
(``UsageHook``): it knows the cost, not who asked. The code that calls the embedder knows who asked, not the
cost. ``charging`` joins the two: the caller opens a *tab* around its embedder call, naming the namespace of
each text; ``EmbeddingMeter.record`` (the hook) adds each request's tokens to the tab of its thread; when the
tab closes, the tokens go to each namespace's ledger (``Keys.usage``: ``embedding_tokens:<model>`` and
``embedding_texts:<model>``) in one pipeline, also when the call failed part way (the answered requests
were paid for).

One call may embed the texts of several namespaces (the add micro-batcher batches across them), and the
endpoint reports the tokens of a request, not of each text. A shared call's tokens are therefore split in
proportion to the characters of each namespace's texts (``split_tokens``: whole tokens that sum to exactly
what the endpoint reported); a namespace's texts are exact. A text that several namespaces needed in one
call is embedded once and counts in full for each of them.

Tokens no tab claims (the endpoint asked for its vector length at start) and every token of a reindex's
target embedder (``record_operator``: re-embedding a store is the operator's decision, also when it mirrors
a tenant's write) go to the operator's ledger, ``Keys.operator_usage``, which names no namespace.

Local models (MiniLM, fastembed, hashing) report nothing: they cost no money per token, their work is counted
in the metrics already (``memory_core_embedded_texts_total``), and so the write path pays no Redis round trip
for them. A tab that saw no usage writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import redis

from memory_core.core.keys import Keys

logger = logging.getLogger(__name__)

TOKENS_FIELD = "embedding_tokens"
TEXTS_FIELD = "embedding_texts"


def split_tokens(tokens: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``tokens`` split in proportion to ``weights`` (characters per namespace), in whole tokens that sum to
    ``tokens``: each gets the floor of its exact share, and the tokens left go to the largest remainders (ties
    to the first name in sorted order, so the split is the same on every worker). Weights must be positive."""
    total = sum(weights.values())
    shares = {name: tokens * weight // total for name, weight in weights.items()}
    left = tokens - sum(shares.values())
    by_remainder = sorted(weights, key=lambda name: (-(tokens * weights[name] % total), name))
    for name in by_remainder[:left]:
        shares[name] += 1
    return shares


@dataclass
class _Tab:
    """Who pays for the embedder calls made in one ``charging`` block, and what they used."""

    chars: dict[str, int]
    """Per namespace, the characters of the texts it asked to embed (the weights of the split)."""
    texts: dict[str, int] | None
    """Per namespace, the texts it asked to embed; None when one namespace pays for whatever is embedded."""
    used: dict[str, list[int]] = field(default_factory=dict)
    """Per model, [tokens, texts] the endpoint reported."""
    meter: EmbeddingMeter | None = None

    def charges(self) -> dict[str, dict[str, int]]:
        """The ledger increments, by namespace: ``{namespace: {"embedding_tokens:<model>": n, ...}}``."""
        charged: dict[str, dict[str, int]] = {name: {} for name in self.chars}
        for model, (tokens, texts) in self.used.items():
            for name, share in split_tokens(tokens, self.chars).items():
                charged[name][f"{TOKENS_FIELD}:{model}"] = share
                charged[name][f"{TEXTS_FIELD}:{model}"] = texts if self.texts is None else self.texts[name]
        return charged


_tab: ContextVar[_Tab | None] = ContextVar("memory_core_embedding_tab", default=None)


@contextmanager
def charging(pairs: Iterable[tuple[str, str]]) -> Iterator[None]:
    """Charges what a remote embedder reports inside the block to the namespaces of ``(namespace, text)``
    pairs, in proportion to their texts' characters (see the module's docstring). Pass the texts the call
    embeds (cache misses, without duplicates)."""
    chars: dict[str, int] = {}
    texts: dict[str, int] = {}
    for namespace, text in pairs:
        chars[namespace] = chars.get(namespace, 0) + max(1, len(text))  # an empty text is still one input
        texts[namespace] = texts.get(namespace, 0) + 1
    if not chars:
        yield
        return
    with _opened(_Tab(chars=chars, texts=texts)):
        yield


@contextmanager
def charged_to(namespace: str) -> Iterator[None]:
    """Charges whatever a remote embedder reports inside the block to ``namespace`` (a compaction, a session
    fold: work of one namespace whose texts are not known up front)."""
    with _opened(_Tab(chars={namespace: 1}, texts=None)):
        yield


@contextmanager
def _opened(tab: _Tab) -> Iterator[None]:
    token = _tab.set(tab)
    try:
        yield
    finally:
        _tab.reset(token)
        if tab.meter is not None:
            tab.meter.charge(tab.charges())


class EmbeddingMeter:
    """Writes embedding usage to the ledger; its ``record`` is the serving embedder's ``on_usage`` hook and
    ``record_operator`` a reindex target's. Thread-safe: tabs are per thread (a context variable)."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys

    def record(self, model: str, tokens: int, texts: int) -> None:
        """Adds one endpoint request's usage to the open tab, or to the operator's ledger when none is open."""
        tab = _tab.get()
        if tab is None:
            self.record_operator(model, tokens, texts)
            return
        used = tab.used.setdefault(model, [0, 0])
        used[0] += tokens
        used[1] += texts
        tab.meter = self

    def record_operator(self, model: str, tokens: int, texts: int) -> None:
        """Adds one endpoint request's usage to the operator's ledger, whatever tab is open."""
        self._write({self._keys.operator_usage(): {f"{TOKENS_FIELD}:{model}": tokens, f"{TEXTS_FIELD}:{model}": texts}})

    def charge(self, charges: Mapping[str, Mapping[str, int]]) -> None:
        """Adds a closed tab's charges (by namespace) to the namespaces' ledgers."""
        self._write({self._keys.usage(namespace): fields for namespace, fields in charges.items() if fields})

    def _write(self, increments: Mapping[str, Mapping[str, int]]) -> None:
        if not increments:
            return
        try:
            with self._client.pipeline(transaction=False) as pipe:
                for key, fields in increments.items():
                    for name, amount in fields.items():
                        pipe.hincrby(key, name, amount)
                pipe.execute()
        except redis.RedisError as exc:
            # The embeddings were made (and paid for): failing the caller now would embed them again on retry.
            logger.warning("embedding usage not recorded in the ledger (%s): %s", type(exc).__name__, increments)
