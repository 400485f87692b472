"""The local ZooKeeper launcher that `rivulet cluster up` and the cluster tests use."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from rivulet.controller.zk_server import ZooKeeperServer

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def test_chroot_fixture_gives_an_empty_namespace(zk_connect):
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        assert zk.get_children("/") == []
        zk.create("/brokers/ids/1", b"x", makepath=True, ephemeral=True)
        assert zk.get("/brokers/ids/1")[0] == b"x"
    finally:
        zk.stop()
        zk.close()


def test_a_second_server_starts_and_stops_beside_the_sessions_one(zookeeper, tmp_path):
    with ZooKeeperServer(data_dir=str(tmp_path / "zk")) as second:
        assert second.port != zookeeper.port
        assert second.is_ok()
        proc = second.proc
    assert proc.poll() is not None
    assert zookeeper.is_ok()
