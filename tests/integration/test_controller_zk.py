"""The controller in-process against a real ZooKeeper, with a channel that records what it
would send: election and failover with epoch+1, new topics get leaders, broker loss and return,
AlterPartition's checks, ControlledShutdown, topic deletion; and once inside a broker's
ZooKeeper membership (ZkClusterMember), for what its config change watch tells it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from rivulet.common.types import TopicPartition
from rivulet.controller import zk_data as z
from rivulet.controller.controller import PREFERRED, UNCLEAN, ControllerConfig, KafkaController
from rivulet.controller.zk_client import KafkaZkClient, ZkBridge
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import alter_partition_request as apq
from rivulet.protocol.messages.leader_and_isr_request import LeaderAndIsrRequest
from rivulet.protocol.messages.stop_replica_request import StopReplicaRequest
from rivulet.protocol.messages.update_metadata_request import UpdateMetadataRequest
from rivulet.protocol.schema import Struct

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

TP = TopicPartition("orders", 0)


class _Any:
    def __eq__(self, other: object) -> bool:
        return True


ANY_MESSAGE = _Any()


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[int, Struct]] = []
        self.brokers: set[int] = set()
        self.closed = False

    def add_broker(self, broker: z.BrokerRegistration) -> None:
        self.brokers.add(broker.broker_id)

    def remove_broker(self, broker_id: int) -> None:
        self.brokers.discard(broker_id)

    def send(self, broker_id: int, request: Struct, callback=None) -> None:
        self.sent.append((broker_id, request))
        if callback is not None:
            callback(None)

    async def close(self) -> None:
        self.closed = True

    def of(self, kind: type, broker: int | None = None) -> list:
        return [r for b, r in self.sent if isinstance(r, kind) and (broker is None or b == broker)]


async def eventually(check: Callable[[], object], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.05)


class Cluster:
    """Broker registrations (each its own ZooKeeper session) and controllers, in one process."""

    def __init__(self, connect: str) -> None:
        self.connect = connect
        self.sessions: dict[int, KafkaZkClient] = {}
        self.controllers: dict[int, tuple[KafkaController, Recorder]] = {}
        self.admin = self._client()
        self.admin.create_top_level_paths()

    def _client(self) -> KafkaZkClient:
        c = KafkaZkClient(self.connect, session_timeout_ms=6000)
        c.start()
        return c

    def register(self, broker_id: int, rack: str | None = None, clean_start: bool = True) -> None:
        """``clean_start``: whether the broker says it found every log dir shut down cleanly."""
        c = self.sessions[broker_id] = self._client()
        c.register_broker(z.BrokerRegistration(broker_id, (z.EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
                                               rack=rack, clean_start=clean_start))

    def kill(self, broker_id: int) -> None:
        self.sessions.pop(broker_id).close()

    async def controller(self, broker_id: int, unclean: bool = False, rebalance_every: float | None = None,
                         elr: bool | Callable[[], bool] = False, min_isr: int = 1) -> tuple[KafkaController, Recorder]:
        """``elr``: as if eligible.leader.replicas.version 1 were finalized, or a function saying
        whether it is."""
        rec = Recorder()
        c = KafkaController(ControllerConfig(broker_id, unclean_leader_election_enable=unclean,
                                             auto_leader_rebalance_enable=rebalance_every is not None,
                                             leader_imbalance_check_interval_s=rebalance_every or 300,
                                             min_insync_replicas=min_isr),
                            ZkBridge(self._client()), lambda: rec, elr if callable(elr) else lambda: elr)
        c.startup()
        self.controllers[broker_id] = (c, rec)
        return c, rec

    async def stop_controller(self, broker_id: int, crash: bool = True) -> None:
        c, _ = self.controllers.pop(broker_id)
        if crash:  # the session ends without a resignation
            c._task.cancel()
            await c.zk.close()
        else:
            await c.shutdown()
            await c.zk.close()

    async def close(self) -> None:
        for b in list(self.controllers):
            await self.stop_controller(b, crash=False)
        for s in self.sessions.values():
            s.close()
        self.admin.close()

    async def with_topic(self, controller_id: int, replicas: dict[int, list[int]],
                         rebalance_every: float | None = None) -> tuple[KafkaController, Recorder]:
        """Brokers 1-3 registered, an active controller, topic "orders" with leaders."""
        for b in (1, 2, 3):
            self.register(b)
        c, rec = await self.controller(controller_id, rebalance_every=rebalance_every)
        await eventually(lambda: c.is_active)
        self.admin.create_topic(z.TopicAssignment("orders", None, replicas), {})
        await eventually(lambda: all(self.state(TopicPartition("orders", p)) is not None for p in replicas))
        return c, rec

    def state(self, tp: TopicPartition = TP) -> z.LeaderAndIsr | None:
        return self.admin.get_partition_state(tp)


@pytest.fixture
def run(zk_connect):
    def go(scenario: Callable[[Cluster], object]) -> None:
        async def main() -> None:
            cluster = Cluster(zk_connect)
            try:
                await scenario(cluster)
            finally:
                await cluster.close()
        asyncio.run(main())
    return go


def test_election_new_topic_broker_loss_and_failover(run):
    async def scenario(cl: Cluster) -> None:
        for b in (1, 2, 3):
            cl.register(b)
        c1, rec1 = await cl.controller(1)
        await eventually(lambda: c1.is_active)
        c2, rec2 = await cl.controller(2)
        await eventually(lambda: c2.active_controller_id == 1)
        assert not c2.is_active and c1.epoch == 1

        cl.admin.create_topic(z.TopicAssignment("orders", None, {0: [1, 2, 3], 1: [2, 3, 1]}), {})
        await eventually(lambda: cl.state() is not None and cl.state(TopicPartition("orders", 1)) is not None)
        assert cl.state() == z.LeaderAndIsr(1, 0, (1, 2, 3), 1, 0)
        assert cl.admin.get_topic_assignment("orders").topic_id is not None  # the controller gave it one
        await eventually(lambda: len(rec1.of(LeaderAndIsrRequest)) >= 3)
        lair = rec1.of(LeaderAndIsrRequest, broker=2)[-1]
        ps = [p for t in lair.topic_states for p in t.partition_states]
        assert {(p.partition_index, p.leader, p.is_new) for p in ps} == {(0, 1, True), (1, 2, True)}
        assert {ll.broker_id for ll in lair.live_leaders} == {1, 2}
        await eventually(lambda: rec1.of(UpdateMetadataRequest, broker=3))
        umr = rec1.of(UpdateMetadataRequest, broker=3)[-1]
        assert [b.id for b in umr.live_brokers] == [1, 2, 3] and umr.controller_id == 1

        cl.kill(1)  # broker 1 (not the controller's session) dies
        await eventually(lambda: cl.state().leader == 2)
        assert cl.state().isr == (2, 3) and cl.state().leader_epoch == 1
        # As Kafka's onReplicasBecomeOffline: the elections first, then the dead replica leaves the
        # ISRs of the partitions it followed, a write of its own that may come a moment later.
        await eventually(lambda: cl.state(TopicPartition("orders", 1)).isr == (2, 3))
        assert cl.state(TopicPartition("orders", 1)).leader == 2

        cl.register(1)  # it returns: a follower again, told the leadership
        await eventually(lambda: rec1.brokers == {1, 2, 3})
        await eventually(lambda: rec1.of(LeaderAndIsrRequest, broker=1)[-1:] and any(
            p.leader == 2 for t in rec1.of(LeaderAndIsrRequest, broker=1)[-1].topic_states for p in t.partition_states))

        await cl.stop_controller(1)  # the controller dies (kill -9): 2 takes over with epoch 2
        await eventually(lambda: c2.is_active)
        assert c2.epoch == 2 and cl.admin.get_controller_epoch().epoch == 2
        # Active first, then it reads the topics from ZooKeeper: wait for them to be loaded.
        await eventually(lambda: TP in c2.ctx.leadership)
        assert c2.ctx.leadership[TP] == cl.state()
        await eventually(lambda: rec2.of(UpdateMetadataRequest, broker=3))
    run(scenario)


def test_leaderless_partition_waits_for_its_isr_unless_unclean(run):
    async def scenario(cl: Cluster) -> None:
        for b in (1, 2):
            cl.register(b)
        c, rec = await cl.controller(9)
        await eventually(lambda: c.is_active)
        cl.admin.create_topic(z.TopicAssignment("orders", None, {0: [1, 2]}), {})
        await eventually(lambda: cl.state() is not None)
        ctx = c.ctx
        # broker 2 falls out of the ISR (as its leader would say through AlterPartition)
        s = cl.state()
        r = await c.alter_partition(apq.AlterPartitionRequest(broker_id=1, broker_epoch=ctx.broker_epoch(1), topics=[
            apq.TopicData(topic_id=ctx.topic_id("orders"), partitions=[apq.PartitionData(
                partition_index=0, leader_epoch=s.leader_epoch, new_isr_with_epochs=[
                    apq.BrokerState(broker_id=1, broker_epoch=ctx.broker_epoch(1))],
                partition_epoch=s.partition_epoch)])]), 3)
        assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0
        assert cl.state().isr == (1,)
        cl.kill(1)
        await eventually(lambda: cl.state().leader == -1)
        assert cl.state().isr == (1,)  # the last in-sync replica stays, to lead cleanly on its return
        cl.admin.set_entity_config("topics", "orders", {"unclean.leader.election.enable": "true"})
        cl.kill(2)
        cl.register(2)  # a broker event: the controller looks again, now allowed to elect uncleanly
        await eventually(lambda: cl.state().leader == 2)
        assert cl.state().isr == (2,)
    run(scenario)


async def _orders_at_elr_level_1(cl: Cluster, elr: bool | Callable[[], bool] = True
                                 ) -> tuple[KafkaController, Recorder]:
    """Three brokers, an active controller told eligible.leader.replicas.version 1 is finalized
    (``elr``, as ``Cluster.controller`` takes it; min ISR 2), and the topic "orders" with one
    partition on all three."""
    for b in (1, 2, 3):
        cl.register(b)
    c, rec = await cl.controller(9, elr=elr, min_isr=2)
    await eventually(lambda: c.is_active)
    cl.admin.create_topic(z.TopicAssignment("orders", None, {0: [1, 2, 3]}), {})
    await eventually(lambda: cl.state() is not None)
    return c, rec


def test_at_elr_version_1_replicas_lost_below_min_isr_stay_eligible(run):
    """KIP-966 (the controller is told level 1 is finalized): RF 3, min ISR 2. Members lost
    below min ISR move into the ELR, the last one empties the ISR and is remembered as the last
    known leader, the brokers hear of both, and the first eligible replica back leads alone; its
    ISR back at min ISR clears the ELR."""
    async def scenario(cl: Cluster) -> None:
        c, rec = await _orders_at_elr_level_1(cl)
        cl.kill(3)
        await eventually(lambda: cl.state().isr == (1, 2))
        assert cl.state().eligible_leader_replicas == ()
        cl.kill(2)
        await eventually(lambda: cl.state().isr == (1,))
        assert (cl.state().leader, cl.state().eligible_leader_replicas) == (1, (2,))
        cl.kill(1)
        await eventually(lambda: cl.state().leader == -1)
        s = cl.state()
        assert (s.isr, s.eligible_leader_replicas, s.last_known_elr) == ((), (1, 2), (1,))
        cl.register(2)
        await eventually(lambda: cl.state().leader == 2)
        s = cl.state()
        assert (s.isr, s.eligible_leader_replicas, s.last_known_elr, s.leader_recovery_state) == ((2,), (1,), (), 0)
        sent = [p for r in rec.of(UpdateMetadataRequest) for t in r.topic_states for p in t.partition_states]
        assert sent[-1].leader == 2 and sent[-1].eligible_leader_replicas == [1]
        assert any(p.leader == -1 and p.eligible_leader_replicas == [1, 2] and p.last_known_elr == [1] for p in sent)
        cl.register(3)
        await eventually(lambda: 3 in c.ctx.live_brokers)
        r = await c.alter_partition(apq.AlterPartitionRequest(broker_id=2, broker_epoch=-1, topics=[apq.TopicData(
            topic_name="orders", partitions=[apq.PartitionData(partition_index=0, leader_epoch=s.leader_epoch,
                                                               new_isr=[2, 3], partition_epoch=s.partition_epoch)])]), 1)
        assert r.topics[0].partitions[0].error_code == 0
        assert (cl.state().isr, cl.state().eligible_leader_replicas) == ((2, 3), ())
    run(scenario)


def test_at_elr_version_1_an_unclean_election_comes_after_the_elr(run):
    """KIP-966 (level 1 forced): a replica outside the ISR and the ELR does not lead on its own; an
    ElectLeaders UNCLEAN makes it leader, alone, RECOVERING, the ELR forgotten."""
    async def scenario(cl: Cluster) -> None:
        c, rec = await _orders_at_elr_level_1(cl)
        for b, isr in ((3, (1, 2)), (2, (1,)), (1, ())):
            cl.kill(b)
            await eventually(lambda isr=isr: cl.state().isr == isr)
        assert (cl.state().leader, cl.state().eligible_leader_replicas) == (-1, (1, 2))
        cl.register(3)
        await eventually(lambda: 3 in c.ctx.live_brokers)
        assert cl.state().leader == -1  # 3 left the ISR while it had min ISR: not eligible
        assert (await c.elect_leaders(PREFERRED, [TP]))[TP][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        assert (await c.elect_leaders(UNCLEAN, [TP]))[TP][0] == ErrorCode.NONE
        s = cl.state()
        assert (s.leader, s.isr, s.eligible_leader_replicas, s.last_known_elr, s.leader_recovery_state) == \
            (3, (3,), (), (), 1)
        assert (await c.elect_leaders(UNCLEAN, [TP]))[TP][0] == ErrorCode.ELECTION_NOT_NEEDED
    run(scenario)


def test_back_at_elr_version_0_each_partition_forgets_its_elr_at_its_next_change(run):
    """A cluster downgraded from eligible.leader.replicas.version 1 (forced here): the lists stay
    until the partition's next change, which drops them."""
    async def scenario(cl: Cluster) -> None:
        level = [1]
        c, rec = await _orders_at_elr_level_1(cl, elr=lambda: level[0] >= 1)
        cl.kill(3)
        await eventually(lambda: cl.state().isr == (1, 2))
        cl.kill(2)
        await eventually(lambda: cl.state().isr == (1,))
        assert cl.state().eligible_leader_replicas == (2,)
        level[0] = 0
        cl.register(3)  # no change to the partition: the list stays
        await eventually(lambda: 3 in c.ctx.live_brokers)
        assert cl.state().eligible_leader_replicas == (2,)
        cl.kill(1)  # its leader goes: the change that follows forgets it
        await eventually(lambda: cl.state().leader == -1)
        assert (cl.state().isr, cl.state().eligible_leader_replicas, cl.state().last_known_elr) == ((1,), (), ())
    run(scenario)


def test_at_elr_version_1_a_controlled_shutdown_leaves_the_broker_eligible(run):
    """KIP-966 (level 1 forced): a broker shutting down cleanly leaves the ISR and, once that is below
    min ISR, waits in the ELR; with no other replica it leaves the ISR empty and the partition
    leaderless rather than led by a broker on its way out."""
    async def scenario(cl: Cluster) -> None:
        c, rec = await _orders_at_elr_level_1(cl)
        assert (await c.controlled_shutdown(1, c.ctx.broker_epoch(1))).remaining_partitions == []
        assert (cl.state().leader, cl.state().isr, cl.state().eligible_leader_replicas) == (2, (2, 3), ())
        assert (await c.controlled_shutdown(2, c.ctx.broker_epoch(2))).remaining_partitions == []
        assert (cl.state().leader, cl.state().isr, cl.state().eligible_leader_replicas) == (3, (3,), (2,))
        assert (await c.controlled_shutdown(3, c.ctx.broker_epoch(3))).remaining_partitions == []
        s = cl.state()
        assert (s.leader, s.isr, s.eligible_leader_replicas, s.last_known_elr) == (-1, (), (2, 3), (3,))
    run(scenario)


def test_at_elr_version_1_a_broker_back_without_a_clean_start_is_not_eligible(run):
    """KIP-966 (level 1 forced): a broker that registers again without a clean start (kill -9, a lost
    disk) leaves every ELR before it is live, the last known leader kept, and is not elected; an
    eligible replica that stopped cleanly leads alone when it is back."""
    async def scenario(cl: Cluster) -> None:
        c, rec = await _orders_at_elr_level_1(cl)
        for b, isr in ((3, (1, 2)), (2, (1,)), (1, ())):
            cl.kill(b)
            await eventually(lambda isr=isr: cl.state().isr == isr)
        assert (cl.state().leader, cl.state().eligible_leader_replicas, cl.state().last_known_elr) == (-1, (1, 2), (1,))
        epoch = cl.state().partition_epoch
        cl.register(1, clean_start=False)
        await eventually(lambda: 1 in c.ctx.live_brokers)
        s = cl.state()
        assert (s.leader, s.isr, s.eligible_leader_replicas, s.last_known_elr) == (-1, (), (2,), (1,))
        assert s.partition_epoch == epoch + 1
        # the brokers heard of it
        sent = [p for r in rec.of(UpdateMetadataRequest) for t in r.topic_states for p in t.partition_states]
        assert sent[-1].eligible_leader_replicas == [2] and sent[-1].leader == -1
        cl.register(2)  # clean
        await eventually(lambda: cl.state().leader == 2)
        s = cl.state()
        assert (s.isr, s.eligible_leader_replicas, s.last_known_elr, s.leader_recovery_state) == ((2,), (), (), 0)
        cl.register(3, clean_start=False)  # in no ISR or ELR: nothing to change
        await eventually(lambda: 3 in c.ctx.live_brokers)
        assert cl.state() == s
    run(scenario)


def test_at_elr_version_1_a_failover_catches_an_unclean_start_made_while_no_controller_was_active(run):
    """KIP-966 (level 1 forced): a broker that registers without a clean start while no controller
    is active leaves the ELR at the next controller's failover, which finds its registration
    newer than the one recorded in /rivulet/accounted_registrations; another broker whose unclean
    start an earlier controller dealt with, and which rejoined the ISR since, keeps its place."""
    async def scenario(cl: Cluster) -> None:
        c, rec = await _orders_at_elr_level_1(cl)
        cl.kill(3)
        await eventually(lambda: cl.state().isr == (1, 2))
        cl.register(3, clean_start=False)
        await eventually(lambda: 3 in c.ctx.live_brokers)
        s = cl.state()
        r = await c.alter_partition(apq.AlterPartitionRequest(broker_id=1, broker_epoch=-1, topics=[apq.TopicData(
            topic_name="orders", partitions=[apq.PartitionData(partition_index=0, leader_epoch=s.leader_epoch,
                                                               new_isr=[1, 2, 3], partition_epoch=s.partition_epoch)])]), 1)
        assert r.topics[0].partitions[0].error_code == 0 and cl.state().isr == (1, 2, 3)
        for b, isr in ((2, (1, 3)), (1, (3,))):
            cl.kill(b)
            await eventually(lambda isr=isr: cl.state().isr == isr)
        assert (cl.state().leader, cl.state().eligible_leader_replicas) == (3, (1,))
        accounted = cl.admin.get_accounted_registrations()
        assert accounted is not None and accounted[3] == c.ctx.broker_epoch(3)

        await cl.stop_controller(9)  # the controller dies; 1 comes back uncleanly before another
        await eventually(lambda: cl.admin.get_controller_id() is None)
        cl.register(1, clean_start=False)
        assert cl.state().eligible_leader_replicas == (1,)  # nobody to act on it yet
        c2, rec2 = await cl.controller(8, elr=True, min_isr=2)
        await eventually(lambda: c2.is_active and 1 in c2.ctx.live_brokers)
        await eventually(lambda: cl.state().eligible_leader_replicas == ())
        s = cl.state()
        assert (s.leader, s.isr, s.eligible_leader_replicas, s.last_known_elr) == (3, (3,), (), ())
        await eventually(lambda: cl.admin.get_accounted_registrations() == {**accounted, 1: c2.ctx.broker_epoch(1)})
    run(scenario)


def test_at_elr_version_1_a_reassignment_completes_through_the_elr_rule(run):
    """KIP-966 (level 1 forced): the last step of a reassignment restricts the ISR to the target through
    the ELR rule, as Kafka's PartitionChangeBuilder: below min ISR (counted over the replicas
    before the step) the removed in-sync replicas are listed, as Kafka lists them; the next
    change at min ISR clears them."""
    async def scenario(cl: Cluster) -> None:
        c, rec = await _orders_at_elr_level_1(cl)
        cl.register(4)
        await eventually(lambda: 4 in c.ctx.live_brokers)
        assert (await c.alter_reassignments({TP: [1]}))[TP][0] == ErrorCode.NONE  # all in sync: done at once
        s = cl.state()
        assert cl.admin.get_topic_assignment("orders").replicas == {0: [1]}
        assert (s.leader, s.isr, s.eligible_leader_replicas, s.last_known_elr) == (1, (1,), (2, 3), ())
        assert (await c.alter_reassignments({TP: [1, 4]}))[TP][0] == ErrorCode.NONE
        s = cl.state()
        r = await c.alter_partition(apq.AlterPartitionRequest(broker_id=1, broker_epoch=-1, topics=[apq.TopicData(
            topic_name="orders", partitions=[apq.PartitionData(partition_index=0, leader_epoch=s.leader_epoch,
                                                               new_isr=[1, 4], partition_epoch=s.partition_epoch)])]), 1)
        assert r.topics[0].partitions[0].error_code == 0
        assert cl.admin.get_topic_assignment("orders").replicas == {0: [1, 4]}
        assert (cl.state().leader, cl.state().isr, cl.state().eligible_leader_replicas) == (1, (1, 4), ())
    run(scenario)


def test_at_elr_version_1_min_isr_is_the_cluster_s_and_its_changes_clear_the_lists(run):
    """KIP-966, dormant: without a topic override the controller takes the cluster-level
    min.insync.replicas from /config/brokers/<default> over its own (3 over 2 here). A topic's
    min ISR altered clears that topic's ELR and last known ELR; the cluster-level one set, even
    to its value, clears every partition's (Kafka's ClearElrRecord). The brokers hear of it
    with a leader epoch moved (what makes them take a new partition epoch); the leaders stay."""
    async def scenario(cl: Cluster) -> None:
        cl.admin.set_entity_config("brokers", "<default>", {"min.insync.replicas": "3"})
        c, rec = await _orders_at_elr_level_1(cl)
        audit = TopicPartition("audit", 0)
        cl.admin.create_topic(z.TopicAssignment("audit", None, {0: [1, 2, 3]}), {})
        await eventually(lambda: cl.state(audit) is not None)
        cl.kill(3)
        await eventually(lambda: cl.state().isr == (1, 2) and cl.state(audit).isr == (1, 2))
        assert cl.state().eligible_leader_replicas == cl.state(audit).eligible_leader_replicas == (3,)
        before = cl.state()
        sent = len(rec.of(LeaderAndIsrRequest))
        cl.admin.set_entity_config("topics", "orders", {"min.insync.replicas": "2"})
        c.min_isr_altered("orders")  # what the broker's config change notification tells it
        await eventually(lambda: cl.state().eligible_leader_replicas == ())
        s = cl.state()
        assert (s.leader, s.isr, s.last_known_elr, s.leader_epoch) == (before.leader, (1, 2), (), before.leader_epoch + 1)
        assert cl.state(audit).eligible_leader_replicas == (3,)
        await eventually(lambda: len(rec.of(LeaderAndIsrRequest)) > sent)
        told = [p for r in rec.of(UpdateMetadataRequest) for t in r.topic_states for p in t.partition_states
                if t.topic_name == "orders"]
        assert told[-1].eligible_leader_replicas == [] and told[-1].leader_epoch == s.leader_epoch
        c.min_isr_altered(None)  # the cluster-level one set to 3 again
        await eventually(lambda: cl.state(audit).eligible_leader_replicas == ())
        assert cl.state(audit).isr == (1, 2) and cl.state().leader_epoch == s.leader_epoch  # nothing left to clear
    run(scenario)


def test_a_broker_s_config_change_watch_tells_its_controller_of_min_isr_changes(run, tmp_path):
    """The whole path of increment 7 on one broker's ZooKeeper membership (in-process, its
    controller told level 1 is finalized; min ISR 3): a topic's min.insync.replicas altered
    through it, then the cluster-level one set to the value in force, each reach its
    controller by the change notification and clear the ELR."""
    from rivulet.server.config import BrokerConfig
    from rivulet.server.zk_cluster import ClusterChangeListeners, ZkClusterMember

    async def scenario(cl: Cluster) -> None:
        for b in (1, 2, 3):
            cl.register(b)
        member = ZkClusterMember(BrokerConfig({"zookeeper.connect": cl.connect, "broker.id": "9",
                                               "log.dirs": str(tmp_path), "min.insync.replicas": "3"}))
        member.init_finalized_features({})
        member.prepare(lambda: True)
        audit = TopicPartition("audit", 0)
        try:
            await member.start([z.EndPoint("PLAINTEXT", "127.0.0.1", 9009)], lambda _e: None,
                               ClusterChangeListeners(), {}, clean_start=True)
            member.start_controller()
            await eventually(lambda: member.controller.is_active)
            for topic in ("orders", "audit"):
                cl.admin.create_topic(z.TopicAssignment(topic, None, {0: [1, 2, 3]}), {})
            await eventually(lambda: cl.state() is not None and cl.state(audit) is not None)
            cl.kill(3)
            await eventually(lambda: cl.state().eligible_leader_replicas == cl.state(audit).eligible_leader_replicas
                             == (3,))
            member.write_topic_config("orders", {"min.insync.replicas": "2"})
            await eventually(lambda: cl.state().eligible_leader_replicas == ())
            assert cl.state(audit).eligible_leader_replicas == (3,)
            epoch = cl.state().leader_epoch
            member.write_broker_level("", {"min.insync.replicas": "3"}, {"min.insync.replicas"})
            await eventually(lambda: cl.state(audit).eligible_leader_replicas == ())
            assert cl.state().leader_epoch == epoch  # nothing left to clear there
        finally:
            await member.stop()
    run(scenario)


def test_alter_partition_checks(run):
    async def scenario(cl: Cluster) -> None:
        c, _ = await cl.with_topic(1, {0: [1, 2, 3]})
        ctx = c.ctx
        s = cl.state()

        async def alter(broker: int, isr: list[int], leader_epoch: int = s.leader_epoch,
                        partition_epoch: int | None = None, broker_epoch: int | None = None, version: int = 2):
            req = apq.AlterPartitionRequest(
                broker_id=broker, broker_epoch=ctx.broker_epoch(broker) if broker_epoch is None else broker_epoch,
                topics=[apq.TopicData(topic_name="orders", topic_id=ctx.topic_id("orders"), partitions=[
                    apq.PartitionData(partition_index=0, leader_epoch=leader_epoch, new_isr=isr,
                                      partition_epoch=cl.state().partition_epoch if partition_epoch is None
                                      else partition_epoch)])])
            resp = await c.alter_partition(req, version)
            return resp.error_code, (resp.topics[0].partitions[0] if resp.topics else None)

        assert (await alter(1, [1, 2], broker_epoch=12345))[0] == ErrorCode.STALE_BROKER_EPOCH
        assert (await alter(2, [2]))[1].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (await alter(1, [1], leader_epoch=-1))[1].error_code == ErrorCode.FENCED_LEADER_EPOCH
        assert (await alter(1, [1], partition_epoch=7))[1].error_code == ErrorCode.INVALID_UPDATE_VERSION
        assert (await alter(1, [1, 4]))[1].error_code == ErrorCode.INELIGIBLE_REPLICA
        assert (await alter(1, [1, 4], version=0))[1].error_code == ErrorCode.OPERATION_NOT_ATTEMPTED
        code, p = await alter(1, [1, 2])
        assert code == 0 and p.error_code == 0 and p.isr == [1, 2] and p.partition_epoch == 1
        assert cl.state().isr == (1, 2) and cl.state().leader_epoch == s.leader_epoch
        assert (await alter(1, [1], partition_epoch=0))[1].error_code == ErrorCode.INVALID_UPDATE_VERSION
        # a retry of what is applied succeeds, its partition epoch aside, as Kafka's
        assert (await alter(1, [1, 2], partition_epoch=0))[1].error_code == 0
        bad = apq.AlterPartitionRequest(broker_id=1, broker_epoch=-1, topics=[apq.TopicData(
            topic_id=uuid.uuid4(), partitions=[apq.PartitionData(partition_index=0)])])
        assert (await c.alter_partition(bad, 2)).topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    run(scenario)


def test_controlled_shutdown_moves_leadership_and_deletion_stops_replicas(run):
    async def scenario(cl: Cluster) -> None:
        c, rec = await cl.with_topic(3, {0: [1, 2, 3], 1: [2, 1], 2: [1]})
        resp = await c.controlled_shutdown(1, c.ctx.broker_epoch(1))
        assert resp.error_code == 0 and resp.remaining_partitions == []
        assert cl.state().leader == 2 and cl.state().isr == (2, 3)
        assert cl.state(TopicPartition("orders", 1)).isr == (2,)
        assert cl.state(TopicPartition("orders", 2)).leader == 1  # RF 1: it stays, not counted
        stops = rec.of(StopReplicaRequest, broker=1)
        assert stops and not any(p.delete_partition for t in stops[-1].topic_states for p in t.partition_states)
        assert (await c.controlled_shutdown(7, -1)).error_code == ErrorCode.BROKER_NOT_AVAILABLE
        assert (await c.controlled_shutdown(2, 99)).error_code == ErrorCode.STALE_BROKER_EPOCH

        cl.admin.request_topic_deletion("orders")
        await eventually(lambda: cl.admin.get_all_topics() == [])
        # The request znode goes just after the topic's: wait for it too.
        await eventually(lambda: cl.admin.get_topic_deletions() == [] and "orders" not in c.ctx.assignments)
        deletes = [r for r in rec.of(StopReplicaRequest) if any(
            p.delete_partition for t in r.topic_states for p in t.partition_states)]
        assert deletes
        cl.admin.request_topic_deletion("nothing-such")
        await eventually(lambda: cl.admin.get_topic_deletions() == [])
    run(scenario)


async def _lose_preferred(cl: Cluster, c: KafkaController) -> None:
    """Broker 1, the preferred leader, dies and returns, out of the ISR."""
    cl.kill(1)
    await eventually(lambda: cl.state().leader == 2)
    cl.register(1)
    await eventually(lambda: 1 in c.ctx.live_brokers)


async def _back_in_isr(cl: Cluster, c: KafkaController) -> z.LeaderAndIsr:
    """Its leader (2) puts broker 1 back in the ISR; the state before that."""
    s = cl.state()
    r = await c.alter_partition(apq.AlterPartitionRequest(broker_id=2, broker_epoch=-1, topics=[apq.TopicData(
        topic_name="orders", partitions=[apq.PartitionData(partition_index=0, leader_epoch=s.leader_epoch,
                                                           new_isr=[2, 3, 1], partition_epoch=s.partition_epoch)])]), 1)
    assert r.topics[0].partitions[0].error_code == 0
    return s


def test_elect_leaders_preferred_and_unclean(run):
    async def scenario(cl: Cluster) -> None:
        c, _ = await cl.with_topic(3, {0: [1, 2, 3]})
        assert await c.elect_leaders(PREFERRED, [TP]) == {TP: (ErrorCode.ELECTION_NOT_NEEDED, ANY_MESSAGE)}
        await _lose_preferred(cl, c)
        (code, _), = (await c.elect_leaders(PREFERRED, [TP])).values()
        assert code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # 1 is not back in the ISR
        s = await _back_in_isr(cl, c)
        assert await c.elect_leaders(PREFERRED, [TP]) == {TP: (ErrorCode.NONE, None)}
        assert cl.state().leader == 1 and cl.state().leader_epoch == s.leader_epoch + 1
        (code, _), = (await c.elect_leaders(UNCLEAN, [TP])).values()
        assert code == ErrorCode.ELECTION_NOT_NEEDED
        (code, _), = (await c.elect_leaders(PREFERRED, [TopicPartition("nothing", 0)])).values()
        assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    run(scenario)


def test_auto_leader_rebalance_gives_leadership_back(run):
    async def scenario(cl: Cluster) -> None:
        c, _ = await cl.with_topic(3, {0: [1, 2, 3]}, rebalance_every=0.2)
        await _lose_preferred(cl, c)
        await _back_in_isr(cl, c)
        await eventually(lambda: cl.state().leader == 1)
    run(scenario)


def test_reassignment_waits_for_the_new_replicas_then_drops_the_old(run):
    async def scenario(cl: Cluster) -> None:
        cl.register(4)
        c, rec = await cl.with_topic(3, {0: [1, 2]})
        assert (await c.alter_reassignments({TP: [4, 1, 2, 5]}))[TP][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert (await c.alter_reassignments({TP: [4, 4]}))[TP][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert (await c.alter_reassignments({TP: None}))[TP][0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        # KIP-860 (v1): a reassignment that may not change the replication factor
        assert await c.alter_reassignments({TP: [3, 4, 1]}, allow_rf_change=False) == {
            TP: (ErrorCode.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 2 to 3")}
        before = cl.state()
        assert await c.alter_reassignments({TP: [3, 4]}, allow_rf_change=False) == {TP: (ErrorCode.NONE, None)}
        a = cl.admin.get_topic_assignment("orders")
        assert a.replicas[0] == [3, 4, 1, 2] and a.adding == {0: [3, 4]} and a.removing == {0: [1, 2]}
        assert await c.list_reassignments(None) == {TP: ([3, 4, 1, 2], [3, 4], [1, 2])}
        assert cl.state().leader == 1 and cl.state().leader_epoch == before.leader_epoch + 1
        lair = rec.of(LeaderAndIsrRequest, broker=4)
        assert lair and [p.replicas for t in lair[-1].topic_states for p in t.partition_states] == [[3, 4, 1, 2]]
        # the new replicas catch up: the leader adds them to the ISR, and the reassignment completes
        s = cl.state()
        r = await c.alter_partition(apq.AlterPartitionRequest(broker_id=1, broker_epoch=-1, topics=[apq.TopicData(
            topic_name="orders", partitions=[apq.PartitionData(partition_index=0, leader_epoch=s.leader_epoch,
                                                               new_isr=[1, 2, 3, 4], partition_epoch=s.partition_epoch)])]),
            1)
        assert r.topics[0].partitions[0].error_code == 0
        assert cl.admin.get_topic_assignment("orders").replicas == {0: [3, 4]}
        assert cl.admin.get_topic_assignment("orders").adding == {}
        assert cl.state().leader == 3 and cl.state().isr == (3, 4)
        assert await c.list_reassignments(None) == {}
        deleted = {b for b, r in rec.sent if isinstance(r, StopReplicaRequest)
                   and any(p.delete_partition for t in r.topic_states for p in t.partition_states)}
        assert deleted == {1, 2}
    run(scenario)


def test_a_new_controller_resumes_a_reassignment_and_cancel_reverts(run):
    async def scenario(cl: Cluster) -> None:
        cl.register(4)
        c, _ = await cl.with_topic(3, {0: [1, 2]})
        await c.alter_reassignments({TP: [1, 4]})
        await cl.stop_controller(3)
        c2, _ = await cl.controller(9)
        await eventually(lambda: c2.is_active)
        assert await c2.list_reassignments([TP]) == {TP: ([1, 4, 2], [4], [2])}
        assert await c2.alter_reassignments({TP: None}) == {TP: (ErrorCode.NONE, None)}
        assert cl.admin.get_topic_assignment("orders").replicas == {0: [1, 2]}
        assert await c2.list_reassignments(None) == {}
    run(scenario)


def test_deletion_waits_for_an_offline_replica(run):
    async def scenario(cl: Cluster) -> None:
        c, rec = await cl.with_topic(3, {0: [1, 2]})
        cl.kill(1)
        await eventually(lambda: 1 not in c.ctx.live_brokers)
        cl.admin.request_topic_deletion("orders")
        await eventually(lambda: c.ctx.deletion_pending == {"orders": {1}})
        assert cl.admin.get_all_topics() == ["orders"]  # not before broker 1 deleted its replica
        cl.register(1)
        await eventually(lambda: cl.admin.get_all_topics() == [])
        stops = rec.of(StopReplicaRequest, broker=1)
        assert any(p.delete_partition for r in stops for t in r.topic_states for p in t.partition_states)
    run(scenario)


def _expire_session(connect: str, client: KafkaZkClient) -> None:
    """Another client attaches to the same session and closes it: the server expires it."""
    from kazoo.client import KazooClient

    session_id, password = client.zk.client_id
    twin = KazooClient(hosts=connect, client_id=(session_id, password))
    twin.start(timeout=15)
    twin.stop()
    twin.close()


def test_a_controller_that_loses_its_session_resigns(run, zk_connect):
    async def scenario(cl: Cluster) -> None:
        for b in (1, 2):
            cl.register(b)
        c1, _ = await cl.controller(1)
        await eventually(lambda: c1.is_active)
        c2, _ = await cl.controller(2)
        await eventually(lambda: c2.active_controller_id == 1)
        _expire_session(zk_connect, c1.client)
        # until it notices, the old one may still think it leads: its writes are fenced meanwhile
        await eventually(lambda: cl.admin.get_controller_epoch().epoch == 2 and c1.is_active != c2.is_active)
        await eventually(lambda: (c1.active_controller_id, c2.active_controller_id) == ((1, 1) if c1.is_active else (2, 2)))
    run(scenario)
