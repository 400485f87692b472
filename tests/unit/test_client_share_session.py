"""The share consumer's sans-IO parts: acknowledgement batches, share session epochs and the
ShareFetch/ShareAcknowledge requests they build (KIP-932), and the ShareConsumer's shape."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rivulet.client.share.session import (
    FINAL_EPOCH,
    Acknowledgements,
    ShareSessionHandler,
    next_epoch,
)
from rivulet.common.types import ACKNOWLEDGE_GAP as GAP
from rivulet.common.types import AcknowledgeType
from rivulet.protocol.errors import ErrorCode

pytestmark = pytest.mark.fast

A, B = uuid.uuid4(), uuid.uuid4()
IDS = {"a": A, "b": B}
KW = {"max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500}


def acks(**offsets: int) -> Acknowledgements:
    a = Acknowledgements()
    for o, k in offsets.items():
        a.add(int(o[1:]), k)
    return a


def test_acknowledgement_batches_group_runs_and_split_at_gaps():
    a = Acknowledgements()
    for o in (0, 1, 2):
        a.add(o, AcknowledgeType.ACCEPT)
    a.add(3, AcknowledgeType.RELEASE)
    a.add(4, AcknowledgeType.ACCEPT)
    for o in (7, 8):
        a.add(o, AcknowledgeType.REJECT)
    a.add(9, GAP)
    assert a.batches() == [(0, 4, [1, 1, 1, 2, 1]), (7, 9, [3, 3, 0])]
    b = Acknowledgements()
    for o in (5, 6, 7):
        b.add(o, AcknowledgeType.ACCEPT)
    assert b.batches() == [(5, 7, [1])]
    assert Acknowledgements().batches() == []


@given(st.dictionaries(st.integers(0, 60), st.sampled_from([0, 1, 2, 3, 4]), min_size=1))
def test_acknowledgement_batches_cover_exactly_the_offsets(types):
    a = Acknowledgements()
    for o, k in types.items():
        a.add(o, k)
    seen: dict[int, int] = {}
    for first, last, kinds in a.batches():
        assert len(kinds) in (1, last - first + 1)
        for o in range(first, last + 1):
            assert o not in seen
            seen[o] = kinds[0] if len(kinds) == 1 else kinds[o - first]
    assert seen == types


def test_session_opens_with_every_partition_and_then_sends_changes():
    s = ShareSessionHandler("g", "m")
    req = s.fetch_request([("a", 0), ("a", 1), ("b", 0)], {("a", 0): acks(o3=1)}, IDS, **KW)
    # Epoch 0 opens the session: every partition, and no acknowledgements (the broker refuses them).
    assert req.share_session_epoch == 0 and req.batch_size == req.max_records == 500
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in req.topics] == [(A, [0, 1]), (B, [0])]
    assert all(not p.acknowledgement_batches for t in req.topics for p in t.partitions)
    # The next request takes the next epoch as soon as this one is built (both may be in flight).
    assert s.handle_response(0, s.generation) and s.epoch == 1 and s.open
    # Unchanged: nothing listed; acknowledgements list their partition.
    req = s.fetch_request([("a", 0), ("a", 1), ("b", 0)], {("a", 1): acks(o4=2, o5=2)}, IDS, **KW)
    assert req.share_session_epoch == 1 and not req.forgotten_topics_data
    assert [(t.topic_id, [(p.partition_index, [(b.first_offset, b.last_offset, b.acknowledge_types)
                                                for b in p.acknowledgement_batches]) for p in t.partitions])
            for t in req.topics] == [(A, [(1, [(4, 5, [2])])])]
    # A partition gone and one added.
    req = s.fetch_request([("a", 0), ("b", 0), ("b", 1)], {}, IDS, **KW)
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in req.topics] == [(B, [1])]
    assert [(t.topic_id, t.partitions) for t in req.forgotten_topics_data] == [(A, [1])]
    assert s.partitions == {("a", 0), ("b", 0), ("b", 1)} and s.epoch == 3


def test_unknown_session_starts_again_and_errors_keep_the_epoch():
    s = ShareSessionHandler("g", "m")
    s.fetch_request([("a", 0)], {}, IDS, **KW)
    gen = s.generation
    s.fetch_request([("a", 0)], {}, IDS, **KW)
    assert s.handle_response(ErrorCode.GROUP_AUTHORIZATION_FAILED, gen) and s.epoch == 2
    s.fetch_request([("a", 0)], {}, IDS, **KW)
    assert not s.handle_response(ErrorCode.SHARE_SESSION_NOT_FOUND, gen)
    assert (s.epoch, s.partitions, s.open) == (0, set(), False)
    # A late answer to a request of the session already reset leaves the new one alone.
    req = s.fetch_request([("a", 0)], {}, IDS, **KW)
    assert req.share_session_epoch == 0 and s.epoch == 1
    assert not s.handle_response(ErrorCode.INVALID_SHARE_SESSION_EPOCH, gen) and s.epoch == 1
    assert not s.handle_response(ErrorCode.INVALID_SHARE_SESSION_EPOCH, s.generation) and s.epoch == 0


def test_acknowledge_alone_and_closing():
    s = ShareSessionHandler("g", "m")
    s.fetch_request([("a", 0)], {}, IDS, **KW)
    req = s.acknowledge_request({("a", 0): acks(o0=1, o1=4)}, IDS)
    assert (req.share_session_epoch, req.is_renew_ack) == (1, True)
    assert [(b.first_offset, b.last_offset, b.acknowledge_types) for b in req.topics[0].partitions[0]
            .acknowledgement_batches] == [(0, 1, [1, 4])]
    assert s.epoch == 2 and s.partitions == {("a", 0)}
    req = s.acknowledge_request({("a", 0): acks(o2=3)}, IDS, close=True)
    assert (req.share_session_epoch, req.is_renew_ack) == (FINAL_EPOCH, False)
    assert not s.open and s.partitions == set()


def test_epochs_wrap_past_int32_to_one():
    assert next_epoch(1) == 2
    assert next_epoch(2**31 - 1) == 1


def test_share_consumer_shape_matches_confluent_kafka():
    """The blocking ShareConsumer has confluent-kafka's methods, and AcknowledgeType its values."""
    ck = pytest.importorskip("confluent_kafka")
    from rivulet import AcknowledgeType as Ours
    from rivulet import ShareConsumer
    theirs = {m for m in dir(ck.ShareConsumer) if not m.startswith("_")} - {"set_sasl_credentials"}
    assert theirs <= {m for m in dir(ShareConsumer) if not m.startswith("_")}
    assert {(k.name, k.value) for k in ck.AcknowledgeType} <= {(k.name, k.value) for k in Ours}
    from rivulet.client.types import Message, ShareMessage
    assert Message("t").delivery_count() is None
    assert ShareMessage("t", 0, 5, None, b"v", None, 1, 0, 0, 3).delivery_count() == 3


def test_a_partition_no_longer_wanted_is_forgotten_with_its_last_acknowledgements():
    s = ShareSessionHandler("g", "m")
    s.fetch_request([("a", 0), ("a", 1)], {}, IDS, **KW)
    assert s.handle_response(0, s.generation)
    s.fetch_request([("a", 0)], {}, IDS, **KW)  # a-1 forgotten
    assert s.handle_response(1, s.generation)
    # Acknowledgements for a-1, out of the session now: listed for them and forgotten again.
    req = s.fetch_request([("a", 0)], {("a", 1): acks(o7=1)}, IDS, **KW)
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in req.topics] == [(A, [1])]
    assert [(t.topic_id, t.partitions) for t in req.forgotten_topics_data] == [(A, [1])]
    assert s.partitions == {("a", 0)}
