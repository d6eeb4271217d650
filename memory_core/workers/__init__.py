"""The Celery layer of memory-core: app factory, per-process services and thin tasks. No business rules here.

Run it with ``celery -A memory_core.workers.app worker`` (``memory-core worker`` does). It is the only part of
``memory_core`` that imports Celery, and nothing else of ours imports it (import-linter keeps both true), so the
client installs and imports without Celery.
"""
