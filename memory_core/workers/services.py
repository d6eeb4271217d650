"""Per-process services of a worker: store, embedder, Redis. Built lazily on first use, i.e. after fork.

Each Celery app registers its settings here; ``get(app)`` builds that app's
services once per process and caches them. Nothing is opened at import time.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import weakref
from dataclasses import dataclass
from functools import partial
from typing import Any

import redis
from celery import Celery

from memory_core.core.auth import TokenMap
from memory_core.core.coordination import Coordinator
from memory_core.core.dispatch import Dispatcher, open_redis
from memory_core.core.errors import ConfigurationError
from memory_core.core.keys import Keys
from memory_core.core.locks import RedisLock
from memory_core.core.messages import AddReply
from memory_core.core.settings import Settings, redact_url
from memory_core.core.tokens import default_counter
from memory_core.engine.batching import AddBatcher
from memory_core.engine.browsing import Browsing
from memory_core.engine.compaction import CompactionTrigger, Compactor, open_summarizer
from memory_core.engine.embedders import Embedder, open_embedder
from memory_core.engine.embedders.base import MAX_DIMENSION
from memory_core.engine.embedders.cache import EmbeddingCache
from memory_core.engine.embedders.metering import EmbeddingMeter
from memory_core.engine.erasure import Eraser
from memory_core.engine.formation import Former, Provenance, open_extractor
from memory_core.engine.maintenance import Maintenance
from memory_core.engine.quotas import QuotaGuard
from memory_core.engine.recall import Recaller
from memory_core.engine.redaction import Redactor
from memory_core.engine.reindex import Reindexer, mirroring
from memory_core.engine.rerankers import open_reranker
from memory_core.engine.service import MemoryService
from memory_core.engine.session.entities import EntityExtractor, OfflineEntityExtractor
from memory_core.engine.session.service import SessionService
from memory_core.engine.stores import VectorStore, collection_name, open_store
from memory_core.engine.transfer import Transfer

logger = logging.getLogger(__name__)


@dataclass
class Services:
    """What tasks need, built once per worker process."""

    settings: Settings
    keys: Keys
    redis: redis.Redis
    dispatcher: Dispatcher
    memory: MemoryService
    browsing: Browsing
    compactor: Compactor
    compaction_trigger: CompactionTrigger
    maintenance: Maintenance
    eraser: Eraser
    sessions: SessionService
    recaller: Recaller
    batcher: AddBatcher | None
    tokens: TokenMap | None
    transfer: Transfer
    reindexer: Reindexer
    former: Former
    provenance: Provenance

    def add(self, request: dict[str, Any]) -> AddReply:
        """An add, through the micro-batcher when batching is on."""
        return self.batcher.add(request) if self.batcher is not None else self.memory.add(request)

    def close(self) -> None:
        """Flushes and releases the store (its directory lock) and broker connections (Redis is the Basics')."""
        if self.batcher is not None:
            self.batcher.close()
        self.memory.store.close()
        if self.memory.reranker is not None:
            self.memory.reranker.close()
        self.dispatcher.close()


@dataclass
class Basics:
    """What replying, dead-lettering and the token check need: no store, no model. Built apart from
    ``Services`` so a task's failure is reported even by a worker whose store or embedder failed."""

    settings: Settings
    keys: Keys
    redis: redis.Redis
    tokens: TokenMap | None


_settings: weakref.WeakKeyDictionary[Celery, Settings] = weakref.WeakKeyDictionary()
_basics: weakref.WeakKeyDictionary[Celery, Basics] = weakref.WeakKeyDictionary()
_built: weakref.WeakKeyDictionary[Celery, Services] = weakref.WeakKeyDictionary()
_embedders: weakref.WeakKeyDictionary[Celery, str] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def register(app: Celery, settings: Settings) -> None:
    """Remembers which settings ``app``'s services are built from."""
    _settings[app] = settings


def registered(app: Celery) -> bool:
    """Whether ``app`` was created by ``memory_core.workers.app.create_app`` (other apps have no services here)."""
    return app in _settings


def settings_of(app: Celery) -> Settings:
    """The settings ``app`` was created with."""
    return _settings[app]


def basics(app: Celery) -> Basics:
    """Settings, keys, Redis and tokens of ``app`` in this process: cheap, and needing no store."""
    found = _basics.get(app)
    if found is not None:
        return found
    with _lock:
        found = _basics.get(app)
        if found is None:
            settings = _settings[app]
            found = Basics(
                settings=settings,
                keys=Keys(settings.redis.key_prefix),
                redis=open_redis(settings),
                tokens=TokenMap.from_secret(settings.auth.tokens),
            )
            _basics[app] = found
        return found


def get(app: Celery) -> Services:
    """The services of ``app`` in this process, built on first call."""
    services = _built.get(app)
    if services is not None:
        return services
    base = basics(app)
    with _lock:
        services = _built.get(app)
        if services is None:
            services = _build(base)
            _built[app] = services
            _embedders[app] = services.memory.embedder.fingerprint.describe()
        return services


def embedder_of(app: Celery) -> str:
    """The fingerprint (``describe()``) of the embedder ``app``'s services were built with in this process
    (kept after they are closed: a prefork parent closes them before it forks); ``""`` before."""
    return _embedders.get(app, "")


def close(app: Celery) -> None:
    """Closes ``app``'s services in this process, if they were built, and its Redis connections."""
    with _lock:
        services = _built.pop(app, None)
        base = _basics.pop(app, None)
    if services is not None:
        services.close()
    if base is not None:
        base.redis.close()


def _build(base: Basics) -> Services:
    settings, keys, redis_client, tokens = base.settings, base.keys, base.redis, base.tokens
    # Tasks the worker enqueues itself (compactions) carry a token that grants their namespace.
    dispatcher = Dispatcher(settings, redis_client, keys, token_for=tokens.token_for if tokens else None)
    # A remote embedder's tokens go to the usage ledger: the asking namespaces', a reindex's to the operator's.
    meter = EmbeddingMeter(redis_client, keys)
    embedder = open_embedder(settings.embedder, on_usage=meter.record)
    _probe(embedder, settings.embedder.model)  # before the store: a new one would be pinned at what it declares
    reranker = open_reranker(settings)  # before the store: a reranker that cannot load leaves no lock behind
    # Refuses a store that holds another embedder's vectors (ConfigurationError: the preflight's one line).
    served = _open_store(settings, redis_client, keys, embedder)
    reindexer = Reindexer(
        store=served,
        embedder=embedder,
        embedder_settings=settings.embedder,
        settings=settings.reindex,
        redis_client=redis_client,
        keys=keys,
        collection_for=lambda model: collection_name(settings.qdrant, model),
        open_target_embedder=partial(open_embedder, on_usage=meter.record_operator),
    )
    try:
        reindexer.settle_switch()  # a switched store's copies still owed, before this worker serves from it
    except BaseException:
        served.close()
        raise
    store = mirroring(served, reindexer)  # writes reach a running reindex's new collection too
    try:
        summarizer = open_summarizer(settings, embedder)
    except BaseException:
        store.close()  # release the store's directory lock: the worker is about to say why it cannot start
        raise
    trigger = CompactionTrigger(
        redis_client=redis_client, keys=keys, dispatcher=dispatcher, pending_ttl=settings.compaction.lock_ttl
    )
    logger.info(
        "worker services ready: store at %s, embedder %s, summarizer %s, redis %s",
        store.location,
        embedder.fingerprint.describe(),
        type(summarizer).__name__,
        redact_url(settings.redis.url),
    )
    coordinator = Coordinator(redis_client, keys)
    extractor, verbatim = open_extractor(settings)
    embeddings = EmbeddingCache(
        embedder, redis_client, keys, ttl=settings.cache.embedding_ttl, write_ttl=settings.cache.write_embedding_ttl
    )
    memory = MemoryService(
        store=store,
        embedder=embedder,
        limits=settings.limits,
        on_capacity=trigger,
        coordinator=coordinator,
        embeddings=embeddings if settings.cache.enabled else None,
        redactor=Redactor(settings.redaction.kinds) if settings.redaction.enabled else None,
        quotas=QuotaGuard(
            settings=settings.quotas,
            store=store,
            client=redis_client,
            keys=keys,
            max_items_per_call=settings.limits.max_items_per_call,
        )
        if settings.quotas.active
        else None,
        reranker=reranker,
        rerank_candidates=settings.rerank.candidates,
    )
    return Services(
        settings=settings,
        keys=keys,
        redis=redis_client,
        dispatcher=dispatcher,
        memory=memory,
        browsing=Browsing(memory),
        compactor=Compactor(
            store=store,
            embedder=embedder,
            summarizer=summarizer,
            redis_client=redis_client,
            keys=keys,
            settings=settings.compaction,
        ),
        compaction_trigger=trigger,
        maintenance=Maintenance(
            store=store,
            coordinator=coordinator,
            keys=keys,
            settings=settings.maintenance,
            max_sets=settings.compaction.sweep_max_sets,
        ),
        eraser=Eraser(store=store, coordinator=coordinator, keys=keys),
        sessions=SessionService(
            redis_client=redis_client,
            keys=keys,
            summarizer=summarizer,
            extractor=_entity_extractor(settings),
            tokens=default_counter(),
            default_model=settings.session.summary_model,
        ),
        recaller=Recaller(memory=memory, tokens=default_counter(), settings=settings.recall),
        batcher=_batcher(memory, settings),
        tokens=tokens,
        transfer=Transfer(memory, settings.stack.backup_dir),
        reindexer=reindexer,
        former=Former(
            store=store,
            embedder=embedder,
            extractor=extractor,
            redis_client=redis_client,
            keys=keys,
            settings=settings.formation,
            coordinator=coordinator,
            dispatcher=dispatcher,
            verbatim=verbatim,
        ),
        provenance=Provenance(
            store=store, redis_client=redis_client, keys=keys, coordinator=coordinator, settings=settings.formation
        ),
    )


PROBE_TEXT = "memory-core checks its embedder before it opens the store"


def _probe(embedder: Embedder, spec: str) -> None:
    """Embeds one text and checks the vector against what the embedder declares (its dimension, which the store
    is opened or created with, and its fingerprint's), before the store is opened.

    An endpoint that ignores ``MEMORY_EMBEDDER__DIMENSIONS``, or answers vectors no store can hold, would
    otherwise pin a new store at a length no write has, or fail every task of a worker that says it is ready.
    Raises ``MemoryCoreError`` (the preflight's one line): ``EmbedderError`` from the embedder's own checks of
    its answer, else ``ConfigurationError`` naming the setting and the values.
    """
    vectors = embedder.embed([PROBE_TEXT])
    lengths = [len(vector) for vector in vectors]
    declared = embedder.dimension
    if lengths != [declared] or not 1 <= declared <= MAX_DIMENSION:
        raise ConfigurationError(
            f"MEMORY_EMBEDDER__MODEL={spec!r} gave vectors of {lengths} dimensions for one text, but declares "
            f"{declared} (MEMORY_EMBEDDER__DIMENSIONS, or the model's own); a store holds one length, of 1 to "
            f"{MAX_DIMENSION:,}: fix MEMORY_EMBEDDER__DIMENSIONS or MEMORY_EMBEDDER__MODEL"
        )
    if not all(math.isfinite(value) for value in vectors[0]):
        raise ConfigurationError(
            f"MEMORY_EMBEDDER__MODEL={spec!r} gave a vector with a non-finite value (NaN or infinity) for a plain "
            "text; its weights or its endpoint are broken: fix them, or set MEMORY_EMBEDDER__MODEL to another model"
        )


def _open_store(settings: Settings, redis_client: redis.Redis, keys: Keys, embedder: Embedder) -> VectorStore:
    """Opens the store; on a Qdrant server, one worker at a time, so two workers never migrate one store's
    layout (or switch it to a reindexed collection) at once. The embedded engine has one owner anyway."""

    def opened() -> VectorStore:
        return open_store(
            settings.qdrant,
            model_name=embedder.model_name,
            dimension=embedder.dimension,
            fingerprint=embedder.fingerprint,
        )

    if settings.qdrant.backend != "server":
        return opened()
    with RedisLock(redis_client, keys.sweep_lock("store-open"), settings.reindex.lock_ttl).kept(
        waiting="another worker is opening the store (a layout migration or a reindex switch may take minutes)"
    ):
        return opened()


def _entity_extractor(settings: Settings) -> EntityExtractor:
    """Claude when an API key is set (the session summary model), else the offline extractor."""
    if settings.anthropic.api_key is not None:
        from memory_core.engine.session.claude_entities import ClaudeEntityExtractor

        return ClaudeEntityExtractor(settings.anthropic, model=settings.session.summary_model)
    return OfflineEntityExtractor()


def _batcher(memory: MemoryService, settings: Settings) -> AddBatcher | None:
    config = settings.batching
    if not config.enabled:
        return None
    threads = config.threads or os.cpu_count() or 1
    return AddBatcher(memory, max_items=config.max_items, max_wait=config.max_wait_ms / 1000, threads=threads)
