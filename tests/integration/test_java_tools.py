"""Apache Kafka's own Java tools against Rivulet, and (to validate the harness) against Kafka.

Rivulet tests drive the broker the way Kafka's perf and admin tools do: ProducerPerformance
(acks=all, idempotence at the client default, i.e. on), ConsumerPerformance in a group,
EndToEndLatency, kafka-topics and kafka-consumer-groups. A missing Rivulet feature makes these
fail, never skip; they skip only when Java, Maven or Maven Central is unavailable.

``test_runners_against_apache_kafka`` runs the same runners against a real Apache Kafka broker,
so a parsing bug in tests/java_tools.py cannot pass for a Rivulet bug (or hide one).
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import java_tools as jt  # noqa: E402

pytestmark = [pytest.mark.java, pytest.mark.integration]

NUM_RECORDS = 50_000
RECORD_SIZE = 100
MIB = NUM_RECORDS * RECORD_SIZE / 2**20

# Bound every client wait so a missing broker feature fails in seconds, not the tool defaults
# (a 60 s max.block.ms, a 2 min delivery timeout).
PRODUCER_PROPS = {"max.block.ms": 20_000, "request.timeout.ms": 15_000, "delivery.timeout.ms": 30_000}
CLIENT_PROPS = {"request.timeout.ms": 15_000, "default.api.timeout.ms": 20_000}
ADMIN_PROPS = {"request.timeout.ms": 15_000, "default.api.timeout.ms": 20_000}
TOOL_TIMEOUT = 90.0


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# Setup goes through librdkafka (CreateTopics, a non-idempotent producer, ListOffsets) so each
# test depends only on the broker features the Java tool under test needs.


def admin_create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """With the broker's default replication factor (1 on one broker, 3 on the test cluster)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions)], request_timeout=60)
    futures[topic].result(timeout=90)


def seed(bootstrap: str, topic: str, n: int, partitions: int, size: int = RECORD_SIZE) -> None:
    """n records spread round-robin, so every partition has some (a sticky partitioner may
    leave one empty)."""
    from confluent_kafka import Producer

    errors: list[object] = []
    p = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
        "linger.ms": 5, "message.timeout.ms": 30_000,
    })
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=b"%08d" % i + b"x" * (size - 8), partition=i % partitions,
                          on_delivery=lambda e, m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(30) == 0, "seeding did not finish"
    assert not errors, f"seeding failed: {errors[:3]}"


def log_end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-watermarks"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        c.close()


# ---------------------------------------------------------------------------- the flows, shared


def check_topic_command(bootstrap: str, replication_factor: int = 1) -> None:
    topic = topic_name("jtopic")
    jt.create_topic(bootstrap, topic, partitions=3, replication_factor=replication_factor,
                    configs={"retention.ms": 3_600_000}, admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)
    desc = jt.describe_topics(bootstrap, topic, admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)
    assert set(desc) == {topic}
    d = desc[topic]
    assert (d.partition_count, d.replication_factor) == (3, replication_factor)
    assert d.topic_id and d.topic_id != "AAAAAAAAAAAAAAAAAAAAAA"  # a real id, not Uuid.ZERO
    assert d.configs.get("retention.ms") == "3600000"
    assert [p.partition for p in d.partitions] == [0, 1, 2]
    for p in d.partitions:
        assert p.leader is not None and len(p.replicas) == replication_factor and p.replicas[0] == p.leader
        assert sorted(p.isr) == sorted(p.replicas)
    # Creating it again must be refused with TOPIC_ALREADY_EXISTS, which the tool reports.
    with pytest.raises(jt.JavaToolError, match="already exists"):
        jt.create_topic(bootstrap, topic, admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)
    # --if-not-exists turns that into a no-op.
    jt.create_topic(bootstrap, topic, if_not_exists=True, admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)


def check_producer_perf(bootstrap: str) -> jt.ProducerPerfResult:
    topic = topic_name("jprod")
    admin_create(bootstrap, topic, partitions=3)
    r = jt.producer_perf(bootstrap, topic, num_records=NUM_RECORDS, record_size=RECORD_SIZE, acks="all",
                         props=PRODUCER_PROPS, timeout=TOOL_TIMEOUT)
    print(f"\nProducerPerformance {bootstrap}: {r.records_per_sec:.0f} rec/s, {r.mb_per_sec:.2f} MB/s, "
          f"avg {r.avg_latency_ms:.1f} ms, p99 {r.p99_ms} ms")
    assert r.records == NUM_RECORDS and r.records_per_sec > 0 and r.mb_per_sec > 0
    assert r.p50_ms <= r.p95_ms <= r.p99_ms <= r.p999_ms <= r.max_latency_ms
    # Idempotent and acks=all: exactly one copy of every record, whatever retries happened.
    assert sum(log_end_offsets(bootstrap, topic).values()) == NUM_RECORDS
    return r


def check_consumer_perf(bootstrap: str) -> jt.ConsumerPerfResult:
    topic = topic_name("jcons")
    admin_create(bootstrap, topic, partitions=3)
    seed(bootstrap, topic, NUM_RECORDS, partitions=3)
    r = jt.consumer_perf(bootstrap, topic, num_records=NUM_RECORDS, group=topic_name("jcons-group"),
                         idle_timeout_ms=15_000, props=CLIENT_PROPS, timeout=TOOL_TIMEOUT)
    print(f"\nConsumerPerformance {bootstrap}: {r.records_per_sec:.0f} rec/s, {r.mb_per_sec:.2f} MB/s, "
          f"rebalance {r.rebalance_ms} ms, fetch {r.fetch_records_per_sec:.0f} rec/s")
    assert r.records == NUM_RECORDS
    assert r.mb == pytest.approx(MIB, abs=1e-3)
    return r


def check_end_to_end_latency(bootstrap: str) -> jt.EndToEndLatencyResult:
    topic = topic_name("je2e")
    admin_create(bootstrap, topic)
    r = jt.end_to_end_latency(bootstrap, topic, num_records=1000, record_size=RECORD_SIZE, acks="all",
                              props=PRODUCER_PROPS | CLIENT_PROPS, timeout=TOOL_TIMEOUT)
    print(f"\nEndToEndLatency {bootstrap}: avg {r.avg_ms:.2f} ms, p50 {r.p50_ms} ms, p99 {r.p99_ms} ms, "
          f"p99.9 {r.p999_ms} ms")
    assert r.avg_ms > 0 and r.p50_ms <= r.p99_ms <= r.p999_ms
    # Each record was read back and validated by the tool itself; the log holds exactly them.
    assert log_end_offsets(bootstrap, topic) == {0: 1000}
    return r


def check_consumer_group_command(bootstrap: str) -> None:
    topic, group = topic_name("jgroup"), topic_name("jgroup-g")
    admin_create(bootstrap, topic, partitions=3)
    seed(bootstrap, topic, 3000, partitions=3)
    ends = log_end_offsets(bootstrap, topic)
    assert ends == {0: 1000, 1: 1000, 2: 1000}
    # Consume everything as a group member; the consumer commits on close.
    jt.consumer_perf(bootstrap, topic, num_records=3000, group=group, idle_timeout_ms=15_000,
                     props=CLIENT_PROPS, timeout=TOOL_TIMEOUT)
    assert group in jt.list_groups(bootstrap, admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)

    rows = jt.describe_group(bootstrap, group, admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)
    assert [(r.topic, r.partition) for r in rows] == [(topic, p) for p in range(3)]
    for r in rows:
        assert (r.current_offset, r.log_end_offset, r.lag) == (ends[r.partition], ends[r.partition], 0)
        assert r.consumer_id is None  # the member left, so no owner is shown

    # A dry run reports the target offsets and changes nothing.
    plan = jt.reset_offsets(bootstrap, group, topic, to="earliest", execute=False,
                            admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)
    assert plan == {(topic, p): 0 for p in range(3)}
    rows = jt.describe_group(bootstrap, group, admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)
    assert all(r.lag == 0 for r in rows)

    done = jt.reset_offsets(bootstrap, group, topic, to="earliest", admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)
    assert done == {(topic, p): 0 for p in range(3)}
    done = jt.reset_offsets(bootstrap, group, topic, to=5, partitions=[1], admin_props=ADMIN_PROPS,
                            timeout=TOOL_TIMEOUT)
    assert done == {(topic, 1): 5}
    rows = jt.describe_group(bootstrap, group, admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)
    expected = {p: (5 if p == 1 else 0) for p in range(3)}
    for r in rows:
        assert r.current_offset == expected[r.partition]
        assert r.lag == ends[r.partition] - expected[r.partition]

    # An unknown group is an error the tool prints (exit 0); the runner must surface it.
    with pytest.raises(jt.JavaToolError):
        jt.describe_group(bootstrap, topic_name("no-such-group"), admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT)


def check_config_command_quotas(bootstrap: str) -> None:
    """kafka-configs sets and shows client quotas (AlterClientQuotas, DescribeClientQuotas)."""
    client = topic_name("jquota")

    def configs(*args: str) -> str:
        return jt.config_command(bootstrap, list(args), admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT).stdout

    assert f"Completed updating config for client {client}." in configs(
        "--alter", "--entity-type", "clients", "--entity-name", client,
        "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    assert f"Quota configs for client-id '{client}' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0" \
        in configs("--describe", "--entity-type", "clients", "--entity-name", client)
    configs("--alter", "--entity-type", "clients", "--entity-name", client, "--delete-config", "consumer_byte_rate")
    assert f"Quota configs for client-id '{client}' are producer_byte_rate=1024.0" in configs(
        "--describe", "--entity-type", "clients", "--entity-name", client)
    with pytest.raises(jt.JavaToolError) as e:
        configs("--alter", "--entity-type", "clients", "--entity-name", client, "--add-config",
                "producer_byte_rate=1.5")
    assert "producer_byte_rate cannot be a fractional value." in e.value.run.stderr
    configs("--alter", "--entity-type", "clients", "--entity-name", client, "--delete-config", "producer_byte_rate")
    # A user's describe also asks for its SCRAM credentials (DescribeUserScramCredentials); a user
    # without any gets RESOURCE_NOT_FOUND there, which the tool passes over.
    user = topic_name("juser")
    configs("--alter", "--entity-type", "users", "--entity-name", user, "--add-config", "producer_byte_rate=4096")
    assert f"Quota configs for user-principal '{user}' are producer_byte_rate=4096.0" in configs(
        "--describe", "--entity-type", "users", "--entity-name", user)
    configs("--alter", "--entity-type", "users", "--entity-name", user, "--delete-config", "producer_byte_rate")


def check_feature_command(bootstrap: str) -> None:
    """kafka-features describe (ApiVersions' features) and upgrade with Kafka's validation
    (UpdateFeatures), what Kafka 4.3.1 and Rivulet have in common: group.version 0-1 finalized
    at 1 in a new cluster, a dry run, a level no broker supports."""
    features = jt.describe_features(bootstrap, timeout=TOOL_TIMEOUT)
    group = features["group.version"]
    assert (group.supported_min, group.supported_max, group.finalized) == (0, 1, 1)
    assert group.epoch >= 0
    dry = jt.feature_command(bootstrap, ["upgrade", "--feature", "group.version=1", "--dry-run"], timeout=TOOL_TIMEOUT)
    assert "group.version can be upgraded to 1." in dry.stdout
    bad = jt.feature_command(bootstrap, ["upgrade", "--feature", "transaction.version=99"], check=False,
                             timeout=TOOL_TIMEOUT)
    assert bad.returncode != 0
    assert "Invalid update version 99 for feature transaction.version." in bad.stdout + bad.stderr, bad.stdout


# ---------------------------------------------------------------------------- against Rivulet


def test_topic_command_create_and_describe(java, broker) -> None:
    check_topic_command(broker.bootstrap)


def test_producer_performance_acks_all_idempotent(java, broker) -> None:
    check_producer_perf(broker.bootstrap)


def test_end_to_end_latency(java, broker) -> None:
    check_end_to_end_latency(broker.bootstrap)


def test_consumer_performance_with_group(java, broker) -> None:
    check_consumer_perf(broker.bootstrap)


def test_consumer_group_command_describe_and_reset(java, broker) -> None:
    check_consumer_group_command(broker.bootstrap)


def test_config_command_client_quotas(java, broker) -> None:
    check_config_command_quotas(broker.bootstrap)


def test_acl_command_add_list_remove(java, broker_factory) -> None:
    """kafka-acls against a broker with an authorizer (everyone allowed where no ACL applies,
    so the anonymous tool may manage them)."""
    b = broker_factory({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                        "allow.everyone.if.no.acl.found": "true"})

    def acls(*args: str) -> str:
        return jt.acl_command(b.bootstrap, list(args), admin_props=ADMIN_PROPS, timeout=TOOL_TIMEOUT).stdout

    acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
         "--topic", "orders")
    acls("--add", "--allow-principal", "User:app", "--consumer", "--topic", "pay-", "--group", "app",
         "--resource-pattern-type", "prefixed")
    listed = acls("--list", "--topic", "orders")
    assert "User:alice" in listed and "READ" in listed and "DESCRIBE" in listed, listed
    prefixed = acls("--list", "--topic", "pay-", "--resource-pattern-type", "prefixed")
    assert "User:app" in prefixed and "READ" in prefixed, prefixed
    acls("--remove", "--force", "--topic", "orders")
    assert "User:alice" not in acls("--list")
    assert "User:app" in acls("--list", "--principal", "User:app")


def test_feature_command_describe_upgrade_downgrade(java, broker_factory) -> None:
    b = broker_factory()
    check_feature_command(b.bootstrap)  # a dry run and a refused upgrade: nothing changes
    before = jt.describe_features(b.bootstrap, timeout=TOOL_TIMEOUT)
    assert before["share.version"].finalized == 1
    # KIP-1071's streams groups: level 1 supported and finalized in a new cluster.
    assert (before["streams.version"].supported_max, before["streams.version"].finalized) == (1, 1)
    # KIP-890 part 2: level 2 supported and finalized in a new cluster, as Kafka 4.3.1's.
    assert (before["transaction.version"].supported_max, before["transaction.version"].finalized) == (2, 2)
    # KIP-966: level 1 supported and finalized in a new cluster, as Kafka 4.3.1's.
    elr = before["eligible.leader.replicas.version"]
    assert (elr.supported_min, elr.supported_max, elr.finalized) == (0, 1, 1)
    out = jt.feature_command(b.bootstrap, ["downgrade", "--feature", "eligible.leader.replicas.version=0"],
                             timeout=TOOL_TIMEOUT)
    assert "eligible.leader.replicas.version was downgraded to 0." in out.stdout
    assert jt.describe_features(b.bootstrap, timeout=TOOL_TIMEOUT)["eligible.leader.replicas.version"].finalized == 0
    out = jt.feature_command(b.bootstrap, ["upgrade", "--feature", "eligible.leader.replicas.version=1"],
                             timeout=TOOL_TIMEOUT)
    assert "eligible.leader.replicas.version was upgraded to 1." in out.stdout
    before = jt.describe_features(b.bootstrap, timeout=TOOL_TIMEOUT)
    assert before["eligible.leader.replicas.version"].finalized == 1
    out = jt.feature_command(b.bootstrap, ["downgrade", "--feature", "group.version=0"], timeout=TOOL_TIMEOUT)
    assert "group.version was downgraded to 0." in out.stdout
    after = jt.describe_features(b.bootstrap, timeout=TOOL_TIMEOUT)
    assert after["group.version"].finalized == 0 and after["group.version"].epoch == before["group.version"].epoch + 1
    # The finalized levels are the broker's metadata: they survive a restart.
    b.stop()
    b.start()
    assert jt.describe_features(b.bootstrap, timeout=TOOL_TIMEOUT)["group.version"].finalized == 0
    jt.feature_command(b.bootstrap, ["upgrade", "--feature", "group.version=1"], timeout=TOOL_TIMEOUT)
    assert jt.describe_features(b.bootstrap, timeout=TOOL_TIMEOUT)["group.version"].finalized == 1


def _props(path: Path, **props: str) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def check_delegation_token_command(bootstrap: str, tmp_path: Path) -> None:
    """kafka-delegation-tokens creates, describes, renews and expires a token (as the PLAIN
    admin, over SASL_PLAINTEXT at ``bootstrap``); a Java client authenticates with it over SCRAM
    (tokenauth=true) as the token's owner, may not ask for tokens with it, and is refused once
    the token is expired."""
    admin = _props(tmp_path / "admin.properties", **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="admin" password="admin-secret";'})

    def tokens(*args: str, config: str = admin, check: bool = True) -> jt.ToolRun:
        return jt.delegation_token_command(bootstrap, list(args), config, check=check, timeout=TOOL_TIMEOUT)

    created = tokens("--create", "--max-life-time-period", "-1", "--renewer-principal", "User:alice").stdout
    m = re.search(r"^(\S+)\s+(\S+)\s+User:admin\s+User:admin\s+\[User:alice\]", created, re.M)
    assert m, created
    token_id, hmac = m.groups()
    described = tokens("--describe", "--owner-principal", "User:admin").stdout
    assert "Total number of tokens : 1" in described and token_id in described
    # Without an owner the tool sends an empty owner list, which describes nothing.
    assert "Total number of tokens : 0" in tokens("--describe").stdout
    assert "Completed renew operation." in tokens("--renew", "--hmac", hmac, "--renew-time-period", "-1").stdout

    with_token = _props(tmp_path / "token.properties", **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            f'username="{token_id}" password="{hmac}" tokenauth=true;'})
    listed = jt.run_tool(jt.TOPIC_COMMAND, ["--bootstrap-server", bootstrap, "--command-config", with_token,
                                            "--list"], timeout=TOOL_TIMEOUT)
    assert listed.returncode == 0
    refused = tokens("--describe", "--owner-principal", "User:admin", config=with_token, check=False)
    assert refused.returncode != 0
    assert "not allowed on PLAINTEXT/1-way SSL channels and on delegation token authenticated channels" \
        in refused.stdout + refused.stderr

    assert "Completed expire operation." in tokens("--expire", "--hmac", hmac, "--expiry-time-period", "-1").stdout
    assert "Total number of tokens : 0" in tokens("--describe", "--owner-principal", "User:admin").stdout
    gone = jt.run_tool(jt.TOPIC_COMMAND, ["--bootstrap-server", bootstrap, "--command-config", with_token,
                                          "--list"], check=False, timeout=TOOL_TIMEOUT)
    assert gone.returncode != 0 and "invalid credentials" in gone.stdout + gone.stderr
    renew_gone = tokens("--renew", "--hmac", hmac, "--renew-time-period", "-1", check=False)
    assert renew_gone.returncode != 0 and "DelegationTokenNotFoundException" in renew_gone.stdout + renew_gone.stderr


def test_delegation_token_command_and_token_authentication(java, tmp_path) -> None:
    from rivulet.testing import BrokerProcess
    from tests.integration.test_sasl import sasl_overrides

    b = BrokerProcess()
    b.overrides.update({**sasl_overrides(b.port), "delegation.token.secret.key": "token-secret"})
    b.start()
    try:
        check_delegation_token_command(b.bootstrap, tmp_path)
    finally:
        b.cleanup()


# ---------------------------------------------------------------------------- against a 3-broker cluster


@pytest.fixture(scope="module")
def cluster_bootstrap(java: None, module_zk_connect: str) -> Iterator[str]:
    """Three ZooKeeper-mode brokers with a replication factor of 3 by default."""
    from tests.cluster import three_brokers

    with three_brokers(module_zk_connect, **{"default.replication.factor": "3", "offsets.topic.replication.factor": "3",
                                             "min.insync.replicas": "2", "group.initial.rebalance.delay.ms": "0"}) as c:
        yield c.bootstrap


@pytest.mark.cluster
def test_topic_command_on_a_cluster(cluster_bootstrap: str) -> None:
    check_topic_command(cluster_bootstrap, replication_factor=3)


@pytest.mark.cluster
def test_producer_performance_on_a_cluster(cluster_bootstrap: str) -> None:
    check_producer_perf(cluster_bootstrap)


@pytest.mark.cluster
def test_consumer_performance_on_a_cluster(cluster_bootstrap: str) -> None:
    check_consumer_perf(cluster_bootstrap)


@pytest.mark.cluster
def test_consumer_group_command_on_a_cluster(cluster_bootstrap: str) -> None:
    check_consumer_group_command(cluster_bootstrap)


@pytest.mark.cluster
def test_feature_levels_on_a_cluster(cluster_bootstrap: str) -> None:
    """/feature in ZooKeeper: a downgrade through one broker is what every broker reports, and
    eligible.leader.replicas.version (1 in a new cluster) goes to 0 and back to 1 the same way."""
    check_feature_command(cluster_bootstrap)
    brokers = cluster_bootstrap.split(",")

    def everywhere(feature: str, level: int) -> None:
        for one in brokers:
            deadline = time.monotonic() + 30
            while jt.describe_features(one, timeout=TOOL_TIMEOUT)[feature].finalized != level:
                assert time.monotonic() < deadline, f"{one} does not report {feature} {level}"
                time.sleep(0.5)

    jt.feature_command(brokers[0], ["downgrade", "--feature", "group.version=0"], timeout=TOOL_TIMEOUT)
    try:
        everywhere("group.version", 0)
    finally:
        jt.feature_command(brokers[-1], ["upgrade", "--feature", "group.version=1"], timeout=TOOL_TIMEOUT)
    elr = "eligible.leader.replicas.version"
    assert jt.describe_features(brokers[1], timeout=TOOL_TIMEOUT)[elr].finalized == 1
    jt.feature_command(brokers[1], ["downgrade", "--feature", f"{elr}=0"], timeout=TOOL_TIMEOUT)
    try:
        everywhere(elr, 0)
    finally:
        jt.feature_command(brokers[2], ["upgrade", "--feature", f"{elr}=1"], timeout=TOOL_TIMEOUT)
    everywhere(elr, 1)


# ---------------------------------------------------------------------------- the harness itself


@pytest.fixture(scope="module")
def kafka_with_sasl(java: None) -> Iterator[tuple[str, str]]:
    """Kafka 4.3.1 with a SASL_PLAINTEXT listener set up as Rivulet's above, beside its plaintext
    one, for both tests against it (one JVM broker for the two): (plaintext, SASL) bootstraps."""
    from benchmarks.reference.kafka import TEST_JVM_FLAGS, KafkaReference
    from rivulet.testing import free_port
    from tests.integration.test_sasl import PLAIN_JAAS, SCRAM_JAAS

    sasl_port = free_port()
    ref = KafkaReference(overrides={}, jvm_flags=TEST_JVM_FLAGS)
    ref.properties.update({
        "listeners": f"{ref.properties['listeners']},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "advertised.listeners": f"{ref.properties['advertised.listeners']},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": f"{ref.properties['listener.security.protocol.map']},"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "delegation.token.secret.key": "token-secret"})
    try:
        ref.start()
        yield ref.bootstrap, f"127.0.0.1:{sasl_port}"
    finally:
        ref.stop()
        ref.cleanup()


def test_delegation_token_command_against_apache_kafka(kafka_with_sasl: tuple[str, str], tmp_path) -> None:
    """The same commands against Kafka 4.3.1 with the same SASL set-up, so that the checks
    above are Kafka's answers."""
    check_delegation_token_command(kafka_with_sasl[1], tmp_path)


def test_runners_against_apache_kafka(kafka_with_sasl: tuple[str, str]) -> None:
    """Every runner and assertion above, against the reference implementation (its plaintext
    listener)."""
    kafka_ref = kafka_with_sasl[0]
    check_topic_command(kafka_ref)
    check_producer_perf(kafka_ref)
    check_consumer_perf(kafka_ref)
    check_end_to_end_latency(kafka_ref)
    check_consumer_group_command(kafka_ref)
    check_config_command_quotas(kafka_ref)
    check_feature_command(kafka_ref)
