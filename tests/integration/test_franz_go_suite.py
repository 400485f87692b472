"""franz-go's own integration suite (its pkg/kgo tests) against a Rivulet broker, as franz-go's
CI runs it against Kafka: produce/consume in every mode, groups with every balancer,
transactions with a consume-transform-produce ETL, admin requests, and its regression tests.

The module comes from the Go module proxy at a pinned version; the compiled test binary is
cached in ``~/.cache/rivulet/franz-go-<version>/``. The one broker is set up as franz-go's CI sets
up Kafka: a SCRAM-SHA-256 listener next to the plaintext one, with its user made by the admin
tool, for its SCRAM tests, and share groups for its share-group tests. Only what skips against
Kafka 4.3.1 too skips here: TestIssueProduceBrokerTooOldFailsRecords, as Kafka advertises Produce
from v0 for librdkafka (KAFKA-18659), and on the cluster the SCRAM tests (franz-go's CI has no
SASL cluster). A test not run on the cluster is named with its reason in the output; the run
fails on any failed test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

from rivulet.testing import BrokerProcess, free_port
from tests.go_suites import go_test_binary

pytestmark = [pytest.mark.integration, pytest.mark.go]

FRANZ_GO_VERSION = "v1.22.2"
MODULE = "github.com/twmb/franz-go"
RECORDS = 50_000  # per produce/consume test (franz-go's default is 500,000)
# On three brokers the suite checks coordinators, leaders and RF=3 apart from each other; its
# ETL tests' volume is the one broker's run's to check (at 50,000 they took CI 5.5 minutes here).
CLUSTER_RECORDS = 20_000
SCRAM_USER = ("testuser", "testpass")  # franz-go's CI's


def kgo_test_binary() -> tuple[Path, Path]:
    """franz-go's pkg/kgo tests compiled into one binary, built once per version, and the
    package's source directory, where the binary runs (some tests read its files)."""
    return go_test_binary(MODULE, FRANZ_GO_VERSION, "pkg/kgo", "kgo")


def run_suite(bootstrap: str, rf: int, log_path: Path, excluded: dict[str, str] | None = None,
              records: int = RECORDS, scram_seeds: str | None = None) -> set[str]:
    """``excluded``: tests not run here, each with the reason (printed with the summary);
    ``records``: per produce/consume test; ``scram_seeds``: a SASL_PLAINTEXT listener on which
    SCRAM_USER has a SCRAM-SHA-256 credential. The tests that passed."""
    binary, pkg = kgo_test_binary()
    env = dict(os.environ, KGO_SEEDS=bootstrap, KGO_TEST_RF=str(rf), KGO_TEST_STABLE_FETCH="true",
               KGO_TEST_RECORDS=str(records))
    if scram_seeds:
        env.update(KGO_TEST_SCRAM_SEEDS=scram_seeds, KGO_TEST_SCRAM=":".join(SCRAM_USER))
    args = [str(binary), "-test.count=1", "-test.v", "-test.timeout=15m"]
    if excluded:
        args += ["-test.skip", "^(" + "|".join(sorted(excluded)) + ")$"]
        for name, why in sorted(excluded.items()):
            print(f"franz-go {name} not run here: {why}")
    # The output goes to a file and is read a line at a time: a test of the suite that loops on
    # an error can log gigabytes (a CI run's worker grew to 21 GB holding it and was killed).
    with open(log_path, "wb") as log:
        r = subprocess.run(args, cwd=pkg, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=1200)
    failed_set: set[str] = set()
    skipped_set: set[str] = set()
    passed: list[str] = []
    # A failing ETL test repeats its last error for as long as it runs: what led to the first
    # one (the client's log before it) is kept apart from the output's end.
    before_first: deque[str] = deque(maxlen=40)
    first_errors: list[str] = []
    with open(log_path, errors="replace") as log:
        for line in log:
            if "sendErr" in line or re.match(r"\s+\w+_test\.go:\d+: ", line):
                if len(first_errors) < 10:
                    first_errors.append(line)
            elif not first_errors:
                before_first.append(line)
            if m := re.match(r"\s*--- FAIL: (\S+)", line):
                failed_set.add(m.group(1))
            elif m := re.match(r"--- PASS: (\S+)", line):
                passed.append(m.group(1))
            elif m := re.match(r"--- SKIP: (\S+)", line):
                skipped_set.add(m.group(1))
    failed, skipped = sorted(failed_set), sorted(skipped_set)
    print(f"franz-go {FRANZ_GO_VERSION} pkg/kgo: {len(passed)} passed, {len(skipped)} skipped ({', '.join(skipped)})")
    if r.returncode != 0 or failed:
        size = log_path.stat().st_size
        with open(log_path, "rb") as log:
            log.seek(max(0, size - 6000))
            tail = log.read().decode(errors="replace")
        first = "".join([*before_first, *first_errors]) if first_errors else ""
        raise AssertionError(f"failed: {failed} (exit {r.returncode}; {size:,} bytes of output)\n"
                             f"{'the first errors and the lines before them:' if first else ''}\n{first}\n"
                             f"the output's end:\n{tail}")
    # The heart of the suite ran: transactions, groups and plain produce/consume.
    assert {"TestTxnEtl", "TestGroupETL"} <= set(passed)
    assert len(passed) >= 100
    return set(passed)


@pytest.mark.timeout(1800)
def test_franz_go_kgo_integration_suite(tmp_path):
    broker = BrokerProcess({"offsets.topic.replication.factor": "1",
                            # As franz-go's CI sets Kafka: its share ETL test releases and kills
                            # consumers enough that a record can reach the default limit of 5.
                            "group.share.delivery.count.limit": "10",
                            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
                                "org.apache.kafka.common.security.scram.ScramLoginModule required;"})
    sasl_port = free_port()
    broker.overrides["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    with broker:
        # The user, made over the plaintext listener as franz-go's CI makes it with kafka-configs.
        r = subprocess.run([sys.executable, "-m", "rivulet", "users", "add", "-b", broker.bootstrap,
                            "--user", SCRAM_USER[0], "--password", SCRAM_USER[1],
                            "--mechanism", "SCRAM-SHA-256", "--iterations", "4096"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        passed = run_suite(broker.bootstrap, 1, tmp_path / "kgo.log", scram_seeds=f"127.0.0.1:{sasl_port}")
    assert {"TestSCRAMAuth", "TestSCRAMAuthBadCredentials", "TestShareGroup"} <= passed


@pytest.mark.cluster
@pytest.mark.timeout(1800)
def test_franz_go_kgo_integration_suite_on_a_cluster(tmp_path, zk_connect):
    """The same suite against three ZooKeeper-mode brokers, every topic it makes at RF=3."""
    from tests.cluster import three_brokers

    with three_brokers(zk_connect, **{"default.replication.factor": "3", "offsets.topic.replication.factor": "3",
                                      "transaction.state.log.replication.factor": "3",
                                      "min.insync.replicas": "2"}) as cluster:
        try:
            run_suite(cluster.bootstrap, 3, tmp_path / "kgo.log", excluded={
                # It runs on one broker above. Its loop stops once as many topics have given
                # records as it wants, whichever they are; with __consumer_offsets standing in
                # for its internal topic (Rivulet, as Kafka, refuses kfake's is_internal config)
                # and resolved by the broker's regex as Kafka resolves it, records of
                # __consumer_offsets from one broker can end that loop before the wanted
                # topic's record arrives from another: a race of the test's on more than one
                # broker.
                "Test848RegexBrokerResolves": "a race in the test itself on more than one broker"},
                records=CLUSTER_RECORDS)
        except AssertionError:
            # The brokers' data dirs go with the cluster; their whole logs stay with the run's.
            for i, b in cluster.brokers.items():
                shutil.copyfile(b.log_path, tmp_path / f"broker-{i}.log")
            print(f"the brokers' logs: {tmp_path}/broker-*.log")
            raise
