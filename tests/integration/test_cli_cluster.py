"""`rivulet cluster up|status|down`: a local ZooKeeper and brokers as background processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rivulet.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def rivulet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rivulet", *args], capture_output=True, text=True, timeout=timeout)


def test_up_status_down(tmp_path):
    d = str(tmp_path / "c")
    r = rivulet("cluster", "up", "--brokers", "2", "--dir", d, "--port", "0", "--zookeeper-port", "0",
                "--metrics-port", "0", "--registry-port", "0", "--override", "min.insync.replicas=2",
                "--log-format", "json")
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "ZooKeeper and 2 broker(s) started" in r.stdout
        state = json.loads((tmp_path / "c" / "cluster.json").read_text())
        assert [b["name"] for b in state["brokers"]] == ["broker-1", "broker-2"]
        # Each broker serves the schema registry; a registration through either is seen by both.
        registries = [f"http://127.0.0.1:{b['registry_port']}" for b in state["brokers"]]
        assert f"schema registry: {' '.join(registries)}" in r.stdout
        import httpx
        deadline = time.monotonic() + 60
        while True:
            try:
                reg = httpx.post(f"{registries[1]}/subjects/up-value/versions", json={"schema": '"string"'},
                                 timeout=30)
                if reg.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "no schema registry answered"
            time.sleep(0.2)
        assert reg.json() == {"id": 1}
        eventually_seen = time.monotonic() + 30
        while httpx.get(f"{registries[0]}/subjects").json() != ["up-value"]:
            assert time.monotonic() < eventually_seen
            time.sleep(0.1)
        lines = rivulet("cluster", "status", "--dir", d).stdout.splitlines()
        assert lines[0].split() == ["NODE", "ADDRESS", "PID", "STATE", "LOG"]
        states = {ln.split()[0]: ln.split()[-2] for ln in lines[1:]}
        assert states["zookeeper"] == "up"
        assert sorted([states["broker-1"], states["broker-2"]]) == ["controller", "registered"]
        assert str(tmp_path / "c" / "broker-1" / "broker.log") in "\n".join(lines)
        as_json = json.loads(rivulet("cluster", "status", "--dir", d, "--format", "json").stdout)
        assert {n["node"]: n["state"] for n in as_json}["zookeeper"] == "up"
        # --log-format json: the brokers' log lines (after the start-up banner) are JSON objects.
        logged = [json.loads(line) for line in (tmp_path / "c" / "broker-1" / "broker.log").read_text().splitlines()
                  if line.startswith("{")]
        assert any(r["logger"] == "rivulet.server.broker" for r in logged)
        again = rivulet("cluster", "up", "--dir", d, "--port", "0", "--zookeeper-port", "0")
        assert again.returncode != 0 and "already running" in again.stderr

        bootstrap = ",".join(f"127.0.0.1:{b['port']}" for b in state["brokers"])
        from rivulet.admin import ConfigResource, ResourceType
        configs_admin = AdminClient({"bootstrap.servers": bootstrap})
        configs_admin.list_topics(timeout=10)  # learns the brokers' ids
        res = configs_admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
        assert next(iter(res.values())).result(30)["min.insync.replicas"].value == "2"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert admin.create_topics([NewTopic("t", 2, 2)])["t"].result(30) is None
        info = rivulet("cluster", "info", "-b", bootstrap)
        assert info.returncode == 0 and "1 " in info.stdout and "2" in info.stdout
        # Every broker serves its metrics; exactly one says it is the active controller.
        assert "Prometheus metrics: http://127.0.0.1:" in r.stdout
        active = 0.0
        for b in state["brokers"]:
            with urllib.request.urlopen(f"http://127.0.0.1:{b['metrics_port']}/metrics", timeout=30) as page:
                families = {f.name: f for f in text_string_to_metric_families(page.read().decode())}
            active += families["kafka_controller_kafkacontroller_activecontrollercount"].samples[0].value
        assert active == 1
    finally:
        r = rivulet("cluster", "down", "--dir", d)
    assert r.returncode == 0, r.stderr
    assert "stopping zookeeper" in r.stdout and not (tmp_path / "c" / "cluster.json").exists()
    gone = rivulet("cluster", "status", "--dir", d)
    assert gone.returncode != 0 and "no cluster" in gone.stderr


def test_up_that_fails_leaves_nothing_running_and_a_taken_default_registry_port_is_skipped(tmp_path):
    """A broker that cannot bind stops `up` with its log's end, and what had started (ZooKeeper,
    the other broker) is stopped too; a registry already on 8081 only moves the cluster's
    registries to free ports."""
    import socket

    from rivulet.cli.local_cluster import alive
    from rivulet.testing import free_port

    d = tmp_path / "c"
    for _ in range(5):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        first = taken.getsockname()[1] - 1  # broker-2's port is the taken one
        r = rivulet("cluster", "up", "--brokers", "2", "--dir", str(d), "--port", str(first), "--zookeeper-port", "0",
                    "--metrics-port", "0", "--registry-port", "-1")
        if "broker-1 exited during start-up" not in r.stderr:
            break
        taken.close()  # broker-1's port, which nothing here holds, was taken by another test: again
    try:
        assert r.returncode == 1, r.stdout + r.stderr
        assert "broker-2 exited during start-up" in r.stderr and "address already in use" in r.stderr
        assert "stopping zookeeper" in r.stdout
        pids = [int(ln.split("pid ")[1].rstrip(")")) for ln in r.stdout.splitlines() if "(pid " in ln]
        assert len(pids) == 3 and not any(alive(p) for p in pids)
        assert not (d / "cluster.json").exists()
    finally:
        taken.close()
    registry = socket.socket()
    try:
        registry.bind(("127.0.0.1", 8081))
        registry.listen()
    except OSError:
        registry.close()
        registry = None  # someone else holds 8081 already: the same case
    try:
        r = rivulet("cluster", "up", "--brokers", "1", "--dir", str(d), "--port", str(free_port()),
                    "--zookeeper-port", "0", "--metrics-port", "0")
        try:
            assert r.returncode == 0, r.stdout + r.stderr
            state = json.loads((d / "cluster.json").read_text())
            port = state["brokers"][0]["registry_port"]  # the test set-up installs the registry extra
            assert port not in (0, 8081) and f"schema registry: http://127.0.0.1:{port}" in r.stdout
        finally:
            assert rivulet("cluster", "down", "--dir", str(d)).returncode == 0
    finally:
        if registry is not None:
            registry.close()
