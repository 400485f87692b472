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
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import api_versions_request as avq
from rivulet.protocol.messages import metadata_request as mq
from rivulet.protocol.messages import share_acknowledge_request as saq
from rivulet.protocol.messages import share_fetch_request as sfq
from rivulet.protocol.records import decode_batch, iter_batches
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
    def __init__(self, port: int, client_id: str = "share-test") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.cid = 0
        self.client_id = client_id

    def send(self, body, version: int = V) -> int:
        self.cid += 1
        self.sock.sendall(framing.encode_request(body, version, self.cid, self.client_id))
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


def new_topic(bootstrap: str) -> str:
    topic = f"share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    return topic


class Member:
    """One share group member on its own connection, keeping its share session epoch."""

    def __init__(self, port: int, group: str, topic_id: uuid.UUID, client_id: str = "share-test") -> None:
        self.conn = Conn(port, client_id)
        self.id = uuid.uuid4().hex
        self.group = group
        self.topic_id = topic_id
        self.epoch = 0

    def fetch(self, acks=(), max_wait_ms: int = 0):
        resp = self.conn.request(share_fetch(self.group, self.id, self.epoch, self.topic_id, acks, max_wait_ms))
        if resp.error_code == 0:
            self.epoch += 1
        return resp

    def ack(self, acks, *, close: bool = False):
        resp = self.conn.request(share_ack(self.group, self.id, -1 if close else self.epoch, self.topic_id, acks))
        if resp.error_code == 0 and not close:
            self.epoch += 1
        return resp

    def acquire_through(self, last: int) -> dict[int, int]:
        """Long-poll until ``last`` is acquired: each acquired offset's delivery count (the
        producer may have written the records in several batches, each waking a poll)."""
        got: dict[int, int] = {}
        while last not in got:
            for first, end, count in acquired(self.fetch(max_wait_ms=30000)):
                got.update((o, count) for o in range(first, end + 1))
        return got


def test_share_fetch_and_acknowledge(broker):
    bootstrap = f"127.0.0.1:{broker.port}"
    topic = new_topic(bootstrap)
    probe = Conn(broker.port)
    versions = {k.api_key: (k.min_version, k.max_version) for k in probe.request(avq.ApiVersionsRequest(), 0).api_keys}
    assert versions[78] == (1, 2) and versions[79] == (1, 2)
    tid = probe.request(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=topic)]), 12).topics[0].topic_id
    probe.close()
    group = f"sg-{uuid.uuid4().hex[:6]}"
    m1, m2 = Member(broker.port, group, tid), Member(broker.port, group, tid)
    try:
        # Epoch 0 opens the session; share.auto.offset.reset=latest: nothing yet.
        assert acquired(m1.fetch()) == []
        # A long poll, answered once records are produced.
        cid = m1.conn.send(share_fetch(group, m1.id, m1.epoch, tid, max_wait_ms=30000))
        produce(bootstrap, topic, [b"v%d" % i for i in range(10)])
        resp = m1.conn.receive(78, cid)
        m1.epoch += 1
        assert resp.acquisition_lock_timeout_ms == 2000
        first = acquired(resp)
        assert first and first[0][0] == 0
        offsets = [(h.base_offset, h.last_offset) for _, h in iter_batches(partition(resp).records)]
        assert offsets[0][0] == 0 and offsets[-1][1] == first[-1][1]
        got = {o: d for a, b, d in first for o in range(a, b + 1)}
        if 9 not in got:
            got.update(m1.acquire_through(9))
        assert got == {o: 1 for o in range(10)}

        # Nothing left for the second member.
        assert acquired(m2.fetch()) == []
        # Acknowledged alone: accept 0..4, release 5..9.
        ack = m1.ack([(0, 4, ACCEPT), (5, 9, RELEASE)])
        assert ack.error_code == 0 and ack.responses[0].partitions[0].error_code == 0
        # The released records go to m2, delivered a second time.
        assert acquired(m2.fetch()) == [(5, 9, 2)]
        # m1 does not hold them.
        ack = m1.ack([(5, 5, ACCEPT)])
        assert ack.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        # Piggy-backed on a fetch: m2 rejects them.
        p = partition(m2.fetch(acks=[(5, 9, REJECT)]))
        assert p.acknowledge_error_code == 0 and p.error_code == 0

        # Session epochs: a wrong one, a member without a session, acknowledgements opening one.
        bad = m2.conn.request(share_fetch(group, m2.id, m2.epoch + 5, tid))
        assert bad.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        bad = m2.conn.request(share_fetch(group, uuid.uuid4().hex, 1, tid))
        assert bad.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        bad = m2.conn.request(share_fetch(group, m2.id, 0, tid, acks=[(5, 9, ACCEPT)]))
        assert bad.error_code == ErrorCode.INVALID_REQUEST

        # Records m2 acquires and never acknowledges come back to m1 once the lock expires.
        produce(bootstrap, topic, [b"w%d" % i for i in range(3)])
        assert m2.acquire_through(12) == {10: 1, 11: 1, 12: 1}
        assert m1.acquire_through(12) == {10: 2, 11: 2, 12: 2}

        # Closing m1's session (epoch -1) releases what it holds to m2.
        assert m1.ack([], close=True).error_code == 0
        assert m2.acquire_through(12) == {10: 3, 11: 3, 12: 3}
        assert m1.fetch().error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    finally:
        m1.conn.close()
        m2.conn.close()


def test_read_committed_group_never_acquires_aborted_records(broker):
    bootstrap = f"127.0.0.1:{broker.port}"
    topic = new_topic(bootstrap)
    group = f"sg-{uuid.uuid4().hex[:6]}"
    # The group's configs, set as Kafka's tools set them (a GROUP config resource).
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.isolation.level", "read_committed", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{group}"})
    p.init_transactions(30)
    p.begin_transaction()
    for v in (b"a1", b"a2", b"a3"):
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0  # written before the abort, which would purge them otherwise
    p.abort_transaction(30)
    p.begin_transaction()
    for v in (b"c1", b"c2"):
        p.produce(topic, v, partition=0)
    p.commit_transaction(30)
    c = Conn(broker.port)
    try:
        tid = c.request(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=topic)]), 12).topics[0].topic_id
        got: set[int] = set()
        epoch = 0
        while 5 not in got:  # aborted 0-2, marker 3, committed 4-5, marker 6
            got |= {o for a, b, _ in acquired(c.request(share_fetch(group, "m1", epoch, tid, max_wait_ms=30000)))
                    for o in range(a, b + 1)}
            epoch += 1
        assert not got & {0, 1, 2}
        assert {4, 5} <= got
    finally:
        c.close()


def test_a_batch_larger_than_the_record_lock_limit_is_acquired_in_parts(broker):
    """The group's share.partition.max.record.locks is 100 and the log holds one batch of 200:
    a ShareFetch acquires 0-99 and answers the stored batch holding those records only, the
    window is then full for every member, and acknowledging frees room for the rest."""
    bootstrap = f"127.0.0.1:{broker.port}"
    topic = new_topic(bootstrap)
    group = f"sg-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.partition.max.record.locks", "100", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5000, "batch.num.messages": 1000})
    for i in range(200):
        p.produce(topic, b"%d" % i, partition=0)
    assert p.flush(30) == 0
    probe = Conn(broker.port)
    tid = probe.request(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=topic)]), 12).topics[0].topic_id
    probe.close()
    m1, m2 = Member(broker.port, group, tid), Member(broker.port, group, tid)
    try:
        resp = m1.fetch(max_wait_ms=30000)
        assert acquired(resp) == [(0, 99, 1)]
        assert [(h.base_offset, h.last_offset) for _, h in iter_batches(partition(resp).records)] == [(0, 199)]
        # The stored batch goes back cut down to the acquired records, as compaction leaves one.
        assert [r.offset for r in decode_batch(partition(resp).records).records] == list(range(100))
        assert acquired(m2.fetch()) == []
        assert m1.ack([(0, 99, ACCEPT)]).responses[0].partitions[0].error_code == 0
        assert acquired(m2.fetch()) == [(100, 199, 1)]
    finally:
        m1.conn.close()
        m2.conn.close()


def test_share_fetch_over_the_consumer_quota_is_answered_empty_and_throttled(broker):
    """consumer_byte_rate counts ShareFetch answers as Fetch answers: over it, the answer
    carries throttle_time_ms and no records, the connection is muted, and what the fetch had
    acquired is Available again uncounted: every record is delivered once, with delivery count 1."""
    from rivulet.admin import AdminClient as RivuletAdmin
    from rivulet.admin import ClientQuotaAlteration, ClientQuotaAlterationOp, ClientQuotaEntity
    bootstrap = f"127.0.0.1:{broker.port}"
    topic = new_topic(bootstrap)
    group = f"sg-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    n = 16
    for i in range(n):
        p.produce(topic, b"%04d" % i + b"x" * 996, partition=0)  # 16 batches of about 1 kB
    assert p.flush(30) == 0
    entity = ClientQuotaEntity({ClientQuotaEntity.CLIENT_ID: "share-slow"})
    quotas = RivuletAdmin({"bootstrap.servers": bootstrap})
    try:  # 1 KiB/s: about ten batches at once, then one a second
        quotas.alter_client_quotas([ClientQuotaAlteration(entity, [
            ClientQuotaAlterationOp("consumer_byte_rate", 1024)])])[entity].result(30)
    finally:
        quotas.close()
    probe = Conn(broker.port)
    tid = probe.request(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=topic)]), 12).topics[0].topic_id
    probe.close()
    m = Member(broker.port, group, tid, client_id="share-slow")
    delivered: dict[int, list[int]] = {}
    throttled = 0
    try:
        acks: list[tuple[int, int, int]] = []
        while len(delivered) < n:
            assert throttled < 50, delivered
            resp = m.fetch(acks=acks, max_wait_ms=1000)
            got = acquired(resp)
            if resp.throttle_time_ms > 0:
                throttled += 1
                assert got == [] and not partition(resp).records
            for first, last, count in got:
                for o in range(first, last + 1):
                    delivered.setdefault(o, []).append(count)
            acks = [(first, last, ACCEPT) for first, last, _ in got]
        assert throttled > 0
        assert delivered == {o: [1] for o in range(n)}
    finally:
        m.conn.close()


def test_share_acknowledge_over_the_request_quota_is_throttled(broker):
    """request_percentage applies to ShareAcknowledge as to other requests: over it, the
    answer carries throttle_time_ms (the acknowledgement itself is done)."""
    from rivulet.admin import AdminClient as RivuletAdmin
    from rivulet.admin import ClientQuotaAlteration, ClientQuotaAlterationOp, ClientQuotaEntity
    bootstrap = f"127.0.0.1:{broker.port}"
    topic = new_topic(bootstrap)
    group = f"sg-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    produce(bootstrap, topic, [b"a%d" % i for i in range(5)])
    probe = Conn(broker.port)
    tid = probe.request(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=topic)]), 12).topics[0].topic_id
    probe.close()
    m = Member(broker.port, group, tid, client_id="share-acker")
    try:
        got = m.acquire_through(4)
        entity = ClientQuotaEntity({ClientQuotaEntity.CLIENT_ID: "share-acker"})
        quotas = RivuletAdmin({"bootstrap.servers": bootstrap})
        try:  # a millionth of a thread: any request is over it
            quotas.alter_client_quotas([ClientQuotaAlteration(entity, [
                ClientQuotaAlterationOp("request_percentage", 0.0001)])])[entity].result(30)
        finally:
            quotas.close()
        resp = m.ack([(o, o, ACCEPT) for o in sorted(got)])
        assert resp.error_code == 0 and resp.responses[0].partitions[0].error_code == 0
        assert resp.throttle_time_ms > 0
    finally:
        m.conn.close()


def test_a_partition_forgotten_in_the_request_carrying_its_acknowledgements_leaves_the_session(broker):
    """A member that lost a partition sends its last acknowledgements for it and forgets it in
    the same ShareFetch (as franz-go does). Kafka adds the request's partitions to the session
    before removing the forgotten ones, so the partition is gone: later answers of the session
    hold no partition, and acquire none of the records produced since."""
    bootstrap = f"127.0.0.1:{broker.port}"
    topic = new_topic(bootstrap)
    c = Conn(broker.port)
    tid = c.request(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=topic)]), 12).topics[0].topic_id
    c.close()
    m = Member(broker.port, f"sg-{uuid.uuid4().hex[:6]}", tid)
    try:
        assert acquired(m.fetch()) == []  # epoch 0 opens the session on partition 0
        produce(bootstrap, topic, [b"v%d" % i for i in range(3)])
        assert m.acquire_through(2) == {0: 1, 1: 1, 2: 1}
        req = share_fetch(m.group, m.id, m.epoch, tid, acks=[(0, 2, ACCEPT)])
        req.forgotten_topics_data = [sfq.ForgottenTopic(topic_id=tid, partitions=[0])]
        p = partition(m.conn.request(req))
        m.epoch += 1
        assert p.acknowledge_error_code == 0 and p.acquired_records == []
        produce(bootstrap, topic, [b"w%d" % i for i in range(3)])
        empty = sfq.ShareFetchRequest(group_id=m.group, member_id=m.id, share_session_epoch=m.epoch,
                                      max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, max_records=500,
                                      batch_size=500, topics=[], forgotten_topics_data=[])
        resp = m.conn.request(empty)
        assert resp.error_code == 0, resp.error_message
        assert resp.responses == []
    finally:
        m.conn.close()


def test_min_bytes_past_max_bytes_waits_for_max_bytes_only(broker):
    # KafkaApis caps a ShareFetch's MinBytes at its MaxBytes: with more than MaxBytes there, a
    # fetch asking for 2 GiB at least is answered at once rather than at MaxWaitMs (two minutes
    # here, past the socket's timeout).
    bootstrap = f"127.0.0.1:{broker.port}"
    topic = new_topic(bootstrap)
    conn = Conn(broker.port)
    try:
        tid = conn.request(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=topic)]), 12).topics[0].topic_id
        group = f"sg-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(30)
        produce(bootstrap, topic, [b"%d" % i + b"." * 100 for i in range(100)])
        req = share_fetch(group, uuid.uuid4().hex, 0, tid, max_wait_ms=120_000)
        req.min_bytes, req.max_bytes = 2**31 - 1, 4096
        got = acquired(conn.request(req))
        assert got and got[0][0] == 0, got
    finally:
        conn.close()
