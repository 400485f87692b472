"""Run tests/java/AdminProbe.java (Kafka's Java Admin, a fixed script of calls) against a
broker and compare its lines with Kafka 4.3.1's, kept in tests/java/admin_probe_kafka.txt.

    python tests/java_admin_probe.py            # a Rivulet broker and Kafka 4.3.1, side by side
    python tests/java_admin_probe.py --record   # Kafka 4.3.1's lines into the golden file

The same configs go to both brokers (one node, ``num.partitions=1``, auto-create). Each line is
``step -> ok <result>`` or ``step -> ERR <exception class>``; the exceptions' messages go to
stderr, for reading only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE.parent) not in sys.path:
    sys.path.insert(0, str(_HERE.parent))

import java_tools as jt  # noqa: E402

SOURCE = _HERE / "java" / "AdminProbe.java"
GOLDEN = _HERE / "java" / "admin_probe_kafka.txt"
# The reference broker's server.properties sets these; Rivulet gets them too.
BROKER_CONFIGS = {"num.partitions": "1", "auto.create.topics.enable": "true", "min.insync.replicas": "1",
                  "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
                  "transaction.state.log.min.isr": "1", "default.replication.factor": "1",
                  "share.coordinator.state.topic.replication.factor": "1", "share.coordinator.state.topic.min.isr": "1"}

# Kafka 4.3.1's broker configs that configs.broker.names lists with other flags on Rivulet, and
# why; every other of Kafka's names must be listed as Kafka lists it (broker_names_differences).
BROKER_NAME_DIFFERENCES = {
    **{n: "set in the reference broker's KRaft server.properties (STATIC_BROKER_CONFIG); Rivulet's harness "
          "needs none of them" for n in (
        "advertised.listeners", "broker.id", "node.id", "process.roles", "controller.listener.names",
        "controller.quorum.voters", "inter.broker.listener.name", "listener.security.protocol.map")},
    **{n: "read-only on Rivulet: TLS settings are read at start-up (no dynamic key store updates)" for n in (
        "ssl.cipher.suites", "ssl.client.auth", "ssl.enabled.protocols", "ssl.endpoint.identification.algorithm",
        "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.keystore.location",
        "ssl.keystore.password", "ssl.keystore.type", "ssl.protocol", "ssl.truststore.certificates",
        "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type")},
    "metric.reporters": "read-only on Rivulet: its reporters (telemetry receivers) are made at start-up",
}

# Steps whose answer is not Kafka 4.3.1's, or not the same from run to run on Kafka itself.
KNOWN_DIFFERENCES = {
    # Rivulet's topic configs add its iceberg.* configs (5 more than Kafka's 33).
    **{s: "iceberg.* topic configs" for s in (
        "create.a", "create.validateOnly", "create.defaults", "create.withConfigs", "create.assignment",
        "create.collides", "configs.topic")},
    "configs.broker.names": "Rivulet lists Kafka 4.3.1's 340 broker configs and 38 of its own (378); Kafka's "
                            "are checked one by one, but BROKER_NAME_DIFFERENCES (broker_names_differences)",
    "configs.brokerLogger.root": "the level each broker starts with: the test broker logs at WARN, Kafka's at INFO",
    "offsets.maxTimestampAfterDelete": "Kafka answers -1 or the record, as its segment was or was not deleted yet",
    "logDirs": "Kafka's replica size after DeleteRecords is 0 or not, as its segment was or was not deleted yet",
    "share.describe.empty": "Kafka's AlterShareGroupOffsets on a new group bumps its epoch to 1",
    "share.offsets": "Kafka persists share-partition start offsets lazily: its answer varies by timing",
    "share.alterOffsets.empty": "as share.offsets",
    "features": "kraft.version not implemented (a ZooKeeper-mode control plane)",
    "registerBroker.unregister": "a ZooKeeper-mode control plane: no UnregisterBroker (KRaft)",
    "list.internal": "Kafka recreates __consumer_offsets after its deletion (the group coordinator); Rivulet "
                     "on the next FindCoordinator",
}


def run_probe(bootstrap: str, stderr_path: Path, sections: list[str] | None = None,
              timeout: float = 300) -> dict[str, str]:
    """The probe's lines, ``{step: answer}``; its stderr (the messages) into ``stderr_path``."""
    with open(stderr_path, "w") as err:
        r = subprocess.run(jt.program_command(SOURCE, [bootstrap, *(sections or [])]), stdout=subprocess.PIPE,
                           stderr=err, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"the probe failed (exit {r.returncode}): {stderr_path.read_text()[-3000:]}")
    return parse(r.stdout)


def parse(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        name, sep, answer = line.partition(" -> ")
        if sep and name and " " not in name:  # the client's own log lines have spaces before any arrow
            out[name] = answer
    return out


def _broker_names(answer: str) -> dict[str, str]:
    """configs.broker.names' answer, ``ok N [name|SOURCE|ro|sens, ...]``, as {name: flags}."""
    inside = answer.partition("[")[2].rpartition("]")[0]
    return {name: flags for name, _, flags in (e.partition("|") for e in inside.split(", ") if e)}


def broker_names_differences(kafka: str, ours: str) -> dict[str, tuple[str | None, str | None]]:
    """Kafka's broker configs that Rivulet does not list, or lists with other flags, but those of
    BROKER_NAME_DIFFERENCES: {name: (Kafka's flags, Rivulet's)}. Rivulet's own configs are left out."""
    k, r = _broker_names(kafka), _broker_names(ours)
    return {n: (f, r.get(n)) for n, f in k.items() if r.get(n) != f and n not in BROKER_NAME_DIFFERENCES}


def golden_lines() -> dict[str, str]:
    return parse(GOLDEN.read_text())


def main(argv: list[str]) -> int:
    import tempfile

    from benchmarks.reference.kafka import TEST_JVM_FLAGS, KafkaReference
    from rivulet.testing import BrokerProcess

    tmp = Path(tempfile.mkdtemp(prefix="java-admin-probe-"))
    ref = KafkaReference(overrides=BROKER_CONFIGS, jvm_flags=TEST_JVM_FLAGS)
    ref.start()
    try:
        kafka = run_probe(ref.bootstrap, tmp / "kafka.err")
    finally:
        ref.stop()
        ref.cleanup()
    if "--record" in argv:
        GOLDEN.write_text("".join(f"{k} -> {v}\n" for k, v in kafka.items()))
        print(f"{len(kafka)} lines into {GOLDEN}")
        return 0
    b = BrokerProcess(BROKER_CONFIGS).start()
    try:
        ours = run_probe(b.bootstrap, tmp / "rivulet.err")
    finally:
        b.stop()
    same = 0
    for name in kafka.keys() | ours.keys():
        k, r = kafka.get(name), ours.get(name)
        if k == r:
            same += 1
            continue
        note = f"  (known: {KNOWN_DIFFERENCES[name]})" if name in KNOWN_DIFFERENCES else ""
        if name == "configs.broker.names" and k is not None and r is not None:
            print(f"{name}{note}\n  Kafka's configs listed otherwise: {broker_names_differences(k, r) or 'none'}")
            continue
        print(f"{name}{note}\n  kafka:   {k}\n  rivulet: {r}")
    print(f"{same} of {len(kafka.keys() | ours.keys())} steps the same; messages in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
