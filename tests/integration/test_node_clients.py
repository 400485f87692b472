"""The Node.js clients: KafkaJS 2.2.4 (in CI) and, by hand, Confluent's librdkafka-based
@confluentinc/kafka-javascript 1.10.1 through its KafkaJS-compatible API, driven by
tests/node/probe.js as a KafkaJS user drives them (admin, producers with acks, codecs, headers,
idempotence and transactions, consumer groups with a rebalance, commits, seeks and pauses, the
errors of unknown topics and bad configs, and KafkaJS's SASL PLAIN and SCRAM logins, right and
wrong). Neither npm package ships its own test suite, so the probe stands in for one; it prints
what it printed against a Kafka 4.3.1 broker with the same settings, line for line
(tests/node/probe.kafka-4.3.1.txt, each line tagged with its part).

The packages are installed with npm from tests/node/package.json into
``~/.cache/rivulet/node-clients-<hash>/`` once. KafkaJS is JavaScript alone and installs in
seconds. Confluent's client is an optional dependency: its prebuilt binaries live on GitHub, so
npm builds its bundled librdkafka (linked against the system's zlib and zstd: g++, make,
zlib1g-dev and libzstd-dev), five minutes and more on two cores, too long for every CI run; it
is librdkafka, which the Python suites cover. Its part runs with

    RIVULET_NODE_PARTS=all python -m pytest tests/integration/test_node_clients.py
"""

from __future__ import annotations

import difflib
import hashlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from benchmarks.reference.kafka import cache_root
from rivulet.testing import BrokerProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.node]

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
PROBE = NODE_DIR / "probe.js"
GOLDEN = NODE_DIR / "probe.kafka-4.3.1.txt"
# Kafka 4.3.1 ran with these too (benchmarks/reference/kafka.py's single node, whose other
# settings are Rivulet's test broker's defaults): the probe's unknown topics must stay unknown,
# and a KIP-848 member hears of its assignment within a heartbeat interval (5 s by default).
# A SASL_PLAINTEXT listener takes PLAIN (users in its JAAS line) and SCRAM (users made below).
SETTINGS = {"auto.create.topics.enable": "false", "num.partitions": "1",
            "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";',
            **{f"listener.name.sasl_plaintext.scram-sha-{bits}.sasl.jaas.config":
               "org.apache.kafka.common.security.scram.ScramLoginModule required;" for bits in (256, 512)}}
SCRAM_USER = ("alice", "alice-secret")  # tests/node/probe.js's
# The probe's parts run here: "all" adds Confluent's client (see above).
PARTS = os.environ.get("RIVULET_NODE_PARTS", "kafkajs,kafkajs-sasl")
WITH_CONFLUENT = PARTS == "all" or "confluent" in PARTS.split(",")


def _cache_dir() -> Path:
    digest = hashlib.sha256((NODE_DIR / "package.json").read_bytes()).hexdigest()[:12]
    return cache_root() / f"node-clients-{digest}{'-confluent' if WITH_CONFLUENT else ''}"


def node_modules() -> Path:
    """tests/node/package.json's packages (the optional one only for its part), installed once
    per version of that file."""
    cache = _cache_dir()
    modules = cache / "node_modules"
    if (cache / ".complete").exists():
        return modules
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:  # as franz-go's suite without Go; scripts/setup.sh installs both
        pytest.skip(f"{' and '.join(missing)} not installed, so the Node.js clients cannot run")
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    shutil.copy(NODE_DIR / "package.json", cache / "package.json")
    # Dynamic linking: librdkafka's configure then uses the system's libraries instead of
    # downloading their sources (from hosts a CI machine may not reach).
    env = dict(os.environ, CKJS_LINKING="dynamic")
    omit = [] if WITH_CONFLUENT else ["--omit=optional"]
    try:
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--no-save", *omit], cwd=cache, env=env,
                           capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"npm install took over {e.timeout} s") from e
    if r.returncode != 0 and "ENOTFOUND" in r.stdout + r.stderr and not modules.exists():
        pytest.skip(f"the npm registry is unreachable: {r.stderr[-500:]}")  # as Maven Central for the Java tests
    assert r.returncode == 0, f"npm install failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    (cache / ".complete").touch()
    return modules


def add_scram_user(bootstrap: str) -> None:
    """SCRAM_USER's SCRAM-SHA-256 and -512 credentials, made as they were on Kafka 4.3.1 (which
    takes one change of a user a request)."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upsert = UserScramCredentialUpsertion(SCRAM_USER[0], ScramCredentialInfo(mechanism, 4096), SCRAM_USER[1].encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)


@pytest.mark.timeout(2400)  # with Confluent's client, the first run builds librdkafka
def test_node_clients_answer_as_kafka(tmp_path):
    modules = node_modules()
    run = uuid.uuid4().hex[:8]
    b = BrokerProcess(SETTINGS)
    sasl_port = free_port()
    b.overrides["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    with b:
        add_scram_user(b.bootstrap)
        p = subprocess.run(["node", str(PROBE), b.bootstrap, run, PARTS, f"127.0.0.1:{sasl_port}"],
                           env=dict(os.environ, NODE_PATH=str(modules)), capture_output=True, text=True, timeout=300)
    (tmp_path / "probe.log").write_text(p.stderr)
    got = p.stdout.splitlines()
    expected = [line for line in GOLDEN.read_text().splitlines()
                if PARTS == "all" or line.split("]", 1)[0].lstrip("[") in PARTS.split(",")]
    assert got == expected, "\n".join(difflib.unified_diff(expected, got, "kafka-4.3.1", "rivulet", lineterm="")) \
        + f"\n{p.stderr[-3000:]}"
    assert p.returncode == 0, p.stderr[-3000:]
