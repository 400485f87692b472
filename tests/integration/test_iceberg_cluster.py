"""Topics as Iceberg tables on three cluster-mode broker processes sharing one catalog: the
leader of a partition is killed with kill -9 while it translates, again and again; its
successor resumes from the table's own offsets, and the table ends up holding each committed
record once."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra: pip install -e '.[iceberg]'")
from collections import Counter  # noqa: E402

from confluent_kafka import Producer  # noqa: E402

from rivulet.iceberg.catalog import CatalogSettings  # noqa: E402
from tests.cluster import eventually, three_brokers  # noqa: E402
from tests.integration.test_iceberg import (  # noqa: E402
    _ends,
    _snapshots,
    _table_rows,
    _topic_rows,
    _wait_for_table,
)
from tests.integration.test_replication_faults import BROKER_CONFIG, create_topic  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def test_leader_kills_add_each_record_to_the_table_once(zk_connect, tmp_path) -> None:
    rng = random.Random(7)
    (tmp_path / "warehouse").mkdir()
    settings = CatalogSettings.resolve(f"sqlite:///{tmp_path / 'catalog.db'}", str(tmp_path / "warehouse"), "")
    shared = {"iceberg.catalog.uri": settings.uri, "iceberg.catalog.warehouse": settings.warehouse,
              "iceberg.translation.max.bytes": "65536"}
    with three_brokers(zk_connect, **BROKER_CONFIG, **shared) as cluster:
        create_topic(cluster, "trips", 2, **{"min.insync.replicas": "2", "iceberg.mode": "key_value",
                                             "iceberg.target.lag.ms": "100"})
        n = 0
        for _round in range(3):
            p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                          "linger.ms": 5, "batch.size": 4096})
            for _ in range(3000):
                p.produce("trips", value=f"trip-{n}-{'y' * 60}".encode(), key=str(n % 11).encode())
                n += 1
            assert p.flush(60) == 0
            seen = _snapshots(settings, "trips")
            eventually(lambda seen=seen: _snapshots(settings, "trips") > seen, 60, "a new snapshot")
            partition = rng.choice([0, 1])
            leader = cluster.partition_state("trips", partition)["leader"]
            cluster.brokers[leader].kill()
            eventually(lambda p=partition, old=leader: cluster.partition_state("trips", p)["leader"] not in (old, -1), 60,
                       "a new leader")
            cluster.restart(leader)
            eventually(lambda p=partition: sorted(cluster.partition_state("trips", p)["isr"]) == [1, 2, 3], 90,
                       "the restarted broker back in the ISR")
        ends = _ends(cluster.bootstrap, "trips", 2)
        assert sum(ends.values()) >= n
        try:
            _wait_for_table(settings, "trips", ends, timeout=120)
        except AssertionError:
            for i, b in cluster.brokers.items():
                print(f"--- broker {i}", b.output()[-4000:])
            raise
        table = _table_rows(settings, "trips")
        twice = [k for k, c in Counter((r[0], r[1]) for r in table).items() if c > 1]
        assert not twice, f"records in the table more than once: {twice[:10]}"
        assert table == _topic_rows(cluster.bootstrap, "trips", 2)
        assert len(table) == n
