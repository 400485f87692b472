"""A topic's table in a PostgreSQL catalog: the broker's SQL catalog on a PostgreSQL server of
the test's own (initdb and pg_ctl, Debian's postgresql package), the files in a shared
warehouse directory; the rows read back through the same catalog are the topic's records.
Skipped, with the reason printed, only when PostgreSQL's server programs or the psycopg2
driver (pip install psycopg2-binary) are not installed."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra: pip install -e '.[iceberg]'")
from confluent_kafka import Producer  # noqa: E402

from rivulet.iceberg.catalog import CatalogSettings  # noqa: E402
from rivulet.testing import free_port  # noqa: E402
from tests.integration.test_iceberg import _create, _ends, _table_rows, _topic_rows, _wait_for_table  # noqa: E402

pytestmark = pytest.mark.integration


def _server_program(name: str) -> str | None:
    """PostgreSQL's ``initdb`` or ``pg_ctl``: on the PATH, else in Debian's versioned directory."""
    if found := shutil.which(name):
        return found
    versioned = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return versioned[-1] if versioned else None


def _unavailable() -> str | None:
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "the psycopg2 driver is not installed (pip install psycopg2-binary)"
    if _server_program("initdb") is None or _server_program("pg_ctl") is None:
        return "PostgreSQL's server programs are not installed (Debian's postgresql package)"
    return None


@pytest.fixture
def postgres() -> Iterator[str]:
    """An SQLAlchemy URI of a fresh PostgreSQL database, its server on a free port and a
    socket in a directory of its own (run as the postgres user when the tests run as root, which
    PostgreSQL refuses)."""
    if reason := _unavailable():
        warnings.warn(f"PostgreSQL catalog test skipped: {reason}", pytest.PytestWarning, stacklevel=1)
        print(f"PostgreSQL catalog test skipped: {reason}", file=sys.stderr)
        pytest.skip(reason)
    # Outside tmp_path, whose parents only root may enter.
    home = Path(tempfile.mkdtemp(prefix="rivulet-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(home, "postgres")
    port = free_port()

    def run(*args: str) -> None:
        done = subprocess.run([*as_user, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{args[0]} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}"

    run(str(_server_program("initdb")), "-D", str(home / "data"), "-A", "trust", "-U", "rivulet")
    pg_ctl = str(_server_program("pg_ctl"))
    run(pg_ctl, "-D", str(home / "data"), "-l", str(home / "log"), "-w", "-o",
        f"-p {port} -k {home} -c listen_addresses=''", "start")
    try:
        yield f"postgresql+psycopg2://rivulet@/postgres?host={home}&port={port}"
    finally:
        run(pg_ctl, "-D", str(home / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(home, ignore_errors=True)


def test_a_topics_table_in_a_postgresql_catalog(postgres, broker_factory, tmp_path) -> None:
    warehouse = str(tmp_path / "warehouse")
    b = broker_factory({"num.partitions": "1", "iceberg.catalog.uri": postgres,
                        "iceberg.catalog.warehouse": warehouse})
    settings = CatalogSettings.resolve(postgres, warehouse, "")
    assert settings.type == "sql"
    _create(b.bootstrap, "orders", 3, {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "300"})
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(600):
        p.produce("orders", key=f"k{i % 9}".encode(), value=f"order-{i}".encode(),
                  headers=[("n", str(i).encode())] if i % 7 == 0 else None)
    p.flush(30)
    _wait_for_table(settings, "orders", _ends(b.bootstrap, "orders", 3))
    rows = _table_rows(settings, "orders")
    assert len(rows) == 600 and rows == _topic_rows(b.bootstrap, "orders", 3)
