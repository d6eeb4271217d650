"""Celery tasks: thin adapters over one ``memory_core`` call each."""

from memory_core.workers.tasks import compaction, formation, ingest, maintenance, operator, query, session

__all__ = ["compaction", "formation", "ingest", "maintenance", "operator", "query", "session"]
