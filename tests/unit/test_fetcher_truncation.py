"""Where a follower truncates (KIP-101, KIP-279), from the leader's answer for its latest epoch."""

from __future__ import annotations

import pytest

from rivulet.replication.fetcher import truncation_offset

pytestmark = pytest.mark.fast


def test_same_epoch_truncates_to_the_smaller_end() -> None:
    # Leader: epoch 3 ends at 10. Follower: epoch 3 ends at 12 (a tail the leader never had).
    assert truncation_offset(3, 10, (3, 12), follower_leo=12, follower_hw=8) == (10, True)
    # The follower is behind within the epoch: nothing to cut.
    assert truncation_offset(3, 10, (3, 7), follower_leo=7, follower_hw=7) == (7, True)


def test_an_epoch_the_follower_never_had_cuts_back_and_asks_again() -> None:
    # Leader answers epoch 2 ending at 9; the follower's largest epoch <= 2 is 1, ending at 6.
    assert truncation_offset(2, 9, (1, 6), follower_leo=11, follower_hw=5) == (6, False)


def test_a_leader_without_that_epoch_history() -> None:
    # The leader has no epoch <= the one asked: cut to its end offset.
    assert truncation_offset(-1, 4, (1, 6), follower_leo=11, follower_hw=5) == (4, True)
    # The follower has no epoch cache at all.
    assert truncation_offset(2, 9, None, follower_leo=11, follower_hw=5) == (9, True)


def test_an_undefined_end_keeps_only_the_committed_part() -> None:
    assert truncation_offset(-1, -1, None, follower_leo=11, follower_hw=5) == (5, True)


def test_never_truncates_past_the_log_end() -> None:
    assert truncation_offset(3, 20, (3, 15), follower_leo=12, follower_hw=12) == (12, True)
