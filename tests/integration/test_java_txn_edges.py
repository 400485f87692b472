"""Kafka's Java producer in transactions at their edges (tests/java/TxnEdges.java) prints against
Rivulet what it printed against Kafka 4.3.1 with transaction.version 2 finalized (Kafka's default
on a new cluster), kept in tests/java/TxnEdges.kafka-4.3.1.txt.

    python tests/integration/test_java_txn_edges.py --record   # Kafka 4.3.1's lines into the golden
"""

from __future__ import annotations

import difflib
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
if str(_TESTS.parent) not in sys.path:  # run as a script (--record)
    sys.path.insert(0, str(_TESTS.parent))

from rivulet.testing import BrokerProcess  # noqa: E402
from tests import java_tools as jt  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.java]

SOURCE = _TESTS / "java" / "TxnEdges.java"
GOLDEN = SOURCE.with_name("TxnEdges.kafka-4.3.1.txt")
# The same settings on both brokers: timed-out transactions aborted within a second.
CONFIGS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
           "auto.create.topics.enable": "false", "offsets.topic.replication.factor": "1",
           "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
           "group.initial.rebalance.delay.ms": "0", "num.partitions": "1"}
# Rivulet's line -> Kafka 4.3.1's, for each difference kept on purpose (none).
KNOWN: dict[str, str] = {}


def run_probe(bootstrap: str, stderr_path: Path, scenarios: list[str] | None = None) -> list[str]:
    """The probe's lines with its random prefix masked; its stderr into ``stderr_path``."""
    prefix = "t" + uuid.uuid4().hex[:8]
    # -Xss: the client's Future.get() recurses once per split of a refused batch ("failedsend").
    with open(stderr_path, "w") as err:
        p = subprocess.run(jt.program_command(SOURCE, [bootstrap, prefix, *(scenarios or [])],
                                              jvm_args=(*jt.PROGRAM_JVM, "-Xss8m")),
                           stdout=subprocess.PIPE, stderr=err, text=True, timeout=400)
    assert p.returncode == 0, stderr_path.read_text()[-3000:]
    # The client's own ERROR log lines (timestamps) go to stdout too: keep the probe's.
    return [line for line in p.stdout.splitlines() if line.startswith("[")]


def test_java_transactions_answer_as_kafka(java, tmp_path):
    """commit/abort loops, sendOffsetsToTransaction (classic, KIP-848 and simple groups, with
    stale and unknown members), fencing by a second instance, a coordinator timeout then
    abortTransaction, a refused batch, LSO vs high watermark, restarts and empty transactions."""
    b = BrokerProcess(CONFIGS).start()
    try:
        got = [KNOWN.get(line, line) for line in run_probe(b.bootstrap, tmp_path / "java.log")]
    finally:
        b.cleanup()
    expected = GOLDEN.read_text().splitlines()
    assert got == expected, "\n".join(difflib.unified_diff(expected, got, "kafka-4.3.1", "rivulet", lineterm=""))


@pytest.mark.cluster
def test_java_transactions_answer_as_kafka_on_a_cluster(java, zk_connect, tmp_path):
    """The same on three brokers: a partition's leader adds it to the transaction of a
    coordinator on another broker (AddPartitionsToTxn v5, the Produce v12 implicit add), and
    the markers go out as WriteTxnMarkers v2."""
    from tests.cluster import three_brokers

    with three_brokers(zk_connect, **CONFIGS) as cluster:
        got = [KNOWN.get(line, line) for line in run_probe(cluster.bootstrap, tmp_path / "java.log")]
    expected = GOLDEN.read_text().splitlines()
    assert got == expected, "\n".join(difflib.unified_diff(expected, got, "kafka-4.3.1", "rivulet", lineterm=""))


def _golden(scenario: str) -> list[str]:
    return [line for line in GOLDEN.read_text().splitlines() if line.startswith(f"[{scenario}] ")]


def test_a_cluster_kept_at_transaction_version_0_upgrades_to_2(java, tmp_path):
    """An existing data dir keeps its stored level over a restart: at 0 the Java producer runs
    transactions V1 (a coordinator's timeout then fences it, as Kafka at transaction.version 0
    or 1 does); kafka-features upgrades it to 2 (UpdateFeatures) and a new producer runs V2."""
    b = BrokerProcess(CONFIGS).start()
    try:
        jt.feature_command(b.bootstrap, ["downgrade", "--feature", "transaction.version=0"])
        b.restart()
        assert jt.describe_features(b.bootstrap)["transaction.version"].finalized == 0
        v1 = run_probe(b.bootstrap, tmp_path / "v1.log", ["basic", "timeout"])
        assert [line for line in v1 if line.startswith("[basic] ")] == _golden("basic")
        timeout = [line for line in v1 if line.startswith("[timeout] ")]
        assert timeout[2] == ("[timeout] abort-after-timeout -> ProducerFencedException(There is a newer producer "
                              "with the same transactionalId which fences the current one.)"), v1
        jt.feature_command(b.bootstrap, ["upgrade", "--feature", "transaction.version=2"])
        assert jt.describe_features(b.bootstrap)["transaction.version"].finalized == 2
        v2 = run_probe(b.bootstrap, tmp_path / "v2.log", ["basic", "timeout"])
        assert v2 == _golden("basic") + _golden("timeout")
    finally:
        b.cleanup()


def _record() -> None:
    from tests.conftest import kafka_reference

    with kafka_reference(CONFIGS) as ref:
        lines = run_probe(ref.bootstrap, Path("/tmp/txnedges-kafka.err"))
    GOLDEN.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:] == ["--record"]:
        _record()
    else:
        sys.exit(__doc__)
