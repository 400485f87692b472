"""common/promise.py: a result whose callbacks run as soon as it is set, on the setter's stack."""

from __future__ import annotations

import pytest

from rivulet.common.promise import Promise

pytestmark = pytest.mark.fast


def test_callbacks_run_when_set_and_at_once_when_already_set():
    p: Promise[int] = Promise()
    seen: list[int] = []
    p.add_done_callback(lambda q: seen.append(q.result()))
    assert not p.done() and seen == []
    p.set_result(7)
    assert p.done() and seen == [7]  # ran inside set_result
    p.add_done_callback(lambda q: seen.append(q.result() + 1))
    assert seen == [7, 8]
    with pytest.raises(RuntimeError):
        p.set_result(9)  # set once


def test_a_failing_callback_does_not_reach_the_setter_nor_stop_the_others():
    p: Promise[int] = Promise()
    seen: list[int] = []
    p.add_done_callback(lambda q: 1 // 0)
    p.add_done_callback(lambda q: seen.append(q.result()))
    p.set_result(3)  # must not raise: the setter is whoever completed the operation
    assert seen == [3]


def test_an_exception_reads_like_a_futures():
    p: Promise[int] = Promise()
    with pytest.raises(RuntimeError):
        p.result()
    p.set_exception(ValueError("bad"))
    assert not p.cancelled() and isinstance(p.exception(), ValueError)
    with pytest.raises(ValueError):
        p.result()
