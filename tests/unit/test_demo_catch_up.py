"""The demo's wait for its pipeline after the generator stops: while the pipeline makes
progress it waits (past any fixed deadline), it stops when it has read every order, and gives
up only after a while without progress."""

from __future__ import annotations

import pytest

from rivulet.cli.demo import CatchUp

pytestmark = pytest.mark.fast


def run(c: CatchUp, ticks: list[tuple[float, int | None, int]]) -> list[str]:
    return [c.observe(now, read, batches) for now, read, batches in ticks]


def test_a_slow_pipeline_that_keeps_reading_is_waited_for():
    # The generator ended at t=0 with 60,200 orders; the pipeline reads 2,000 every 20 s, far
    # past the 60 s the demo used to wait in all.
    c = CatchUp(60_200, started=0.0, patience=60)
    verdicts = run(c, [(t, min(20_200 + 2_000 * int(t // 20), 60_200), int(t // 20)) for t in range(1, 420)])
    assert CatchUp.STALLED not in verdicts
    assert verdicts[-1] == CatchUp.DONE
    assert verdicts.index(CatchUp.DONE) > 60


def test_it_is_done_once_every_order_is_read_and_stays_so():
    c = CatchUp(1000, started=0.0, settle=4)
    assert run(c, [(1, 900, 1), (2, 1000, 2), (3, 1000, 2), (5, 1000, 2)]) == ["wait"] * 4
    assert c.observe(6, 1000, 2) == CatchUp.DONE


def test_no_progress_for_the_patience_stops_it_early_with_what_was_read():
    c = CatchUp(60_200, started=0.0, patience=60)
    assert run(c, [(10, 13, 3), (30, 13, 3), (69, 13, 3)]) == ["wait"] * 3
    assert c.observe(70.5, 13, 3) == CatchUp.STALLED
    assert (c.read, c.expected) == (13, 60_200)


def test_a_finished_batch_is_progress_and_an_unanswered_lag_query_is_not():
    c = CatchUp(1000, started=0.0, patience=60)
    assert c.observe(50, None, 1) == CatchUp.WAIT  # a batch finished: the deadline moves to 110
    assert c.observe(100, None, 1) == CatchUp.WAIT
    assert c.observe(111, None, 1) == CatchUp.STALLED


def test_caught_up_is_not_forgotten_when_the_lag_query_fails_once():
    c = CatchUp(1000, started=0.0, settle=4)
    assert run(c, [(1, 1000, 1), (2, None, 1), (3, 1000, 1)]) == ["wait"] * 3
    assert c.observe(5, None, 1) == CatchUp.DONE


def test_caught_up_is_not_done_until_the_watermark_closed_every_window():
    # The end mark's batch is read, but the batch that writes the last windows has not run yet.
    c = CatchUp(1000, started=0.0, settle=4)
    assert [c.observe(t, 1001, 1, closed=False) for t in (1, 6, 7)] == ["wait"] * 3
    assert c.observe(8, 1001, 2, closed=True) == CatchUp.DONE
