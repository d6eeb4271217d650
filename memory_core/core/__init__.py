"""What both sides of the queue share: the vocabulary and the plumbing, and nothing else of ours.

The vocabulary: ``models`` (public types), ``messages`` (what travels over the broker, JSON only),
``errors`` (the one error tree), ``settings`` (one ``Settings``, ``MEMORY_`` prefix), ``keys``
(every Redis key), ``validation``, ``tokens`` and ``routing`` (task names and queues).
The plumbing: ``dispatch`` (send a task, wait for its reply), ``liveness`` (worker heartbeats),
``coordination`` and ``locks`` (versions and leases in Redis), ``cache`` (L1/L2), ``auth``,
``metrics``, ``hosts`` (which ``Host`` a server without auth answers), ``tracing``, and the embedded
store's files (``files``, ``store_owner``).

Import rule (enforced by import-linter): nothing here imports ``client``, ``tiers``, ``engine``
or ``cli``.
"""
