"""A blocking client the application drops without close(), as confluent-kafka allows: its
thread stops, and its loop's tasks are cancelled rather than collected while still pending
(which asyncio logs as "Task was destroyed but it is pending", at ERROR, into whatever test
or application happens to be running when the collector gets to them)."""

from __future__ import annotations

import gc
import logging
import threading

import pytest

from rivulet import Producer
from rivulet.testing import free_port


def _loop_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_a_dropped_producer_stops_its_thread_and_cancels_its_tasks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="asyncio")
    before = set(_loop_threads("rivulet-producer"))
    # Not idempotent: without a broker its sender then waits with no timer, on an event only
    # the producer refers to, the case the collector found pending.
    p = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "enable.idempotence": False})
    assert p.flush(1) == 0
    (thread,) = set(_loop_threads("rivulet-producer")) - before
    del p
    gc.collect()
    thread.join(10)
    assert not thread.is_alive(), "the dropped producer's loop thread still runs"
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
