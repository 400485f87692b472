"""Share partitions on the partition leader (KIP-932): the in-flight record states of each
(share group, topic-partition), their acquisition locks and delivery counts."""

from .partition import (
    AcknowledgeType,
    AcknowledgementBatch,
    AcquiredRecords,
    RecordState,
    SharePartition,
    SharePartitionSnapshot,
    StateBatch,
)
from .persister import InMemorySharePersister, SharePartitionKey, SharePersister, ShareStateSummary, summarize
from .reset import initial_start_offset, parse_duration_ms

__all__ = [
    "AcknowledgeType",
    "AcknowledgementBatch",
    "AcquiredRecords",
    "RecordState",
    "InMemorySharePersister",
    "SharePartition",
    "SharePartitionKey",
    "SharePartitionSnapshot",
    "SharePersister",
    "ShareStateSummary",
    "StateBatch",
    "initial_start_offset",
    "parse_duration_ms",
    "summarize",
]
