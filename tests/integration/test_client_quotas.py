"""Client quotas against a real broker: AlterClientQuotas / DescribeClientQuotas through the
admin client, kept across a restart, and a producer and a consumer over their quotas
throttled as Kafka throttles them (throttle_time_ms reported, the connection muted)."""

from __future__ import annotations

import time

import pytest

from benchmarks.quotas import produce_flat_out, set_quota
from rivulet.admin import (
    AdminClient,
    ClientQuotaAlteration,
    ClientQuotaAlterationOp,
    ClientQuotaEntity,
    ClientQuotaFilter,
    ClientQuotaFilterComponent,
)
from rivulet.client.errors import KafkaException
from rivulet.testing import BrokerProcess

pytestmark = pytest.mark.integration

USER, CLIENT_ID = ClientQuotaEntity.USER, ClientQuotaEntity.CLIENT_ID


def alter(admin: AdminClient, entity: dict, ops: dict, validate_only: bool = False) -> None:
    e = ClientQuotaEntity(entity)
    futures = admin.alter_client_quotas(
        [ClientQuotaAlteration(e, [ClientQuotaAlterationOp(k, v) for k, v in ops.items()])],
        validate_only=validate_only)
    futures[e].result(30)


def test_alter_describe_and_restart(broker_factory):
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        alter(admin, {USER: "alice", CLIENT_ID: "app"}, {"producer_byte_rate": 1024, "request_percentage": 50.5})
        alter(admin, {CLIENT_ID: None}, {"consumer_byte_rate": 4096})
        alter(admin, {USER: "bob"}, {"producer_byte_rate": 1}, validate_only=True)
        with pytest.raises(KafkaException) as e:
            alter(admin, {USER: "alice"}, {"producer_byte_rate": 1.5})
        assert "cannot be a fractional value" in str(e.value)
        with pytest.raises(KafkaException):
            alter(admin, {"group": "g"}, {"producer_byte_rate": 1})
        everything = admin.describe_client_quotas(ClientQuotaFilter.all()).result(30)
        assert everything == {
            ClientQuotaEntity({USER: "alice", CLIENT_ID: "app"}): {"producer_byte_rate": 1024.0,
                                                                  "request_percentage": 50.5},
            ClientQuotaEntity({CLIENT_ID: None}): {"consumer_byte_rate": 4096.0},
        }
        only_default = admin.describe_client_quotas(ClientQuotaFilter.contains_only(
            [ClientQuotaFilterComponent.of_default_entity(CLIENT_ID)])).result(30)
        assert list(only_default) == [ClientQuotaEntity({CLIENT_ID: None})]
        with pytest.raises(KafkaException) as e:
            admin.describe_client_quotas(ClientQuotaFilter.contains(
                [ClientQuotaFilterComponent.of_entity_type("group")])).result(30)
        assert "Unsupported entity type group" in str(e.value)
    finally:
        admin.close()
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        again = admin.describe_client_quotas().result(30)
        assert again[ClientQuotaEntity({CLIENT_ID: None})] == {"consumer_byte_rate": 4096.0}
        alter(admin, {CLIENT_ID: None}, {"consumer_byte_rate": None})
        assert ClientQuotaEntity({CLIENT_ID: None}) not in admin.describe_client_quotas().result(30)
    finally:
        admin.close()


@pytest.mark.parametrize("acks", [1, 0])
def test_producer_over_its_quota_is_throttled_to_it(acks):
    """confluent-kafka producing flat out under a 1 MB/s producer_byte_rate: librdkafka reports
    throttle times (acks=1; acks=0 has no answer to carry one, but is muted all the same), and
    in the 10 s after the first quota window the broker accepts no more than the quota plus
    25%. The first window is left out: Kafka's rate counts its span as 10 s even when a burst
    takes a few ms, so a client may send 10 s worth at once. Kafka 4.3.1 itself accepts about
    1.09 of the quota here, and so does Rivulet on a quiet machine (docs/performance.md); with
    the CPUs busy a throttled producer's bursts land unevenly across windows (1.17 with two
    busy loops beside the test), while a quota not applied lets through many times it. An
    upper bound only: a slow machine just produces less."""
    quota = 1_000_000
    with BrokerProcess() as broker:
        set_quota(broker.bootstrap, "throttled-producer", quota)
        run = produce_flat_out(broker.bootstrap, "quota-test", seconds=22, quota=quota, acks=acks,
                               batch_size=16384)
    if acks:
        assert run.throttles and max(run.throttles) > 0
    t0 = run.acked[0][0]
    steady = run.rate(t0 + 11, t0 + 21)
    assert steady <= quota * 1.25, (f"{steady:,.0f} B/s accepted under a quota of {quota:,} B/s; "
                                    f"per second: {[round(w / quota, 2) for w in run.windows(1.0)]}")


def test_consumer_over_its_quota_gets_throttled_empty_fetches(broker_factory):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    broker = broker_factory()
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for _ in range(2000):
        p.produce("quota-fetch", b"y" * 1000, partition=0)
        p.poll(0)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        alter(admin, {CLIENT_ID: "slow-consumer"}, {"consumer_byte_rate": 50_000})
    finally:
        admin.close()
    throttles: list[float] = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "quota-fetch", "client.id": "slow-consumer",
                  "enable.auto.commit": False, "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    c.assign([TopicPartition("quota-fetch", 0, OFFSET_BEGINNING)])
    got = 0
    deadline = time.monotonic() + 20
    while not throttles and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += 1
    c.close()
    assert throttles and max(throttles) > 0
    assert got < 2000  # 2 MB at 50 kB/s cannot have arrived yet


def test_cli_configs_for_quota_entities(broker_factory):
    import subprocess
    import sys
    broker = broker_factory()

    def rivulet(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rivulet", *args, "-b", broker.bootstrap],
                              capture_output=True, text=True, timeout=60)

    def table(*args: str) -> list[list[str]]:
        r = rivulet(*args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        return [line.split() for line in r.stdout.splitlines()[1:]]

    done = rivulet("configs", "alter", "--entity-type", "clients", "--entity-name", "app",
                   "--set", "producer_byte_rate=1048576", "--set", "request_percentage=12.5")
    assert done.returncode == 0 and "client-id=app" in done.stdout, done.stderr
    assert rivulet("configs", "alter", "--user", "alice", "--client-defaults",
                   "--set", "consumer_byte_rate=2048").returncode == 0
    assert rivulet("configs", "alter", "--entity-type", "users", "--entity-default",
                   "--set", "producer_byte_rate=1000").returncode == 0
    assert table("configs", "describe", "--entity-type", "clients", "--entity-name", "app") == [
        ["client-id=app", "producer_byte_rate", "1048576"], ["client-id=app", "request_percentage", "12.5"]]
    assert table("configs", "describe", "--entity-type", "users") == [
        ["user=<default>", "producer_byte_rate", "1000"]]
    assert table("configs", "describe", "--user", "alice", "--client-defaults") == [
        ["client-id=<default>,user=alice", "consumer_byte_rate", "2048"]]
    assert rivulet("configs", "alter", "--entity-type", "clients", "--entity-name", "app",
                   "--delete", "request_percentage").returncode == 0
    assert table("configs", "describe", "--entity-type", "clients") == [
        ["client-id=app", "producer_byte_rate", "1048576"]]
    bad = rivulet("configs", "alter", "--entity-type", "clients", "--entity-name", "app",
                  "--set", "producer_byte_rate=1.5")
    assert bad.returncode == 1 and len(bad.stderr.splitlines()) == 1 and "INVALID_REQUEST" in bad.stderr, bad.stderr


def test_a_new_quota_applies_to_a_connection_already_open(broker_factory):
    from confluent_kafka import Producer
    broker = broker_factory()
    throttles: list[float] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "late-quota", "linger.ms": 5,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    for _ in range(10):
        p.produce("late-quota", b"a" * 100)
    assert p.flush(30) == 0 and not throttles
    set_quota(broker.bootstrap, "late-quota", 10_000)  # while the producer's connection stays open
    deadline = time.monotonic() + 20
    while not throttles and time.monotonic() < deadline:
        try:
            p.produce("late-quota", b"b" * 1000)
        except BufferError:
            pass
        p.poll(0.01)
    p.purge()
    assert throttles and max(throttles) > 0


def test_connection_creation_rate_holds_then_closes_connections_over_it(broker_factory):
    """An IP over its connection_creation_rate (KIP-612): its new connections are not served and
    are closed after the throttle time; removing the quota lets new ones in again."""
    import socket
    import struct

    def served(sock: socket.socket) -> bool:
        body = struct.pack(">hhih", 18, 0, 7, 3) + b"raw"
        sock.settimeout(5)
        try:
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = sock.recv(8, socket.MSG_WAITALL)
        except (ConnectionResetError, BrokenPipeError, socket.timeout):
            return False
        return len(head) == 8

    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        alter(admin, {ClientQuotaEntity.IP: "127.0.0.1"}, {"connection_creation_rate": 2})
        host, port = broker.bootstrap.split(":")
        socks = [socket.create_connection((host, int(port))) for _ in range(25)]
        results = [served(s) for s in socks]
        # 2/s judged over the first window, counted as 10 s: twenty at once are within it (one
        # more if the second it took adds to the span), the rest are not.
        assert all(results[:20]) and not any(results[21:]), results
        for s in socks:
            s.close()
        alter(admin, {ClientQuotaEntity.IP: "127.0.0.1"}, {"connection_creation_rate": None})
        with socket.create_connection((host, int(port))) as s:
            assert served(s)
    finally:
        admin.close()


def test_controller_mutation_rate_on_topic_creation(broker_factory):
    """controller_mutation_rate (KIP-599): CreateTopics v6+ is strict (a topic is refused with
    THROTTLING_QUOTA_EXCEEDED while the client is in debt), librdkafka's older CreateTopics is
    permissive (done, and the answer throttled)."""
    import asyncio

    from confluent_kafka.admin import AdminClient as CkAdmin
    from confluent_kafka.admin import NewTopic as CkNewTopic

    from rivulet.admin import AsyncAdminClient, NewTopic
    from rivulet.protocol.errors import ApiError, ErrorCode
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        alter(admin, {CLIENT_ID: None}, {"controller_mutation_rate": 1})  # 11 partitions of credit each
    finally:
        admin.close()

    async def strict() -> list:
        async with AsyncAdminClient({"bootstrap.servers": broker.bootstrap, "client.id": "strict"}) as a:
            first = await a.create_topics([NewTopic("m-a", 20)])
            second = await a.create_topics([NewTopic("m-b", 1)])
            return [first["m-a"], second["m-b"]]

    first, second = asyncio.run(strict())
    assert not isinstance(first, ApiError)  # in credit when it started
    assert isinstance(second, ApiError) and second.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED

    throttles: list[float] = []
    ck = CkAdmin({"bootstrap.servers": broker.bootstrap, "client.id": "permissive",
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    for name, parts in (("m-c", 20), ("m-d", 1)):
        ck.create_topics([CkNewTopic(name, parts, 1)])[name].result(30)  # both done
    deadline = time.monotonic() + 10
    while not throttles and time.monotonic() < deadline:
        ck.poll(0.1)
    assert throttles and max(throttles) > 0


@pytest.mark.parametrize("version", [0, 1])
def test_kafka_pythons_encoding_of_the_quota_apis(broker_factory, version):
    """kafka-python has no quota calls in its admin client, but its own codec for both APIs
    (v0 and the flexible v1), sent through its admin connection, gets Kafka's answers."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.admin import AlterClientQuotasRequest as A
    from kafka.protocol.admin import DescribeClientQuotasRequest as D
    broker = broker_factory()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        def send(request):  # kafka-python's admin runs its requests on its own network loop
            return admin._manager.run(admin._manager.send, request)

        def entry(name, value, key="producer_byte_rate"):
            return A.EntryData(entity=[A.EntryData.EntityData(entity_type="client-id", entity_name=name)],
                               ops=[A.EntryData.OpData(key=key, value=value, remove=False)])

        altered = send(A(version=version, entries=[entry("kp", 1024.0), entry("bad", 1.5)], validate_only=False))
        assert [(e.entity[0].entity_name, e.error_code, e.error_message) for e in altered.entries] == [
            ("kp", 0, None), ("bad", 42, "producer_byte_rate cannot be a fractional value.")]
        described = send(D(version=version, components=[D.ComponentData(entity_type="client-id", match_type=2,
                                                                         match=None)], strict=True))
        assert described.error_code == 0
        assert [(e.entity[0].entity_name, [(v.key, v.value) for v in e.values]) for e in described.entries] == [
            ("kp", [("producer_byte_rate", 1024.0)])]
        refused = send(D(version=version, components=[D.ComponentData(entity_type="group", match_type=0,
                                                                      match="g")], strict=False))
        assert (refused.error_code, refused.error_message) == (35, "Unsupported entity type group")
    finally:
        admin.close()


@pytest.mark.parametrize("client", ["confluent", "rivulet"])
def test_share_consumer_over_its_quota_is_throttled(broker_factory, client):
    """A share consumer under consumer_byte_rate=1 KiB/s: ShareFetch answers count against the
    same fetch quota as Fetch's, so the consumer is throttled (librdkafka reports the throttle
    time; the broker mutes the connection either way) and reads no faster than the quota lets
    it, far from the 5,000 records (500 kB) waiting. An upper bound only: a slow machine just
    reads less."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient as CkAdmin
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    broker = broker_factory()
    topic, group, n, size = "quota-share", f"quota-share-{client}", 5000, 100
    ck = CkAdmin({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    ck.incremental_alter_configs([res])[res].result(30)
    # Batches of 10 records, each well within what the quota lets through at once.
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 10})
    for _ in range(n):
        p.produce(topic, b"s" * size, partition=0)
        p.poll(0)
    assert p.flush(30) == 0
    quota = 1024
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        alter(admin, {CLIENT_ID: "slow-share"}, {"consumer_byte_rate": quota})
    finally:
        admin.close()
    if client == "confluent":
        from confluent_kafka import ShareConsumer
    else:
        from rivulet import ShareConsumer
    throttles: list[float] = []
    c = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "slow-share",
                       "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    c.subscribe([topic])
    got = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < 15 and not (client == "confluent" and throttles and got):
            got += sum(1 for m in c.poll(0.5) if m.error() is None)
        while time.monotonic() - start < 15:
            got += sum(1 for m in c.poll(0.5) if m.error() is None)
        elapsed = time.monotonic() - start
    finally:
        c.close()
    assert got > 0
    if client == "confluent":
        assert throttles and max(throttles) > 0
    # Kafka's rate lets one quota window (10 s of quota) through at once, then the quota: twice
    # that, counting only the values, is far above what a throttled consumer can get.
    assert got * size <= 2 * quota * (elapsed + 10), f"{got} records of {size} B in {elapsed:.1f} s"
