"""The C reader of integer-only struct arrays (``_speedups.read_int_structs``) against the
compiled Python readers of rivulet.protocol.schema.

A Fetch request's partitions (thousands per request from a consumer without a fetch session)
are read in C when the extension is built. Every version of FetchRequest, and random
truncations and corruptions of the frames, must decode to the same structs, or fail with
the same error, with the C reader and without it.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rivulet.protocol import schema
from rivulet.protocol.errors import ProtocolDecodeError
from rivulet.protocol.messages import fetch_request as fq
from rivulet.protocol.records import SPEEDUPS

pytestmark = pytest.mark.fast

VERSIONS = range(fq.FetchRequest.VALID_VERSIONS[0], fq.FetchRequest.VALID_VERSIONS[1] + 1)
CLASSES = (fq.FetchRequest, fq.FetchTopic, fq.FetchPartition, fq.ForgottenTopic, fq.ReplicaState)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
partitions = st.builds(
    fq.FetchPartition, partition=i32, current_leader_epoch=i32, fetch_offset=i64, last_fetched_epoch=i32,
    log_start_offset=i64, partition_max_bytes=i32,
    replica_directory_id=st.one_of(st.just(schema.ZERO_UUID), st.uuids()),
    high_watermark=st.one_of(st.just(2**63 - 1), i64))
topics = st.builds(fq.FetchTopic, topic=st.text(max_size=5), topic_id=st.uuids(),
                   partitions=st.lists(partitions, max_size=5))
requests = st.builds(fq.FetchRequest, topics=st.lists(topics, max_size=3), max_wait_ms=i32, min_bytes=i32,
                     session_epoch=i32, rack_id=st.text(max_size=3))


def _decode(data: bytes, version: int, c_reader: Any) -> tuple[str, Any]:
    """(outcome, value): the message as a dict, or the error's type and text."""
    saved = {cls: cls._readers for cls in CLASSES}
    old = schema._read_int_structs
    try:
        schema._read_int_structs = c_reader  # readers compiled afresh, with it or without
        for cls in CLASSES:
            cls._readers = {}
        try:
            return "ok", fq.FetchRequest.decode(data, version).to_dict()
        except ProtocolDecodeError as e:
            return "error", str(e)
    finally:
        schema._read_int_structs = old
        for cls, readers in saved.items():
            cls._readers = readers


def test_the_c_reader_is_used_when_built() -> None:
    assert (schema._read_int_structs is not None) == SPEEDUPS
    if SPEEDUPS:
        assert schema._int_struct_plan(fq.FetchPartition, 16, True) is not None


@pytest.mark.skipif(not SPEEDUPS, reason="the C extension is not built (test_records_speedups reports it)")
@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(VERSIONS), req=requests, cut=st.integers(0, 400),
       flip=st.tuples(st.integers(0, 400), st.integers(0, 255)))
def test_same_structs_and_errors_as_the_python_readers(version: int, req: fq.FetchRequest, cut: int,
                                                        flip: tuple[int, int]) -> None:
    data = req.encode(version)
    python = _decode(data, version, None)
    assert python[0] == "ok"
    assert _decode(data, version, schema._read_int_structs) == python
    truncated = data[:cut]
    assert _decode(truncated, version, None) == _decode(truncated, version, schema._read_int_structs)
    at, byte = flip
    if at < len(data):
        corrupt = data[:at] + bytes([byte]) + data[at + 1:]
        assert _decode(corrupt, version, None) == _decode(corrupt, version, schema._read_int_structs)


@pytest.mark.skipif(not SPEEDUPS, reason="the C extension is not built (test_records_speedups reports it)")
def test_tagged_fields_of_an_element_are_read() -> None:
    dir_id = uuid.uuid4()
    req = fq.FetchRequest(topics=[fq.FetchTopic(topic_id=uuid.uuid4(), partitions=[
        fq.FetchPartition(partition=1, fetch_offset=5, replica_directory_id=dir_id, high_watermark=7),
        fq.FetchPartition(partition=2, fetch_offset=6)])])
    got = fq.FetchRequest.decode(req.encode(18), 18).topics[0].partitions
    assert [(p.partition, p.fetch_offset, p.replica_directory_id, p.high_watermark) for p in got] == [
        (1, 5, dir_id, 7), (2, 6, schema.ZERO_UUID, 2**63 - 1)]
