"""Celery tasks: thin adapters over one ``memory_core`` call each."""

from workers.tasks import ingest, query

__all__ = ["ingest", "query"]
