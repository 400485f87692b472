"""A topic's table in an Iceberg REST catalog: Apache Iceberg's own REST catalog server (the
test fixture its project publishes on Maven Central as a runnable jar, run with Java) holds the
table, the broker writes the files into the warehouse the server names, and the rows read back
through the same REST catalog are the topic's records. Snapshot expiry goes through it too.
Skipped, with the reason printed, only when Java, Maven or Maven Central is unavailable."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra: pip install -e '.[iceberg]'")
from confluent_kafka import Producer  # noqa: E402

from rivulet.iceberg.catalog import CatalogSettings, open_catalog  # noqa: E402
from rivulet.testing import free_port  # noqa: E402
from tests.integration.test_iceberg import (  # noqa: E402
    _cli,
    _create,
    _ends,
    _table_rows,
    _topic_rows,
    _wait_for_table,
)

pytestmark = [pytest.mark.java, pytest.mark.integration]  # a JVM server: with the heavy tests

# The Iceberg release whose REST catalog server the test runs (on Java 17 or later).
ICEBERG_VERSION = "1.10.0"
# Its main jar is the runnable server (Main-Class RESTCatalogServer), with all it needs inside.
ARTIFACT = f"org.apache.iceberg:iceberg-open-api:{ICEBERG_VERSION}:jar"


def _fixture_jar() -> Path:
    """The REST catalog server's jar, fetched once by Maven into the cache beside Kafka's jars;
    RuntimeError says why it cannot be."""
    from benchmarks.reference.kafka import cache_root

    jar = cache_root() / f"iceberg-rest-fixture-{ICEBERG_VERSION}.jar"
    if jar.exists():
        return jar
    if shutil.which("java") is None or shutil.which("mvn") is None:
        raise RuntimeError("Java and Maven are needed to run Apache Iceberg's REST catalog")
    jar.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="iceberg-rest.partial-", dir=jar.parent))
    try:
        done = subprocess.run(["mvn", "-B", "-q", "-Dstyle.color=never", "dependency:copy", f"-Dartifact={ARTIFACT}",
                               f"-DoutputDirectory={scratch}", "-Dmdep.stripVersion=true"],
                              capture_output=True, text=True, timeout=900, cwd=scratch)
        got = list(scratch.glob("*.jar"))
        if done.returncode != 0 or not got:
            errors = [ln for ln in done.stdout.splitlines() if "[ERROR]" in ln]
            raise RuntimeError(f"cannot fetch {ARTIFACT} with Maven: {' '.join(errors[:2])[:1000]}")
        got[0].rename(jar)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return jar


@pytest.fixture
def rest_catalog(tmp_path) -> Iterator[str]:
    """The base URL of a REST catalog server of its own (its JDBC catalog in SQLite, its
    warehouse under tmp_path)."""
    try:
        jar = _fixture_jar()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        warnings.warn(f"REST catalog test skipped: {e}", pytest.PytestWarning, stacklevel=1)
        print(f"REST catalog test skipped: {e}", file=sys.stderr)
        pytest.skip(f"Apache Iceberg's REST catalog unavailable: {e}")
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "CATALOG_REST_PORT": str(port), "CATALOG_WAREHOUSE": f"file://{tmp_path}/wh",
           "CATALOG_URI": f"jdbc:sqlite:file:{tmp_path}/rest-catalog.db"}
    log = open(tmp_path / "rest.log", "w")
    server = subprocess.Popen(["java", "-Xmx256m", "-jar", str(jar)], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/v1/config", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, \
                f"the REST catalog did not start: {(tmp_path / 'rest.log').read_text()[-3000:]}"
            time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def test_a_topics_table_in_a_rest_catalog(rest_catalog, broker_factory) -> None:
    # The URL's scheme makes it a REST catalog (iceberg.catalog.type left empty); the broker
    # names no warehouse, so the server places the table.
    b = broker_factory({"num.partitions": "1", "iceberg.catalog.uri": rest_catalog})
    settings = CatalogSettings.resolve(rest_catalog, "", "")
    assert settings.type == "rest"
    _create(b.bootstrap, "orders", 2, {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "300",
                                       "iceberg.snapshot.max.age.ms": "1000"})
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    first: int | None = None
    for wave in range(3):
        for i in range(150):
            p.produce("orders", key=f"k{i % 7}".encode(), value=f"order-{wave}-{i}".encode(),
                      headers=[("wave", str(wave).encode())] if i % 5 == 0 else None)
        p.flush(30)
        _wait_for_table(settings, "orders", _ends(b.bootstrap, "orders", 2))
        if first is None:
            first = open_catalog(settings).load_table(("rivulet", "orders")).snapshots()[0].snapshot_id
        time.sleep(1.2)  # past the age and its slack (a tenth): the next commit expires what is older
    table = open_catalog(settings).load_table(("rivulet", "orders"))
    assert "/wh/" in table.location()  # where the server put it
    assert _table_rows(settings, "orders") == _topic_rows(b.bootstrap, "orders", 2)
    assert len(_table_rows(settings, "orders")) == 450
    # The REST server applied the expiry: the first wave's snapshot is gone, the age recorded.
    assert first not in [s.snapshot_id for s in table.snapshots()]
    assert table.properties["history.expire.max-snapshot-age-ms"] == "1000"
    # rivulet topics describe finds the REST catalog from the leader's settings.
    described = json.loads(_cli("topics", "describe", "--topic", "orders", "-b", b.bootstrap, "--format", "json"))
    assert described[0]["iceberg"] == {"table": "rivulet.orders", "snapshot_id": table.current_snapshot().snapshot_id,
                                       "lag": {"0": 0, "1": 0}, "lag_ms": {"0": 0, "1": 0},
                                       "next_offsets": {str(p): end for p, end in _ends(b.bootstrap, "orders", 2).items()}}
