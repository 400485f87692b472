"""The fetcher's side of fetch sessions (KIP-227), sans I/O: what each request carries and how
answers move the session id and epoch (``rivulet/protocol/fetch_session.py``)."""

from __future__ import annotations

import uuid

import pytest

from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.fetch_session import FetchSessionHandler, PartitionFetch
from rivulet.protocol.schema import ZERO_UUID

pytestmark = pytest.mark.fast

A, B = uuid.uuid4(), uuid.uuid4()


def pf(offset: int, topic_id: uuid.UUID = A, leader_epoch: int = 0) -> PartitionFetch:
    return PartitionFetch(topic_id, offset, leader_epoch, -1, -1, 1 << 20)


def opened(session_id: int = 7) -> FetchSessionHandler:
    """A handler whose full fetch of a-0 and a-1 the broker answered with a session."""
    h = FetchSessionHandler(1)
    data = h.build({("a", 0): pf(0), ("a", 1): pf(0)})
    assert data.full and (data.session_id, data.epoch) == (0, 0)
    assert h.handle_response(0, session_id, 0, {("a", 0), ("a", 1)})
    assert (h.session_id, h.epoch) == (session_id, 1)
    return h


def test_full_fetch_names_every_partition_and_a_session_id_0_answer_keeps_it_full() -> None:
    h = FetchSessionHandler(1)
    for _ in range(3):
        data = h.build({("a", 0): pf(5), ("b", 0): pf(9, B)})
        assert data.full and list(data.to_send) == [("a", 0), ("b", 0)]
        assert [(t.topic, t.topic_id, [p.fetch_offset for p in t.partitions]) for t in data.topics()] == [
            ("a", A, [5]), ("b", B, [9])]
        assert h.handle_response(0, 0, 0, {("a", 0), ("b", 0)})
        assert (h.session_id, h.epoch) == (0, 0)
    assert h.incremental_requests == 0


def test_incremental_requests_send_only_changes_and_forget_removed_partitions() -> None:
    h = opened()
    data = h.build({("a", 0): pf(0), ("a", 1): pf(3), ("b", 0): pf(0, B)})
    assert not data.full and (data.session_id, data.epoch) == (7, 1)
    # Added partitions first, then the changed one; a-0 is implied.
    assert list(data.to_send) == [("b", 0), ("a", 1)]
    assert data.to_forget == [] and h.incremental_requests == 1
    assert h.handle_response(0, 7, 0, {("a", 1)})  # an answer names only partitions with news
    assert h.epoch == 2
    data = h.build({("a", 1): pf(3), ("b", 0): pf(0, B)})
    assert data.to_send == {} and data.to_forget == [(A, ("a", 0))]
    assert [(f.topic, f.topic_id, f.partitions) for f in data.forgotten_topics(13)] == [("a", A, [0])]
    assert set(h.partitions) == {("a", 1), ("b", 0)}


def test_a_new_topic_id_replaces_the_partition_forgotten_by_id_only_from_v13() -> None:
    h = opened()
    data = h.build({("a", 0): pf(0, B), ("a", 1): pf(0)})
    assert list(data.to_send) == [("a", 0)] and data.to_replace == [(A, ("a", 0))]
    assert [(f.topic_id, f.partitions) for f in data.forgotten_topics(13)] == [(A, [0])]
    assert data.forgotten_topics(12) == []


def test_a_partition_named_without_topic_id_is_not_replaced() -> None:
    h = opened()
    data = h.build({("a", 0): pf(0, ZERO_UUID), ("a", 1): pf(0)})
    assert list(data.to_send) == [("a", 0)] and data.to_replace == []


def test_an_incremental_answer_naming_a_partition_outside_the_session_starts_over() -> None:
    h = opened()
    h.build({("a", 0): pf(1), ("a", 1): pf(1)})
    assert not h.handle_response(0, 7, 0, {("a", 0), ("z", 0)})
    # Epoch 0 on the same session id: the broker replaces the session with a new full one.
    assert (h.session_id, h.epoch) == (7, 0)
    data = h.build({("a", 0): pf(1), ("a", 1): pf(1)})
    assert data.full and set(data.to_send) == {("a", 0), ("a", 1)}


def test_a_full_answer_must_name_every_partition() -> None:
    h = FetchSessionHandler(1)
    h.build({("a", 0): pf(0), ("a", 1): pf(0)})
    assert not h.handle_response(0, 7, 0, {("a", 0)})
    assert (h.session_id, h.epoch) == (0, 0)


@pytest.mark.parametrize(("code", "kept"), [
    (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0),
    (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 7),
    (ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, 7),
])
def test_session_errors_start_over_with_a_full_fetch(code: int, kept: int) -> None:
    h = opened()
    h.build({("a", 0): pf(1), ("a", 1): pf(0)})
    assert not h.handle_response(code, 0, 0, set())
    assert (h.session_id, h.epoch) == (kept, 0)
    # Partitions added meanwhile go in the full fetch with the rest.
    data = h.build({("a", 0): pf(1), ("a", 1): pf(0), ("a", 2): pf(0)})
    assert data.full and list(data.to_send) == [("a", 0), ("a", 1), ("a", 2)]
    assert h.handle_response(0, 8, 0, {("a", 0), ("a", 1), ("a", 2)})
    assert (h.session_id, h.epoch) == (8, 1)


def test_no_answer_starts_over_on_the_same_session() -> None:
    h = opened()
    h.build({("a", 0): pf(1), ("a", 1): pf(0)})
    h.handle_error()
    assert (h.session_id, h.epoch) == (7, 0) and h.build({("a", 0): pf(1)}).full


def test_a_throttled_empty_full_answer_is_not_used() -> None:
    h = FetchSessionHandler(1)
    h.build({("a", 0): pf(0)})
    assert not h.handle_response(0, 0, 100, set())
    assert h.full


def test_the_broker_closing_the_session_makes_the_next_request_full() -> None:
    h = opened()
    h.build({("a", 0): pf(1), ("a", 1): pf(0)})
    assert h.handle_response(0, 0, 0, {("a", 0)})
    assert (h.session_id, h.epoch) == (0, 0)


def test_close_sends_epoch_minus_1_with_no_partitions_and_only_for_a_session() -> None:
    assert FetchSessionHandler(1).close() is None
    h = opened()
    data = h.close()
    assert data is not None and data.full and (data.session_id, data.epoch) == (7, -1)
    assert data.to_send == {} and data.topics() == []
    assert h.handle_response(0, 0, 0, set())
    assert (h.session_id, h.epoch) == (0, 0) and not h.partitions


def test_the_epoch_wraps_to_1() -> None:
    h = opened()
    h.epoch = 2**31 - 1
    h.build({("a", 0): pf(0), ("a", 1): pf(0)})
    assert h.handle_response(0, 7, 0, set())
    assert h.epoch == 1
