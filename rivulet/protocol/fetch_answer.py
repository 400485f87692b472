"""A Fetch response written straight from the replica manager's per-partition results.

A consumer that keeps no fetch session names every partition it reads in every Fetch
(librdkafka: a thousand per request), and building then encoding a PartitionData struct
for each was most of the handler's cost. ``FetchAnswer`` is a ``FetchResponse`` whose topics
hold, per partition, its index and either the result object (anything shaped as
``PartitionResult``) or, for the few answers the handler builds itself (errors, leader
hints), a ``PartitionData``. Its bytes are exactly those of the equivalent ``FetchResponse``
(``to_response``): the C accelerator writes the partitions when it is built, else the
generated writers do, from the PartitionData structs that ``to_response`` builds.
"""

from __future__ import annotations

import struct
import uuid
from typing import Protocol

from rivulet.common.file_region import FileRegion
from rivulet.protocol.accel import speedups
from rivulet.protocol.messages import fetch_response as fr
from rivulet.protocol.schema import CHUNK_MIN, OutBuf, write_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id (v7+)


class PartitionResult(Protocol):
    """What the replica manager answers for one partition (its FetchResult)."""

    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | memoryview | FileRegion | None  # None: an empty record set
    aborted_transactions: list[tuple[int, int]] | None
    diverging_epoch: tuple[int, int] | None
    preferred_read_replica: int


class AnswerTopic:
    """One topic of the answer: partition indexes and their entries, in the same order."""

    __slots__ = ("name", "topic_id", "indexes", "entries")

    def __init__(self, name: str, topic_id: uuid.UUID, indexes: list[int],
                 entries: list[PartitionResult | fr.PartitionData]) -> None:
        self.name = name
        self.topic_id = topic_id
        self.indexes = indexes
        self.entries = entries


def partition_data(index: int, r: PartitionResult) -> fr.PartitionData:
    """The PartitionData a result stands for (what the C writer writes without building it)."""
    aborted = r.aborted_transactions
    data = fr.PartitionData(
        partition_index=index, error_code=r.error, high_watermark=r.high_watermark,
        last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
        aborted_transactions=None if aborted is None else [
            fr.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in aborted],
        preferred_read_replica=r.preferred_read_replica,
        records=r.records if r.records is not None else b"")
    if r.diverging_epoch is not None:
        data.diverging_epoch = fr.EpochEndOffset(epoch=r.diverging_epoch[0], end_offset=r.diverging_epoch[1])
    return data


def _entries_data(t: AnswerTopic) -> list[fr.PartitionData]:
    return [e if type(e) is fr.PartitionData else partition_data(i, e) for i, e in zip(t.indexes, t.entries, strict=True)]


def _py_write_partitions(out: bytearray, version: int, t: AnswerTopic) -> None:
    parts = _entries_data(t)
    if version >= 12:
        write_uvarint(out, len(parts) + 1)
    else:
        out += _I32.pack(len(parts))
    if parts:
        w = fr.PartitionData._writer(version, version >= 12)
        for p in parts:
            w(p, out)


_write_partitions = _py_write_partitions
ACCELERATED = False
"""Whether the C accelerator writes the partitions (RIVULET_NO_SPEEDUPS=1 turns it off with
the record codec's)."""
_speedups = speedups()
if _speedups is not None:
    _speedups.setup_fetch(OutBuf, CHUNK_MIN, fr.PartitionData)
    _c_encode = _speedups.encode_fetch_partitions

    def _c_write_partitions(out: bytearray, version: int, t: AnswerTopic) -> None:
        _c_encode(out, version, t.indexes, t.entries, fr.PartitionData._writer(version, version >= 12))

    _write_partitions = _c_write_partitions
    ACCELERATED = True


class FetchAnswer(fr.FetchResponse):
    """A successful Fetch answer (throttle 0, error 0, fetch session ``session_id``) over ``topics``.

    The partitions are kept in ``topics``; ``responses`` builds the FetchableTopicResponses they
    stand for on each read (for whatever reads the answer as a FetchResponse: its repr, equality,
    ``to_dict``), and ``to_response`` the plain FetchResponse. Writing and the request metrics
    (``partition_error_counts``) read ``topics`` and never build them."""

    __slots__ = ("topics",)

    def __init__(self, topics: list[AnswerTopic], node_endpoints: list[fr.NodeEndpoint], session_id: int = 0) -> None:
        # Not the generated __init__: it would set responses, which here are derived.
        self.throttle_time_ms = 0
        self.error_code = 0
        self.session_id = session_id
        self.node_endpoints = node_endpoints
        self.topics = topics

    @property
    def responses(self) -> list[fr.FetchableTopicResponse]:
        return [fr.FetchableTopicResponse(topic=t.name, topic_id=t.topic_id, partitions=_entries_data(t))
                for t in self.topics]

    def to_response(self) -> fr.FetchResponse:
        return fr.FetchResponse(throttle_time_ms=0, error_code=0, session_id=self.session_id,
                                node_endpoints=self.node_endpoints, responses=self.responses)

    def partition_error_counts(self) -> dict[int, int]:
        """How many partitions answer each error code (the request metrics' errorCounts)."""
        counts: dict[int, int] = {}
        for t in self.topics:
            for e in t.entries:
                code = e.error_code if type(e) is fr.PartitionData else e.error
                counts[code] = counts.get(code, 0) + 1
        return counts

    def encode_into(self, out: bytearray, version: int) -> bytearray:
        flex = version >= 12
        if version >= 7:
            out += _HEAD.pack(0, 0, self.session_id)
        elif version >= 1:
            out += _I32.pack(0)
        if flex:
            write_uvarint(out, len(self.topics) + 1)
        else:
            out += _I32.pack(len(self.topics))
        for t in self.topics:
            if version <= 12:
                name = t.name.encode("utf-8")
                if flex:
                    write_uvarint(out, len(name) + 1)
                else:
                    out += _I16.pack(len(name))
                out += name
            if version >= 13:
                out += t.topic_id.bytes
            _write_partitions(out, version, t)
            if flex:
                out.append(0)
        if flex:
            if version >= 16 and self.node_endpoints:
                body = bytearray()
                write_uvarint(body, len(self.node_endpoints) + 1)
                w = fr.NodeEndpoint._writer(version, True)
                for e in self.node_endpoints:
                    w(e, body)
                out += b"\x01\x00"
                write_uvarint(out, len(body))
                out += body
            else:
                out.append(0)
        return out


__all__ = ["ACCELERATED", "AnswerTopic", "FetchAnswer", "PartitionResult", "partition_data"]
