from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from rivulet.testing import BrokerProcess, free_port

if TYPE_CHECKING:
    from benchmarks.reference.kafka import KafkaReference

_TESTS = Path(__file__).resolve().parent
# Spark's JVMs started by the tests (the in-process sessions' drivers, executors, the standalone
# cluster, spark-submit's and spark-pipelines' children) take their options from tests/spark_conf.
os.environ.setdefault("SPARK_CONF_DIR", str(_TESTS / "spark_conf"))
# .ci/run runs the suite in two parts, each on pytest-xdist workers with `--dist loadgroup`.
# Every test carries an xdist group, its module's name by default, so a module (and its
# module-scoped broker) stays on one worker. The fault modules share the group `faults`: one
# worker runs them one after another while the others take light tests (their kills, stalls and
# partitions mostly wait out session and request timeouts, so they cost little CPU). Then the
# `heavy` tests: Spark, Kafka's JVM tools, franz-go's and kafka-go's suites, the Node.js clients,
# the browser, and Spark's standalone cluster with Spark Connect in the group `spark-cluster` (the
# session starts the cluster once for both). Every test passes beside any other; the parts only keep the run short.
_HEAVY_MARKS = {"spark", "java", "go", "node", "browser"}
_GROUPS = {**{m: "faults" for m in (
    "test_replication_faults", "test_disk_full", "test_durability", "test_data_safety",
    "test_zk_broker_session", "test_cluster_coordinators", "test_network_partitions",
    "test_iceberg_cluster", "test_zero_copy_faults")},
    "test_spark_cluster": "spark-cluster", "test_spark_connect": "spark-cluster"}
# The longest groups first (.ci/run turns off xdist's own ordering by test count), so that none
# of them starts last and keeps one worker busy while the others idle: about 8 to 3 minutes
# each on a quiet 2-core machine. The rest follow in collection order.
_LONGEST_FIRST = ("faults", "spark-cluster", "test_franz_go_suite", "test_readme", "test_spark_declarative",
                  "test_java_tools", "test_spark_pipeline", "test_spark", "test_java_admin", "test_transactions",
                  "test_client_quotas", "test_share_groups", "test_java_txn_edges", "test_streams_groups",
                  "test_java_consumer_edges", "test_spark_kafka_connector", "test_cli", "test_consumer_protocol",
                  "test_fuzz_frames", "test_topic_admin_off_loop", "test_zk_outages", "test_share_state",
                  "test_kafka_python_suite")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by where it lives, so none is left unmarked: tests/unit are `fast`
    unless marked `integration` themselves, tests/integration are `integration`; `heavy` and
    `faults` the ones .ci/run schedules apart; each with its xdist group, longest groups first."""
    groups: dict[int, str] = {}
    for item in items:
        try:
            area = item.path.resolve().relative_to(_TESTS).parts[0]
        except ValueError:
            continue
        marked = {m.name for m in item.iter_markers()}
        module = item.path.stem
        group = _GROUPS.get(module, module)
        if marked & _HEAVY_MARKS or group == "spark-cluster":
            item.add_marker(pytest.mark.heavy)
        if group == "faults":
            item.add_marker(pytest.mark.faults)
        if area == "unit" and not marked & {"fast", "integration"}:
            item.add_marker(pytest.mark.fast)
        elif area == "integration" and "integration" not in marked:
            item.add_marker(pytest.mark.integration)
        item.add_marker(pytest.mark.xdist_group(group))
        groups[id(item)] = group
    rank = {g: i for i, g in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda it: rank.get(groups.get(id(it), ""), len(rank)))  # stable: modules stay whole


@pytest.fixture(scope="module")
def broker():
    """One broker per test module, shared by its tests (each test uses its own topics)."""
    b = BrokerProcess().start()
    yield b
    b.cleanup()


def wait_for_registry(url: str, **get: Any) -> None:
    """Wait (60 s at most) until the schema registry at ``url`` answers GET /subjects; ``get``
    goes to httpx.get (verify, auth) for a secured one."""
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/subjects", timeout=30, **get).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the schema registry did not answer"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def registry_broker() -> Iterator[tuple[BrokerProcess, str]]:
    """One broker per test module serving the schema registry on a port of its own, once the
    registry answers: (the broker, the registry's URL)."""
    url = f"http://127.0.0.1:{free_port()}"
    b = BrokerProcess({"schema.registry.listeners": url}).start()
    try:
        wait_for_registry(url)
        yield b, url
    finally:
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
        # pytest shows a test's teardown output only when it failed: the brokers' logs then.
        print(f"--- broker {b.bootstrap} ({b.log_path}), its output's end:\n{b.output_tail(16 * 1024)}")
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


@contextlib.contextmanager
def kafka_reference(overrides: dict[str, str] | None = None, heap: str = "1g") -> Iterator[KafkaReference]:
    """A real Apache Kafka broker (benchmarks/reference), started, then stopped and removed
    afterwards. Failing to start it is a harness failure, not a skip: ask for the `java`
    fixture first, which skips loudly when Java cannot run here."""
    from benchmarks.reference.kafka import TEST_JVM_FLAGS, KafkaReference

    ref = KafkaReference(overrides=overrides, heap=heap, jvm_flags=TEST_JVM_FLAGS)
    try:
        ref.start()
        yield ref
    finally:
        ref.stop()
        ref.cleanup()


@contextlib.contextmanager
def running_kafka(overrides: dict[str, str] | None = None, heap: str = "1g") -> Iterator[str]:
    """``kafka_reference``'s bootstrap address."""
    with kafka_reference(overrides, heap) as ref:
        yield ref.bootstrap


@pytest.fixture(scope="module")
def kafka_ref(java: None) -> Iterator[str]:
    with running_kafka() as bootstrap:
        yield bootstrap


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
