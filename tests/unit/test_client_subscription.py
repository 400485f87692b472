"""SubscriptionState and TopicPartitionState transitions, and the fetch buffer's positions."""

from __future__ import annotations

import pytest

from rivulet.client.consumer.fetcher import Chunk, FetchBuffer
from rivulet.client.consumer.subscription import OffsetAndMetadata, SubscriptionState, TopicPartitionState
from rivulet.client.types import Message

pytestmark = pytest.mark.fast


def test_new_partition_state_has_no_position():
    s = TopicPartitionState()
    assert s.position is None and s.committed is None and s.high_watermark is None
    assert not s.paused and s.reset_strategy is None
    assert not s.has_valid_position and not s.is_fetchable


def test_await_reset_then_seek():
    s = TopicPartitionState()
    s.seek(5)
    e = s.epoch
    s.await_reset("earliest")
    assert s.position is None and s.awaiting_reset and s.epoch > e
    s.seek(42)
    assert s.position == 42 and s.fetch_offset == 42 and not s.awaiting_reset and s.is_fetchable


def test_subscribe_and_assign_cannot_mix():
    st = SubscriptionState()
    st.subscribe(["a"])
    with pytest.raises(ValueError):
        st.assign_from_user([("a", 0)])
    st.unsubscribe()
    st.assign_from_user([("a", 0)])
    with pytest.raises(ValueError):
        st.subscribe(["a"])


def test_pattern_subscription():
    st = SubscriptionState()
    st.subscribe(["^orders-.*", "audit"])
    assert st.pattern is not None and st.partitions_auto_assigned
    assert st.update_pattern_matches(["orders-eu", "orders-us", "audit", "auditx", "__consumer_offsets", "other"])
    assert st.subscription == {"orders-eu", "orders-us", "audit"}
    assert not st.update_pattern_matches(["orders-eu", "orders-us", "audit"])
    assert st.matches("orders-new") and not st.matches("x-orders")


def test_assignment_keeps_state_of_partitions_it_keeps():
    st = SubscriptionState()
    st.subscribe(["t"])
    st.assign_from_subscribed([("t", 0), ("t", 1)])
    st.seek(("t", 0), 10)
    keep = st.state(("t", 0))
    st.assign_from_subscribed([("t", 0), ("t", 2)])
    assert st.state(("t", 0)) is keep and st.position(("t", 0)) == 10
    assert st.position(("t", 2)) is None
    assert not st.is_assigned(("t", 1))
    with pytest.raises(KeyError):
        st.state(("t", 1))


def test_fetch_positions_and_fetchable():
    st = SubscriptionState("earliest")
    st.assign_from_user([("t", 0), ("t", 1), ("t", 2)])
    assert st.missing_fetch_positions() == [("t", 0), ("t", 1), ("t", 2)]
    assert not st.has_all_fetch_positions()
    st.seek(("t", 0), 3)
    st.request_offset_reset(("t", 1))
    assert st.is_offset_reset_needed(("t", 1)) and st.state(("t", 1)).reset_strategy == "earliest"
    st.seek(("t", 1), 0)
    st.seek(("t", 2), 7)
    st.pause(("t", 2))
    assert st.has_all_fetch_positions()
    assert st.fetchable_partitions() == [("t", 0), ("t", 1)]
    assert st.paused_partitions() == [("t", 2)]
    st.resume(("t", 2))
    assert st.fetchable_partitions() == [("t", 0), ("t", 1), ("t", 2)]
    assert {tp: om.offset for tp, om in st.all_consumed().items()} == {("t", 0): 3, ("t", 1): 0, ("t", 2): 7}


def test_committed_only_for_assigned():
    st = SubscriptionState()
    st.assign_from_user([("t", 0)])
    st.committed(("t", 0), OffsetAndMetadata(5))
    st.committed(("t", 9), OffsetAndMetadata(5))
    assert st.state(("t", 0)).committed.offset == 5


def test_incremental_add_and_remove():
    st = SubscriptionState()
    st.subscribe(["t"])
    st.add_partitions([("t", 0)])
    st.seek(("t", 0), 1)
    st.add_partitions([("t", 0), ("t", 1)])
    assert st.position(("t", 0)) == 1 and st.assigned_partitions() == [("t", 0), ("t", 1)]
    st.remove_partitions([("t", 0)])
    assert st.assigned_partitions() == [("t", 1)]


def _chunk(st: TopicPartitionState, tp, offsets, next_offset=None, tail=None) -> Chunk:
    msgs = [Message(tp[0], tp[1], o, None, b"v", None, 1, 1_700_000_000_000 + o) for o in offsets]
    if tail is not None:
        msgs.append(tail)
    return Chunk(tp, st, st.epoch, msgs, next_offset if next_offset is not None else offsets[-1] + 1, 100)


def test_buffer_advances_position_as_messages_are_taken():
    st = SubscriptionState()
    st.assign_from_user([("t", 0)])
    st.seek(("t", 0), 0)
    s = st.state(("t", 0))
    buf = FetchBuffer(st)
    buf.put(_chunk(s, ("t", 0), [0, 1, 2, 3], next_offset=6))  # 4 and 5 were control records
    assert [m.offset() for m in buf.take(3)] == [0, 1, 2]
    assert s.position == 3
    assert [m.offset() for m in buf.take(10)] == [3]
    assert s.position == 6 and not buf and buf.nbytes == 0


def test_buffer_builds_messages_and_delivers_the_tail_event_last():
    st = SubscriptionState()
    st.assign_from_user([("t", 0)])
    st.seek(("t", 0), 0)
    s = st.state(("t", 0))
    buf = FetchBuffer(st)
    eof = Message("t", 0, 2, error=None)
    buf.put(_chunk(s, ("t", 0), [0, 1], tail=eof))
    first = buf.take(2)
    assert [(m.topic(), m.partition(), m.offset(), m.value(), m.timestamp()) for m in first] == [
        ("t", 0, 0, b"v", (1, 1_700_000_000_000)), ("t", 0, 1, b"v", (1, 1_700_000_000_001))]
    assert s.position == 2
    assert buf.take(2) == [eof] and not buf


def test_buffer_drops_data_fetched_before_a_seek_or_revocation():
    st = SubscriptionState()
    st.assign_from_user([("t", 0), ("t", 1)])
    st.seek(("t", 0), 0)
    st.seek(("t", 1), 0)
    buf = FetchBuffer(st)
    buf.put(_chunk(st.state(("t", 0)), ("t", 0), [0, 1]))
    buf.put(_chunk(st.state(("t", 1)), ("t", 1), [0, 1]))
    st.seek(("t", 0), 100)
    st.assign_from_user([("t", 0)])
    assert buf.take(10) == []
    assert st.position(("t", 0)) == 100 and buf.nbytes == 0


def test_buffer_returns_error_events_first():
    st = SubscriptionState()
    buf = FetchBuffer(st)
    woke = []
    buf.notify = lambda: woke.append(1)
    buf.put_error(Message(None, -1, error=None))
    assert woke and len(buf.take(5)) == 1


# ---------------------------------------------------------------- KIP-320 position validation

from rivulet.client.core import EpochEndOffset  # noqa: E402
from rivulet.client.consumer.subscription import Validation  # noqa: E402


def test_a_committed_position_with_an_epoch_awaits_validation():
    s = TopicPartitionState()
    s.seek_unvalidated(100, 4)
    assert s.awaiting_validation and not s.is_fetchable and (s.position, s.leader_epoch) == (100, 4)
    s.seek_unvalidated(100, None)  # a commit without an epoch: nothing to check
    assert not s.awaiting_validation and s.is_fetchable


def test_a_leader_change_asks_for_validation_only_with_a_known_epoch():
    s = TopicPartitionState()
    s.seek(10)
    assert not s.leader_changed(3)           # the first epoch seen is taken as it is
    assert not s.leader_changed(4)           # a user's seek carries no epoch to check
    assert s.current_leader_epoch == 4 and s.is_fetchable
    s.seek(10, 4)
    assert not s.leader_changed(4) and not s.leader_changed(-1)
    assert s.leader_changed(5)
    assert s.awaiting_validation and not s.is_fetchable and s.current_leader_epoch == 5


def test_validation_outcomes():
    s = TopicPartitionState()
    s.seek_unvalidated(100, 4)
    assert s.complete_validation(EpochEndOffset(4, 150), can_reset=True) is Validation.VALID
    assert s.position == 100 and not s.awaiting_validation

    s.seek_unvalidated(100, 4)
    e = s.epoch
    assert s.complete_validation(EpochEndOffset(3, 80), can_reset=True) is Validation.TRUNCATED
    assert (s.position, s.fetch_offset, s.leader_epoch, s.fetch_epoch) == (80, 80, 3, 3)
    assert s.epoch > e and s.is_fetchable  # what was fetched for the old position is dropped

    s.seek_unvalidated(100, 4)
    assert s.complete_validation(EpochEndOffset(3, 80), can_reset=False) is Validation.LOG_TRUNCATION
    assert s.position == 100 and not s.awaiting_validation  # the consumer waits for a seek

    s.seek_unvalidated(100, 4)
    assert s.complete_validation(EpochEndOffset(-1, -1), can_reset=True) is Validation.RESET
    assert s.complete_validation(EpochEndOffset(-1, -1), can_reset=False) is Validation.LOG_TRUNCATION


def test_rewind_drops_what_was_fetched_ahead():
    subs = SubscriptionState()
    subs.assign_from_user([("t", 0)])
    s = subs.state(("t", 0))
    s.seek(0, 1)
    buf = FetchBuffer(subs)
    msgs = [Message("t", 0, o, None, b"v", leader_epoch=1) for o in range(3)]
    buf.put(Chunk(("t", 0), s, s.epoch, msgs, 3, 30, last_epoch=1))
    s.fetch_offset, s.fetch_epoch = 6, 2
    assert [m.offset() for m in buf.take(2)] == [0, 1]
    assert (s.position, s.leader_epoch) == (2, 1)
    buf.rewind(s)
    assert (s.fetch_offset, s.fetch_epoch) == (2, 1)
    assert buf.take(10) == []  # the rest of the chunk belongs to the dropped fetch


def test_pause_and_fence_fetch_again_from_the_position_with_its_epoch():
    # After a pause (or a revocation's fence) the next Fetch starts at the position; its
    # last_fetched_epoch must be the position's, not that of the batch fetched ahead.
    subs = SubscriptionState()
    subs.assign_from_user([("t", 0), ("t", 1)])
    for tp in (("t", 0), ("t", 1)):
        s = subs.state(tp)
        s.seek(4, 1)
        s.fetched_ahead_to(9, 2)
    subs.state(("t", 0)).pause()
    FetchBuffer(subs).fence([subs.state(("t", 1))])
    for tp in (("t", 0), ("t", 1)):
        s = subs.state(tp)
        assert (s.fetch_offset, s.fetch_epoch) == (4, 1)


def test_position_takes_the_epoch_of_the_last_batch_handed_out():
    subs = SubscriptionState()
    subs.assign_from_user([("t", 0)])
    s = subs.state(("t", 0))
    s.seek(0)
    buf = FetchBuffer(subs)
    buf.put(Chunk(("t", 0), s, s.epoch, [Message("t", 0, 0, None, b"v", leader_epoch=2)], 5, 10, last_epoch=3))
    assert len(buf.take(10)) == 1
    assert (s.position, s.leader_epoch) == (5, 3)  # the chunk ended in a control batch of epoch 3
    assert subs.all_consumed()[("t", 0)].leader_epoch == 3


def test_unassign_ends_a_user_assignment_but_keeps_a_subscription():
    s = SubscriptionState()
    s.incremental_assign_from_user([("t", 0)])
    s.incremental_assign_from_user([("t", 1)])
    assert s.type == s.USER_ASSIGNED and s.assigned_partitions() == [("t", 0), ("t", 1)]
    s.unassign()
    assert s.type == s.NONE and s.assignment == {}
    s.subscribe(["t"])
    s.assign_from_subscribed([("t", 0)])
    s.unassign()
    assert s.type == s.AUTO_TOPICS and s.assignment == {} and s.subscription == {"t"}
