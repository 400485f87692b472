"""The table's own record of what it holds: the next offset to translate, per partition, kept in
each snapshot's summary. Every snapshot carries every partition's entry forward, so the
current snapshot alone says where each partition resumes; no local state is ever trusted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

NEXT_OFFSET = "rivulet.next-offset."
# The id of the topic whose offsets a snapshot records (in its summary; tables made before
# snapshots carried it have it as a table property): a topic deleted and made again under the
# same name is another topic, whose offsets start over.
TOPIC_ID = "rivulet.topic-id"
# The schema modes: the registered schema (and Protobuf message) the value column followed.
VALUE_SCHEMA_ID = "rivulet.value-schema-id"
VALUE_MESSAGE = "rivulet.value-message"


def next_offsets(summary: Mapping[str, str] | None) -> dict[int, int]:
    """Partition -> next offset to translate, from a snapshot summary (none: nothing yet)."""
    out: dict[int, int] = {}
    for key, value in (summary or {}).items():
        if key.startswith(NEXT_OFFSET) and key[len(NEXT_OFFSET):].isdigit():
            out[int(key[len(NEXT_OFFSET):])] = int(value)
    return out


def summary_after(previous: Mapping[int, int], advanced: Mapping[int, int], topic_id: str | None = None
                  ) -> dict[str, str]:
    """The summary properties of a snapshot that moves ``advanced``'s partitions on from the
    parent snapshot's ``previous`` offsets (the others carried as they were), for the topic
    ``topic_id``. An offset never goes back: that would translate records twice."""
    for p, offset in advanced.items():
        if offset < previous.get(p, 0):
            raise ValueError(f"partition {p} would go back from {previous[p]} to {offset}")
    merged = {**previous, **advanced}
    out = {f"{NEXT_OFFSET}{p}": str(offset) for p, offset in sorted(merged.items())}
    if topic_id is not None:
        out[TOPIC_ID] = topic_id
    return out


@dataclass(slots=True)
class PartitionSlice:
    """What one partition's leader read of its log for one commit: whole batches from the one
    holding ``start`` on, and the table's next offset after them, ``end`` (at most the last
    stable offset). ``aborted`` is the log's (producer id, first offset) of the aborted
    transactions overlapping [start, end)."""

    partition: int
    start: int
    end: int
    chunks: list[bytes] = field(default_factory=list)
    aborted: list[tuple[int, int]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(c) for c in self.chunks)


@dataclass(frozen=True, slots=True)
class TableState:
    """The table's current snapshot, the offsets its summary records, and the id of the topic
    they are offsets of (None: not recorded)."""

    snapshot_id: int | None
    next_offsets: dict[int, int]
    topic_id: str | None = None
