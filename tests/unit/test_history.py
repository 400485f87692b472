"""The replication tests' history checker finds each anomaly it is meant to find."""

from __future__ import annotations

import pytest

from tests.history import History

pytestmark = pytest.mark.fast


def test_a_clean_history_has_no_anomalies():
    h = History()
    for o in range(3):
        h.ack(0, o, b"v%d" % o)
    for o in range(4):  # reading more than was acknowledged is fine (unacknowledged writes)
        h.read(0, o, b"v%d" % o)
    result = h.check()
    assert not result and result.summary() == "no anomalies"


def test_lost_inconsistent_duplicate_and_nonmonotonic():
    h = History()
    h.ack(0, 0, b"a")
    h.ack(0, 1, b"b")  # never read back: lost
    h.ack(1, 0, b"c")
    h.read(0, 0, b"a")
    h.read(1, 0, b"x")  # another value at an acknowledged offset: inconsistent, and c is lost
    h.read(0, 2, b"a")  # the same value at two offsets: duplicate
    h.read(0, 2, b"a")  # the same offset twice in one sequence: nonmonotonic
    result = h.check()
    assert result.lost == [(0, 1, b"b"), (1, 0, b"c")]
    assert result.inconsistent == [(1, 0, {b"c", b"x"})]
    assert result.duplicate == [(0, b"a", [0, 2])]
    assert result.nonmonotonic == [(0, 2, 2)]
    assert "2 lost" in result.summary()


def test_a_new_read_sequence_may_start_over():
    h = History()
    h.ack(0, 0, b"a")
    h.read(0, 0, b"a")
    h.new_read_sequence()
    h.read(0, 0, b"a")
    assert not h.check()


def test_two_acknowledgements_of_one_offset_disagreeing():
    h = History()
    h.ack(0, 5, b"a")
    h.ack(0, 5, b"b")
    h.read(0, 5, b"a")
    assert h.check().inconsistent[0][:2] == (0, 5)
