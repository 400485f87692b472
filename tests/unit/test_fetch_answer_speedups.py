"""FetchAnswer (a Fetch response written from the replica manager's results) against the plain
FetchResponse it stands for, with the C partition writer and with the Python one.

Every version the broker answers, results of every shape (errors, aborted transactions or
none, diverging epochs, preferred replicas, record sets small and large enough to travel as
their own buffer) mixed with PartitionData entries the handler builds itself (leader hints):
the bytes must be the same, and the request metrics must count the same partition errors.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rivulet.protocol import fetch_answer as fa
from rivulet.protocol.messages import fetch_response as fr
from rivulet.protocol.records import SPEEDUPS
from rivulet.protocol.schema import CHUNK_MIN, OutBuf
from rivulet.replication.replica_manager import FetchResult
from rivulet.server.metrics.requests import count_errors

pytestmark = pytest.mark.fast

VERSIONS = range(fr.FetchResponse.VALID_VERSIONS[0], fr.FetchResponse.VALID_VERSIONS[1] + 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
records = st.one_of(
    st.none(), st.binary(max_size=40),
    st.binary(max_size=40).map(memoryview),
    st.integers(0, 3).map(lambda n: bytes(range(256)) * (CHUNK_MIN // 256) + b"x" * n))
results = st.builds(
    FetchResult, error=st.sampled_from([0, 0, 0, 1, 6, 74]), high_watermark=i64, last_stable_offset=i64,
    log_start_offset=i64, records=records,
    aborted_transactions=st.one_of(st.none(), st.lists(st.tuples(i64, i64), max_size=3)),
    diverging_epoch=st.one_of(st.none(), st.just((-1, -1)), st.tuples(i32, i64)),
    preferred_read_replica=i32)
leader_hints = st.builds(
    lambda index, leader, epoch, r: _with_leader(fa.partition_data(index, r), leader, epoch),
    i32, i32, i32, results)
topics = st.builds(
    lambda name, tid, entries: fa.AnswerTopic(name, tid, [i for i, _ in entries], [e for _, e in entries]),
    st.text(max_size=8), st.uuids(), st.lists(st.tuples(i32, st.one_of(results, results, leader_hints)), max_size=6))
endpoints = st.lists(st.builds(fr.NodeEndpoint, node_id=i32, host=st.text(max_size=6), port=i32,
                               rack=st.one_of(st.none(), st.text(max_size=4))), max_size=2)


def _with_leader(data: fr.PartitionData, leader: int, epoch: int) -> fr.PartitionData:
    data.current_leader = fr.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)
    return data


def _bytes(body: fr.FetchResponse, version: int) -> bytes:
    """Encoded into an OutBuf, as a response frame is, with its out-of-line chunks in place."""
    out = OutBuf()
    body.encode_into(out, version)
    return b"".join(bytes(p) for p in out.parts())


def _encode_with(writer: Any, answer: fa.FetchAnswer, version: int, monkeypatch: pytest.MonkeyPatch) -> bytes:
    with monkeypatch.context() as m:
        m.setattr(fa, "_write_partitions", writer)
        return _bytes(answer, version)


def test_the_accelerator_writes_the_partitions_when_built() -> None:
    assert fa.ACCELERATED == SPEEDUPS


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(version=st.sampled_from(VERSIONS), answer_topics=st.lists(topics, max_size=3), nodes=endpoints)
def test_same_bytes_as_the_fetch_response_it_stands_for(version: int, answer_topics: list[fa.AnswerTopic],
                                                       nodes: list[fr.NodeEndpoint],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    answer = fa.FetchAnswer(answer_topics, nodes if version >= 16 else [])
    expected = _bytes(answer.to_response(), version)
    assert _encode_with(fa._py_write_partitions, answer, version, monkeypatch) == expected
    if fa.ACCELERATED:
        assert _encode_with(fa._c_write_partitions, answer, version, monkeypatch) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_large_record_sets_stay_out_of_line(version: int) -> None:
    big = memoryview(b"r" * CHUNK_MIN)
    answer = fa.FetchAnswer([fa.AnswerTopic("t", uuid.uuid4(), [0, 1], [
        FetchResult(high_watermark=5, records=big), FetchResult(high_watermark=5, records=b"small")])], [])
    out = OutBuf()
    answer.encode_into(out, version)
    assert [b for _, b in out.chunks] == [big]
    decoded = fr.FetchResponse.decode(b"".join(bytes(p) for p in out.parts()), version)
    assert [bytes(p.records) for p in decoded.responses[0].partitions] == [bytes(big), b"small"]


def test_the_request_metrics_count_each_partition_error() -> None:
    ok, failed = FetchResult(high_watermark=1), FetchResult(error=6)
    hint = _with_leader(fa.partition_data(2, FetchResult(error=6)), 1, 3)
    answer = fa.FetchAnswer([fa.AnswerTopic("t", uuid.uuid4(), [0, 1, 2], [ok, failed, hint])], [])
    counted: dict[tuple[str, int], int] = {}
    plain: dict[tuple[str, int], int] = {}
    count_errors(answer, "FetchConsumer", counted)
    count_errors(answer.to_response(), "FetchConsumer", plain)
    assert counted == plain == {("FetchConsumer", 0): 2, ("FetchConsumer", 6): 2}


def test_read_as_a_fetch_response_it_shows_its_partitions() -> None:
    hint = _with_leader(fa.partition_data(2, FetchResult(error=6)), 1, 3)
    answer = fa.FetchAnswer([fa.AnswerTopic("t", uuid.uuid4(), [0, 2], [FetchResult(high_watermark=7), hint])], [])
    plain = answer.to_response()
    assert answer.responses == plain.responses
    assert [p.partition_index for p in answer.responses[0].partitions] == [0, 2]
    assert answer.to_dict() == plain.to_dict()
    assert "high_watermark=7" in repr(answer)
