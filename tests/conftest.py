from __future__ import annotations

import itertools
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from rivulet.testing import BrokerProcess

_TESTS = Path(__file__).resolve().parent
# .ci/run runs the suite in three parts. First the light tests, several side by side. Then the
# `heavy` ones, two at a time: Spark, Kafka's JVM tools, franz-go's suite, the browser (CPU,
# memory, JVMs; beside the light ones they would slow them all). Last the `alone` ones, one at
# a time: the fault tests whose kills, stalls and partitions wait out session and request
# timeouts, and Spark's standalone cluster (its two workers want both cores; the session
# starts it once, for its tests and Spark Connect's). All of them pass side by side too; the
# parts only keep the run short and its waits honest.
_HEAVY_MARKS = {"spark", "java", "go", "browser"}
_ALONE_MODULES = {"test_replication_faults", "test_disk_full", "test_durability", "test_data_safety",
                  "test_zk_broker_session", "test_cluster_coordinators", "test_network_partitions",
                  "test_spark_cluster", "test_spark_connect", "test_iceberg_cluster"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by where it lives, so none is left unmarked: tests/unit are `fast`
    unless marked `integration` themselves, tests/integration are `integration`; and `heavy`
    and `alone` the ones .ci/run keeps apart."""
    for item in items:
        try:
            area = item.path.resolve().relative_to(_TESTS).parts[0]
        except ValueError:
            continue
        marked = {m.name for m in item.iter_markers()}
        module = item.path.stem
        if marked & _HEAVY_MARKS or module in _ALONE_MODULES:
            item.add_marker(pytest.mark.heavy)
        if module in _ALONE_MODULES:
            item.add_marker(pytest.mark.alone)
        if area == "unit" and not marked & {"fast", "integration"}:
            item.add_marker(pytest.mark.fast)
        elif area == "integration" and "integration" not in marked:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def broker():
    """One broker per test module, shared by its tests (each test uses its own topics)."""
    b = BrokerProcess().start()
    yield b
    b.cleanup()


@pytest.fixture
def broker_factory():
    made: list[BrokerProcess] = []

    def make(overrides: dict[str, str] | None = None) -> BrokerProcess:
        b = BrokerProcess(overrides)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.cleanup()


@pytest.fixture(scope="session")
def zookeeper():
    """One real ZooKeeper server for the session; tests keep apart through `zk_connect`'s chroots.

    A machine without ZooKeeper fails these tests with the reason, never skips them.
    """
    from rivulet.controller.zk_server import ZooKeeperNotFound, ZooKeeperServer

    server = ZooKeeperServer()
    try:
        server.start()
    except ZooKeeperNotFound as e:
        pytest.fail(f"these tests need a ZooKeeper server: {e}", pytrace=False)
    yield server
    server.cleanup()


_chroots = itertools.count()


def _fresh_chroot(zookeeper, name: str) -> str:
    from kazoo.client import KazooClient

    chroot = f"/t{next(_chroots)}-{name}"[:120].replace("[", "-").replace("]", "")
    zk = KazooClient(hosts=zookeeper.connect)
    zk.start(timeout=15)
    try:
        if zk.exists(chroot):
            zk.delete(chroot, recursive=True)
        zk.ensure_path(chroot)
    finally:
        zk.stop()
        zk.close()
    return zookeeper.connect + chroot


@pytest.fixture
def zk_connect(zookeeper, request):
    """A `zookeeper.connect` string with a chroot of this test's own, created empty."""
    return _fresh_chroot(zookeeper, request.node.name)


@pytest.fixture(scope="module")
def module_zk_connect(zookeeper, request):
    """As `zk_connect`, shared by one test module (a cluster its tests share)."""
    return _fresh_chroot(zookeeper, request.module.__name__.rpartition(".")[2])


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory):
    """A CA with broker and client certificates, and a second CA's client certificate, made
    for this session (PEM files and PKCS12 stores; see tests/tls_certs.py)."""
    from tls_certs import make_test_certs

    return make_test_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def java() -> None:
    """Skip, loudly, when the Java tools cannot run here. List it before `broker`."""
    from tests import java_tools as jt

    reason = jt.java_available()
    if reason is not None:
        # A warning shows in pytest's summary by default; a skip reason only with -rs.
        warnings.warn(f"Kafka Java tool tests skipped: {reason}", pytest.PytestWarning, stacklevel=1)
        print(f"Kafka Java tool tests skipped: {reason}", file=sys.stderr)
        pytest.skip(f"Kafka Java tools unavailable: {reason}")


@pytest.fixture(scope="module")
def kafka_ref(java: None) -> Iterator[str]:
    """A real Apache Kafka broker; failing to start it is a harness failure, not a skip."""
    from benchmarks.reference.kafka import KafkaReference

    ref = KafkaReference()
    try:
        ref.start()
        yield ref.bootstrap
    finally:
        ref.stop()
        ref.cleanup()


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory):
    """A Spark standalone master and two 1-core workers on loopback (tests/spark_cluster.py),
    shared by the session; its processes are killed afterwards."""
    from spark_cluster import StandaloneCluster

    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        yield cluster.start()
    finally:
        cluster.close()
