"""The worker side of the queue: what a Celery task calls to do the work.

``service`` (long-term sets: add, search, get, delete), ``batching`` (group adds into one embed
and one upsert), ``recall`` (the ranked prompt block across tiers), ``transfer`` (export, import,
backups), ``maintenance`` (TTL and eviction sweeps), ``erasure`` (forget a tenant),
``compaction`` (fold old items into summaries), ``session`` (session folds and entities),
``stores`` (the Qdrant engines behind one protocol), ``embedders`` and ``redaction``.

Only workers (and tests) import this package; the client never does (enforced by import-linter),
so an app that installs ``memory-core`` without the ``worker`` extra never loads a vector engine,
a model runtime or the Anthropic SDK.
"""
