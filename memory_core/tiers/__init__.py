"""The memory tiers an app holds handles to, apart from long-term sets: short-term state
(``short_term``), session history and its strategies (``session``), checkpoints and user profiles.

They run in the caller's process, on Redis, and stand on ``memory_core.core`` alone. The work a
worker does for them (summary folds, entity extraction) lives in ``memory_core.engine.session``.
"""
