"""A blocking client the application drops without close(), as confluent-kafka allows: it is
freed at once, its thread stops, and its loop's tasks are cancelled rather than collected while
still pending (which asyncio logs as "Task was destroyed but it is pending", at ERROR, into
whatever test or application happens to be running when the collector gets to them)."""

from __future__ import annotations

import gc
import logging
import threading
import weakref
from collections.abc import Callable

import pytest

from rivulet import Consumer, Producer, ShareConsumer
from rivulet.admin import AdminClient
from rivulet.testing import free_port

Client = Producer | Consumer | ShareConsumer | AdminClient


def _producer(bootstrap: str) -> Producer:
    # Not idempotent: without a broker its sender then waits with no timer, on an event only
    # the producer refers to, the case the collector found pending.
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False})
    assert p.flush(1) == 0
    return p


def _consumer(bootstrap: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "dropped", "error_cb": lambda err: None,
                  "on_commit": lambda err, partitions: None})
    c.subscribe(["dropped"], on_assign=lambda consumer, partitions: None)
    assert c.poll(0.2) is None
    return c


def _share_consumer(bootstrap: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "dropped"})
    c.subscribe(["dropped"])
    return c


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


CLIENTS: dict[str, tuple[Callable[[str], Client], str]] = {
    "producer": (_producer, "rivulet-producer"),
    "consumer": (_consumer, "rivulet-consumer"),
    "share_consumer": (_share_consumer, "rivulet-share-consumer"),
    "admin": (_admin, "rivulet-admin"),
}


def _loop_threads(name: str) -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == name}


def _make(kind: str) -> tuple[Client, threading.Thread]:
    make, thread_name = CLIENTS[kind]
    before = _loop_threads(thread_name)
    client = make(f"127.0.0.1:{free_port()}")
    (thread,) = _loop_threads(thread_name) - before
    return client, thread


def _asyncio_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "asyncio"]


@pytest.mark.parametrize("kind", list(CLIENTS))
def test_a_dropped_client_is_freed_at_once_and_stops_its_thread(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="asyncio")
    client, thread = _make(kind)
    ref = weakref.ref(client)
    del client
    # No collector run: nothing the loop's tasks reach refers back to the client.
    assert ref() is None, f"the dropped {kind} is still referred to"
    thread.join(10)
    assert not thread.is_alive(), f"the dropped {kind}'s loop thread still runs"
    gc.collect()  # its tasks, were any still pending, would be destroyed and logged now
    assert _asyncio_logs(caplog) == []


@pytest.mark.parametrize("kind", list(CLIENTS))
def test_a_client_dropped_in_a_reference_cycle_has_its_tasks_cancelled(
        kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """The collector frees the application's cycle with the client in it; the thread stops and
    the loop's tasks are cancelled, not destroyed while pending."""
    caplog.set_level(logging.WARNING, logger="asyncio")
    client, thread = _make(kind)
    ref = weakref.ref(client)
    cycle: list[object] = [client]
    cycle.append(cycle)
    del client, cycle
    gc.collect()
    assert ref() is None, f"the dropped {kind} was not collected"
    thread.join(10)
    assert not thread.is_alive(), f"the dropped {kind}'s loop thread still runs"
    gc.collect()
    assert _asyncio_logs(caplog) == []
