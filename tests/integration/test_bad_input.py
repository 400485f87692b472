"""Bad input gets the right error code or a closed connection, and never disturbs others."""

from __future__ import annotations

import os
import socket
import struct
import uuid

import pytest

from rivulet.protocol import framing, records
from rivulet.protocol.compression import Codec
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import api_versions_request as avq
from rivulet.protocol.messages import metadata_request as mq
from rivulet.protocol.messages import produce_request as pq

pytestmark = pytest.mark.integration


def connect(broker) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    return s


def read_frame(s: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out
    size = struct.unpack(">i", exactly(4))[0]
    return exactly(size)


def is_closed(s: socket.socket) -> bool:
    s.settimeout(10)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def request(s: socket.socket, body, version: int, cid: int = 1):
    s.sendall(framing.encode_request(body, version, cid, "bad-input-test"))
    got_cid, resp = framing.decode_response(read_frame(s), body.API_KEY, version)
    assert got_cid == cid
    return resp


def still_serving(broker) -> None:
    """A fresh connection gets a correct Metadata answer."""
    with connect(broker) as s:
        resp = request(s, mq.MetadataRequest(topics=None), 12)
        assert resp.brokers[0].port == broker.port


def produce(s, topic: str, data: bytes, version: int = 9, acks: int = 1):
    req = pq.ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[pq.TopicProduceData(
        name=topic, partition_data=[pq.PartitionProduceData(index=0, records=data)])])
    resp = request(s, req, version)
    return resp.responses[0].partition_responses[0]


def valid_batch(codec: int = 0) -> bytes:
    recs = [records.Record(offset=i, timestamp=1_700_000_000_000 + i, key=b"k", value=b"v" * 100, headers=[])
            for i in range(5)]
    return records.encode_batch(recs, compression=codec)


@pytest.fixture(scope="module")
def topic(broker):
    name = f"bad-{uuid.uuid4().hex[:6]}"
    with connect(broker) as s:
        request(s, mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=name)],
                                      allow_auto_topic_creation=True), 12)
    return name


def test_random_bytes_close_only_that_connection(broker):
    keep = connect(broker)
    for seed in range(20):
        with connect(broker) as s:
            junk = os.urandom(64 + seed)
            s.sendall(struct.pack(">i", len(junk)) + junk)
            # Either a reply (if the junk happened to parse) or a closed connection; never a hang.
            s.settimeout(10)
            try:
                s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                pass
    assert request(keep, mq.MetadataRequest(topics=None), 1).brokers
    keep.close()
    still_serving(broker)


def test_oversized_frame_is_refused(broker):
    with connect(broker) as s:
        s.sendall(struct.pack(">i", 200 * 1024 * 1024))  # above socket.request.max.bytes
        assert is_closed(s)
    still_serving(broker)


def test_negative_size_is_refused(broker):
    with connect(broker) as s:
        s.sendall(struct.pack(">i", -5))
        assert is_closed(s)
    still_serving(broker)


def test_truncated_frame_then_disconnect(broker):
    with connect(broker) as s:
        frame = framing.encode_request(mq.MetadataRequest(topics=None), 12, 1, "x")
        s.sendall(frame[: len(frame) // 2])
    still_serving(broker)


def test_truncated_body_closes(broker):
    with connect(broker) as s:
        frame = framing.encode_request(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name="abc")]), 1, 1, "x")
        body = frame[4:-3]
        s.sendall(struct.pack(">i", len(body)) + body)
        assert is_closed(s)
    still_serving(broker)


def test_unknown_api_key_closes(broker):
    with connect(broker) as s:
        frame = struct.pack(">hhi", 9999, 0, 1) + b"\x00\x00"
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert is_closed(s)
    still_serving(broker)


def test_unsupported_api_version_of_api_versions_gets_v0_error(broker):
    with connect(broker) as s:
        frame = struct.pack(">hhi", 18, 99, 7) + b"\x00\x02hi"
        s.sendall(struct.pack(">i", len(frame)) + frame)
        cid, resp = framing.decode_response(read_frame(s), 18, 0)
        assert cid == 7
        assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
        keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert keys[18] == (0, 4) and keys[0][0] == 0


def test_unsupported_version_of_other_api_closes(broker):
    with connect(broker) as s:
        # Fetch v0 is valid in the schema but older than Rivulet supports.
        frame = struct.pack(">hhi", 1, 0, 3) + b"\x00\x01x" + bytes(20)
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert is_closed(s)
    still_serving(broker)


def test_api_versions_v3_reports_versions(broker):
    with connect(broker) as s:
        resp = request(s, avq.ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        assert resp.error_code == 0
        keys = {k.api_key for k in resp.api_keys}
        assert {0, 1, 2, 3, 18, 19, 20}.issubset(keys)


def test_wrong_crc_is_corrupt_message(broker, topic):
    data = bytearray(valid_batch())
    data[-1] ^= 0xFF
    with connect(broker) as s:
        r = produce(s, topic, bytes(data))
        assert r.error_code == ErrorCode.CORRUPT_MESSAGE


def test_corrupt_compressed_payload(broker, topic):
    data = bytearray(valid_batch(Codec.GZIP))
    # Scramble the compressed payload, then fix the CRC so only the payload is wrong.
    for i in range(records.HEADER_SIZE + 4, len(data)):
        data[i] ^= 0x5A
    struct.pack_into(">I", data, records.CRC_OFFSET, records.compute_batch_crc(data, 0))
    with connect(broker) as s:
        r = produce(s, topic, bytes(data))
        assert r.error_code == ErrorCode.CORRUPT_MESSAGE


def magic_v1_message() -> bytes:
    # offset, size, crc, magic=1, attributes, timestamp, key, value
    inner = struct.pack(">bbqi", 1, 0, 0, -1) + struct.pack(">i", 1) + b"x"
    import zlib
    msg = struct.pack(">I", zlib.crc32(inner)) + inner
    return struct.pack(">qi", 0, len(msg)) + msg


def test_old_message_format_is_invalid_record(broker, topic):
    # As Kafka 4.3.1 answers it (ProduceRequest.validateRecords): INVALID_RECORD, no message.
    with connect(broker) as s:
        r = produce(s, topic, magic_v1_message())
        assert (r.error_code, r.error_message) == (ErrorCode.INVALID_RECORD, None)


@pytest.mark.parametrize("version", [0, 2])
def test_produce_before_v3_closes_though_advertised(broker, topic, version):
    # Kafka 4 lists Produce from v0 in ApiVersions for librdkafka (KAFKA-18659) but cannot
    # read v0-2 and closes the connection (4.3.1 checked, with a v1 and with a v2 batch);
    # franz-go pinned to 0.10 then fails its records instead of finding the broker too old.
    with connect(broker) as s:
        s.sendall(framing.encode_request(avq.ApiVersionsRequest(), 0, 1, "bad-input-test"))
        _, resp = framing.decode_response(read_frame(s), 18, 0)
        assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}[0] == (0, 13)
        req = pq.ProduceRequest(acks=1, timeout_ms=5000, topic_data=[pq.TopicProduceData(
            name=topic, partition_data=[pq.PartitionProduceData(index=0, records=valid_batch())])])
        s.sendall(framing.encode_request(req, version, 2, "bad-input-test"))
        assert is_closed(s)
    still_serving(broker)


def test_truncated_batch_in_produce(broker, topic):
    data = valid_batch()[:-10]
    with connect(broker) as s:
        r = produce(s, topic, data)
        assert r.error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)


def test_produce_to_unknown_partition_and_bad_acks(broker, topic):
    with connect(broker) as s:
        req = pq.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[pq.TopicProduceData(
            name=topic, partition_data=[pq.PartitionProduceData(index=99, records=valid_batch())])])
        r = request(s, req, 9).responses[0].partition_responses[0]
        assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        req.acks = 5
        req.topic_data[0].partition_data[0].index = 0
        r = request(s, req, 9).responses[0].partition_responses[0]
        assert r.error_code == ErrorCode.INVALID_REQUIRED_ACKS


def test_good_produce_after_all_that(broker, topic):
    with connect(broker) as s:
        r = produce(s, topic, valid_batch())
        assert r.error_code == 0 and r.base_offset >= 0


# -- per-record rules: Kafka's LogValidator lists every offending record -------------------

def create_topic_with(broker, name: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(30)


def batch_of(keys: list[bytes | None], timestamps: list[int]) -> bytes:
    return records.encode_batch([records.Record(offset=i, timestamp=ts, key=k, value=b"v", headers=[])
                                 for i, (k, ts) in enumerate(zip(keys, timestamps))])


def test_compacted_topic_refuses_keyless_records_and_lists_each(broker):
    name = f"compact-{uuid.uuid4().hex[:6]}"
    create_topic_with(broker, name, {"cleanup.policy": "compact"})
    ts = 1_700_000_000_000
    with connect(broker) as s:
        r = produce(s, name, batch_of([b"a", None, b"c", None, b"e"], [ts] * 5))
        assert r.error_code == ErrorCode.INVALID_RECORD
        assert [e.batch_index for e in r.record_errors] == [1, 3]
        # Kafka 4.3.1's LogValidator wording, which Kafka's Java producer shows per record.
        assert {e.batch_index_error_message for e in r.record_errors} == {
            f"Compacted topic cannot accept message without key in topic partition {name}-0"}
        assert r.error_message.startswith("One or more records have been rejected due to 2 record errors in total")
        r = produce(s, name, batch_of([b"a", b"b"], [ts] * 2))
        assert (r.error_code, r.base_offset) == (0, 0)  # nothing of the refused batch was written


def test_timestamps_beyond_message_timestamp_after_max_ms_are_invalid(broker):
    """Kafka 4's default log.message.timestamp.after.max.ms is one hour."""
    import time
    name = f"future-{uuid.uuid4().hex[:6]}"
    create_topic_with(broker, name, {})
    now = int(time.time() * 1000)
    with connect(broker) as s:
        r = produce(s, name, batch_of([b"k"] * 3, [now, now + 2 * 3600_000, now + 600_000]))
        assert r.error_code == ErrorCode.INVALID_TIMESTAMP
        assert [e.batch_index for e in r.record_errors] == [1]
        # Worded as Kafka 4.3.1's LogValidator (its Java producer shows the record's message).
        assert r.error_message == "One or more records have been rejected due to invalid timestamp"
        assert r.record_errors[0].batch_index_error_message.startswith(
            f"Timestamp {now + 2 * 3600_000} of message with offset 1 is out of range. The timestamp should be within [")
        assert produce(s, name, batch_of([b"k"] * 2, [now, now + 600_000])).error_code == 0


def test_records_without_timestamps_are_not_expired_by_a_wrong_header(broker_factory):
    """librdkafka sends records with timestamp -1 in a batch whose header says maxTimestamp 0.
    Kafka recomputes maxTimestamp from the records (-1: retention then goes by the segment
    file's age); trusting the header made retention delete the data within seconds."""
    b = broker_factory({"log.retention.check.interval.ms": "200", "log.initial.task.delay.ms": "0"})
    name = f"nots-{uuid.uuid4().hex[:6]}"
    create_topic_with(b, name, {})
    data = bytearray(batch_of([b"k"] * 3, [-1] * 3))
    struct.pack_into(">q", data, records.MAX_TIMESTAMP_OFFSET, 0)
    struct.pack_into(">I", data, records.CRC_OFFSET, records.compute_batch_crc(data, 0))
    with connect(b) as s:
        assert produce(s, name, bytes(data)).error_code == 0
    import time
    time.sleep(1.5)  # several retention checks
    from ck_helpers import ck_consume
    got = ck_consume(b.bootstrap, name, 3, timeout=20)
    assert [m["offset"] for m in got] == [0, 1, 2]


def test_excessively_many_partitions_in_one_request_are_refused(broker):
    """As Kafka's controller: more than 10,000 partitions in one request is a POLICY_VIOLATION,
    refused before anything is created (a mutated request once asked for two billion)."""
    from confluent_kafka import KafkaError as CKError
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic("huge-a", 6000), NewTopic("huge-b", 5000)], request_timeout=30)
    for name, f in futures.items():
        err = f.exception(30).args[0]
        assert err.code() == CKError.POLICY_VIOLATION, (name, err)
        assert "Excessively large number of partitions per request." in err.str()
    assert not {"huge-a", "huge-b"} & set(admin.list_topics(timeout=30).topics)
    admin.create_topics([NewTopic("grows", 2)])["grows"].result(30)
    err = admin.create_partitions([NewPartitions("grows", 10_003)])["grows"].exception(30).args[0]
    assert err.code() == CKError.POLICY_VIOLATION
    assert "Unable to perform excessively large batch operation." in err.str()
    assert len(admin.list_topics("grows", timeout=30).topics["grows"].partitions) == 2


def test_a_batch_over_max_message_bytes_carries_no_message(broker):
    # Kafka 4.3.1 sends a message only for record validation failures; Kafka's Java producer
    # then shows MESSAGE_TOO_LARGE's standard text, as it does against Kafka.
    name = f"small-{uuid.uuid4().hex[:6]}"
    create_topic_with(broker, name, {"max.message.bytes": "1000"})
    big = records.encode_batch([records.Record(offset=0, timestamp=0, key=None, value=b"x" * 3000, headers=[])])
    with connect(broker) as s:
        r = produce(s, name, big)
        assert (r.error_code, r.error_message) == (ErrorCode.MESSAGE_TOO_LARGE, None)


def test_min_insync_replicas_above_the_replica_count_takes_acks_all(broker):
    # As Kafka's leader: min.insync.replicas counts at most the replicas the partition has.
    name = f"minisr-{uuid.uuid4().hex[:6]}"
    create_topic_with(broker, name, {"min.insync.replicas": "2"})
    batch = records.encode_batch([records.Record(offset=0, timestamp=0, key=None, value=b"v", headers=[])])
    with connect(broker) as s:
        r = produce(s, name, batch, acks=-1)
        assert (r.error_code, r.base_offset) == (ErrorCode.NONE, 0)


def test_a_failed_acks_0_produce_closes_the_connection(broker):
    # As Kafka 4.3.1's KafkaApis: acks=0 has no answer to carry an error, so the broker closes
    # the connection (Kafka's Java producer then loses what it pipelined behind, as against
    # Kafka). A successful one leaves it open.
    name = f"acks0-{uuid.uuid4().hex[:6]}"
    create_topic_with(broker, name, {"max.message.bytes": "1000"})

    def acks0(data: bytes) -> bytes:
        req = pq.ProduceRequest(acks=0, timeout_ms=5000, topic_data=[pq.TopicProduceData(
            name=name, partition_data=[pq.PartitionProduceData(index=0, records=data)])])
        return framing.encode_request(req, 9, 7, "bad-input-test")

    small = records.encode_batch([records.Record(offset=0, timestamp=0, key=None, value=b"v", headers=[])])
    big = records.encode_batch([records.Record(offset=0, timestamp=0, key=None, value=b"x" * 3000, headers=[])])
    with connect(broker) as s:
        s.sendall(acks0(small))
        resp = request(s, mq.MetadataRequest(topics=None), 12, cid=8)  # answered: still open
        assert resp.brokers[0].port == broker.port
        s.sendall(acks0(big))
        assert is_closed(s)
    with connect(broker) as s:
        assert produce(s, name, small).base_offset == 1  # the first landed, the refused one did not
