"""KIP-714 client telemetry with real clients: librdkafka (confluent-kafka) and the Java 4.3
producer and consumer push their metrics once a CLIENT_METRICS subscription matches them, and with none they
are asked for nothing, push nothing and work as before.

Pushes are seen where they arrive: the broker runs on real sockets in a thread of this process,
so the test reads what its telemetry receiver was handed. Subscriptions made through the admin
API (Rivulet's client, and Kafka's own kafka-client-metrics tool) survive a broker restart.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

from rivulet.client.admin.client import AsyncAdminClient
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.server.broker import Broker
from rivulet.server.client_metrics import LastPayloads
from rivulet.server.config import LAST_PUSH_RECEIVER, BrokerConfig
from rivulet.testing import BrokerProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

pytestmark = pytest.mark.integration

CLIENT_METRICS = 16
SET, DELETE, APPEND = 0, 1, 2


class ThreadBroker:
    """A broker on its own event loop in a thread of the test process."""

    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start() -> Broker:
            b = Broker(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir),
                                     "group.initial.rebalance.delay.ms": "0", "num.partitions": "1",
                                     "metric.reporters": LAST_PUSH_RECEIVER}))
            await b.start()
            return b
        self.broker: Broker = self.call_async(start())
        self.bootstrap = f"127.0.0.1:{self.broker.bound_ports[0]}"

    def call_async(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()
        return self.call_async(run())

    def payloads(self) -> LastPayloads:
        receiver = self.broker.client_metrics.receiver
        assert isinstance(receiver, LastPayloads)
        return receiver

    def pushes_from(self, software: str) -> list[Any]:
        return self.call(lambda: [p for p in self.payloads().last.values() if p.context.software_name == software])

    def instances(self) -> list[Any]:
        return self.call(lambda: list(self.broker.client_metrics.instances.values()))

    def stop(self) -> None:
        self.call_async(self.broker.shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@pytest.fixture
def broker(tmp_path):
    b = ThreadBroker(tmp_path)
    try:
        yield b
    finally:
        b.stop()


def admin_call(bootstrap: str, fn: Callable[[AsyncAdminClient], Any]) -> Any:
    async def main() -> Any:
        async with AsyncAdminClient({"bootstrap.servers": bootstrap}) as admin:
            return await fn(admin)
    return asyncio.run(main())


def subscribe(bootstrap: str, name: str, **configs: str) -> None:
    ops = [(k.replace("_", "."), SET, v) for k, v in configs.items()]
    admin_call(bootstrap, lambda a: a.incremental_alter_configs(CLIENT_METRICS, name, ops))


def described(bootstrap: str, name: str) -> dict[str, tuple[str, int]]:
    entries = admin_call(bootstrap, lambda a: a.describe_configs(CLIENT_METRICS, name))
    return {e.name: (e.value, e.config_source) for e in entries}


def eventually(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def assert_exported(payload: Any, software: str) -> None:
    """The push decodes as OTLP and becomes Prometheus series (the metrics endpoint's exporter),
    labelled with the client."""
    from rivulet.common.time import SYSTEM_CLOCK
    from rivulet.server.metrics.telemetry import ClientTelemetryExporter
    exporter = ClientTelemetryExporter(SYSTEM_CLOCK)
    exporter.export_metrics(payload)
    assert exporter.undecodable == 0
    series = [(f.name, s.labels) for f in exporter.collect() for s in f.samples]
    assert series and all(name.startswith("org_apache_kafka_producer_") for name, _ in series), series
    assert all(labels["client_software_name"] == software and
               labels["client_instance_id"] == str(payload.client_instance_id) for _, labels in series)


# ------------------------------------------------------------------ librdkafka
def rdkafka_producer(bootstrap: str, logs: list[str]):
    from confluent_kafka import Producer

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logs.append(f"{record.levelname} {record.getMessage()}")
    logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex[:6]}")
    logger.addHandler(Capture())
    logger.setLevel(logging.INFO)
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": logger})


def test_librdkafka_pushes_what_its_subscription_asks_for(broker):
    import confluent_kafka
    assert confluent_kafka.libversion()[1] >= 0x02050000, "librdkafka 2.5 brought KIP-714"
    subscribe(broker.bootstrap, "rdkafka-producers", metrics="org.apache.kafka.producer.", interval_ms="1000",
              match="client_software_name=confluent-kafka-python")
    logs: list[str] = []
    p = rdkafka_producer(broker.bootstrap, logs)
    try:
        def produced_and_pushed() -> list[Any]:
            for i in range(10):
                p.produce("telemetry-rd", f"v{i}".encode())
            p.flush(10)
            return broker.pushes_from("confluent-kafka-python")
        pushed = eventually(produced_and_pushed, "a push from librdkafka")
    finally:
        p.flush(10)
    payload = pushed[0]
    inst = next(i for i in broker.instances() if i.instance_id == payload.client_instance_id)
    assert inst.metrics == frozenset({"org.apache.kafka.producer."})
    # Destroyed, the producer pushes a last time, terminating.
    del p
    last = eventually(lambda: [q for q in broker.pushes_from("confluent-kafka-python") if q.terminating],
                      "librdkafka's terminating push")
    assert last[0].client_instance_id == payload.client_instance_id
    assert payload.context.client_id == "rdkafka"
    assert payload.push_interval_ms == 1000
    assert b"org.apache.kafka.producer." in payload.data  # OTLP metric names, decompressed
    assert b"org.apache.kafka.consumer." not in payload.data
    assert_exported(payload, "confluent-kafka-python")
    assert not [line for line in logs if "TELEMETRY" in line.upper() and not line.startswith("INFO")], logs


def test_without_a_subscription_clients_ask_once_and_push_nothing(broker, caplog):
    from confluent_kafka import Consumer
    caplog.set_level(logging.WARNING, logger="rivulet")
    logs: list[str] = []
    p = rdkafka_producer(broker.bootstrap, logs)
    for i in range(100):
        p.produce("telemetry-quiet", f"v{i}".encode())
    assert p.flush(15) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "quiet", "auto.offset.reset": "earliest"})
    c.subscribe(["telemetry-quiet"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 100 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
    c.close()
    assert got == 100
    # Both asked (GetTelemetrySubscriptions), were told no metrics at the default interval, pushed nothing.
    asked = eventually(lambda: [i for i in broker.instances() if i.context.software_name == "confluent-kafka-python"],
                       "librdkafka asking for its subscription")
    assert all(i.metrics == frozenset() and i.push_interval_ms == 300_000 for i in asked)
    assert broker.call(lambda: broker.payloads().pushes) == 0
    # librdkafka says at INFO that it has an instance id, as against Kafka; nothing louder.
    assert not [line for line in logs if not line.startswith(("INFO", "DEBUG"))], logs
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_without_a_telemetry_reporter_telemetry_is_answered_but_not_offered(tmp_path):
    """As Kafka: with no reporter that receives telemetry, ApiVersions does not list KIP-714's
    APIs (so clients neither ask nor say anything about it), and the requests are answered
    all the same."""
    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages.get_telemetry_subscriptions_request import GetTelemetrySubscriptionsRequest
    with BrokerProcess(data_dir=str(tmp_path)) as b:
        logs: list[str] = []
        p = rdkafka_producer(b.bootstrap, logs)
        p.produce("telemetry-off", b"v")
        assert p.flush(15) == 0

        async def main() -> tuple:
            host, port = b.bootstrap.split(":")
            c = await BrokerConnection(host, int(port)).connect()
            try:
                r = await c.send(GetTelemetrySubscriptionsRequest(client_instance_id=uuid.UUID(int=0)), version=0)
                return set(c.api_versions), r
            finally:
                await c.close()
        listed, answer = asyncio.run(main())
        assert 71 not in listed and 72 not in listed and 18 in listed
        assert answer.error_code == 0 and answer.client_instance_id != uuid.UUID(int=0)
        assert not [line for line in logs if "telemetry" in line.lower()], logs


# ------------------------------------------------------------------ the Java client
@pytest.mark.java
def test_java_producer_pushes_and_terminates(broker):
    import java_tools as jt
    reason = jt.java_available()
    if reason is not None:
        pytest.skip(f"Java client unavailable: {reason}")
    # The subscription through Kafka's own tool (the Java Admin's IncrementalAlterConfigs).
    jt.run_tool("org.apache.kafka.tools.ClientMetricsCommand", [
        "--bootstrap-server", broker.bootstrap, "--alter", "--name", "java-producers",
        "--metrics", "org.apache.kafka.producer.,org.apache.kafka.consumer.", "--interval", "1000",
        "--match", "client_software_name=apache-kafka-java"])
    tool = jt.run_tool("org.apache.kafka.tools.ClientMetricsCommand", [
        "--bootstrap-server", broker.bootstrap, "--describe", "--name", "java-producers"]).stdout
    assert "org.apache.kafka.producer." in tool and "1000" in tool and "apache-kafka-java" in tool, tool
    listed = jt.run_tool("org.apache.kafka.tools.ClientMetricsCommand", [
        "--bootstrap-server", broker.bootstrap, "--list"]).stdout
    assert listed.split() == ["java-producers"], listed
    jt.producer_perf(broker.bootstrap, "telemetry-java", num_records=3000, record_size=100, throughput=1000)
    pushed = eventually(lambda: broker.pushes_from("apache-kafka-java"), "a push from the Java producer")
    payload = pushed[-1]
    assert payload.context.software_version == jt.KAFKA_VERSION
    assert b"org.apache.kafka.producer." in payload.data
    assert_exported(payload, "apache-kafka-java")
    # Its connection closed when it finished, and the broker forgot its instance. (Its close
    # usually pushes once more, terminating, but not when a push is still in flight then.)
    eventually(lambda: payload.client_instance_id not in {i.instance_id for i in broker.instances()},
               "the instance forgotten with its connection")
    # The consumer too, while it waits for records that do not come.
    jt.consumer_perf(broker.bootstrap, "telemetry-java", num_records=6000, idle_timeout_ms=4000, require_all=False)
    eventually(lambda: [p for p in broker.pushes_from("apache-kafka-java") if b"org.apache.kafka.consumer." in p.data],
               "a push from the Java consumer")


# ------------------------------------------------------------------ admin API, errors, restart
def test_subscriptions_through_the_admin_api_survive_a_restart(tmp_path):
    with BrokerProcess(data_dir=str(tmp_path)) as b:
        subscribe(b.bootstrap, "sub-a", metrics="org.apache.kafka.producer., org.apache.kafka.consumer.,"
                  "org.apache.kafka.stream.", interval_ms="2000", match="client_id=app-.*")
        want = {"metrics": ("org.apache.kafka.producer.,org.apache.kafka.consumer.,org.apache.kafka.stream.", 7),
                "interval.ms": ("2000", 7), "match": ("client_id=app-.*", 7)}
        assert described(b.bootstrap, "sub-a") == want
        assert described(b.bootstrap, "none-such") == {"metrics": ("", 5), "interval.ms": ("300000", 5),
                                                       "match": ("", 5)}
        for ops, code in (([("interval.ms", SET, "50")], ErrorCode.INVALID_REQUEST),
                          ([("colour", SET, "blue")], ErrorCode.INVALID_REQUEST),
                          ([("interval.ms", SET, "soon")], ErrorCode.INVALID_CONFIG),
                          ([("match", SET, "client_id=(")], ErrorCode.INVALID_CONFIG),
                          ([("match", SET, "who=me")], ErrorCode.INVALID_CONFIG),
                          ([("interval.ms", APPEND, "5")], ErrorCode.INVALID_CONFIG),
                          # Kafka 4.3 appends to no client metrics config, lists included
                          ([("metrics", APPEND, "org.apache.kafka.")], ErrorCode.INVALID_CONFIG)):
            with pytest.raises(ApiError) as e:
                admin_call(b.bootstrap, lambda a: a.incremental_alter_configs(CLIENT_METRICS, "sub-b", ops))
            assert e.value.code == code, ops
        with pytest.raises(ApiError) as e:
            admin_call(b.bootstrap, lambda a: a.describe_configs(CLIENT_METRICS, ""))
        assert e.value.code == ErrorCode.INVALID_REQUEST
        subscribe(b.bootstrap, "sub-gone", metrics="*")
        admin_call(b.bootstrap, lambda a: a.incremental_alter_configs(
            CLIENT_METRICS, "sub-gone", [("metrics", DELETE, None)]))
        b.stop()
        b.start()
        assert described(b.bootstrap, "sub-a") == want
        assert described(b.bootstrap, "sub-gone")["metrics"] == ("", 5)

        # The same through the CLI, as kafka-configs --entity-type client-metrics.
        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "rivulet", "configs", *args, "-b", b.bootstrap],
                                  capture_output=True, text=True, timeout=60)
        sub = ("--entity-type", "client-metrics", "--entity-name", "sub-cli")
        done = cli("alter", *sub, "--set", "metrics=org.apache.kafka.consumer.", "--set", "interval.ms=60000")
        assert done.returncode == 0 and "Completed updating config for client-metric sub-cli." in done.stdout, \
            done.stderr
        rows = [line.split() for line in cli("describe", *sub).stdout.splitlines()[1:]]
        assert rows == [["interval.ms", "60000", "CLIENT_METRICS_CONFIG"],
                        ["metrics", "org.apache.kafka.consumer.", "CLIENT_METRICS_CONFIG"]]
        every = [line.split() for line in cli("describe", "--entity-type", "client-metrics").stdout.splitlines()]
        assert every[0][0] == "SUBSCRIPTION" and {r[0] for r in every[1:]} == {"sub-a", "sub-cli"}
        refused = cli("alter", *sub, "--set", "interval.ms=10")
        assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr, refused.stderr


# ------------------------------------------------------------------ cluster mode
@pytest.mark.cluster
def test_cluster_brokers_share_subscriptions_through_zookeeper(zk_connect, tmp_path):
    from rivulet.testing import free_port

    def config(i: int) -> BrokerConfig:
        return BrokerConfig({"broker.id": str(i), "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                             "log.dirs": str(tmp_path / f"b{i}"), "zookeeper.connect": zk_connect,
                             "zookeeper.session.timeout.ms": "6000"})

    async def until(check: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(30):
                while not check():
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"never happened: {what}") from None

    async def main() -> None:
        brokers = [Broker(config(1)), Broker(config(2))]
        for b in brokers:
            await b.start()
        try:
            bootstrap = f"127.0.0.1:{brokers[0].bound_ports[0]}"
            async with AsyncAdminClient({"bootstrap.servers": bootstrap}) as admin:
                await admin.incremental_alter_configs(CLIENT_METRICS, "everyone", [
                    ("metrics", SET, "org.apache.kafka."), ("interval.ms", SET, "10000")])
                await until(lambda: all("everyone" in b.client_metrics.subscriptions for b in brokers),
                            "the subscription on both brokers")
                assert {b.client_metrics.subscriptions["everyone"].interval_ms for b in brokers} == {10000}
                await admin.incremental_alter_configs(CLIENT_METRICS, "gone", [("metrics", SET, "*")])
                await until(lambda: all("gone" in b.client_metrics.subscriptions for b in brokers), "a second one")
                await admin.incremental_alter_configs(CLIENT_METRICS, "gone", [("metrics", DELETE, None)])
                await until(lambda: not any("gone" in b.client_metrics.subscriptions for b in brokers),
                            "its removal on both brokers")
            # A broker started later reads them from ZooKeeper before it serves.
            await brokers.pop().shutdown()
            late = Broker(config(2))
            brokers.append(late)
            await late.start()
            assert late.client_metrics.names() == ["everyone"]
        finally:
            for b in brokers:
                await b.shutdown()

    asyncio.run(main())
