"""The repository's entry to the Celery layer, for ``celery -A workers.app`` run from a checkout.

The Celery layer itself ships inside the distribution as ``memory_core.workers``; the installed wheel holds
nothing outside ``memory_core``, so a ``workers`` package of an application's own never clashes with it.
"""
