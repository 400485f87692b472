"""The leader's replication state of one partition: follower LEOs, the HW over the ISR, ISR
shrink and expansion through AlterPartition, min.insync.replicas, leader epochs."""

from __future__ import annotations

import uuid

import pytest

from rivulet.common.time import MockClock
from rivulet.common.types import TopicPartition
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.replication.partition import (
    FollowerState,
    LeaderAndIsr,
    Partition,
    PartitionState,
)
from rivulet.storage import Log, LogConfig

pytestmark = pytest.mark.fast

T0 = 1_700_000_000_000
TP = TopicPartition("t", 0)
LAG = 30_000


class RecordingAlterPartition:
    """The controller's side, played by the test: it sees each proposal and answers it."""

    def __init__(self) -> None:
        self.submitted: list[tuple[LeaderAndIsr, object]] = []
        self.broker_epochs: list[dict[int, int]] = []

    def submit(self, tp, topic_id, proposed, on_result, broker_epochs) -> None:
        self.submitted.append((proposed, on_result))
        self.broker_epochs.append(dict(broker_epochs))

    def accept_last(self) -> LeaderAndIsr:
        proposed, cb = self.submitted[-1]
        committed = LeaderAndIsr(proposed.leader, proposed.leader_epoch, proposed.isr, proposed.partition_epoch + 1)
        cb(committed)
        return committed


class Listener:
    def __init__(self) -> None:
        self.advanced: list[TopicPartition] = []

    def on_high_watermark_advanced(self, tp: TopicPartition) -> None:
        self.advanced.append(tp)


def _append(log: Log, n: int, epoch: int) -> None:
    buf = bytearray(rec.encode_batch([rec.Record(0, T0 + i, None, b"v", []) for i in range(n)]))
    headers = rec.validate_produce_records(buf, max_batch_size=1 << 30)
    log.append_as_leader(buf, headers, leader_epoch=epoch, now_ms=T0)


@pytest.fixture
def env(tmp_path):
    clock = MockClock(wall_ms=T0)
    lg = Log(str(tmp_path / "t-0"), LogConfig(min_insync_replicas=2))
    alter = RecordingAlterPartition()
    listener = Listener()
    p = Partition(TP, uuid.uuid4(), lg, node_id=1, clock=clock, replica_lag_time_max_ms=LAG,
                  alter_partition=alter, listener=listener, leader_id=-1, replicas=[1, 2, 3], isr=[1, 2, 3])
    yield p, clock, alter, listener
    lg.close()


def lead(p: Partition, epoch: int = 1, isr=(1, 2, 3), replicas=(1, 2, 3), partition_epoch: int = 0) -> bool:
    return p.make_leader(PartitionState(controller_epoch=1, leader=1, leader_epoch=epoch, isr=list(isr),
                                        partition_epoch=partition_epoch, replicas=list(replicas)))


# ---------------------------------------------------------------- single node

def test_single_node_partition_leads_alone_and_hw_follows_leo(tmp_path) -> None:
    lg = Log(str(tmp_path / "s-0"), LogConfig())
    p = Partition(TopicPartition("s", 0), uuid.uuid4(), lg, 7)
    assert (p.leader_id, p.replicas, p.isr, p.is_leader) == (7, [7], [7], True)
    _append(lg, 3, 0)
    assert p.maybe_increment_high_watermark()
    assert p.high_watermark == 3
    lg.close()


# ---------------------------------------------------------------- follower state

def test_follower_caught_up_when_it_fetches_the_leader_end() -> None:
    fs = FollowerState(2)
    fs.update_fetch(10, 0, now_ms=1000, leader_leo=10)
    assert fs.last_caught_up_time_ms == 1000
    assert fs.is_caught_up(10, 50_000, LAG)


def test_follower_caught_up_as_of_its_previous_fetch() -> None:
    fs = FollowerState(2)
    fs.update_fetch(5, 0, now_ms=1000, leader_leo=10)  # behind
    assert fs.last_caught_up_time_ms == 0
    fs.update_fetch(10, 0, now_ms=2000, leader_leo=12)  # reached the end the leader had at 1000
    assert fs.last_caught_up_time_ms == 1000
    assert not fs.is_caught_up(12, 1000 + LAG + 1, LAG)
    assert fs.is_caught_up(12, 1000 + LAG, LAG)


# ---------------------------------------------------------------- high watermark

def test_new_leader_assigns_its_epoch_at_the_log_end_and_waits_for_followers(env) -> None:
    p, _clock, _alter, _ = env
    _append(p.log, 4, 0)
    assert lead(p, epoch=3)
    assert p.log.epoch_entries()[-1] == (3, 4)
    assert p.leader_epoch_start_offset == 4
    assert p.high_watermark == 0  # followers' LEOs unknown yet


def test_hw_is_the_smallest_leo_over_the_isr_and_never_goes_back(env) -> None:
    p, _clock, _alter, _ = env
    lead(p)
    _append(p.log, 10, 1)
    assert not p.update_follower_fetch(2, 10, 0)  # 3 is still unknown
    assert p.update_follower_fetch(3, 6, 0)
    assert p.high_watermark == 6
    assert p.update_follower_fetch(3, 10, 0)
    assert p.high_watermark == 10
    # A follower that restarts from an older offset does not move the leader's HW back.
    assert not p.update_follower_fetch(3, 4, 0)
    assert p.high_watermark == 10


def test_a_replica_outside_the_isr_does_not_hold_the_hw(env) -> None:
    p, _clock, _alter, _ = env
    lead(p, isr=(1, 2))
    _append(p.log, 5, 1)
    p.update_follower_fetch(2, 5, 0)
    assert p.high_watermark == 5


def test_fetch_from_a_non_replica_is_refused(env) -> None:
    p, *_ = env
    lead(p)
    with pytest.raises(ApiError) as e:
        p.update_follower_fetch(9, 0, 0)
    assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


# ---------------------------------------------------------------- ISR shrink and expansion

def test_isr_shrinks_after_replica_lag_time_max_ms(env) -> None:
    p, clock, alter, listener = env
    lead(p)
    _append(p.log, 5, 1)
    p.update_follower_fetch(2, 5, 0)
    p.update_follower_fetch(3, 2, 0)
    assert p.high_watermark == 2
    clock.sleep(LAG)
    p.update_follower_fetch(2, 5, 0)
    assert not p.maybe_shrink_isr()  # exactly the lag: still in sync
    clock.sleep(1)
    p.update_follower_fetch(2, 5, 0)
    assert p.maybe_shrink_isr()
    proposed = alter.submitted[-1][0]
    assert (proposed.isr, proposed.leader_epoch, proposed.partition_epoch) == ([1, 2], 1, 0)
    # Until the controller commits it, the shrinking replica still holds the HW and counts.
    assert p.isr == [1, 2, 3] and p.high_watermark == 2
    assert not p.maybe_shrink_isr()  # one change in flight at a time
    alter.accept_last()
    assert p.isr == [1, 2] and p.partition_epoch == 1
    assert p.high_watermark == 5
    assert listener.advanced == [TP]


def test_isr_expands_when_the_follower_reaches_the_hw_in_this_epoch(env) -> None:
    p, _clock, alter, _ = env
    _append(p.log, 3, 0)
    lead(p, epoch=2, isr=(1, 2))
    _append(p.log, 4, 2)  # epoch 2 starts at offset 3
    p.update_follower_fetch(2, 7, 0)
    assert p.high_watermark == 7
    p.update_follower_fetch(3, 5, 0)
    assert alter.submitted == []  # below the HW
    p.update_follower_fetch(3, 7, 0)
    proposed = alter.submitted[-1][0]
    assert proposed.isr == [1, 2, 3]
    # Pending: the HW already waits for the new member, min.insync counts the committed ISR.
    assert p.maximal_isr == [1, 2, 3] and p.isr == [1, 2]
    alter.accept_last()
    assert p.isr == [1, 2, 3]


def test_an_isr_proposal_carries_the_followers_broker_epochs(env) -> None:
    # KIP-903: the controller refuses a member whose broker restarted (a new broker epoch)
    # since the fetch that made the leader propose it.
    p, _clock, alter, _ = env
    lead(p, isr=(1, 2))
    _append(p.log, 4, 1)
    p.update_follower_fetch(2, 4, 0, broker_epoch=40)
    p.update_follower_fetch(3, 4, 0, broker_epoch=57)
    assert alter.submitted[-1][0].isr == [1, 2, 3]
    assert alter.broker_epochs[-1] == {2: 40, 3: 57}


def test_no_expansion_before_the_follower_reaches_the_leader_epoch_start(env) -> None:
    p, _clock, alter, _ = env
    _append(p.log, 5, 0)
    lead(p, epoch=4, isr=(1, 2))
    assert p.high_watermark == 0 and p.leader_epoch_start_offset == 5  # 2 has not fetched yet
    p.update_follower_fetch(3, 3, 0)  # at or past the HW, but before this epoch began
    assert alter.submitted == []
    p.update_follower_fetch(3, 5, 0)
    assert alter.submitted[-1][0].isr == [1, 2, 3]


def test_refused_change_is_dropped_and_a_stale_answer_ignored(env) -> None:
    p, clock, alter, _ = env
    lead(p)
    _append(p.log, 1, 1)
    p.update_follower_fetch(2, 1, 0)
    clock.sleep(LAG + 1)
    p.update_follower_fetch(2, 1, 0)
    assert p.maybe_shrink_isr()
    alter.submitted[-1][1](ErrorCode.INVALID_UPDATE_VERSION)
    assert not p.has_pending_isr_change and p.isr == [1, 2, 3]
    # A new LeaderAndIsr while a change is in flight: the late answer changes nothing.
    assert p.maybe_shrink_isr()
    lead(p, epoch=2, isr=(1, 2, 3), partition_epoch=5)
    alter.accept_last()
    assert p.isr == [1, 2, 3] and p.partition_epoch == 5


# ---------------------------------------------------------------- acks=all and min.insync.replicas

def test_min_insync_replicas_before_and_after_append(env) -> None:
    p, clock, alter, _ = env
    lead(p, isr=(1, 2))
    p.check_min_isr(-1)
    _append(p.log, 2, 1)
    assert p.check_enough_replicas_reach_offset(2) == (False, ErrorCode.NONE)
    # Follower 2 stops fetching: the ISR shrinks to the leader alone, below min.insync.replicas,
    # so the HW stays (Kafka 4's leader) and the waiting produce goes on waiting (its timeout).
    clock.sleep(LAG + 1)
    assert p.maybe_shrink_isr()
    alter.accept_last()
    assert p.high_watermark == 0
    assert p.check_enough_replicas_reach_offset(2) == (False, ErrorCode.NONE)
    with pytest.raises(ApiError) as e:
        p.check_min_isr(-1)
    assert e.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    p.check_min_isr(1)  # acks=1 does not care


def test_the_hw_holds_below_min_isr(tmp_path) -> None:
    """Kafka 4's leader, at every eligible.leader.replicas.version: the shrink above leaves the HW
    where it was and the acks=all append waits; the ISR back at min ISR lets the HW move."""
    clock = MockClock(wall_ms=T0)
    lg = Log(str(tmp_path / "t-0"), LogConfig(min_insync_replicas=2))
    alter = RecordingAlterPartition()
    p = Partition(TP, uuid.uuid4(), lg, node_id=1, clock=clock, replica_lag_time_max_ms=LAG, alter_partition=alter,
                  leader_id=-1, replicas=[1, 2, 3], isr=[1, 2, 3])
    try:
        lead(p, isr=(1, 2))
        _append(p.log, 2, 1)
        clock.sleep(LAG + 1)
        assert p.maybe_shrink_isr()
        alter.accept_last()
        assert p.isr == [1] and p.high_watermark == 0
        assert p.check_enough_replicas_reach_offset(2) == (False, ErrorCode.NONE)
        p.update_follower_fetch(2, 2, 0)  # 2 catches up and rejoins; the HW follows
        alter.accept_last()
        assert p.isr == [1, 2] and p.high_watermark == 2
    finally:
        lg.close()


def test_min_insync_replicas_above_the_replication_factor_counts_as_the_factor(env) -> None:
    # Kafka's leader caps min.insync.replicas at the replica count: a one-replica topic with
    # min.insync.replicas=2 takes acks=all writes (Kafka 4.3.1's Java producer succeeds there).
    p, *_ = env
    lead(p, isr=(1,), replicas=(1,))
    assert p.effective_min_isr == 1
    p.check_min_isr(-1)
    _append(p.log, 2, 1)
    p.maybe_increment_high_watermark()
    assert p.check_enough_replicas_reach_offset(2) == (True, ErrorCode.NONE)
    lead(p, epoch=2, isr=(1,), replicas=(1, 2))
    assert p.effective_min_isr == 2
    with pytest.raises(ApiError) as e:
        p.check_min_isr(-1)
    assert e.value.code == ErrorCode.NOT_ENOUGH_REPLICAS


def test_enough_replicas_once_the_isr_has_the_records(env) -> None:
    p, *_ = env
    lead(p)
    _append(p.log, 2, 1)
    p.update_follower_fetch(2, 2, 0)
    p.update_follower_fetch(3, 2, 0)
    assert p.check_enough_replicas_reach_offset(2) == (True, ErrorCode.NONE)


# ---------------------------------------------------------------- epochs and followers

def test_fencing_by_leader_epoch_then_leadership(env) -> None:
    p, *_ = env
    lead(p, epoch=5)
    p.check_leader(5)
    p.check_leader(-1)
    for epoch, code in ((4, ErrorCode.FENCED_LEADER_EPOCH), (6, ErrorCode.UNKNOWN_LEADER_EPOCH)):
        with pytest.raises(ApiError) as e:
            p.check_leader(epoch)
        assert e.value.code == code
    assert p.make_follower(PartitionState(1, 2, 6, [1, 2], 1, [1, 2, 3]))
    with pytest.raises(ApiError) as e:
        p.check_leader(6)
    assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert not p.make_follower(PartitionState(1, 2, 6, [1, 2], 2, [1, 2, 3]))  # same leader and epoch


def test_follower_hw_is_the_leaders_bounded_by_its_own_leo(env) -> None:
    p, *_ = env
    p.make_follower(PartitionState(1, 2, 1, [1, 2], 0, [1, 2]))
    _append(p.log, 3, 1)
    p.update_follower_high_watermark(10)
    assert p.high_watermark == 3
    p.update_follower_high_watermark(2)
    assert p.high_watermark == 2
