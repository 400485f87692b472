"""The group APIs over the wire format: every supported version of each request goes through
the real codec and the handler, and the response must encode at that version and carry the
version's semantics (where errors go, which fields exist)."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.common.types import TopicPartition
from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode as E
from rivulet.protocol.messages import (
    delete_groups_request as dgq,
    describe_groups_request as dsq,
    find_coordinator_request as fcq,
    heartbeat_request as hbq,
    join_group_request as jgq,
    leave_group_request as lgq,
    list_groups_request as lsq,
    offset_commit_request as ocq,
    offset_delete_request as odq,
    offset_fetch_request as ofq,
    sync_group_request as sgq,
    txn_offset_commit_request as tocq,
)
from rivulet.server.apis import SUPPORTED_VERSIONS
from rivulet.server.handlers.find_coordinator import FindCoordinatorHandler
from rivulet.server.acls import Authz
from rivulet.server.network import PLAINTEXT_LISTENER
from test_group_support import group_handlers, make_coordinator

pytestmark = pytest.mark.fast


class Conn:
    peer = ("10.1.2.3", 5555)
    listener = PLAINTEXT_LISTENER


class FakeTxnCoordinator:
    """FindCoordinator key type 1 resolves here; not started: no coordinator yet."""

    def __init__(self) -> None:
        self.answer = (E.COORDINATOR_NOT_AVAILABLE, -1, "", -1)

    def find_coordinator(self, key):
        return self.answer


class Apis:
    """The group handlers keyed by API, with their versions from the one table."""

    def __init__(self, handlers) -> None:
        self.registered = {key: (SUPPORTED_VERSIONS[key], fn) for key, fn in handlers.items()}


def setup():
    c, b = make_coordinator()
    b.add_topic("t", 3)
    b.txn = FakeTxnCoordinator()
    no_authorizer = Authz(None)
    apis = Apis({**group_handlers(c, b).handlers(),
                 **FindCoordinatorHandler(c, b.txn, no_authorizer).handlers()})
    return c, b, apis


def call(apis: Apis, req, version: int, client_id: str = "cli"):
    """Encode and decode the request at ``version`` (so absent fields take their defaults),
    run the handler, then encode and decode the response at the same version."""
    key = req.API_KEY
    lo, hi = apis.registered[key][0]
    assert lo <= version <= hi
    decoded = type(req).decode(req.encode(version), version)
    header = framing.RequestHeader(key, version, 7, client_id)
    resp = apis.registered[key][1](header, decoded, Conn())
    if isinstance(resp, asyncio.Future):
        return resp
    return roundtrip(resp, key, version)


def call_awaited(apis: Apis, req, version: int):
    """``call`` in an event loop of its own, for a handler that answers later (a TxnOffsetCommit
    first awaits KIP-890's check of the group's offsets partition)."""
    async def go():
        resp = call(apis, req, version)
        if isinstance(resp, asyncio.Future):
            resp = roundtrip(await resp, req.API_KEY, version)
        return resp
    return asyncio.run(go())


def roundtrip(resp, key: int, version: int):
    frame = bytes(framing.encode_response(resp, key, version, 7))
    cid, body = framing.decode_response(frame[4:], key, version)
    assert cid == 7
    return body


def test_registered_versions():
    _, _, apis = setup()
    group_versions = {k: v for k, (v, _) in apis.registered.items()}
    assert group_versions == {8: (2, 10), 9: (1, 10), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5),
                              15: (0, 6), 16: (0, 5), 28: (0, 5), 42: (0, 2), 47: (0, 0), 68: (0, 1), 69: (0, 1),
                              76: (1, 1), 77: (1, 1)}
    assert all(SUPPORTED_VERSIONS[k] == v for k, v in group_versions.items())


@pytest.mark.parametrize("v", range(0, 7))
def test_find_coordinator_all_versions(v):
    c, b, apis = setup()
    r = call(apis, fcq.FindCoordinatorRequest(key="g", key_type=0, coordinator_keys=["g", "h"]), v)
    if v < 4:
        assert (r.error_code, r.node_id, r.host, r.port) == (0, 1, "127.0.0.1", 9092)
        if v >= 1:
            assert r.error_message == "NONE"
    else:
        assert [(x.key, x.error_code, x.node_id, x.port) for x in r.coordinators] == [
            ("g", 0, 1, 9092), ("h", 0, 1, 9092)]
    if v >= 1:
        t = call(apis, fcq.FindCoordinatorRequest(key="tx", key_type=1, coordinator_keys=["tx"]), v)
        err = t.error_code if v < 4 else t.coordinators[0].error_code
        node = t.node_id if v < 4 else t.coordinators[0].node_id
        assert (err, node) == (E.COORDINATOR_NOT_AVAILABLE, -1)


def test_find_coordinator_hook_and_unknown_type():
    c, b, apis = setup()
    b.txn.answer = (E.NONE, 1, "txhost", 1234)
    r = call(apis, fcq.FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]), 4)
    assert (r.coordinators[0].host, r.coordinators[0].port) == ("txhost", 1234)
    r = call(apis, fcq.FindCoordinatorRequest(key="x", key_type=7), 2)
    assert r.error_code == E.INVALID_REQUEST and r.node_id == -1


def join_req(member_id="", instance=None, session=10000, protocols=(("range", b"m"),), reason=None):
    return jgq.JoinGroupRequest(group_id="g", session_timeout_ms=session, rebalance_timeout_ms=20000,
                                member_id=member_id, group_instance_id=instance, protocol_type="consumer",
                                protocols=[jgq.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols],
                                reason=reason)


@pytest.mark.parametrize("v", range(0, 10))
def test_join_sync_heartbeat_leave_every_version(v):
    async def run():
        c, b, apis = setup()
        await c.wait_loaded()
        r = call(apis, join_req(), v)
        if v >= 4:
            r = roundtrip(r, 11, v) if not isinstance(r, asyncio.Future) else r
            assert r.error_code == E.MEMBER_ID_REQUIRED and r.member_id.startswith("cli-")
            r = call(apis, join_req(member_id=r.member_id), v)
        assert isinstance(r, asyncio.Future)  # parked until the (0 ms) initial delay passes
        for _ in range(3):
            b.advance(1)
        r = roundtrip(await r, 11, v)
        assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id
        assert [m.member_id for m in r.members] == [r.member_id] and r.members[0].metadata == b"m"
        assert r.protocol_name == "range"
        if v >= 7:
            assert r.protocol_type == "consumer"
        g = c.manager.get_group("g")
        member = g.get(r.member_id)
        assert member.client_id == "cli" and member.client_host == "/10.1.2.3"
        assert member.rebalance_timeout_ms == (10000 if v == 0 else 20000)  # v0: session timeout serves
        sv = min(v, 5)
        s = call(apis, sgq.SyncGroupRequest(group_id="g", generation_id=1, member_id=r.member_id,
                                            protocol_type="consumer", protocol_name="range",
                                            assignments=[sgq.SyncGroupRequestAssignment(member_id=r.member_id,
                                                                                        assignment=b"A")]), sv)
        if isinstance(s, asyncio.Future):
            await asyncio.sleep(0)
            s = roundtrip(await s, 14, sv)
        assert s.error_code == 0 and s.assignment == b"A"
        if sv >= 5:
            assert (s.protocol_type, s.protocol_name) == ("consumer", "range")
        hv = min(v, 4)
        h = call(apis, hbq.HeartbeatRequest(group_id="g", generation_id=1, member_id=r.member_id), hv)
        assert h.error_code == 0
        h = call(apis, hbq.HeartbeatRequest(group_id="g", generation_id=9, member_id=r.member_id), hv)
        assert h.error_code == E.ILLEGAL_GENERATION
        lv = min(v, 5)
        leave = lgq.LeaveGroupRequest(group_id="g", member_id=r.member_id, members=[
            lgq.MemberIdentity(member_id=r.member_id, reason="bye"), lgq.MemberIdentity(member_id="ghost")])
        out = call(apis, leave, lv)
        if lv >= 3:
            assert out.error_code == 0 and [m.error_code for m in out.members] == [0, E.UNKNOWN_MEMBER_ID]
        else:
            assert out.error_code == 0  # the one member left
        assert g.size == 0
    asyncio.run(run())


def test_sync_v5_requires_protocol_fields_and_leave_v0_error():
    c, b, apis = setup()
    r = call(apis, sgq.SyncGroupRequest(group_id="g", generation_id=1, member_id="m", protocol_type=None,
                                        protocol_name="range"), 5)
    assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    r = call(apis, lgq.LeaveGroupRequest(group_id="nogroup", member_id="m"), 0)
    assert r.error_code == E.UNKNOWN_MEMBER_ID  # v0-2: the member's error is the response's
    r = call(apis, hbq.HeartbeatRequest(group_id="", generation_id=1, member_id="m"), 0)
    assert r.error_code == E.INVALID_GROUP_ID


def test_join_errors_on_the_wire():
    c, b, apis = setup()
    r = call(apis, join_req(session=100), 9)
    assert r.error_code == E.INVALID_SESSION_TIMEOUT and r.generation_id == -1 and r.protocol_name is None
    r = call(apis, join_req(session=100), 6)
    assert r.protocol_name == ""  # not nullable before v7


def offsets_commit_req(v, group="g", gen=-1, member="", parts=((0, 5, "meta"),), topic="t"):
    return ocq.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=gen, member_id=member, retention_time_ms=-1,
        topics=[ocq.OffsetCommitRequestTopic(name=topic, partitions=[
            ocq.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=4,
                                             committed_metadata=m) for p, o, m in parts])])


@pytest.mark.parametrize("v", range(2, 10))
def test_offset_commit_and_fetch_versions(v):
    c, b, apis = setup()
    r = call(apis, offsets_commit_req(v, parts=((0, 5, "meta"), (1, 6, None), (9, 1, ""))), v)
    errs = {p.partition_index: p.error_code for t in r.topics for p in t.partitions}
    assert errs == {0: 0, 1: 0, 9: E.UNKNOWN_TOPIC_OR_PARTITION}
    r = call(apis, offsets_commit_req(v, topic="nope"), v)
    assert r.topics[0].name == "nope" and r.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    fv = min(v, 9)
    if fv >= 8:
        f = call(apis, ofq.OffsetFetchRequest(groups=[
            ofq.OffsetFetchRequestGroup(group_id="g", topics=[ofq.OffsetFetchRequestTopics(name="t",
                                                                                            partition_indexes=[0, 1, 2])]),
            ofq.OffsetFetchRequestGroup(group_id="other", topics=None)]), fv)
        got = {p.partition_index: (p.committed_offset, p.metadata, p.committed_leader_epoch)
               for p in f.groups[0].topics[0].partitions}
        assert f.groups[1].group_id == "other" and f.groups[1].topics == []
    else:
        f = call(apis, ofq.OffsetFetchRequest(group_id="g", topics=[
            ofq.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1, 2])]), fv)
        got = {p.partition_index: (p.committed_offset, p.metadata,
                                   p.committed_leader_epoch if fv >= 5 else 4) for p in f.topics[0].partitions}
    epoch = 4 if v >= 6 else -1
    assert got[0] == (5, "meta", epoch if fv >= 5 else 4)
    assert got[1][:2] == (6, "") and got[2][:2] == (-1, "")


def test_offset_commit_retention_time_v2_writes_expiring_record():
    c, b, apis = setup()
    req = offsets_commit_req(2)
    req.retention_time_ms = 60000
    call(apis, req, 2)
    om = c.manager.get_group("g").offset(type(next(iter(c.manager.get_group("g").all_offsets())))("t", 0))
    assert om.expire_timestamp == b.now + 60000


def test_offset_fetch_v1_errors_are_per_partition_and_v2_all_partitions():
    c, b, apis = setup()
    c.manager.loading_partitions.add(c.partition_for("g"))
    f = call(apis, ofq.OffsetFetchRequest(group_id="g", topics=[
        ofq.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]), 1)
    assert [p.error_code for p in f.topics[0].partitions] == [E.COORDINATOR_LOAD_IN_PROGRESS] * 2
    f = call(apis, ofq.OffsetFetchRequest(group_id="g", topics=None), 3)
    assert f.error_code == E.COORDINATOR_LOAD_IN_PROGRESS and f.topics == []
    c.manager.loading_partitions.clear()
    call(apis, offsets_commit_req(8, parts=((2, 11, ""), (0, 3, ""))), 8)
    f = call(apis, ofq.OffsetFetchRequest(group_id="g", topics=None), 2)
    assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in f.topics] == [
        ("t", [(0, 3), (2, 11)])]


def test_describe_list_delete_and_offset_delete():
    c, b, apis = setup()
    call(apis, offsets_commit_req(8, parts=((0, 3, ""), (1, 4, ""))), 8)
    for v in range(0, 6):
        d = call(apis, dsq.DescribeGroupsRequest(groups=["g", "missing"], include_authorized_operations=True), v)
        assert [(x.group_id, x.group_state, x.error_code) for x in d.groups] == [("g", "Empty", 0),
                                                                                 ("missing", "Dead", 0)]
        if v >= 3:
            # every operation a group supports (Kafka 4's: READ, DELETE, DESCRIBE and the configs')
            assert d.groups[0].authorized_operations == (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
        lst = call(apis, lsq.ListGroupsRequest(states_filter=["empty"], types_filter=["classic"]), v)
        assert [x.group_id for x in lst.groups] == ["g"] and lst.error_code == 0
        if v >= 4:
            assert lst.groups[0].group_state == "Empty"
            assert call(apis, lsq.ListGroupsRequest(states_filter=["Stable"]), v).groups == []
        if v >= 5:
            assert lst.groups[0].group_type == "classic"
            assert call(apis, lsq.ListGroupsRequest(types_filter=["consumer"]), v).groups == []
    od = call(apis, odq.OffsetDeleteRequest(group_id="g", topics=[
        odq.OffsetDeleteRequestTopic(name="t", partitions=[odq.OffsetDeleteRequestPartition(partition_index=0),
                                                           odq.OffsetDeleteRequestPartition(partition_index=8)])]), 0)
    assert od.error_code == 0
    assert {p.partition_index: p.error_code for p in od.topics[0].partitions} == {0: 0, 8: E.UNKNOWN_TOPIC_OR_PARTITION}
    od = call(apis, odq.OffsetDeleteRequest(group_id="missing", topics=[]), 0)
    assert od.error_code == E.GROUP_ID_NOT_FOUND
    for v in range(0, 3):
        dg = call(apis, dgq.DeleteGroupsRequest(groups_names=["g", "missing"]), v)
        expect = [("g", 0), ("missing", E.GROUP_ID_NOT_FOUND)] if v == 0 else [("g", E.GROUP_ID_NOT_FOUND),
                                                                               ("missing", E.GROUP_ID_NOT_FOUND)]
        assert [(x.group_id, x.error_code) for x in dg.results] == expect


def txn_commit_req(group="tg", pid=42, parts=((0, 10), (7, 1)), topic="t"):
    return tocq.TxnOffsetCommitRequest(
        transactional_id="tx", group_id=group, producer_id=pid, producer_epoch=0, topics=[
            tocq.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                tocq.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o) for p, o in parts])])


@pytest.mark.parametrize("v", range(0, 4))
def test_txn_offset_commit_versions(v):
    c, b, apis = setup()
    r = call_awaited(apis, txn_commit_req(), v)
    errs = {p.partition_index: p.error_code for t in r.topics for p in t.partitions}
    assert errs == {0: E.NONE, 7: E.UNKNOWN_TOPIC_OR_PARTITION}
    tp0 = TopicPartition("t", 0)
    # Pending until the transaction's marker reaches the group's __consumer_offsets partition.
    assert c.handle_fetch_offsets("tg", False, [tp0])[1][tp0].offset == -1
    c.on_transaction_completed(42, [c.partition_for("tg")], True)
    assert c.handle_fetch_offsets("tg", False, [tp0])[1][tp0].offset == 10
    r = call_awaited(apis, txn_commit_req(topic="nope", parts=((0, 1),)), v)
    assert r.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_txn_offset_commit_load_in_progress_for_old_clients():
    c, b, apis = setup()
    c.manager.loading_partitions.add(c.partition_for("tg"))
    # Clients before v2 do not know COORDINATOR_LOAD_IN_PROGRESS.
    assert call_awaited(apis, txn_commit_req(parts=((0, 1),)), 1).topics[0].partitions[0].error_code == \
        E.COORDINATOR_NOT_AVAILABLE
    assert call_awaited(apis, txn_commit_req(parts=((0, 1),)), 2).topics[0].partitions[0].error_code == \
        E.COORDINATOR_LOAD_IN_PROGRESS
