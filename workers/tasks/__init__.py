"""Celery tasks: thin adapters over one ``memory_core`` call each."""

from workers.tasks import compaction, ingest, maintenance, query, session

__all__ = ["compaction", "ingest", "maintenance", "query", "session"]
