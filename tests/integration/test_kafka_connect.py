"""Kafka Connect 4.3.1 itself (a distributed worker, Java) on a Rivulet broker: a FileStreamSource
connector with exactly-once source support feeds a FileStreamSink through a topic.

The worker keeps its configs, offsets and statuses in compacted topics it creates, joins a
classic group of protocol type ``connect``, writes its config records in transactions and fences
each source task's transactional id with Admin.fenceProducers before the task starts; the task
commits each poll's records together with its source offsets. A restart of the connector and its
task must resume from the committed offset: each line reaches the sink once, in order.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

_TESTS = Path(__file__).resolve().parents[1]
if str(_TESTS.parent) not in sys.path:
    sys.path.insert(0, str(_TESTS.parent))

from benchmarks.reference.kafka import libs_dir, write_log4j2_config  # noqa: E402
from rivulet.testing import BrokerProcess, free_port  # noqa: E402
from tests import java_tools as jt  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.java]

T = TypeVar("T")
SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


def connect_classpath() -> str:
    """Connect's runtime, its file connectors and MirrorMaker 2, with log4j from Kafka's own jars
    (Connect's dependencies bring slf4j's API only)."""
    log4j = sorted(str(j) for j in libs_dir().glob("log4j-*.jar"))
    return ":".join([jt.maven_classpath("kafka-connect", ["connect-runtime", "connect-file", "connect-mirror"]),
                     *log4j])


def until(check: Callable[[], T | None], what: str, timeout: float = 90.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


class ConnectWorker:
    """``connect-distributed`` on a free REST port, its log in ``work``."""

    def __init__(self, bootstrap: str, work: Path, group: str, **props: str) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = work / f"{group}-worker.log"
        self.properties = work / f"{group}-worker.properties"
        settings = {
            "bootstrap.servers": bootstrap, "group.id": group, "listeners": self.url,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            **{f"{t}.storage.topic": f"{group}-{t}s" for t in ("config", "offset", "status")},
            **{f"{t}.storage.replication.factor": "1" for t in ("config", "offset", "status")},
            # The sink writes its file out when its offsets are committed.
            "offset.flush.interval.ms": "500", "plugin.discovery": "only_scan",
            **props,
        }
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.log4j = write_log4j2_config(work / "connect-log4j2.properties", level="INFO", log_file=self.log)
        self.proc: subprocess.Popen | None = None

    def start(self) -> ConnectWorker:
        self.proc = subprocess.Popen(
            ["java", "-Xmx384m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={self.log4j}",
             "-cp", connect_classpath(), "org.apache.kafka.connect.cli.ConnectDistributed", str(self.properties)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, f"the worker exited:\n{self.log_tail()}"
            try:  # Jetty answers 404 until the herder has joined its group and read the config topic
                return httpx.get(f"{self.url}/connectors", timeout=10).status_code == 200
            except httpx.TransportError:
                return False
        until(ready, "the Connect worker's REST API", timeout=120)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def errors(self) -> list[str]:
        """The ERROR lines of the worker's log."""
        try:
            return [ln for ln in self.log.read_text(errors="replace").splitlines() if "] ERROR " in ln]
        except OSError:
            return []

    def status(self, name: str) -> dict:
        return httpx.get(f"{self.url}/connectors/{name}/status", timeout=30).json()

    def running(self, name: str) -> dict | None:
        s = self.status(name)
        tasks = s.get("tasks") or []
        ok = s.get("connector", {}).get("state") == "RUNNING" and tasks and all(t["state"] == "RUNNING" for t in tasks)
        return s if ok else None


@pytest.fixture
def broker_for_connect() -> Iterator[BrokerProcess]:
    b = BrokerProcess().start()
    yield b
    print(f"--- broker {b.bootstrap}, its output's end:\n{b.output_tail(8 * 1024)}")
    b.cleanup()


def lines_of(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


@pytest.mark.timeout(240)
def test_file_source_to_sink_with_exactly_once_source_support(java, broker_for_connect, tmp_path):
    """Source (exactly.once.support=required) -> topic -> sink reading read_committed: every line
    reaches the sink file once and in order, across a restart of the connector and its task; the
    source's committed offset is the input's length; the worker logs no ERROR."""
    from confluent_kafka import Consumer, TopicPartition

    group = "connect-" + uuid.uuid4().hex[:6]
    topic = f"{group}-lines"
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    worker = ConnectWorker(broker_for_connect.bootstrap, tmp_path, group, **{
        "exactly.once.source.support": "enabled", "connector.client.config.override.policy": "All"})
    expected = [f"line-{i}" for i in range(400)]
    source.write_text("".join(f"{line}\n" for line in expected[:200]))
    try:
        worker.start()
        created = [httpx.post(f"{worker.url}/connectors", timeout=60, json={"name": name, "config": config})
                   for name, config in (
                       ("src", {"connector.class": SOURCE, "tasks.max": "1", "file": str(source), "topic": topic,
                                "exactly.once.support": "required", "transaction.boundary": "poll"}),
                       ("sink", {"connector.class": SINK, "tasks.max": "1", "file": str(sink), "topics": topic,
                                 "consumer.override.isolation.level": "read_committed"}))]
        assert [r.status_code for r in created] == [201, 201], [r.text for r in created]
        # FileStreamSource sends its last batch of a file once more lines follow or it polls empty.
        until(lambda: len(lines_of(sink)) >= 150, "the first lines in the sink's file")

        restarted = httpx.post(f"{worker.url}/connectors/src/restart?includeTasks=true&onlyFailed=false", timeout=60)
        assert restarted.status_code == 202, restarted.text
        until(lambda: worker.running("src"), "the source and its task running again")
        with source.open("a") as f:
            f.writelines(f"{line}\n" for line in expected[200:])
        until(lambda: len(lines_of(sink)) >= len(expected) - 50, "the rest in the sink's file")
        with source.open("a") as f:  # flushes the last batch
            f.write("end\n")
        until(lambda: len(lines_of(sink)) >= len(expected), "every line in the sink's file")
        got = lines_of(sink)
        assert got[:len(expected)] == expected, f"{len(got)} lines, {len(set(got))} distinct"

        offsets = httpx.get(f"{worker.url}/connectors/src/offsets", timeout=30).json()["offsets"]
        assert [o["partition"]["filename"] for o in offsets] == [str(source)]
        assert offsets[0]["offset"]["position"] >= len("".join(f"{line}\n" for line in expected))

        # The topic holds transactions: a read_committed reader sees each line once.
        reader = Consumer({"bootstrap.servers": broker_for_connect.bootstrap, "group.id": f"{group}-reader",
                           "isolation.level": "read_committed", "enable.auto.commit": False})
        reader.assign([TopicPartition(topic, 0, 0)])
        seen: list[str] = []

        def read_all() -> bool:
            while (m := reader.poll(0.5)) is not None:
                if not m.error():
                    seen.append(m.value().decode())
            return len(seen) >= len(expected)
        until(read_all, "the topic's committed records")
        reader.close()
        assert seen[:len(expected)] == expected
        assert worker.errors() == []

        deleted = [httpx.delete(f"{worker.url}/connectors/{name}", timeout=60).status_code for name in ("src", "sink")]
        assert deleted == [204, 204]
        assert httpx.get(f"{worker.url}/connectors", timeout=30).json() == []
    except BaseException:
        print(f"--- the Connect worker's log ({worker.log}) ends:\n{worker.log_tail()}")
        raise
    finally:
        worker.stop()
