"""The Celery layer of memory-core: app factory, per-process services and thin tasks. No business rules here."""
