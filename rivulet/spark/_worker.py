"""What the connector does once in each of Spark's Python worker processes."""

from __future__ import annotations

import gc

_frozen = False


def freeze_imported() -> None:
    """Called by a task before its work (executor side, or readOnDriver's planner process;
    never in the user's driver process).

    Spark's daemon runs a full ``gc.collect()`` after every task of a reused worker, and a
    worker that has imported pyspark, pyarrow and this connector holds tens of thousands of
    objects that live as long as it does: each collection walked them all again (about 30 ms
    per task here). ``gc.freeze()`` moves what exists now to the permanent generation, which
    collections skip; the cost is that cycles already garbage at this moment are never freed.
    """
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()
