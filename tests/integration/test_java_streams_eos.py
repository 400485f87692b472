"""Kafka Streams 4.3.1 with exactly_once_v2 through the kill -9 of one of its two instances
(tests/java/StreamsEos.java: a repartition, a KStream-KTable join, an aggregation, standby replicas),
with the classic group protocol and with the streams protocol (KIP-1071). Its "[" lines against
Rivulet are those it printed against Kafka 4.3.1, kept in tests/java/StreamsEos.kafka-4.3.1.txt.

    python tests/integration/test_java_streams_eos.py --record    # Kafka 4.3.1's lines into the golden
    python tests/integration/test_java_streams_eos.py --compare   # both protocols on Rivulet against it

The lines starting "#" (how long the takeover took, the transactions the kill left open, the
instances' logged errors) differ from run to run and are shown, never compared.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
if str(_TESTS.parent) not in sys.path:  # run as a script (--record)
    sys.path.insert(0, str(_TESTS.parent))

from rivulet.testing import BrokerProcess  # noqa: E402
from tests import java_tools as jt  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.java]

SOURCE = _TESTS / "java" / "StreamsEos.java"
GOLDEN = SOURCE.with_name("StreamsEos.kafka-4.3.1.txt")
PROTOCOLS = ("classic", "streams")
# The same settings on both brokers: a killed member's session ends after 6 s under either
# protocol (the classic one takes the instances' session.timeout.ms=6000), no first-join delay.
CONFIGS = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "4",
           "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
           "transaction.state.log.num.partitions": "4",
           "group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "false",
           "group.streams.min.session.timeout.ms": "2000", "group.streams.session.timeout.ms": "6000",
           "group.streams.min.heartbeat.interval.ms": "500", "group.streams.heartbeat.interval.ms": "500",
           "group.streams.initial.rebalance.delay.ms": "0"}


def run_probe(bootstrap: str, protocol: str, work: Path) -> tuple[list[str], list[str]]:
    """The probe's "[" lines and its "#" lines (timings, the instances' errors); the instances'
    logs are left in ``work``."""
    prefix = "s" + uuid.uuid4().hex[:8]
    # The driver starts its instances with its own JVM flags and class path.
    cmd = jt.program_command(SOURCE, ["drive", bootstrap, prefix, protocol, str(work)],
                             cp=jt.streams_logged_classpath(),
                             jvm_args=("-Xmx192m", *jt.LIGHT_JVM, f"-Dlog4j2.configurationFile={jt.tools_log_config()}"))
    with open(work.with_suffix(".err"), "w") as err:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, timeout=400)
    lines = p.stdout.splitlines()
    assert p.returncode == 0, "\n".join(lines) + "\n" + work.with_suffix(".err").read_text()[-3000:]
    return [ln for ln in lines if ln.startswith("[")], [ln for ln in lines if ln.startswith("#")]


def _golden(protocol: str) -> list[str]:
    return [ln for ln in GOLDEN.read_text().splitlines() if ln.startswith(f"[{protocol}] ")]


@pytest.mark.timeout(240)
def test_kafka_streams_eos_through_a_kill_as_on_kafka(java, tmp_path):
    """With the classic group protocol (StreamsPartitionAssignor; the streams protocol's kill -9 is
    test_streams_groups' word count): every region's totals counted 1..n in order and complete
    after the kill, nothing lost, nothing counted twice; the same lines as on Kafka 4.3.1."""
    got, notes = _on_rivulet("classic", tmp_path / "classic")
    expected = _golden("classic")
    assert got == expected, "\n".join([*difflib.unified_diff(expected, got, "kafka-4.3.1", "rivulet", lineterm=""),
                                       *notes])


def _on_rivulet(protocol: str, work: Path) -> tuple[list[str], list[str]]:
    b = BrokerProcess(CONFIGS).start()
    try:
        return run_probe(b.bootstrap, protocol, work)
    finally:
        b.cleanup()


def _record() -> None:
    from tests.conftest import kafka_reference

    lines: list[str] = []
    with kafka_reference(CONFIGS) as ref:
        for protocol in PROTOCOLS:
            got, notes = run_probe(ref.bootstrap, protocol, Path(tempfile.mkdtemp(prefix=f"streams-eos-kafka-{protocol}-")))
            lines += got
            print("\n".join(got + notes))
    GOLDEN.write_text("\n".join(lines) + "\n")


def _compare() -> None:
    for protocol in PROTOCOLS:
        got, notes = _on_rivulet(protocol, Path(tempfile.mkdtemp(prefix=f"streams-eos-rivulet-{protocol}-")))
        expected = _golden(protocol)
        diff = list(difflib.unified_diff(expected, got, "kafka-4.3.1", "rivulet", lineterm=""))
        print("\n".join([*notes, *(diff or [f"[{protocol}] the same lines as Kafka 4.3.1"])]))


if __name__ == "__main__":
    if sys.argv[1:] == ["--record"]:
        _record()
    elif sys.argv[1:] == ["--compare"]:
        _compare()
    else:
        sys.exit(__doc__)
