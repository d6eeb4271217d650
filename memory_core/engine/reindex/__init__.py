"""Re-embedding a live store for another embedder, blue-green (``memory-core reindex``).

The store keeps serving from its collection (the *source*) while a second collection (the *target*) is filled
with the same points, their dense vectors made anew by the target embedder and their BM25 vectors copied as
they are (they depend on no model). Nothing ever compares vectors of two models: reads use the source until
the workers restart with the new ``MEMORY_EMBEDDER__MODEL``, and the first of them to open the store makes
the switch (``fingerprints.settle_fingerprint``: one write of the fingerprint record names the new collection).

The target is never a dependency of the live path. A write succeeds when the source took it:

* Every change that needs no model is mirrored into the target at once, after the source, under the same
  monotonic rules (``stores.base.due``): deletes (their tombstones), field changes (folds, pins, importance,
  access times), set definitions, erasures and the TTL sweep.
* An upsert is not embedded for the target on the live path: the target gets an *owed placeholder* instead
  (``stores.base.owed_payload``), a vectorless point just older than the write. The owed copies are caught up
  in the background (part ``OWED``), with backoff while the target's endpoint fails.

How the copy stays exact while the store is written (``Reindexer._reconcile``): every copy compares a point's
state in both collections and repairs the target (copies what is older or missing, patches the fields of the
same version, removes what the source no longer holds), then reads both again and repeats until they agree.
A copy can be overtaken by a change made while it was embedding; the change was mirrored before the re-read,
or is seen by it, so no interleaving resurrects an erased item or reverts a field change.

* The point-id space is cut into ``PARTS`` parts; each is copied in batches by ``memory.reindex_batch`` tasks
  (several workers share the work on a Qdrant server). A part's progress (its cursor) is a record in the
  store's metadata collection, written after each batch, so a killed worker's part resumes where it was.
  A Redis lock per part keeps two workers off one part; its expiry bounds how long a killed holder blocks it.
* Each part is read twice. The second pass reads both collections and repairs what differs: writes a worker
  made before it learned of the reindex (within ``ReindexSettings.refresh``), a mirror lost to a kill, and
  points the target holds that the source does not. It starts no sooner than two refresh periods in.
* Set definitions are copied at the start and again when the last part is done (and mirrored in between).
* A batch that cannot reach the target's endpoint records why and retries the same batch later (exponential
  backoff to ``ReindexSettings.retry_max``): one message per part at any time, whatever the outage lasts.

When every part has done both passes the reindex is ``complete``: writes are still mirrored (and owed copies
caught up) until the workers restart with the target setting; the first of them catches up what is still
owed before it serves (``settle_switch``), so a store under a steady stream of writes completes too. A
worker still on the old setting after the switch embeds its writes for the new collection itself. ``abort``
drops the target; ``drop_old`` drops the source once the workers switched.
"""

from memory_core.engine.reindex.mirror import MirroringStore, mirroring
from memory_core.engine.reindex.reindexer import MIRRORED_STATES, Reindexer, restart_settings
from memory_core.engine.reindex.repairs import OWED, PARTS, Repairs, Target, part_bounds, part_record, plan_repairs

__all__ = [
    "MIRRORED_STATES",
    "OWED",
    "PARTS",
    "MirroringStore",
    "Reindexer",
    "Repairs",
    "Target",
    "mirroring",
    "part_bounds",
    "part_record",
    "plan_repairs",
    "restart_settings",
]
