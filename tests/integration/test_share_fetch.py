"""ShareFetch and ShareAcknowledge (KIP-932) as raw requests through Rivulet's codec against a
real broker: sessions and their epochs, acquired ranges, delivery counts, acknowledgements
piggy-backed and alone, the long poll woken by produced records and by expired locks, and
the records of a closed session going to another member."""

from __future__ import annotations

import socket
import struct
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import api_versions_request as avq
from rivulet.protocol.messages import metadata_request as mq
from rivulet.protocol.messages import share_acknowledge_request as saq
from rivulet.protocol.messages import share_fetch_request as sfq
from rivulet.protocol.records import iter_batches
from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration

ACCEPT, RELEASE, REJECT = 1, 2, 3
V = 2
# Locks short enough that an expiry comes within a long poll (the bounds allow it).
BROKER = {"group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "2000"}


@pytest.fixture(scope="module")
def broker():
    b = BrokerProcess(BROKER)
    b.start()
    yield b
    b.cleanup()


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.cid = 0

    def send(self, body, version: int = V) -> int:
        self.cid += 1
        self.sock.sendall(framing.encode_request(body, version, self.cid, "share-test"))
        return self.cid

    def receive(self, api_key: int, cid: int, version: int = V):
        def exactly(n: int) -> bytes:
            out = b""
            while len(out) < n:
                chunk = self.sock.recv(n - len(out))
                if not chunk:
                    raise ConnectionError("closed")
                out += chunk
            return out
        got, resp = framing.decode_response(exactly(struct.unpack(">i", exactly(4))[0]), api_key, version)
        assert got == cid
        return resp

    def request(self, body, version: int = V):
        return self.receive(body.API_KEY, self.send(body, version), version)

    def close(self) -> None:
        self.sock.close()


def share_fetch(group: str, member: str, epoch: int, topic_id: uuid.UUID, acks=(), max_wait_ms: int = 0,
                max_records: int = 500) -> sfq.ShareFetchRequest:
    batches = [sfq.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=[t]) for a, b, t in acks]
    return sfq.ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=max_wait_ms, min_bytes=1,
        max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
        topics=[sfq.FetchTopic(topic_id=topic_id, partitions=[
            sfq.FetchPartition(partition_index=0, acknowledgement_batches=batches)])],
        forgotten_topics_data=[])


def share_ack(group: str, member: str, epoch: int, topic_id: uuid.UUID, acks) -> saq.ShareAcknowledgeRequest:
    batches = [saq.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=[t]) for a, b, t in acks]
    return saq.ShareAcknowledgeRequest(group_id=group, member_id=member, share_session_epoch=epoch, topics=[
        saq.AcknowledgeTopic(topic_id=topic_id, partitions=[
            saq.AcknowledgePartition(partition_index=0, acknowledgement_batches=batches)])])


def partition(resp):
    assert resp.error_code == 0, (resp.error_code, resp.error_message)
    assert len(resp.responses) == 1 and len(resp.responses[0].partitions) == 1
    return resp.responses[0].partitions[0]


def acquired(resp) -> list[tuple[int, int, int]]:
    p = partition(resp)
    assert p.error_code == 0, p.error_message
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0


def test_share_fetch_and_acknowledge(broker):
    bootstrap = f"127.0.0.1:{broker.port}"
    topic = f"share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    group = f"sg-{uuid.uuid4().hex[:6]}"
    m1, m2 = uuid.uuid4().hex, uuid.uuid4().hex
    c1, c2 = Conn(broker.port), Conn(broker.port)
    try:
        versions = {k.api_key: (k.min_version, k.max_version)
                    for k in c1.request(avq.ApiVersionsRequest(), 0).api_keys}
        assert versions[78] == (1, 2) and versions[79] == (1, 2)
        meta = c1.request(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=topic)]), 12)
        tid = meta.topics[0].topic_id

        # Epoch 0 opens the session; share.auto.offset.reset=latest: nothing yet.
        assert acquired(c1.request(share_fetch(group, m1, 0, tid))) == []
        # A long poll, answered once records are produced.
        cid = c1.send(share_fetch(group, m1, 1, tid, max_wait_ms=30000))
        produce(bootstrap, topic, [b"v%d" % i for i in range(10)])
        resp = c1.receive(78, cid)
        got = acquired(resp)
        assert resp.acquisition_lock_timeout_ms == 2000
        assert got[0][0] == 0 and got[-1][1] == 9 and all(d == 1 for _, _, d in got)
        offsets = [(h.base_offset, h.last_offset) for _, h in iter_batches(partition(resp).records)]
        assert offsets[0][0] == 0 and offsets[-1][1] == 9

        # Nothing left for the second member.
        assert acquired(c2.request(share_fetch(group, m2, 0, tid))) == []
        # Acknowledged alone: accept 0..4, release 5..9.
        ack = c1.request(share_ack(group, m1, 2, tid, [(0, 4, ACCEPT), (5, 9, RELEASE)]))
        assert ack.error_code == 0 and ack.responses[0].partitions[0].error_code == 0
        # The released records go to m2, delivered a second time.
        assert acquired(c2.request(share_fetch(group, m2, 1, tid))) == [(5, 9, 2)]
        # m1 does not hold them.
        ack = c1.request(share_ack(group, m1, 3, tid, [(5, 5, ACCEPT)]))
        assert ack.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        # Piggy-backed on a fetch: m2 rejects them.
        p = partition(c2.request(share_fetch(group, m2, 2, tid, acks=[(5, 9, REJECT)])))
        assert p.acknowledge_error_code == 0 and p.error_code == 0

        # Session epochs: a wrong one, and a member without a session.
        bad = c2.request(share_fetch(group, m2, 7, tid))
        assert bad.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        bad = c2.request(share_fetch(group, uuid.uuid4().hex, 1, tid))
        assert bad.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        bad = c2.request(share_fetch(group, m2, 0, tid, acks=[(5, 9, ACCEPT)]))
        assert bad.error_code == ErrorCode.INVALID_REQUEST

        # Records m2 acquires and never acknowledges come back to m1 once the lock expires.
        assert acquired(c2.request(share_fetch(group, m2, 0, tid))) == []
        produce(bootstrap, topic, [b"w%d" % i for i in range(3)])
        assert acquired(c2.request(share_fetch(group, m2, 1, tid, max_wait_ms=30000))) == [(10, 12, 1)]
        assert acquired(c1.request(share_fetch(group, m1, 4, tid, max_wait_ms=30000))) == [(10, 12, 2)]

        # Closing m1's session (epoch -1) releases what it holds to m2.
        closed = c1.request(share_ack(group, m1, -1, tid, []))
        assert closed.error_code == 0
        assert acquired(c2.request(share_fetch(group, m2, 2, tid, max_wait_ms=30000))) == [(10, 12, 3)]
        assert c1.request(share_fetch(group, m1, 5, tid)).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    finally:
        c1.close()
        c2.close()
