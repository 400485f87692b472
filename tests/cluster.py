"""Brokers in ZooKeeper mode as real processes, for the cluster tests: start, kill -9, pause
(SIGSTOP) and resume them, and read what ZooKeeper and the brokers say of the cluster."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator

from kazoo.client import KazooClient

from rivulet.client.connection import BrokerConnection
from rivulet.protocol.messages.describe_cluster_request import DescribeClusterRequest
from rivulet.testing import BrokerProcess

SESSION_MS = "4000"  # a killed broker's znodes go after this
LOG_TAIL = 80  # lines of each broker's log printed when a cluster closes


def eventually(check: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what or check}")


def describe_cluster(broker: BrokerProcess) -> tuple[int, list[int]]:
    async def ask() -> tuple[int, list[int]]:
        conn = await BrokerConnection(broker.host, broker.port).connect(10)
        try:
            r = await conn.send(DescribeClusterRequest(include_cluster_authorized_operations=False))
        finally:
            await conn.close()
        return r.controller_id, sorted(b.broker_id for b in r.brokers)
    return asyncio.run(ask())


class ZkCluster:
    def __init__(self, connect: str) -> None:
        self.connect = connect
        self.brokers: dict[int, BrokerProcess] = {}
        self.zk = KazooClient(hosts=connect)
        self.zk.start(timeout=15)

    def start(self, broker_id: int | None, host: str = "127.0.0.1", prefix: list[str] | None = None,
              **overrides: str) -> BrokerProcess:
        """``host`` and ``prefix`` as BrokerProcess's (a broker in a network namespace)."""
        props = {"zookeeper.connect": self.connect, "zookeeper.session.timeout.ms": SESSION_MS,
                 "controlled.shutdown.retry.backoff.ms": "200", **overrides}
        if broker_id is not None:
            props["broker.id"] = str(broker_id)
        # At info: the tails close() prints are what a failed run leaves to read.
        args = ["--log-level", os.environ.get("RIVULET_LOG", "info")]
        b = BrokerProcess(props, host=host, prefix=prefix, args=args).start()
        self.brokers[broker_id if broker_id is not None else -len(self.brokers) - 1] = b
        return b

    def restart(self, broker_id: int) -> BrokerProcess:
        """Start a killed broker again at once, as a supervisor does: it waits itself for
        ZooKeeper to drop the old session's registration, and listens once registered."""
        return self.brokers[broker_id].start(timeout=60)

    def heal(self) -> None:
        """Every broker running and registered again: what a test that killed or paused one
        (and failed before restarting it) leaves for the next test of a shared cluster."""
        ids = [i for i in self.brokers if i >= 0]
        for i in ids:
            b = self.brokers[i]
            b.resume()
            if b.proc is None:  # killed
                self.restart(i)
        self.wait_for_brokers(ids)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def json(self, path: str) -> dict:
        return json.loads(self.zk.get(path)[0])

    def controller(self) -> int | None:
        try:
            return self.json("/controller")["brokerid"]
        except Exception:
            return None

    def partition_state(self, topic: str, partition: int) -> dict:
        """Leader, leader epoch and ISR as the controller last wrote them."""
        return self.json(f"/brokers/topics/{topic}/partitions/{partition}/state")

    def registered(self) -> list[int]:
        return sorted(int(i) for i in self.zk.get_children("/brokers/ids"))

    def wait_for_brokers(self, ids: list[int], timeout: float = 60) -> None:
        """Until ``ids`` are registered, there is a controller, and every running broker lists
        exactly them (topics created through any broker then see them all)."""
        eventually(lambda: self.registered() == sorted(ids) and self.controller() is not None, timeout,
                   f"brokers {ids} and a controller")
        for b in self.brokers.values():
            if b.proc is not None:
                eventually(lambda b=b: describe_cluster(b)[1] == sorted(ids), timeout,
                           f"broker on port {b.port} to list brokers {ids}")

    def close(self) -> None:
        # Printed always, shown by pytest only for a test that failed.
        for i, b in self.brokers.items():
            tail = b.output_tail().splitlines()[-LOG_TAIL:]
            print(f"----- broker {i} (port {b.port}), the last {len(tail)} lines of its log -----", *tail, sep="\n")
        for b in self.brokers.values():
            b.resume()
            b.stop(timeout=60)
            b.cleanup()
        self.zk.stop()
        self.zk.close()


@contextlib.contextmanager
def three_brokers(connect: str, **overrides: str) -> Iterator[ZkCluster]:
    """Brokers 1, 2 and 3 registered with a controller elected and known to each other; all
    stopped afterwards."""
    cluster = ZkCluster(connect)
    try:
        for i in (1, 2, 3):
            cluster.start(i, **overrides)
        cluster.wait_for_brokers([1, 2, 3])
        yield cluster
    finally:
        cluster.close()


def find_coordinator(broker: BrokerProcess, key: str, key_type: int = 0) -> int:
    """The node id of the coordinator of a group (key type 0) or transactional id (1); -1 when
    there is none yet."""
    from rivulet.client import core

    async def ask() -> int:
        conn = await BrokerConnection("127.0.0.1", broker.port).connect(10)
        try:
            resp = await conn.send(core.find_coordinator_request(key, key_type))
        finally:
            await conn.close()
        code, found, _ = core.read_find_coordinator(resp)
        return found.node_id if code == 0 and found is not None else -1
    return asyncio.run(ask())
