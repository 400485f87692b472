"""Topic administration through the CLI and through real clients' admin APIs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration


def cli(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rivulet", "topics", *args, "--bootstrap-server", broker.bootstrap],
                          capture_output=True, text=True, timeout=60)


def test_topics_cli_lifecycle(broker):
    t = f"cli-{uuid.uuid4().hex[:6]}"
    r = cli(broker, "create", "--topic", t, "--partitions", "3", "--config", "retention.ms=3600000")
    assert r.returncode == 0, r.stderr
    assert t in cli(broker, "list").stdout.split()
    d = cli(broker, "describe", "--topic", t).stdout
    assert "PartitionCount: 3" in d and "retention.ms=3600000" in d
    again = cli(broker, "create", "--topic", t)
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    assert cli(broker, "alter", "--topic", t, "--partitions", "5").returncode == 0
    assert "PartitionCount: 5" in cli(broker, "describe", "--topic", t).stdout
    assert cli(broker, "alter", "--topic", t, "--config", "cleanup.policy=compact").returncode == 0
    assert "cleanup.policy=compact" in cli(broker, "describe", "--topic", t).stdout
    bad = cli(broker, "alter", "--topic", t, "--config", "retention.ms=soon")
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr
    assert cli(broker, "delete", "--topic", t).returncode == 0
    assert t not in cli(broker, "list").stdout.split()


def test_cli_reports_unreachable_broker():
    r = subprocess.run([sys.executable, "-m", "rivulet", "topics", "list", "--bootstrap-server", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "cannot reach" in r.stderr


def test_confluent_admin_validation(broker):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    t = f"adm-{uuid.uuid4().hex[:6]}"
    fs = admin.create_topics([
        NewTopic(t, 2, 1, config={"segment.bytes": "1048576"}),
        NewTopic("bad/name", 1, 1),
        NewTopic(t + "-rf", 1, 3),
        NewTopic(t + "-cfg", 1, 1, config={"retention.ms": "abc"}),
        NewTopic(t + "-zero", 0, 1),
    ])
    fs[t].result(30)

    def code(f):
        try:
            f.result(30)
        except Exception as e:
            return e.args[0].code()
        return None
    assert code(fs["bad/name"]) == KafkaError.TOPIC_EXCEPTION
    assert code(fs[t + "-rf"]) == KafkaError.INVALID_REPLICATION_FACTOR
    assert code(fs[t + "-cfg"]) == KafkaError.INVALID_CONFIG
    assert code(fs[t + "-zero"]) == KafkaError.INVALID_PARTITIONS
    admin.create_partitions([NewPartitions(t, 4)])[t].result(30)
    assert len(admin.list_topics(t, timeout=10).topics[t].partitions) == 4
    res = ConfigResource(ConfigResource.Type.TOPIC, t)
    cfgs = admin.describe_configs([res])[res].result(30)
    assert cfgs["segment.bytes"].value == "1048576" and not cfgs["segment.bytes"].is_default
    assert cfgs["retention.ms"].is_default
    admin.delete_topics([t])[t].result(30)
    assert t not in admin.list_topics(timeout=10).topics


def test_list_offsets_and_delete_records(broker):
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    t = f"lo-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        p.produce(t, value=f"v{i}".encode(), partition=0, timestamp=1_000_000 + i * 1000)
        p.flush(10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(t, 0)

    def offset(spec):
        return admin.list_offsets({tp: spec})[tp].result(30).offset
    assert offset(OffsetSpec.earliest()) == 0
    assert offset(OffsetSpec.latest()) == 10
    assert offset(OffsetSpec.for_timestamp(1_004_500)) == 5
    assert offset(OffsetSpec.max_timestamp()) == 9
    deleted = admin.delete_records([TopicPartition(t, 0, 4)])
    assert deleted[TopicPartition(t, 0, 4)].result(30).low_watermark == 4
    assert offset(OffsetSpec.earliest()) == 4


def test_topic_deletion_removes_data():
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    with BrokerProcess() as b:
        p = Producer({"bootstrap.servers": b.bootstrap})
        p.produce("gone", value=b"x" * 1000)
        p.flush(10)
        assert os.path.isdir(os.path.join(b.data_dir, "gone-0"))
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.delete_topics(["gone"])["gone"].result(30)
        leftovers = [n for n in os.listdir(b.data_dir) if n.startswith("gone-")]
        assert leftovers == []


def test_retention_by_bytes_deletes_old_segments():
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    with BrokerProcess({"log.retention.check.interval.ms": "200", "log.initial.task.delay.ms": "0",
                        "log.retention.bytes": "40000"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("ret", 1, 1, config={"internal.segment.bytes": "20000"})])["ret"].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for i in range(200):
            p.produce("ret", value=b"y" * 1000, partition=0)
            p.flush(10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            logs = b.segment_bytes("ret-0")
            if len(logs) <= 3 and "00000000000000000000.log" not in logs:
                break
            time.sleep(0.2)
        assert "00000000000000000000.log" not in logs
        assert sum(logs.values()) <= 40000 + 20000


def test_first_retention_pass_runs_after_the_initial_task_delay():
    """As Kafka's LogManager: the first retention pass comes log.initial.task.delay.ms after
    start (30 s by default), not a whole log.retention.check.interval.ms (5 min) later, so
    records timestamped beyond the retention are gone that soon on both (Spark's Kafka
    connector then reads an empty topic on either)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    with BrokerProcess({"log.initial.task.delay.ms": "2000"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("old", 1, 1)])["old"].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        eight_days_ago = int(time.time() * 1000) - 8 * 24 * 3600 * 1000  # beyond the default 7 days
        for i in range(5):
            p.produce("old", value=b"x", partition=0, timestamp=eight_days_ago + i)
        assert p.flush(10) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g"})
        deadline = time.monotonic() + 60
        low, high = c.get_watermark_offsets(TopicPartition("old", 0), 10)
        while low < 5 and time.monotonic() < deadline:
            time.sleep(0.5)
            low, high = c.get_watermark_offsets(TopicPartition("old", 0), 10)
        c.close()
        assert (low, high) == (5, 5)


def test_sigterm_shuts_down_cleanly_and_restarts_without_recovery():
    from confluent_kafka import Producer
    b = BrokerProcess()
    try:
        b.start()
        p = Producer({"bootstrap.servers": b.bootstrap})
        p.produce("clean", value=b"z")
        p.flush(10)
        b.proc.send_signal(signal.SIGTERM)
        assert b.proc.wait(30) == 0
        b.proc = None
        assert os.path.exists(os.path.join(b.data_dir, ".kafka_cleanShutdown"))
        assert os.path.exists(os.path.join(b.data_dir, "recovery-point-offset-checkpoint"))
        b.start()
    finally:
        b.cleanup()


def _admin_error(f) -> int | None:
    try:
        f.result(30)
    except Exception as e:
        return e.args[0].code()
    return None


def test_dynamic_broker_configs(broker_factory):
    """AlterConfigs / IncrementalAlterConfigs on BROKER resources, as librdkafka's admin test
    (0081) and Kafka's tools use them: per broker and cluster-wide, in force at once for
    topics without their own value, reported with their source, kept across a restart."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
    b = broker_factory()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    plain, own = f"dyn-{uuid.uuid4().hex[:6]}", f"dyn-own-{uuid.uuid4().hex[:6]}"
    fs = admin.create_topics([NewTopic(plain, 1, 1), NewTopic(own, 1, 1, config={"retention.ms": "999"})])
    for f in fs.values():
        f.result(30)
    node = ConfigResource(ConfigResource.Type.BROKER, "1")

    def incremental(res, *entries):
        res = ConfigResource(res.restype, res.name, incremental_configs=list(entries))
        return admin.incremental_alter_configs([res])[res]

    def raw_default(*configs: tuple[str, int, str | None], describe: bool = False):
        """The cluster-default level (resource name ""), which confluent-kafka cannot name."""
        import asyncio
        from rivulet.client.connection import BrokerConnection
        from rivulet.protocol.messages import describe_configs_request as dcq
        from rivulet.protocol.messages import incremental_alter_configs_request as iacq

        async def go():
            host, port = b.bootstrap.split(":")
            conn = await BrokerConnection(host, int(port)).connect()
            try:
                if describe:
                    resp = await conn.send(dcq.DescribeConfigsRequest(resources=[dcq.DescribeConfigsResource(
                        resource_type=4, resource_name="", configuration_keys=None)]))
                    return {c.name: (c.value, c.config_source) for c in resp.results[0].configs}
                resp = await conn.send(iacq.IncrementalAlterConfigsRequest(validate_only=False, resources=[
                    iacq.AlterConfigsResource(resource_type=4, resource_name="", configs=[
                        iacq.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in configs])]))
                return resp.responses[0].error_code
            finally:
                await conn.close()
        return asyncio.run(go())

    def set_(name, value):
        return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)

    incremental(node, set_("log.retention.ms", "123456"), set_("background.threads", "6")).result(30)
    assert raw_default(("log.cleanup.policy", 2, "compact")) == 0  # APPEND to the value in force
    cfg = admin.describe_configs([node])[node].result(30)
    assert cfg["log.retention.ms"].value == "123456"
    assert cfg["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert cfg["log.cleanup.policy"].value == "delete,compact"
    assert cfg["log.cleanup.policy"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    # Kafka 4.1+ keeps min.insync.replicas at the cluster level (KIP-966).
    assert raw_default(describe=True) == {"log.cleanup.policy": ("delete,compact", 3), "min.insync.replicas": ("1", 3)}

    def topic_value(t, name):
        res = ConfigResource(ConfigResource.Type.TOPIC, t)
        return admin.describe_configs([res])[res].result(30)[name].value
    assert topic_value(plain, "retention.ms") == "123456"  # in force at once
    assert topic_value(own, "retention.ms") == "999"  # a topic's own value wins
    assert topic_value(plain, "cleanup.policy") == "delete,compact"

    assert _admin_error(incremental(node, set_("log.dirs", "/elsewhere"))) == KafkaError.INVALID_REQUEST
    assert _admin_error(incremental(node, set_("log.retention.ms", "soon"))) == KafkaError.INVALID_REQUEST
    # APPEND and SUBTRACT only make sense for lists (Kafka: INVALID_CONFIG).
    topic = ConfigResource(ConfigResource.Type.TOPIC, plain)
    append = ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)
    assert _admin_error(incremental(topic, append)) == KafkaError.INVALID_CONFIG

    # Kept across a restart; DELETE takes a dynamic config away again.
    b.stop()
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert admin.describe_configs([node])[node].result(30)["log.retention.ms"].value == "123456"
    incremental(node, ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)).result(30)
    assert topic_value(plain, "retention.ms") == "604800000"


def test_dynamic_broker_config_errors_come_in_kafkas_order(broker):
    """What Kafka 4.3.1 answers (checked against its broker with these requests): read-only names
    first, listed as its HashSet prints them; at the cluster level a bad value before per-broker
    names; those names again in HashSet order. The same through AlterConfigs and
    IncrementalAlterConfigs."""
    import asyncio
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    from rivulet.client.connection import BrokerConnection
    from rivulet.protocol.messages import incremental_alter_configs_request as iacq
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def answers(name: str, configs: dict[str, str]) -> set[str]:
        """The error message of both APIs, validate_only."""
        if name:
            fs = [admin.alter_configs([ConfigResource(ConfigResource.Type.BROKER, name, set_config=configs)],
                                      validate_only=True),
                  admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
                      ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])],
                      validate_only=True)]
            out = set()
            for f in (f for d in fs for f in d.values()):
                with pytest.raises(Exception) as e:
                    f.result(30)
                out.add(e.value.args[0].str())
            return out

        async def cluster_default() -> str:  # the resource name "", which confluent-kafka cannot name
            host, port = broker.bootstrap.split(":")
            conn = await BrokerConnection(host, int(port)).connect()
            try:
                resp = await conn.send(iacq.IncrementalAlterConfigsRequest(validate_only=True, resources=[
                    iacq.AlterConfigsResource(resource_type=4, resource_name="", configs=[
                        iacq.AlterableConfig(name=k, config_operation=0, value=v) for k, v in configs.items()])]))
                return resp.responses[0].error_message
            finally:
                await conn.close()
        return {asyncio.run(cluster_default())}

    assert answers("1", {"log.dirs": "/x", "broker.id": "3", "process.roles": "broker", "node.id": "3"}) == {
        "Cannot update these configs dynamically: [node.id, process.roles, broker.id, log.dirs]"}
    assert answers("", {"listeners": "PLAINTEXT://:1", "log.retention.ms": "y"}) == {
        "Invalid value y for configuration log.retention.ms: Not a number of type LONG"}
    assert answers("", {"sasl.enabled.mechanisms": "PLAIN", "ssl.provider": "x",
                        "listener.security.protocol.map": "A:PLAINTEXT"}) == {
        "Cannot update these configs at default cluster level, broker id must be specified: "
        "[ssl.provider, sasl.enabled.mechanisms, listener.security.protocol.map]"}
