"""The controller's requests, built from its context, encode and decode at every version."""

from __future__ import annotations

import uuid

import pytest

from rivulet.common.types import TopicPartition
from rivulet.controller.channel import RequestBatch
from rivulet.controller.context import ControllerContext
from rivulet.controller.zk_client import ControllerEpoch
from rivulet.controller.zk_data import BrokerRegistration, EndPoint, LeaderAndIsr, TopicAssignment

pytestmark = pytest.mark.fast

TID = uuid.uuid4()


def context() -> ControllerContext:
    ctx = ControllerContext(ControllerEpoch(3, 2))
    for b in (1, 2):
        ctx.live_brokers[b] = BrokerRegistration(b, (EndPoint("INTERNAL", "10.0.0.%d" % b, 9094),
                                                     EndPoint("PLAINTEXT", "h%d" % b, 9092)), rack="r%d" % b,
                                                 epoch=100 + b)
    ctx.assignments["t"] = TopicAssignment("t", TID, {0: [1, 2, 3], 1: [2, 1, 3]})
    ctx.leadership[TopicPartition("t", 0)] = LeaderAndIsr(1, 4, (1, 2), 3, 7)
    ctx.leadership[TopicPartition("t", 1)] = LeaderAndIsr(2, 0, (2, 1), 3, 0)
    return ctx


class Sink:
    def __init__(self) -> None:
        self.sent: list = []

    def add_broker(self, broker) -> None: ...

    def remove_broker(self, broker_id: int) -> None: ...

    def send(self, broker_id, request, callback=None) -> None:
        self.sent.append((broker_id, request))

    async def close(self) -> None: ...


def test_one_request_of_each_kind_per_live_broker_round_trips():
    ctx = context()
    batch = RequestBatch(controller_id=1, listener="INTERNAL")
    batch.add_leader_and_isr([1, 2, 3], TopicPartition("t", 0), is_new=True)
    batch.add_leader_and_isr([1, 2], TopicPartition("t", 1))
    batch.add_stop_replica(2, TopicPartition("t", 1), delete=True)
    sink = Sink()
    batch.send(ctx, sink)
    kinds = [(b, type(r).__name__) for b, r in sink.sent]
    # broker 3 is not live: it gets nothing
    assert kinds == [(1, "LeaderAndIsrRequest"), (2, "LeaderAndIsrRequest"), (1, "UpdateMetadataRequest"),
                     (2, "UpdateMetadataRequest"), (2, "StopReplicaRequest")]
    assert not batch.leader_and_isr and not batch.update_metadata_partitions
    for _, req in sink.sent:
        lo, hi = req.VALID_VERSIONS
        for v in range(max(lo, 1), hi + 1):
            again = type(req).decode(req.encode(v), v)
            assert again.controller_id == 1 and again.controller_epoch == 3
    lair = sink.sent[1][1]
    p = {x.partition_index: x for t in lair.topic_states for x in t.partition_states}
    assert p[0].is_new and p[0].leader_epoch == 4 and p[0].partition_epoch == 7 and p[0].replicas == [1, 2, 3]
    assert lair.broker_epoch == 102 and lair.topic_states[0].topic_id == TID
    assert [(ll.broker_id, ll.host_name, ll.port) for ll in lair.live_leaders] == [(1, "10.0.0.1", 9094),
                                                                                 (2, "10.0.0.2", 9094)]
    umr = sink.sent[2][1]
    assert [(b.id, b.rack, [e.listener for e in b.endpoints]) for b in umr.live_brokers] == [
        (1, "r1", ["INTERNAL", "PLAINTEXT"]), (2, "r2", ["INTERNAL", "PLAINTEXT"])]
    ups = {x.partition_index: x for t in umr.topic_states for x in t.partition_states}
    assert ups[0].offline_replicas == [3] and ups[0].zk_version == 7
    stop = sink.sent[4][1]
    assert [(x.partition_index, x.leader_epoch, x.delete_partition) for x in stop.topic_states[0].partition_states] \
        == [(1, -2, True)]


def test_a_topic_being_deleted_shows_leader_minus_two():
    ctx = context()
    ctx.topics_to_delete.add("t")
    umr = RequestBatch(1).build_update_metadata(ctx, 1, {TopicPartition("t", 0)})
    assert umr.topic_states[0].partition_states[0].leader == -2


def test_the_elr_lists_ride_in_update_metadata_as_rivulet_tagged_fields():
    """KIP-966's lists reach the brokers' caches (for DescribeTopicPartitions) as tagged fields
    of UpdateMetadata v6+, an API Kafka 4 removed: empty lists add no byte, so a partition
    without them encodes as before."""
    from rivulet.protocol.messages import update_metadata_request as umr
    from rivulet.server.handlers.replication import update_from_request

    ctx = context()
    tp = TopicPartition("t", 0)
    ctx.leadership[tp] = LeaderAndIsr(-1, 5, (), 3, 8)
    plain = RequestBatch(1).build_update_metadata(ctx, 1, {tp})
    ctx.leadership[tp] = LeaderAndIsr(-1, 5, (), 3, 8, eligible_leader_replicas=(2, 3), last_known_elr=(1,))
    with_elr = RequestBatch(1).build_update_metadata(ctx, 1, {tp})
    for v in range(6, umr.UpdateMetadataRequest.VALID_VERSIONS[1] + 1):
        req = umr.UpdateMetadataRequest.decode(with_elr.encode(v), v)
        cached = update_from_request(req, v).partitions[tp]
        assert (cached.leader, cached.isr, cached.eligible_leader_replicas, cached.last_known_elr) == \
            (-1, [], [2, 3], [1])
        # the two tagged fields alone: tag, size, compact array length and 4 bytes a broker id
        assert len(with_elr.encode(v)) - len(plain.encode(v)) == (3 + 2 * 4) + (3 + 4)
        assert update_from_request(umr.UpdateMetadataRequest.decode(plain.encode(v), v), v) \
            .partitions[tp].eligible_leader_replicas == []
    # below v6 (not flexible) they do not travel
    old = update_from_request(umr.UpdateMetadataRequest.decode(with_elr.encode(5), 5), 5).partitions[tp]
    assert (old.eligible_leader_replicas, old.last_known_elr) == ([], [])
