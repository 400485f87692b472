"""The process's open-file limit: raised to what the OS allows, and what it means in partitions.

Every socket and every segment costs a descriptor: a segment holds its ``.log`` open from
creation, and its indexes only while writing or syncing them (as Kafka, which maps them). Running out (EMFILE) halfway through creating a topic is what
this limit decides, so the broker raises the soft limit to the hard one at start-up and says
how far it goes.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

log = logging.getLogger(__name__)

# Descriptors of a partition with one segment: its .log (the indexes hold none between uses).
FDS_PER_PARTITION = 1
# Left for sockets, checkpoints and the odd file of the process itself.
MIN_RESERVED_FDS = 256


@dataclass(frozen=True)
class FdLimit:
    soft: int
    hard: int
    raised_from: int | None  # the soft limit before it was raised, or None


def raise_open_file_limit() -> FdLimit:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit where the OS allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft >= hard:
        # An unlimited hard limit cannot be the soft one (Linux caps it at fs.nr_open).
        return FdLimit(soft, hard, None)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as e:
        log.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, e)
        return FdLimit(soft, hard, None)
    return FdLimit(hard, hard, soft)


def partitions_within(fd_limit: int) -> int:
    """Roughly how many partitions ``fd_limit`` descriptors hold, after a reserve for
    connections (a tenth of the limit, at least MIN_RESERVED_FDS)."""
    reserve = max(MIN_RESERVED_FDS, fd_limit // 10)
    return max(0, (fd_limit - reserve) // FDS_PER_PARTITION)


def describe(limit: FdLimit, partitions: int) -> str:
    """The start-up line."""
    raised = f" (raised from {limit.raised_from})" if limit.raised_from is not None else ""
    hard = "unlimited" if limit.hard == resource.RLIM_INFINITY else str(limit.hard)
    return (f"open-file limit {limit.soft}{raised}, hard limit {hard}: room for about "
            f"{partitions_within(limit.soft)} partitions at {FDS_PER_PARTITION} open files each "
            f"({partitions} now)")
