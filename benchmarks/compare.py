"""Rivulet and Apache Kafka side by side: identical workloads against both, on this machine.

The brokers alternate A B A B (Rivulet, Kafka, Rivulet, Kafka for two rounds), each round on a
fresh data directory. Before the first round each broker kind is started once for a short
untimed produce and consume (``--machine-warmup``): after the machine idles its VM returns
memory to the host, and the first broker to run would pay the page faults for it alone. After
start-up each broker gets an untimed warm-up (``--warmup``) so that Kafka's JIT has compiled its
produce and fetch paths. Throughput is loaded by native load
generators only, never by a Python loop (which, at 100 B records, would measure itself):

* librdkafka's ``rdkafka_performance`` (``benchmarks.rdkafka_perf``; build it once with
  ``python -m benchmarks.rdkafka_perf build``): produce 100 B and 1 KiB at acks=1 and acks=all,
  4 partitions, ``linger.ms=10``, ``batch.size=1000000``; consume each full acks=1 topic;
  produce 1 KiB lz4 and zstd batches at acks=1; and many partitions, 1,000 over 10 topics:
  rdkafka_performance takes one topic per process, so ten processes run at once, one per
  topic of 100 partitions (``MANY_TOPIC_CONFIG``, also ``many10k``'s: indexes of 128 KiB, so
  that page faults on Kafka's mmapped indexes read around no more than a 128 KiB readahead
  would), their records counted over the wall time from the first start to the last exit; the consume row then reads records of its own, appended untimed after the
  produce row (``fill_layout``): the same count to every partition in the same batches, so that
  both brokers' consume rows read the same layout, which its table reports (the produce row's
  sticky partitioner lays records out by the producer's speed);
* Kafka's Java ProducerPerformance and ConsumerPerformance (``tests.java_tools``): produce
  100 B and 1 KiB at acks=1 and acks=all with the same batching and idempotence off, and
  consume the full acks=1 topics (the fetch figures, without the group join).

Two families start brokers of their own, after the single broker's rows (which so run as
before), one broker or cluster at a time:

* ``many10k``: 10,000 partitions, ten topics of 1,000 on a fresh single broker, ten
  rdkafka_performance processes producing 1 KiB at acks=1 and then consuming an even fill, as
  ``many``;
  and the time to create the topics and elect their leaders, and the broker's RSS after;
* ``cluster``: three brokers on this machine, RF=3, acks=all, min.insync.replicas=2 (on both),
  six partitions: Rivulet in ZooKeeper mode (``benchmarks.replication.Cluster``, its ZooKeeper
  counted with the brokers) against three Kafka KRaft nodes, each broker and controller and a
  voter (``KafkaCluster``); rdkafka_performance produces 100 B and 1 KiB and consumes each
  topic, bootstrapped to all three; PLAINTEXT only.

Next to each throughput figure: the load generator's own CPU (user+sys of the child processes,
from their rusage) and the broker's (from ``/proc``, its process tree), each as seconds and as
a share of one core over the run's wall time; a generator well under 100% is not the limit.
Then the ratio Rivulet/Kafka (median of the rounds, and its range over the rounds), the spread
of each broker's rounds, and the machine's load average before and after each broker's run.

The other figures: end-to-end latency p50, p99 and p99.9 at fixed rates of 5,000 and 50,000
msg/s, linger.ms 5 and 0, acks=1 and acks=all (``produce_consume.latency``, confluent-kafka;
a consumer thread in the same process times each record), Kafka's EndToEndLatency, the time for a classic group of 10 members to be
Stable (``benchmarks.groups``; group.initial.rebalance.delay.ms=0 on both brokers), start-up
time from the broker process's creation (``/proc/<pid>/stat``) to its first Metadata response,
and the broker's resident memory (VmRSS over its process tree; for Kafka the java process).

``--security tls`` or ``--security sasl_ssl`` gives both brokers a second listener, TLS 1.3 only
(``ssl.enabled.protocols=TLSv1.3``; a CA and a broker certificate for 127.0.0.1 made for the run,
in PKCS12 stores), and for sasl_ssl SASL_SSL with SCRAM-SHA-512 (the user is made with
AlterUserScramCredentials over the PLAINTEXT listener once the broker is up). Every load
generator and the latency clients then use that listener (librdkafka: ``security.protocol``,
``ssl.ca.location``, ``sasl.*``; the Java tools: a PEM trust store and a SCRAM JAAS line); topic
creation and the wait for leaders stay on PLAINTEXT, outside the measured windows. The group
rows use Rivulet's own client and are left out; start-up is still timed to the first Metadata
on PLAINTEXT.

    python -m benchmarks.rdkafka_perf build             # once: rdkafka_performance into the cache
    python -m benchmarks.compare                        # 2 rounds, issue 17's counts
    python -m benchmarks.compare --rounds 1 --records-100 100000 --records-1k 30000 --warmup 10000
    python -m benchmarks.compare --skip java,latency,group,txn,group100,share,many10k,cluster --json run.json
    python -m benchmarks.compare --security sasl_ssl --skip java,latency,compression,many
    python -m benchmarks.compare --only cluster,many10k    # those families alone
    python -m benchmarks.compare --only txn,group100,share --rounds 1   # issue 32's rows alone

Issue 32's rows, each a family that ``--skip`` can leave out and ``--only`` can pick:

* ``txn``: transactions of 100 and of 10,000 records (100 B, acks=all, 4 partitions), records/s
  committed, loaded by ``benchmarks.txn_perf`` (franz-go, native; why that one: its docstring),
  with CPU columns as above; afterwards, outside the window, a read_committed consumer checks that
  every record arrived (``benchmarks.transactions.count_committed``), or the row fails;
* ``group100``: 100 confluent-kafka consumers subscribe at once to a topic of 200 partitions, the
  classic protocol (eager ``range``) and the consumer protocol (KIP-848); the time from the first
  subscribe until every partition is owned and every member owns some (``groups.protocol_run``,
  its ``start``, which begins once every partition has taken a write), with each broker's
  default heartbeat intervals; each case runs several times per broker round (``GROUP100_RUNS``,
  ``--group100-runs``), a fresh topic and group each time, and the round's figure is their median:
  the classic row is a lottery on both brokers, one run a round one ticket. Every run, and each
  broker's median over all rounds' runs, is listed under the table;
* ``share``: records acknowledged per second by 1, 4 and 8 share consumers on a 1-partition topic
  (``benchmarks.share_groups``): confluent-kafka's ShareConsumer, threads of this process (so its
  generator CPU is this process's), and Kafka's Java KafkaShareConsumer
  (``benchmarks/java/ShareAcks.java``, one JVM). The rate runs from the first acknowledgement
  confirmed to the last (the first batch left out): the join before it waits on heartbeat
  intervals (Kafka's default 5 s on both brokers), so it is a row of its own, from the first
  subscribe to the first acknowledgement. Their CPU shares are over the whole run, join, client
  start-up (for Java the JVM compiling ShareAcks.java) and close included. Share groups are on by
  default in both brokers (Kafka 4.3 finalizes share.version 1 in a new cluster).

These clients have no TLS settings here, so ``--security`` leaves the three families out.

Progress goes to stderr, the markdown tables and the run's context to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import confluent_kafka  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    ClusterMetadata,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from benchmarks import groups, rdkafka_perf, share_groups, txn_perf  # noqa: E402
from benchmarks.produce_consume import create_topic, latency, wait_for_leaders  # noqa: E402
from benchmarks.reference.kafka import KAFKA_VERSION, KafkaCluster, KafkaReference  # noqa: E402
from benchmarks.replication import Cluster  # noqa: E402
from benchmarks.transactions import count_committed  # noqa: E402
from rivulet.client.blocking import BlockingClient  # noqa: E402
from rivulet.client.core import LATEST  # noqa: E402
from rivulet.testing import BrokerProcess, free_port  # noqa: E402
from tests import java_tools  # noqa: E402
from tests.tls_certs import CertSet, make_test_certs  # noqa: E402

PARTITIONS = 4
# The base consume rows once more with the partitions shared between this many generators.
CONSUME_PROCESSES = 2
# Many partitions: rdkafka_performance takes one topic, so one process per topic, all at once.
MANY_TOPICS = 10
MANY_PARTITIONS_EACH = 100
MANY_CREATE_TIMEOUT = 60.0  # CreateTopics and the leaders, as _create's (create_topic 30 s, leaders 60 s)
# Ten times as many, on a broker of their own (so the other rows' broker never holds them).
MANY10K_TOPICS = 10
MANY10K_PARTITIONS_EACH = 1000
# Creating 1,000 partitions a topic, and electing their leaders, takes a while on either broker.
MANY10K_CREATE_TIMEOUT = 300.0
# Either broker keeps a file open per partition: 10,000 of them, and sockets and the rest beside.
MANY10K_OPEN_FILES = 16_384
# The many-partition topics (both families, both brokers): indexes of 128 KiB, not Kafka's 10 MiB
# (preallocated sparse, mmapped). A fault on an index page reads around by the disk's readahead,
# 8 MiB on this VM: at 10,000 partitions that zero-filled more page cache than the VM has, evicting
# the logs the consume row then read back ("Why Kafka's broker burned 17 CPU s" in
# docs/performance.md). 128 KiB is what a default readahead reads; 16,384 entries roll a segment
# after ~64 MiB of log, and these rows write at most ~2 MiB a partition.
MANY_TOPIC_CONFIG = {"segment.index.bytes": "131072"}
# The many-partition consume rows read a layout of their own: the produce rows' keyless records go
# through librdkafka's sticky partitioner, which moves on every sticky.partitioning.linger.ms, so
# how many partitions they reach follows how fast the producer ran against that broker. After the
# produce row, FILL_LINGER_MS lets one flush per topic send every partition's records as one batch.
FILL_LINGER_MS = 60_000
# Three brokers, RF=3: leaders two a broker; the same on both sides.
CLUSTER_BROKERS = 3
CLUSTER_RF = 3
CLUSTER_PARTITIONS = 6
CLUSTER_BROKER_PROPS = {"min.insync.replicas": "2"}
COMPRESSIONS = ("lz4", "zstd")
# Both generators batch alike (issue 17's settings); idempotence off, librdkafka's default.
JAVA_PRODUCER_PROPS = {"enable.idempotence": False, "linger.ms": 10, "batch.size": 1_000_000}
JAVA_LATENCY_RECORDS = 2000
LATENCY_RATES = (5000, 50000)
# librdkafka's default (5) batches; 0 sends one request per record (see produce_consume.latency)
LATENCY_LINGERS = (5, 0)
LATENCY_ACKS = ("1", "all")
LATENCY_CASES = [(rate, linger, acks) for rate in LATENCY_RATES for linger in LATENCY_LINGERS for acks in LATENCY_ACKS]
GROUP_MEMBERS = 10
TOOL_TIMEOUT = 1800.0
# Issue 32's rows. Transactions: records per transaction, and the record size.
TXN_PER = (100, 10_000)
TXN_SIZE = 100
# At least this many records in transactions of 100 warm the transaction paths up (untimed).
TXN_WARMUP = 10_000
GROUP100_MEMBERS = 100
# (group.protocol, the classic protocol's assignor)
GROUP100_CASES = (("classic", "range"), ("consumer", "-"))
# Runs of each 100-member case per broker round, the round's figure their median (each run is
# kept as group100_<protocol>.run<i>). The classic row is a lottery on both brokers: whether the
# last new member's JoinGroup lands before the leader's SyncGroup (about 2.2 s) or waits for a
# 3 s heartbeat (docs/performance.md); the consumer protocol's waits out a fixed interval.
GROUP100_RUNS = {"classic": 5, "consumer": 2}
SHARE_MEMBERS = (1, 4, 8)
SHARE_GENERATORS = {"confluent": "confluent-kafka ShareConsumer (threads here)",
                    "java": "KafkaShareConsumer (ShareAcks.java)"}
SHARE_SIZE = 100
# What --skip can leave out (and --only pick): each a family of rows. "base": the produce and
# consume rows of rdkafka_performance and (unless "java" is left out) Kafka's Java tools. The
# families until "group" share one broker; "many10k" and "cluster" start their own, after it.
SINGLE_PARTS = ("base", "java", "compression", "many", "latency", "group", "txn", "group100", "share")
PARTS = (*SINGLE_PARTS, "many10k", "cluster")
SECURITY = ("plaintext", "tls", "sasl_ssl")
# Rows not run on a secured listener: benchmarks.groups (Rivulet's own client), txn_perf,
# groups.protocol_run and share_groups have no TLS settings, and the clusters are set up with
# PLAINTEXT only.
NOT_SECURED = {"group", "txn", "group100", "share", "cluster"}
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USER, SCRAM_PASSWORD = "bench", "bench-secret"
SCRAM_ITERATIONS = 8192

T = TypeVar("T")

# (key, label, unit, higher_is_better): the figures other than throughput
FIGURES: list[tuple[str, str, str, bool]] = []
# (key, label, load generator): each stored as key.rps, key.mbps, key.gen_s, key.gen_pct, ...
THROUGHPUTS: list[tuple[str, str, str]] = []


def _figure(key: str, label: str, unit: str, higher_is_better: bool) -> str:
    FIGURES.append((key, label, unit, higher_is_better))
    return key


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- process facts


def _boottime_now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _stat_fields(stat: str) -> list[str]:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces and parentheses):
    element 0 is field 3 (state), so field N is element N - 3."""
    return stat[stat.rindex(")") + 2:].split()


def process_started_at(pid: int) -> float:
    """The process's creation time on the CLOCK_BOOTTIME scale (resolution one clock tick)."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat").read_text())
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 overall: starttime


def stat_cpu_seconds(stat: str, ticks_per_second: int) -> tuple[float, float]:
    """(user, system) seconds of one process from its ``/proc/<pid>/stat`` line."""
    fields = _stat_fields(stat)
    return int(fields[11]) / ticks_per_second, int(fields[12]) / ticks_per_second  # fields 14, 15


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(x) for x in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def _tree(pid: int) -> list[int]:
    """The process and all its descendants alive now."""
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        stack += _children(p)
    return out


def rss_kib(pid: int) -> int:
    """VmRSS of the process and all its descendants, in KiB."""
    total = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def tree_cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of the process and its live descendants."""
    tck = os.sysconf("SC_CLK_TCK")
    user = system = 0.0
    for p in _tree(pid):
        try:
            u, s = stat_cpu_seconds(Path(f"/proc/{p}/stat").read_text(), tck)
        except OSError:
            continue
        user, system = user + u, system + s
    return user, system


@dataclass(frozen=True)
class CpuUse:
    """CPU spent over a wall-clock window."""

    user: float
    system: float
    wall: float

    @property
    def seconds(self) -> float:
        return self.user + self.system

    def percent_of_core(self, over: float) -> float:
        """As a share of one core over ``over`` seconds (at most ``wall``)."""
        return 100.0 * self.seconds / over if over > 0 else 0.0


@dataclass(frozen=True)
class Rate:
    """A load generator's figure and the interval it measured (start-up and the wind-down
    after the last record outside it, for the tools that time themselves)."""

    records_per_sec: float
    mb_per_sec: float
    seconds: float


def with_cpu(broker_pid: int, fn: Callable[[], T], in_process: bool = False) -> tuple[T, CpuUse, CpuUse]:
    """Run ``fn`` (which runs load-generator processes to completion) and return its result,
    the CPU of the child processes reaped meanwhile (the load generators: this process runs
    nothing else in parallel), and the broker's CPU over the same window. ``in_process``: the
    load generator is ``fn`` itself (clients on threads here), so its CPU is this process's."""
    return with_cpu_of([broker_pid], fn, in_process)


def _trees_cpu_seconds(pids: Sequence[int]) -> tuple[float, float]:
    each = [tree_cpu_seconds(p) for p in pids]
    return sum(u for u, _ in each), sum(s for _, s in each)


def with_cpu_of(broker_pids: Sequence[int], fn: Callable[[], T],
                in_process: bool = False) -> tuple[T, CpuUse, CpuUse]:
    """``with_cpu`` for several broker processes (a cluster): their CPU summed."""
    who = resource.RUSAGE_SELF if in_process else resource.RUSAGE_CHILDREN
    r0, b0, t0 = resource.getrusage(who), _trees_cpu_seconds(broker_pids), time.monotonic()
    out = fn()
    wall = time.monotonic() - t0
    r1, b1 = resource.getrusage(who), _trees_cpu_seconds(broker_pids)
    return (out, CpuUse(r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, wall),
            CpuUse(b1[0] - b0[0], b1[1] - b0[1], wall))


def wait_metadata(bootstrap: str, timeout: float = 120.0, conf: dict[str, str] | None = None) -> None:
    """Poll until the broker answers Metadata listing at least one broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(conf or {})})
    deadline = time.monotonic() + timeout
    while True:
        try:
            if admin.list_topics(timeout=2).brokers:
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)


# ---------------------------------------------------------------------------- brokers


@dataclass(frozen=True)
class Security:
    """The listener the load generators use: PLAINTEXT, SSL or SASL_SSL (with SCRAM-SHA-512),
    the brokers' properties for it and the clients'."""

    protocol: str
    certs: CertSet | None = None

    @classmethod
    def named(cls, name: str, cert_dir: Path) -> Security:
        if name == "plaintext":
            return cls("PLAINTEXT")
        return cls("SSL" if name == "tls" else "SASL_SSL", make_test_certs(cert_dir))

    @property
    def secured(self) -> bool:
        return self.protocol != "PLAINTEXT"

    @property
    def scram(self) -> bool:
        return self.protocol == "SASL_SSL"

    def broker_props(self) -> dict[str, str]:
        """For both brokers, beside the listener itself: TLS 1.3 only, PKCS12 stores."""
        if self.certs is None:
            return {}
        props = {**self.certs.broker_ssl_props(pkcs12_stores=True), "ssl.enabled.protocols": "TLSv1.3"}
        if self.scram:
            props.update({"sasl.enabled.mechanisms": SCRAM_MECHANISM,
                          f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
                              "org.apache.kafka.common.security.scram.ScramLoginModule required;"})
        return props

    def client_conf(self) -> dict[str, str]:
        """librdkafka's properties (rdkafka_performance and confluent-kafka)."""
        if self.certs is None:
            return {}
        conf = {"security.protocol": self.protocol, "ssl.ca.location": str(self.certs.ca.pem)}
        if self.scram:
            conf.update({"sasl.mechanism": SCRAM_MECHANISM, "sasl.username": SCRAM_USER,
                         "sasl.password": SCRAM_PASSWORD})
        return conf

    def java_props(self) -> dict[str, str]:
        """The Java client's properties."""
        if self.certs is None:
            return {}
        props = {"security.protocol": self.protocol, "ssl.truststore.type": "PEM",
                 "ssl.truststore.location": str(self.certs.ca.pem)}
        if self.scram:
            props.update({"sasl.mechanism": SCRAM_MECHANISM, "sasl.jaas.config":
                          "org.apache.kafka.common.security.scram.ScramLoginModule required "
                          f'username="{SCRAM_USER}" password="{SCRAM_PASSWORD}";'})
        return props

    def add_user(self, bootstrap: str) -> None:
        """The SCRAM user, over PLAINTEXT (neither broker has an authorizer here)."""
        upsert = UserScramCredentialUpsertion(
            SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS), SCRAM_PASSWORD.encode())
        admin = AdminClient({"bootstrap.servers": bootstrap})  # held: its futures die with it
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(30)


class Broker:
    """Start a broker, measure start-up, yield its bootstrap; both kinds behind one face.
    ``bootstrap`` is the PLAINTEXT listener (topics, leaders); ``load_bootstrap`` the one the
    load generators use, secured as ``security`` says."""

    def __init__(self, kind: str, security: Security) -> None:
        self.kind = kind
        self.security = security
        self.impl: BrokerProcess | KafkaReference | None = None
        self.secured_port: int | None = None

    def _listeners(self, plain_port: int) -> str:
        listeners = f"PLAINTEXT://127.0.0.1:{plain_port}"
        if self.secured_port is not None:
            listeners += f",{self.security.protocol}://127.0.0.1:{self.secured_port}"
        return listeners

    def start(self) -> float:
        props = self.security.broker_props()
        self.secured_port = free_port() if self.security.secured else None
        if self.kind == "rivulet":
            rivulet = BrokerProcess({"group.initial.rebalance.delay.ms": "0", "inter.broker.listener.name": "PLAINTEXT",
                                     **props})
            rivulet.overrides["listeners"] = self._listeners(rivulet.port)
            self.impl = rivulet
        else:
            kafka = KafkaReference(group_initial_rebalance_delay_ms=0)
            if self.secured_port is not None:
                kafka.properties.update({
                    **props,
                    "listeners": f"{self._listeners(kafka.port)},CONTROLLER://127.0.0.1:{kafka.controller_port}",
                    "advertised.listeners": self._listeners(kafka.port),
                    "listener.security.protocol.map": f"{kafka.properties['listener.security.protocol.map']},"
                                                      f"{self.security.protocol}:{self.security.protocol}"})
            self.impl = kafka
        self.impl.start()  # Rivulet: until it listens; Kafka: format, then until Metadata works
        wait_metadata(self.impl.bootstrap)
        done = _boottime_now()
        if self.security.scram:
            self.security.add_user(self.bootstrap)
        if self.security.secured:  # until the secured listener (and the SCRAM user) work
            wait_metadata(self.load_bootstrap, conf=self.security.client_conf())
        return done - process_started_at(self.pid)

    @property
    def load_bootstrap(self) -> str:
        return self.bootstrap if self.secured_port is None else f"127.0.0.1:{self.secured_port}"

    @property
    def pid(self) -> int:
        return self.impl.proc.pid

    @property
    def bootstrap(self) -> str:
        return self.impl.bootstrap

    def close(self) -> None:
        if self.impl is None:
            return
        if self.kind == "kafka":
            self.impl.stop()
        self.impl.cleanup()
        self.impl = None


class Brokers3:
    """Three brokers of one kind on this machine, PLAINTEXT, with ``CLUSTER_BROKER_PROPS``:
    Rivulet's in ZooKeeper mode with a ZooKeeper beside them (which stands in for Kafka's
    controller quorum, so its CPU and memory count with the brokers'), Kafka's three KRaft
    nodes, each broker and controller, all three voters."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.rivulet: Cluster | None = None
        self.kafka: KafkaCluster | None = None

    def start(self) -> float:
        """Seconds until every broker answers Metadata listing all of them."""
        t0 = time.monotonic()
        if self.kind == "rivulet":
            self.rivulet = Cluster(CLUSTER_BROKERS, **CLUSTER_BROKER_PROPS)
        else:
            self.kafka = KafkaCluster(CLUSTER_BROKERS, overrides=CLUSTER_BROKER_PROPS).start()
        return time.monotonic() - t0

    @property
    def bootstraps(self) -> list[str]:
        if self.rivulet is not None:
            return [b.bootstrap for b in self.rivulet.brokers.values()]
        assert self.kafka is not None
        return [n.bootstrap for n in self.kafka.nodes]

    @property
    def pids(self) -> list[int]:
        if self.rivulet is not None:
            return [b.proc.pid for b in self.rivulet.brokers.values()] + [self.rivulet.zk_server.proc.pid]
        assert self.kafka is not None
        return [n.proc.pid for n in self.kafka.nodes]

    def close(self) -> None:
        if self.rivulet is not None:
            self.rivulet.close()
            self.rivulet = None
        if self.kafka is not None:
            self.kafka.stop()
            self.kafka.cleanup()
            self.kafka = None


# ---------------------------------------------------------------------------- load generators


def _rdk_rate(s: rdkafka_perf.Summary) -> Rate:
    return Rate(s.records_per_sec, s.mb_per_sec, s.ms / 1000)


def _rdk_produce(bs: str, topic: str, count: int, size: int, acks: str, compression: str | None = None,
                 extra: list[str] | None = None) -> Rate:
    return _rdk_rate(rdkafka_perf.produce(bs, topic, count, size, acks, compression=compression, extra=extra or [],
                                          timeout=TOOL_TIMEOUT))


def _rdk_consume(bs: str, topic: str, partitions: int, count: int, extra: list[str] | None = None) -> Rate:
    return _rdk_rate(rdkafka_perf.consume(bs, topic, partitions, count, extra=extra or [], timeout=TOOL_TIMEOUT))


def _rdk_parallel(argvs: list[list[str]], parse: Callable[[str], rdkafka_perf.Summary],
                  each: int | Sequence[int], *, own_windows: bool = False) -> Rate:
    """Several processes at once, each to send or read ``each`` records (one count for all, or
    one per process), refused if any falls short. Records and bytes over the wall time from
    the first start to the last exit (each process's own figure would leave out the others'
    start-up skew); with ``own_windows``, over the longest of the processes' own windows (a
    consumer's from its first record, as the one-process rows measure it), which holds the
    others when they start together."""
    counts = [each] * len(argvs) if isinstance(each, int) else list(each)
    t0 = time.monotonic()
    outs = rdkafka_perf.run_many(argvs, timeout=TOOL_TIMEOUT)
    wall = time.monotonic() - t0
    summaries = [parse(out) for out in outs]
    short = [s for s, n in zip(summaries, counts, strict=True) if s.records < n or s.failed]
    if short:
        raise rdkafka_perf.RdkafkaPerfError(f"{len(short)} of {len(outs)} processes fell short of {counts}: {short}")
    seconds = max(s.ms for s in summaries) / 1000 if own_windows else wall
    return Rate(sum(s.records for s in summaries) / seconds, sum(s.bytes for s in summaries) / seconds / 1e6, seconds)


def _rdk_consume_split(bs: str, lbs: str, topic: str, partitions: int, processes: int, extra: list[str]) -> Rate:
    """The topic read by ``processes`` generators at once on ``lbs``, each from its share of the
    partitions to their ends (read on the PLAINTEXT ``bs`` before the window): one librdkafka
    consumer parses a broker's answers on one thread, so alone it can be the pace where the
    broker is not."""
    ends = log_ends(bs, [topic], partitions)
    shares = [range(i, partitions, processes) for i in range(processes)]
    counts = [sum(ends[(topic, p)] for p in share) for share in shares]
    return _rdk_parallel([rdkafka_perf.consumer_args(lbs, topic, share, n, extra=extra)
                          for share, n in zip(shares, counts, strict=True)],
                         rdkafka_perf.parse_consumer, counts, own_windows=True)


def _java_produce(bs: str, topic: str, count: int, size: int, acks: str, props: dict[str, str]) -> Rate:
    r = java_tools.producer_perf(bs, topic, num_records=count, record_size=size, acks=acks,
                                 props={**JAVA_PRODUCER_PROPS, **props}, timeout=TOOL_TIMEOUT,
                                 jvm_args=java_tools.MEASURED_JVM)
    return Rate(r.records_per_sec, r.mb_per_sec * 1.048576, r.records / r.records_per_sec)  # MiB/s -> MB/s


def _java_consume(bs: str, topic: str, count: int, props: dict[str, str]) -> Rate:
    r = java_tools.consumer_perf(bs, topic, num_records=count, props=props, timeout=TOOL_TIMEOUT,
                                 jvm_args=java_tools.MEASURED_JVM)
    # fetch.* figures exclude the group join, which is measured separately.
    return Rate(r.fetch_records_per_sec, r.fetch_mb_per_sec * 1.048576, r.fetch_ms / 1000)  # MiB/s -> MB/s


# ---------------------------------------------------------------------------- workloads


def _topic(prefix: str) -> str:
    return f"cmp-{prefix}-{uuid.uuid4().hex[:6]}"


def _create(bs: str, topics: list[str], partitions: int) -> None:
    for t in topics:
        create_topic(bs, t, partitions)
    wait_for_leaders(bs, topics)


def _create_large(bs: str, topics: list[str], partitions: int, timeout: float,
                  config: Mapping[str, str] | None = None) -> None:
    """``_create`` for topics of many partitions, with ``timeout`` for each CreateTopics and
    for all the leaders (create_topic waits 30 s, which 1,000 partitions can take)."""
    admin = AdminClient({"bootstrap.servers": bs})  # held: its futures die with it
    for t in topics:
        admin.create_topics([NewTopic(t, partitions, 1, config=dict(config or {}))], operation_timeout=timeout,
                            request_timeout=timeout)[t].result(timeout)
    wait_for_leaders(bs, topics, timeout)


def log_ends(bs: str, topics: list[str], partitions: int) -> dict[tuple[str, int], int]:
    client = BlockingClient(bs)
    try:
        return {(tp.topic, tp.partition): o for tp, o in
                client.list_offsets({(t, p): LATEST for t in topics for p in range(partitions)}).items()}
    finally:
        client.close()


def fill_evenly(bs: str, topics: list[str], partitions: int, per_partition: int, size: int) -> None:
    """``per_partition`` keyless records of ``size`` bytes appended to every partition, each
    partition's in one batch when they fit ``batch.size`` (the flush sends them, not the linger),
    whatever either broker's speed."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bs, "acks": "1", "linger.ms": FILL_LINGER_MS, "batch.size": 1_000_000,
        "enable.idempotence": False, "queue.buffering.max.messages": 2 * partitions * per_partition,
        "queue.buffering.max.kbytes": 2 * partitions * per_partition * max(1, size // 1024)})
    value = b"x" * size
    failed: list[str] = []

    def report(err: confluent_kafka.KafkaError | None, _msg: confluent_kafka.Message) -> None:
        if err is not None:
            failed.append(str(err))
    for t in topics:
        for p in range(partitions):
            for _ in range(per_partition):
                producer.produce(t, value, partition=p, on_delivery=report)
        if producer.flush(TOOL_TIMEOUT) or failed:
            raise RuntimeError(f"{t}: the even fill fell short: {failed[:3]}")


def fill_layout(results: dict[str, float], kind: str, key: str, bs: str, topics: list[str], partitions: int,
                per_partition: int) -> None:
    """The consume row's records, untimed: ``fill_evenly``, then what it added to each partition
    (the layout the row reads) as key.layout_min, _median, _max."""
    before = log_ends(bs, topics, partitions)
    fill_evenly(bs, topics, partitions, per_partition, 1024)
    after = log_ends(bs, topics, partitions)
    added = sorted(after[tp] - before[tp] for tp in before)
    lo, mid, hi = added[0], statistics.median(added), added[-1]
    results.update({f"{key}.layout_min": lo, f"{key}.layout_median": mid, f"{key}.layout_max": hi})
    log(f"  {kind}: {key}: records added to a partition (fewest / median / most): {lo:,} / {mid:,.0f} / {hi:,}")


def replicas_ready(md: ClusterMetadata, topics: list[str], replicas: int) -> bool:
    """Every partition of ``topics`` has a leader and ``replicas`` replicas in sync."""
    return all(
        t in md.topics and md.topics[t].error is None and bool(md.topics[t].partitions)
        and all(p.leader >= 0 and p.error is None and len(p.isrs) == replicas for p in md.topics[t].partitions.values())
        for t in topics)


def _create_replicated(bootstraps: list[str], topics: list[str], partitions: int, timeout: float = 120.0) -> None:
    """Topics of ``CLUSTER_RF`` replicas; until every broker's Metadata has them all in sync."""
    admin = AdminClient({"bootstrap.servers": ",".join(bootstraps)})  # held: its futures die with it
    for t in topics:
        admin.create_topics([NewTopic(t, partitions, CLUSTER_RF)])[t].result(60)
    deadline = time.monotonic() + timeout
    for bs in bootstraps:
        one = AdminClient({"bootstrap.servers": bs})
        while not replicas_ready(one.list_topics(timeout=10), topics, CLUSTER_RF):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{bs}: partitions of {topics} not all in sync after {timeout:.0f}s")
            time.sleep(0.1)


def _txn(bs: str, topic: str, count: int, per_txn: int) -> Rate:
    s = txn_perf.run(bs, topic, count, per_txn, TXN_SIZE, f"cmp-txn-{uuid.uuid4().hex[:8]}", timeout=TOOL_TIMEOUT)
    return Rate(s.records_per_sec, s.mb_per_sec(TXN_SIZE), s.seconds)


def _share(client: str, bs: str, topic: str, count: int, members: int, timeout: float) -> share_groups.ShareFigures:
    if client == "java":
        f = share_groups.java_share_figures(bs, topic, count, members, timeout)
    else:
        f = share_groups.share_figures(client, bs, topic, count, members, timeout)
    log(f"  {client} x{members}: {f.trips()}")  # what each round trip brought, for both brokers
    return f


def share_rate(f: share_groups.ShareFigures) -> Rate:
    """The steady state: from the first acknowledgement to the last (the join is its own row)."""
    if f.steady_rate is None:
        raise RuntimeError(f"all {f.records:,} records came in the first acknowledgement: no steady rate")
    return Rate(f.steady_rate, f.steady_rate * SHARE_SIZE / 1e6, f.seconds - f.first_ack_s)


def txn_counts(records: int, records_100: int) -> list[tuple[int, int]]:
    """(records per transaction, records in all) for each transaction row: whole transactions,
    at least one."""
    return [(per, max(per, (records_100 if per == 100 else records) // per * per)) for per in TXN_PER]


class Recorder:
    """One broker run's figures: each workload attempted on its own (a failure is logged, the
    run goes on), each throughput with the generators' and the brokers' CPU."""

    def __init__(self, kind: str, broker_pids: list[int], results: dict[str, float]) -> None:
        self.kind = kind
        self.broker_pids = broker_pids
        self.results = results

    def attempt(self, name: str, fn: Callable[[], None]) -> None:
        t0 = time.perf_counter()
        try:
            fn()
            log(f"  {self.kind}: {name} done in {time.perf_counter() - t0:.1f}s")
        except Exception:
            log(f"  {self.kind}: {name} FAILED\n{traceback.format_exc()}")

    def load(self, key: str, name: str, fn: Callable[[], Rate], before: Callable[[], None] | None = None,
             in_process: bool = False, cpu_over_wall: bool = False) -> None:
        """A throughput figure with the generator's and the broker's CPU: all the CPU of the
        generator's processes over the interval its figure measured, an upper bound of its
        share of a core while measured (its start-up counts in). ``before``: what to do first
        (make the topic), outside the measured window; ``in_process``: see with_cpu;
        ``cpu_over_wall``: the CPU shares over the whole run instead (a figure whose window
        leaves out most of the run)."""
        def go() -> None:
            if before is not None:
                before()
            rate, gen, brk = with_cpu_of(self.broker_pids, fn, in_process)
            over = gen.wall if cpu_over_wall else min(rate.seconds, gen.wall) or gen.wall
            self.results.update({
                f"{key}.rps": rate.records_per_sec, f"{key}.mbps": rate.mb_per_sec,
                f"{key}.measured_s": rate.seconds, f"{key}.wall": gen.wall,
                f"{key}.gen_s": gen.seconds, f"{key}.gen_pct": gen.percent_of_core(over),
                f"{key}.broker_s": brk.seconds, f"{key}.broker_pct": brk.percent_of_core(over)})
            log(f"  {self.kind}: {name}: {rate.records_per_sec:,.0f} records/s, {rate.mb_per_sec:,.1f} MB/s "
                f"over {rate.seconds:.2f}s ({gen.wall:.1f}s in all); CPU: generator {gen.seconds:.2f}s "
                f"({gen.percent_of_core(over):.0f}%), broker {brk.seconds:.2f}s ({brk.percent_of_core(over):.0f}%)")
        self.attempt(name, go)


def _warm_up(rec: Recorder, args: argparse.Namespace, lbs: str, x: list[str], partitions: int,
             create: Callable[[list[str], int], None]) -> None:
    """Untimed: the same produce and fetch paths once, so Kafka's JIT has compiled them and
    the figures compare steady states, as a long-running broker would be in."""
    if not args.warmup:
        return

    def warm() -> None:
        for size, count in ((100, args.warmup), (1024, max(1, args.warmup // 3))):
            topic = _topic(f"warm-{size}")
            create([topic], partitions)
            _rdk_produce(lbs, topic, count, size, "1", extra=x)
            _rdk_consume(lbs, topic, partitions, count, extra=x)
    rec.attempt("warm-up (untimed)", warm)


def drop_page_cache() -> None:
    """Write dirty pages back and drop the clean page cache (root only). On this VM a page the
    guest never touched costs a host fault when the page cache first takes it; pages it dropped
    are backed already. Before a produce row, this takes the order of the rows (how much the
    run wrote before) out of that row's writes, for either broker alike."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("1\n")


def _dropping_first(then: Callable[[], None] | None) -> Callable[[], None]:
    def before() -> None:
        drop_page_cache()
        if then is not None:
            then()
    return before


def measure(broker: Broker, args: argparse.Namespace) -> dict[str, float]:
    results: dict[str, float] = {}
    log(f"{broker.kind}: starting")
    results["startup"] = broker.start()
    log(f"  {broker.kind}: Metadata answered {results['startup']:.2f}s after process creation")
    results["load_before"] = os.getloadavg()[0]
    bs = broker.bootstrap  # PLAINTEXT: topics and leaders, outside the measured windows
    lbs = broker.load_bootstrap  # the load generators' listener
    conf = broker.security.client_conf()
    x = rdkafka_perf.config_args(conf)
    jprops = broker.security.java_props()
    sizes = ((100, args.records_100), (1024, args.records_1k))
    rec = Recorder(broker.kind, [broker.pid], results)
    attempt = rec.attempt

    def load(key: str, name: str, fn: Callable[[], Rate], create: str | None = None, in_process: bool = False,
             cpu_over_wall: bool = False) -> None:
        make = None if create is None else functools.partial(_create, bs, [create], PARTITIONS)
        rec.load(key, name, fn, _dropping_first(make) if args.drop_caches and "_prod_" in key else make,
                 in_process, cpu_over_wall)

    _warm_up(rec, args, lbs, x, PARTITIONS, functools.partial(_create, bs))

    # "java" alone (--only java) still produces the topic ConsumerPerformance reads, untimed.
    for size, count in sizes if not {"base", "java"} <= args.skip else ():
        for acks in ("1", "all"):
            topic = _topic(f"rdk-{size}-{acks}")
            if "base" not in args.skip:
                load(f"rdk_prod_{size}_{acks}", f"rdkafka_performance produce {size} B acks={acks}",
                     functools.partial(_rdk_produce, lbs, topic, count, size, acks, extra=x), create=topic)
            elif acks == "1" and not args.no_java_consumer:
                _create(bs, [topic], PARTITIONS)
                _rdk_produce(lbs, topic, count, size, acks, extra=x)
            if acks == "1" and "base" not in args.skip and f"rdk_prod_{size}_1.rps" in results:
                load(f"rdk_cons_{size}", f"rdkafka_performance consume {size} B",
                     functools.partial(_rdk_consume, lbs, topic, PARTITIONS, count, extra=x))
                load(f"rdk_cons2_{size}", f"rdkafka_performance x{CONSUME_PROCESSES} consume {size} B",
                     functools.partial(_rdk_consume_split, bs, lbs, topic, PARTITIONS, CONSUME_PROCESSES, x))
            if acks == "1" and (f"rdk_prod_{size}_1.rps" in results or "base" in args.skip):
                if "java" not in args.skip and not args.no_java_consumer:
                    load(f"java_cons_{size}", f"ConsumerPerformance {size} B",
                         functools.partial(_java_consume, lbs, topic, count, jprops))
            if "java" not in args.skip:
                jtopic = _topic(f"java-{size}-{acks}")
                load(f"java_prod_{size}_{acks}", f"ProducerPerformance {size} B acks={acks}",
                     functools.partial(_java_produce, lbs, jtopic, count, size, acks, jprops), create=jtopic)

    for codec in COMPRESSIONS if "compression" not in args.skip else ():
        topic = _topic(f"rdk-{codec}")
        load(f"rdk_prod_1024_{codec}", f"rdkafka_performance produce 1 KiB {codec} acks=1",
             functools.partial(_rdk_produce, lbs, topic, args.records_1k, 1024, "1", codec, x), create=topic)

    if "many" not in args.skip:
        def many_partitions() -> None:
            many = [_topic(f"many{i}") for i in range(MANY_TOPICS)]
            each = max(1, args.records_1k // MANY_TOPICS)
            _create_large(bs, many, MANY_PARTITIONS_EACH, MANY_CREATE_TIMEOUT, MANY_TOPIC_CONFIG)
            load("rdk_prod_many", f"rdkafka_performance x{MANY_TOPICS} produce 1 KiB acks=1",
                 functools.partial(_rdk_parallel, [rdkafka_perf.producer_args(lbs, t, each, 1024, "1", extra=x) for t in many],
                                   rdkafka_perf.parse_producer, each))
            per = max(1, each // MANY_PARTITIONS_EACH)
            if "rdk_prod_many.rps" in results:
                attempt("the consume row's even fill (untimed)",
                        functools.partial(fill_layout, results, broker.kind, "rdk_cons_many", bs, many,
                                          MANY_PARTITIONS_EACH, per))
            if "rdk_cons_many.layout_min" in results:
                load("rdk_cons_many", f"rdkafka_performance x{MANY_TOPICS} consume 1 KiB",
                     functools.partial(_rdk_parallel,
                                       [rdkafka_perf.consumer_args(lbs, t, MANY_PARTITIONS_EACH, per * MANY_PARTITIONS_EACH,
                                                                   extra=x, tail=per) for t in many],
                                       rdkafka_perf.parse_consumer, per * MANY_PARTITIONS_EACH))
        attempt(f"{MANY_TOPICS * MANY_PARTITIONS_EACH} partitions", many_partitions)

    def lat(rate: int, linger: int, acks: str) -> None:
        topic = _topic(f"lat{rate}")  # a fresh topic: the consumer starts at its beginning
        _create(bs, [topic], 1)
        r = latency(lbs, topic, rate, args.latency_seconds, linger_ms=linger, conf=conf, acks=acks)
        for q in ("p50", "p99", "p999"):
            results[f"lat{rate}_{linger}_{acks}_{q}"] = r[q]
    if "latency" not in args.skip:
        for case in LATENCY_CASES:
            attempt(f"end-to-end latency at {case[0]} msg/s, linger.ms={case[1]}, acks={case[2]}",
                    functools.partial(lat, *case))

    def jlat() -> None:
        # Kafka's own EndToEndLatency: one record at a time, acks=all, round trip per record.
        topic = _topic("jlat")
        _create(bs, [topic], 1)
        r = java_tools.end_to_end_latency(lbs, topic, num_records=JAVA_LATENCY_RECORDS, record_size=100, acks="all",
                                          props=jprops, jvm_args=java_tools.MEASURED_JVM)
        results["jlat_avg"] = r.avg_ms
        results["jlat_p99"] = float(r.p99_ms)
    if "latency" not in args.skip and "java" not in args.skip:
        attempt("Java EndToEndLatency", jlat)

    def grp() -> None:
        host, port = bs.rsplit(":", 1)

        async def go() -> float:
            group = f"cmp-{uuid.uuid4().hex[:8]}"
            elapsed, members, _ = await groups.rebalance(host, int(port), group, GROUP_MEMBERS, args.heartbeat_ms)
            for m in members:
                await m.c.close()
            return elapsed
        results["group_stable"] = asyncio.run(go()) * 1000
    if "group" not in args.skip:
        attempt(f"{GROUP_MEMBERS}-member group to Stable", grp)

    measure_issue32(rec, args, bs, lbs)

    results["rss"] = rss_kib(broker.pid) / 1024
    results["load_after"] = os.getloadavg()[0]
    log(f"  {broker.kind}: RSS {results['rss']:.0f} MiB")
    return results


def measure_issue32(rec: Recorder, args: argparse.Namespace, bs: str, lbs: str) -> None:
    """Issue 32's rows on the single broker: transactions, the 100-member group, share groups.
    ``bs``: the PLAINTEXT bootstrap (topics, checks); ``lbs``: the load generators' listener."""
    results, attempt = rec.results, rec.attempt

    def load(key: str, name: str, fn: Callable[[], Rate], create: str | None = None, in_process: bool = False,
             cpu_over_wall: bool = False) -> None:
        rec.load(key, name, fn, None if create is None else functools.partial(_create, bs, [create], PARTITIONS),
                 in_process, cpu_over_wall)

    if args.warmup and not {"txn", "group100", "share"} <= args.skip:
        # Untimed, as the warm-up above: the first use of each makes an internal topic on both
        # brokers (__transaction_state, __consumer_offsets, __share_group_state) and the first
        # calls of its paths are Kafka's JIT's; neither belongs in the figures.
        def warm_issue32() -> None:
            if "txn" not in args.skip:
                topic = _topic("warm-txn")
                _create(bs, [topic], PARTITIONS)
                _txn(lbs, topic, max(TXN_WARMUP, args.warmup // 10) // 100 * 100, 100)
            if "group100" not in args.skip:
                groups.protocol_run(bs, 2, "classic", "range", changes=())
            if "share" not in args.skip:
                records = max(100, args.warmup // 10)
                for client in SHARE_GENERATORS:
                    _share(client, lbs, share_groups.fill(bs, records, SHARE_SIZE), records, 1, args.share_timeout)
        attempt("warm-up of the transaction, group and share paths (untimed)", warm_issue32)

    if "txn" not in args.skip:
        for per_txn, count in txn_counts(args.txn_records, args.txn_records_100):
            key, topic = f"txn_{per_txn}", _topic(f"txn{per_txn}")
            load(key, f"txnperf, transactions of {per_txn:,}", functools.partial(_txn, lbs, topic, count, per_txn),
                 create=topic)

            def check(key: str = key, topic: str = topic, count: int = count) -> None:
                got = count_committed(bs, topic, PARTITIONS)
                if got != count:  # a figure for records that did not all arrive is no figure
                    for k in [k for k in results if k.startswith(f"{key}.")]:
                        del results[k]
                    raise RuntimeError(f"read {got:,} committed records of {count:,}: {key} dropped")
            if f"{key}.rps" in results:
                attempt(f"read_committed check of {key}", check)

    def group100(protocol: str, strategy: str) -> None:
        def once() -> float:
            took = groups.protocol_run(bs, GROUP100_MEMBERS, protocol, strategy, changes=())["start"][0]
            if took >= groups.SETTLE_TIMEOUT:
                raise RuntimeError(f"not settled in {took:.0f} s")
            return took
        runs = args.group100_runs or GROUP100_RUNS[protocol]
        median_of_runs(results, f"group100_{protocol}", runs, once)
        log(f"  {protocol}: " + ", ".join(f"{results[f'group100_{protocol}.run{i}']:.2f}" for i in range(1, runs + 1))
            + f" s, median {results[f'group100_{protocol}']:.2f}")
    if "group100" not in args.skip:
        for protocol, strategy in GROUP100_CASES:
            attempt(f"{GROUP100_MEMBERS}-member group, {protocol} protocol, to every member assigned",
                    functools.partial(group100, protocol, strategy))

    def share(client: str, members: int) -> None:
        topic = share_groups.fill(bs, args.share_records, SHARE_SIZE)  # outside the measured window
        key = f"share_{client}_{members}"

        def run() -> Rate:
            f = _share(client, lbs, topic, args.share_records, members, args.share_timeout)
            results[f"{key}_first_ack"] = f.first_ack_s
            return share_rate(f)
        load(key, f"share group, {client} x{members}", run, in_process=client != "java", cpu_over_wall=True)
    if "share" not in args.skip:
        for client in SHARE_GENERATORS:
            for members in SHARE_MEMBERS:
                attempt(f"fill and share group, {client} x{members}", functools.partial(share, client, members))


def median_of_runs(results: dict[str, float], key: str, runs: int, once: Callable[[], float]) -> None:
    """``once`` run ``runs`` times: ``key`` is their median, ``key.run<i>`` each run."""
    samples = [once() for _ in range(runs)]
    results[key] = statistics.median(samples)
    results.update({f"{key}.run{i}": v for i, v in enumerate(samples, 1)})


def measure_many10k(broker: Broker, args: argparse.Namespace) -> dict[str, float]:
    """10,000 partitions over ten topics on a broker of their own: produce, then consume."""
    results: dict[str, float] = {}
    log(f"{broker.kind}: starting for {MANY10K_TOPICS * MANY10K_PARTITIONS_EACH:,} partitions")
    broker.start()
    results["load_before"] = os.getloadavg()[0]
    bs, lbs = broker.bootstrap, broker.load_bootstrap
    x = rdkafka_perf.config_args(broker.security.client_conf())
    rec = Recorder(broker.kind, [broker.pid], results)
    _warm_up(rec, args, lbs, x, PARTITIONS, functools.partial(_create, bs))
    topics = [_topic(f"many10k{i}") for i in range(MANY10K_TOPICS)]
    each = max(1, args.records_1k // MANY10K_TOPICS)

    def create() -> None:
        t0 = time.monotonic()
        _create_large(bs, topics, MANY10K_PARTITIONS_EACH, MANY10K_CREATE_TIMEOUT, MANY_TOPIC_CONFIG)
        results["many10k_create"] = time.monotonic() - t0
    rec.attempt(f"create {MANY10K_TOPICS} topics of {MANY10K_PARTITIONS_EACH:,} partitions", create)
    if "many10k_create" in results:
        rec.load("rdk_prod_many10k", f"rdkafka_performance x{MANY10K_TOPICS} produce 1 KiB acks=1, 10k partitions",
                 functools.partial(_rdk_parallel, [rdkafka_perf.producer_args(lbs, t, each, 1024, "1", extra=x)
                                                   for t in topics], rdkafka_perf.parse_producer, each))
    per = max(1, each // MANY10K_PARTITIONS_EACH)
    if "rdk_prod_many10k.rps" in results:
        rec.attempt("the consume row's even fill (untimed)",
                    functools.partial(fill_layout, results, broker.kind, "rdk_cons_many10k", bs, topics,
                                      MANY10K_PARTITIONS_EACH, per))
    if "rdk_cons_many10k.layout_min" in results:
        rec.load("rdk_cons_many10k", f"rdkafka_performance x{MANY10K_TOPICS} consume 1 KiB, 10k partitions",
                 functools.partial(_rdk_parallel, [rdkafka_perf.consumer_args(lbs, t, MANY10K_PARTITIONS_EACH,
                                                                              per * MANY10K_PARTITIONS_EACH, extra=x,
                                                                              tail=per) for t in topics],
                                   rdkafka_perf.parse_consumer, per * MANY10K_PARTITIONS_EACH))
    if "many10k_create" in results:  # with fewer partitions it would not compare
        results["many10k_rss"] = rss_kib(broker.pid) / 1024
    results["load_after"] = os.getloadavg()[0]
    return results


def measure_cluster(brokers: Brokers3, args: argparse.Namespace) -> dict[str, float]:
    """Three brokers, RF=3, min.insync.replicas=2: produce at acks=all, then consume each topic."""
    results: dict[str, float] = {}
    log(f"{brokers.kind}: starting {CLUSTER_BROKERS} brokers")
    log(f"  {brokers.kind}: {CLUSTER_BROKERS} brokers up in {brokers.start():.1f}s")
    results["load_before"] = os.getloadavg()[0]
    bss = brokers.bootstraps
    bs = ",".join(bss)
    rec = Recorder(brokers.kind, brokers.pids, results)
    _warm_up(rec, args, bs, [], CLUSTER_PARTITIONS, functools.partial(_create_replicated, bss))
    for size, count in ((100, args.records_100), (1024, args.records_1k)):
        topic = _topic(f"cluster-{size}")
        rec.load(f"cl_prod_{size}_all", f"{CLUSTER_BROKERS} brokers: rdkafka_performance produce {size} B acks=all",
                 functools.partial(_rdk_produce, bs, topic, count, size, "all"),
                 functools.partial(_create_replicated, bss, [topic], CLUSTER_PARTITIONS))
        if f"cl_prod_{size}_all.rps" in results:
            rec.load(f"cl_cons_{size}", f"{CLUSTER_BROKERS} brokers: rdkafka_performance consume {size} B",
                     functools.partial(_rdk_consume, bs, topic, CLUSTER_PARTITIONS, count))
    results["cluster_rss"] = sum(rss_kib(p) for p in brokers.pids) / 1024
    results["load_after"] = os.getloadavg()[0]
    return results


B = TypeVar("B", Broker, Brokers3)


def warm_machine(security: Security, args: argparse.Namespace) -> None:
    """Untimed, once before the first timed round: each broker kind started, a short produce and
    consume of ``--machine-warmup`` 1 KiB records, stopped. After the machine has idled, its VM
    has handed memory back to the host, and whichever process touches that memory first pays the
    page faults: without this, the first round's first broker (Rivulet) pays them in its timed
    rows and Kafka, after it, does not. ``--machine-warmup 0`` leaves it out."""
    if not args.machine_warmup:
        return
    for kind in ("rivulet", "kafka"):
        broker = Broker(kind, security)
        try:
            Recorder(kind, [], {}).attempt("machine warm-up before the first round (untimed)",
                                           functools.partial(_warm_once, broker, args.machine_warmup))
        finally:
            broker.close()


def _warm_once(broker: Broker, count: int) -> None:
    broker.start()
    topic = _topic("machine-warm")
    _create(broker.bootstrap, [topic], PARTITIONS)
    x = rdkafka_perf.config_args(broker.security.client_conf())
    _rdk_produce(broker.load_bootstrap, topic, count, 1024, "1", extra=x)
    _rdk_consume(broker.load_bootstrap, topic, PARTITIONS, count, extra=x)


def _closing(brokers: B, run: Callable[[B, argparse.Namespace], dict[str, float]],
             args: argparse.Namespace) -> dict[str, float]:
    try:
        return run(brokers, args)
    finally:
        brokers.close()


def merge_round(parts: list[dict[str, float]]) -> dict[str, float]:
    """One round's figures from its brokers' runs, in the order they ran: the load average
    before the first and after the last."""
    out: dict[str, float] = {}
    for part in parts:
        out.update({k: v for k, v in part.items() if k != "load_before" or "load_before" not in out})
    return out


# ---------------------------------------------------------------------------- the tables


def _declare_figures() -> None:
    for size, label in ((100, "100 B"), (1024, "1 KiB")):
        for acks in ("1", "all"):
            THROUGHPUTS.append((f"rdk_prod_{size}_{acks}", f"produce {label}, acks={acks}", "rdkafka_performance"))
            THROUGHPUTS.append((f"java_prod_{size}_{acks}", f"produce {label}, acks={acks}", "ProducerPerformance"))
    for codec in COMPRESSIONS:
        THROUGHPUTS.append((f"rdk_prod_1024_{codec}", f"produce 1 KiB, {codec}, acks=1", "rdkafka_performance"))
    for size, label in ((100, "100 B"), (1024, "1 KiB")):
        THROUGHPUTS.append((f"rdk_cons_{size}", f"consume {label}, full topic", "rdkafka_performance"))
        THROUGHPUTS.append((f"rdk_cons2_{size}", f"consume {label}, full topic, {PARTITIONS // CONSUME_PROCESSES} "
                            f"partitions each", f"rdkafka_performance x{CONSUME_PROCESSES}"))
        THROUGHPUTS.append((f"java_cons_{size}", f"consume {label}, full topic", "ConsumerPerformance"))
    many = f"{MANY_TOPICS * MANY_PARTITIONS_EACH:,} partitions ({MANY_TOPICS} topics), 1 KiB"
    gens = f"rdkafka_performance x{MANY_TOPICS}"
    THROUGHPUTS.append(("rdk_prod_many", f"produce {many}, acks=1", gens))
    THROUGHPUTS.append(("rdk_cons_many", f"consume {many}", gens))
    many = f"{MANY10K_TOPICS * MANY10K_PARTITIONS_EACH:,} partitions ({MANY10K_TOPICS} topics), 1 KiB"
    gens = f"rdkafka_performance x{MANY10K_TOPICS}"
    THROUGHPUTS.append(("rdk_prod_many10k", f"produce {many}, acks=1", gens))
    THROUGHPUTS.append(("rdk_cons_many10k", f"consume {many}", gens))
    cluster = f"{CLUSTER_BROKERS} brokers, RF={CLUSTER_RF}, min ISR 2, {CLUSTER_PARTITIONS} partitions"
    for size, label in ((100, "100 B"), (1024, "1 KiB")):
        THROUGHPUTS.append((f"cl_prod_{size}_all", f"{cluster}: produce {label}, acks=all", "rdkafka_performance"))
    for size, label in ((100, "100 B"), (1024, "1 KiB")):
        THROUGHPUTS.append((f"cl_cons_{size}", f"{cluster}: consume {label}, full topic", "rdkafka_performance"))
    for per_txn in TXN_PER:
        THROUGHPUTS.append((f"txn_{per_txn}", f"transactions of {per_txn:,} records, {TXN_SIZE} B, acks=all",
                            "franz-go txnperf"))
    for client, generator in SHARE_GENERATORS.items():
        for members in SHARE_MEMBERS:
            THROUGHPUTS.append((f"share_{client}_{members}", f"share group, {members} consumer(s), records "
                                f"acknowledged after the first, 1 partition", generator))
    for rate, linger, acks in LATENCY_CASES:
        for q, name in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
            _figure(f"lat{rate}_{linger}_{acks}_{q}", f"end-to-end latency {name} at {rate:,} msg/s, "
                    f"linger.ms={linger}, acks={acks} (confluent-kafka)", "ms", False)
    _figure("jlat_avg", "Java EndToEndLatency average (acks=all, one at a time)", "ms", False)
    _figure("jlat_p99", "Java EndToEndLatency p99 (whole ms)", "ms", False)
    _figure("group_stable", f"{GROUP_MEMBERS}-member group start -> Stable", "ms", False)
    for client, generator in SHARE_GENERATORS.items():
        for members in SHARE_MEMBERS:
            _figure(f"share_{client}_{members}_first_ack", f"share group, {members} consumer(s), {generator}: "
                    "first subscribe -> first acknowledgement confirmed", "s", False)
    for protocol, strategy in GROUP100_CASES:
        name = f"classic protocol ({strategy}, eager)" if protocol == "classic" else "consumer protocol (KIP-848)"
        _figure(f"group100_{protocol}", f"{GROUP100_MEMBERS}-member group start -> every member assigned, {name}, "
                "confluent-kafka", "s", False)
    for key, parts in (("rdk_cons_many", MANY_TOPICS * MANY_PARTITIONS_EACH),
                       ("rdk_cons_many10k", MANY10K_TOPICS * MANY10K_PARTITIONS_EACH)):
        for end, name in (("min", "fewest"), ("median", "median"), ("max", "most")):
            # 1.00: both consume rows read the same layout
            _figure(f"{key}.layout_{end}", f"consume {parts:,} partitions: records read from a partition, {name}",
                    "records", True)
    _figure("startup", "start-up to first Metadata response", "s", False)
    _figure("rss", "broker RSS after the run", "MiB", False)
    _figure("many10k_create", f"create {MANY10K_TOPICS} topics of {MANY10K_PARTITIONS_EACH:,} partitions "
            "and wait for their leaders", "s", False)
    _figure("many10k_rss", f"broker RSS after the {MANY10K_TOPICS * MANY10K_PARTITIONS_EACH:,}-partition run",
            "MiB", False)
    _figure("cluster_rss", f"RSS of the {CLUSTER_BROKERS} brokers (Rivulet: and ZooKeeper) after their run",
            "MiB", False)


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "failed"
    if unit == "records/s":
        return f"{v:,.0f}"
    if unit == "records":
        return f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"
    if unit in ("MB/s", "MiB"):
        return f"{v:,.1f}"
    if unit == "s":
        return f"{v:.2f}"
    return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"


Runs = dict[str, list[dict[str, float]]]


def _values(runs: Runs, kind: str, key: str) -> list[float]:
    return [r[key] for r in runs[kind] if key in r]


def _median(runs: Runs, kind: str, key: str) -> float | None:
    vals = _values(runs, kind, key)
    return statistics.median(vals) if vals else None


def spread(vals: list[float]) -> str:
    """(max - min) / median over the rounds."""
    if len(vals) < 2 or statistics.median(vals) <= 0:
        return "-"
    return f"{(max(vals) - min(vals)) / statistics.median(vals) * 100:.0f}%"


def ratio(runs: Runs, key: str, higher_is_better: bool) -> str:
    """Rivulet against Kafka, > 1.0 when Rivulet is better: the median of the per-round ratios
    (round i's Rivulet against round i's Kafka, run next to each other), and their range."""
    per_round = []
    for r, k in zip(runs["rivulet"], runs["kafka"]):
        a, b = r.get(key), k.get(key)
        if a is not None and b is not None and min(a, b) > 0:
            per_round.append(a / b if higher_is_better else b / a)
    if not per_round:
        return "n/a"
    cell = f"{statistics.median(per_round):.2f}"
    if len(per_round) > 1:
        cell += f" ({min(per_round):.2f}-{max(per_round):.2f})"
    return cell


def _cpu_cell(runs: Runs, key: str, who: str) -> str:
    cells = []
    for kind in ("rivulet", "kafka"):
        pct, sec = _median(runs, kind, f"{key}.{who}_pct"), _median(runs, kind, f"{key}.{who}_s")
        cells.append("-" if pct is None or sec is None else f"{pct:.0f}% ({sec:.2f} s)")
    return " / ".join(cells)


def throughput_table(runs: Runs) -> list[str]:
    lines = [
        "| workload | load generator | Rivulet records/s | Kafka records/s | Rivulet / Kafka (range) | "
        "spread R / K | MB/s R / K | generator CPU R / K | broker CPU R / K |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, label, generator in THROUGHPUTS:
        r, k = _median(runs, "rivulet", f"{key}.rps"), _median(runs, "kafka", f"{key}.rps")
        if r is None and k is None:
            continue
        mb = " / ".join(_fmt(_median(runs, kind, f"{key}.mbps"), "MB/s") for kind in ("rivulet", "kafka"))
        lines.append(
            f"| {label} | {generator} | {_fmt(r, 'records/s')} | {_fmt(k, 'records/s')} | "
            f"{ratio(runs, f'{key}.rps', True)} | {spread(_values(runs, 'rivulet', f'{key}.rps'))} / "
            f"{spread(_values(runs, 'kafka', f'{key}.rps'))} | {mb} | {_cpu_cell(runs, key, 'gen')} | "
            f"{_cpu_cell(runs, key, 'broker')} |")
    return lines


def table(runs: Runs) -> list[str]:
    lines = [
        "| figure | unit | Rivulet | Kafka | ratio (> 1.0: Rivulet better) | spread R / K |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for key, label, unit, higher in FIGURES:
        r, k = _median(runs, "rivulet", key), _median(runs, "kafka", key)
        if r is None and k is None:
            continue
        cell = ratio(runs, key, higher)
        cell += "" if higher or cell == "n/a" else " (K/R)"
        lines.append(f"| {label} | {unit} | {_fmt(r, unit)} | {_fmt(k, unit)} | {cell} | "
                     f"{spread(_values(runs, 'rivulet', key))} / {spread(_values(runs, 'kafka', key))} |")
    return lines


def pooled_runs(runs: Runs, key: str) -> str | None:
    """Every run of a several-runs figure (``median_of_runs``) over all rounds, each broker's,
    and the median of each broker's: a lottery's rounds can each land either side."""
    every = {kind: [v for r in runs[kind] for k, v in r.items() if k.startswith(f"{key}.run")] for kind in runs}
    if not every["rivulet"] or not every["kafka"]:
        return None
    r, k = statistics.median(every["rivulet"]), statistics.median(every["kafka"])
    return (f"{key}, every run (s): Rivulet {', '.join(f'{v:.2f}' for v in every['rivulet'])}; "
            f"Kafka {', '.join(f'{v:.2f}' for v in every['kafka'])}; their medians {r:.2f} / {k:.2f}, "
            f"K/R {k / r:.2f}")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _security_line(name: str) -> str:
    if name == "plaintext":
        return "PLAINTEXT"
    line = ("SSL listener, TLS 1.3 only (ssl.enabled.protocols=TLSv1.3), a P-256 ECDSA broker certificate "
            "in a PKCS12 key store, no client authentication; the clients trust the run's CA "
            "(librdkafka ssl.ca.location, Java a PEM trust store)")
    if name == "sasl_ssl":
        line = line.replace("SSL listener", f"SASL_SSL listener with {SCRAM_MECHANISM} ({SCRAM_ITERATIONS} "
                            "iterations)")
    return line + "; topics are created over a PLAINTEXT listener beside it"


def context(argv: list[str], args: argparse.Namespace, wall: float, load_before: str, runs: Runs,
            order: list[str]) -> list[str]:
    mem = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/meminfo").read_text().splitlines()
               if ln.startswith("MemTotal"))
    try:
        jv = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        jv = "unknown"
    import rivulet
    ck = confluent_kafka.version()
    ck = ck if isinstance(ck, str) else ck[0]  # a (str, int) tuple in upstream releases
    seen = {"rivulet": 0, "kafka": 0}
    per_run = []
    for kind in order:
        r = runs[kind][seen[kind]]
        seen[kind] += 1
        per_run.append(f"{kind.capitalize()} {seen[kind]}: {r.get('load_before', 0):.2f} -> {r.get('load_after', 0):.2f}")
    return [
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- command: `{' '.join(shlex.quote(a) for a in ['python', '-m', 'benchmarks.compare', *argv])}`",
        f"- versions: Rivulet {rivulet.__version__}, Apache Kafka {KAFKA_VERSION} ({jv}, -Xmx1g, G1), "
        f"rdkafka_performance {rdkafka_perf.RDKAFKA_VERSION} (built from Debian's source), "
        f"Python {platform.python_version()}, confluent-kafka {ck} / librdkafka {confluent_kafka.libversion()[0]} "
        f"(latency, group100 and share rows)",
        f"- machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), MemTotal {mem}, "
        f"{platform.system()} {platform.release()}; brokers and load generators share the machine; "
        f"load average (1/5/15 min) {load_before} before the run, {loadavg()} after; 1-minute load average "
        f"before -> after each broker's run: {', '.join(per_run)}",
        f"- security: {_security_line(args.security)}",
        f"- workload: {args.records_100:,} x 100 B and {args.records_1k:,} x 1 KiB records per produce run, "
        f"{PARTITIONS} partitions, linger.ms=10, batch.size=1000000, idempotence off; many partitions: "
        f"{MANY_TOPICS} rdkafka_performance processes at once, {max(1, args.records_1k // MANY_TOPICS):,} x 1 KiB "
        f"each to its own topic of {MANY_PARTITIONS_EACH} partitions ({_topic_config_text()}), the consume row reading an untimed even "
        f"fill after it ({max(1, args.records_1k // MANY_TOPICS // MANY_PARTITIONS_EACH):,} x 1 KiB appended to "
        f"every partition, one flush a topic); untimed warm-up of {args.warmup:,} x 100 B + "
        f"{args.warmup // 3:,} x 1 KiB (rdkafka_performance produce+consume) after start-up; "
        f"before the first round, {args.machine_warmup:,} x 1 KiB produced and consumed untimed against each "
        f"broker kind once (--machine-warmup); "
        f"latency {args.latency_seconds:g} s per case at {' and '.join(f'{r:,}' for r in LATENCY_RATES)} msg/s, "
        f"linger.ms {' and '.join(map(str, LATENCY_LINGERS))}, acks {' and '.join(LATENCY_ACKS)}, 1 partition, "
        f"100 B records; "
        + "".join(f"{line}; " for line in new_family_lines(args))
        + f"{args.rounds} round(s) per broker alternating Rivulet, Kafka; medians shown, spread = (max - min) / median "
        f"over the rounds; ratio is Rivulet/Kafka for throughputs, Kafka/Rivulet (K/R) for latencies, times "
        f"and memory, the median of the per-round ratios with their range; CPU is user+sys seconds over the "
        f"figure's whole run (the generator's process lifetime, start-up included) and that as a share of one "
        f"core over the interval the figure measured, so an upper bound for the generator; wall time "
        f"{wall / 60:.1f} min"
        + (f"; left out: {', '.join(sorted(args.skip))}" if args.skip else ""),
        *_issue32_context(args),
    ]


def _issue32_context(args: argparse.Namespace) -> list[str]:
    """The workload of issue 32's rows that ran."""
    parts = []
    if "txn" not in args.skip:
        counts = ", ".join(f"{n:,} records in transactions of {per:,}"
                           for per, n in txn_counts(args.txn_records, args.txn_records_100))
        parts.append(f"transactions: franz-go {txn_perf.FRANZ_GO_VERSION} (txnperf), {counts}, {TXN_SIZE} B, "
                     f"{PARTITIONS} partitions, linger 10 ms, acks=all; checked with read_committed")
    if "group100" not in args.skip:
        runs = ", ".join(f"{p} {args.group100_runs or n}" for p, n in GROUP100_RUNS.items())
        parts.append(f"{GROUP100_MEMBERS}-member group: confluent-kafka consumers, one process, "
                     f"{2 * GROUP100_MEMBERS} partitions, each broker's default heartbeat intervals; runs per "
                     f"round ({runs}), the round's figure their median")
    if "share" not in args.skip:
        parts.append(f"share groups: {args.share_records:,} x {SHARE_SIZE} B records on 1 partition per run, "
                     f"{', '.join(map(str, SHARE_MEMBERS))} consumers, implicit acknowledgement; records/s from "
                     f"the first acknowledgement confirmed to the last (the first batch left out), the join "
                     f"(first subscribe -> first acknowledgement) a row of its own")
    return [f"- issue 32 rows: {'; '.join(parts)}"] if parts else []


def _topic_config_text() -> str:
    return ", ".join(f"{k}={v}" for k, v in MANY_TOPIC_CONFIG.items())


def new_family_lines(args: argparse.Namespace) -> list[str]:
    """The workload of the families that start brokers of their own, those that ran."""
    lines = []
    if "many10k" not in args.skip:
        lines.append(f"{MANY10K_TOPICS * MANY10K_PARTITIONS_EACH:,} partitions: a broker of their own (same "
                     f"settings, same warm-up), {MANY10K_TOPICS} rdkafka_performance processes at once, "
                     f"{max(1, args.records_1k // MANY10K_TOPICS):,} x 1 KiB each to its own topic of "
                     f"{MANY10K_PARTITIONS_EACH:,} partitions ({_topic_config_text()}), acks=1; the consume row reads an untimed even "
                     f"fill after it ({max(1, args.records_1k // MANY10K_TOPICS // MANY10K_PARTITIONS_EACH):,} "
                     "x 1 KiB appended to every partition, one flush a topic)")
    if "cluster" not in args.skip:
        lines.append(f"cluster: {CLUSTER_BROKERS} brokers on this machine (Rivulet: ZooKeeper mode with a ZooKeeper, "
                     f"counted in broker CPU and RSS; Kafka: {CLUSTER_BROKERS} KRaft nodes, each broker+controller "
                     f"and a voter, -Xmx1g each), "
                     + ", ".join(f"{k}={v}" for k, v in CLUSTER_BROKER_PROPS.items())
                     + f", topics of {CLUSTER_PARTITIONS} partitions and RF={CLUSTER_RF}, PLAINTEXT, the same "
                     f"warm-up at RF={CLUSTER_RF}; produce at acks=all, consume the full topic, one "
                     "rdkafka_performance bootstrapped to all three")
    return lines


def open_files_limit(soft: int, hard: int, need: int) -> int | None:
    """The soft RLIMIT_NOFILE to set so that ``need`` files can be open (None: it already
    can); raises when the hard limit is too low."""
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ValueError(f"the hard limit of open files is {hard}, {need} are needed (ulimit -Hn)")
    return None if soft == resource.RLIM_INFINITY or soft >= need else need


def _names(value: str) -> set[str]:
    return set(filter(None, value.split(",")))


def skipped_parts(skip: set[str], only: set[str] | None) -> set[str]:
    """The families left out: those of ``--skip``, and with ``--only`` every other one."""
    return set(skip) | (set(PARTS) - only if only is not None else set())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--records-100", type=int, default=3_000_000)
    ap.add_argument("--records-1k", type=int, default=1_000_000)
    ap.add_argument("--latency-seconds", type=float, default=5.0, help="per latency case (there are "
                    f"{len(LATENCY_CASES)})")
    ap.add_argument("--warmup", type=int, default=100_000,
                    help="untimed 100 B records (and a third as many 1 KiB) produced and consumed first; 0: none")
    ap.add_argument("--machine-warmup", dest="machine_warmup", type=int, default=30_000,
                    help="untimed 1 KiB records produced and consumed against each broker kind once before the "
                         "first round, so neither pays the machine's page faults after idling; 0: none")
    ap.add_argument("--drop-caches", action="store_true",
                    help="drop the page cache before each produce row (root; see drop_page_cache)")
    ap.add_argument("--heartbeat-ms", type=int, default=100, help="group members' heartbeat interval")
    ap.add_argument("--no-java-consumer", action="store_true", help="skip ConsumerPerformance")
    ap.add_argument("--skip", type=_names, default=set(),
                    help=f"leave out these rows, comma-separated: {', '.join(PARTS)}")
    ap.add_argument("--only", type=_names, default=None,
                    help="run only these families of rows (comma-separated, as for --skip), e.g. cluster,many10k")
    ap.add_argument("--txn-records", type=int, default=1_000_000, help="records in transactions of 10,000")
    ap.add_argument("--txn-records-100", type=int, default=200_000, help="records in transactions of 100")
    ap.add_argument("--group100-runs", type=int, default=None,
                    help="runs of each 100-member group case per broker round, the round's figure their median "
                         f"(default: {', '.join(f'{k} {v}' for k, v in GROUP100_RUNS.items())})")
    ap.add_argument("--share-records", type=int, default=200_000, help="records per share-group run")
    ap.add_argument("--share-timeout", type=float, default=600.0, help="seconds a share-group run may take")
    ap.add_argument("--json", type=Path, help="also write every round's figures to this file")
    ap.add_argument("--security", choices=SECURITY, default="plaintext",
                    help="the load generators' listener on both brokers: TLS 1.3 (tls), or TLS 1.3 with "
                         f"SASL {SCRAM_MECHANISM} (sasl_ssl); leaves out: {', '.join(sorted(NOT_SECURED))}")
    argv = sys.argv[1:]
    args = ap.parse_args(argv)
    for flag, names in (("--skip", args.skip), ("--only", args.only or set())):
        if unknown := names - set(PARTS):
            ap.error(f"{flag}: unknown {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    args.skip = skipped_parts(args.skip, args.only)
    if "many10k" not in args.skip:  # the brokers inherit it
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            raised = open_files_limit(soft, hard, MANY10K_OPEN_FILES)
        except ValueError as e:
            ap.error(f"many10k: {e}; or --skip many10k")
        if raised is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    reason = java_tools.java_available()
    if reason is not None:
        sys.exit(f"Kafka's Java tools are unavailable: {reason}")
    if not rdkafka_perf.is_built():
        sys.exit("rdkafka_performance is not built; run: python -m benchmarks.rdkafka_perf build")
    if "txn" not in args.skip:
        try:
            txn_perf.build()
        except txn_perf.TxnPerfError as e:
            sys.exit(f"the transaction rows' load generator cannot be built (--skip txn leaves them out): {e}")
    if args.security != "plaintext" and not NOT_SECURED <= args.skip:
        log(f"--security {args.security}: leaving out {', '.join(sorted(NOT_SECURED - args.skip))} "
            f"(its client has no TLS settings here)")
        args.skip |= NOT_SECURED
    cert_dir = tempfile.TemporaryDirectory(prefix="rivulet-compare-certs-")
    security = Security.named(args.security, Path(cert_dir.name))
    _declare_figures()
    runs: Runs = {"rivulet": [], "kafka": []}
    order: list[str] = []
    load_before = loadavg()
    t0 = time.monotonic()
    warm_machine(security, args)
    for i in range(args.rounds):
        for kind in ("rivulet", "kafka"):
            log(f"round {i + 1}/{args.rounds}: {kind}")
            # One after another, never two at once: the single broker, the 10k-partition one, the cluster.
            parts = []
            if not set(SINGLE_PARTS) <= args.skip:
                parts.append(_closing(Broker(kind, security), measure, args))
            if "many10k" not in args.skip:
                parts.append(_closing(Broker(kind, security), measure_many10k, args))
            if "cluster" not in args.skip:
                parts.append(_closing(Brokers3(kind), measure_cluster, args))
            runs[kind].append(merge_round(parts))
            order.append(kind)
            log(f"  {kind} round {i + 1} figures: " + ", ".join(f"{k}={v:.4g}" for k, v in runs[kind][-1].items()))
    cert_dir.cleanup()
    if args.json:
        args.json.write_text(json.dumps({"argv": argv, "order": order, "runs": runs}, indent=1))
    print("\n".join(context(argv, args, time.monotonic() - t0, load_before, runs, order)))
    print()
    print("\n".join(throughput_table(runs)))
    print()
    print("\n".join(table(runs)))
    pooled = [line for protocol, _ in GROUP100_CASES if (line := pooled_runs(runs, f"group100_{protocol}"))]
    if pooled:
        print()
        print("\n".join(f"- {line}" for line in pooled))


if __name__ == "__main__":
    main()
