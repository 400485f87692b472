"""Real network partitions for the cluster tests: each broker in a network namespace of its
own, joined to this one by a veth pair, with packet filters (nftables) that cut it off.

The test, its clients and ZooKeeper stay in this (the root) namespace, which routes between
the brokers' namespaces. Broker ``i`` listens on 10.213.<i>.2; this namespace is 10.213.<i>.1
on its side of the pair, so a client's packets reach the broker from 10.213.<i>.1 and another
broker's from 10.213.<j>.2. ZooKeeper listens on ``ZK_HOST``. A cut is a table of drop rules
inside the broker's namespace: by address for the other brokers, by port for ZooKeeper (whose
address is on this side of the pair too), so clients keep reaching the broker throughout.
Everything is made here and removed again (deleting a namespace takes its veth pair and its
rules with it); root is needed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SUBNET = "10.213"
ZK_HOST = f"{SUBNET}.1.1"  # this namespace's side of broker 1's pair
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
CUT_TABLE = "rivulet_cut"


def _run(*args: str, stdin: str | None = None) -> None:
    r = subprocess.run(args, input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {r.stderr.strip()}")


def check_tools() -> str | None:
    """Why network partitions cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode != 0:
            return f"{tool} is missing (scripts/setup.sh --extras test installs it)"
    return None


class BrokerNetworks:
    """Namespaces for brokers 1..n; ``cut``/``heal`` partition one broker, ``cut_zookeeper``
    cuts every broker from ZooKeeper only."""

    def __init__(self, n: int) -> None:
        tag = os.getpid() % 100000
        self.ids = list(range(1, n + 1))
        self.ns = {i: f"rvp{tag}b{i}" for i in self.ids}
        self.host_ifs = {i: f"rvp{tag}h{i}" for i in self.ids}
        self._forward = IP_FORWARD.read_text().strip()
        self._made: list[int] = []
        try:
            IP_FORWARD.write_text("1")
            for i in self.ids:
                self._make(i, tag)
        except BaseException:
            self.close()
            raise

    def _make(self, i: int, tag: int) -> None:
        ns, host_if, ns_if = self.ns[i], self.host_ifs[i], f"rvp{tag}n{i}"
        _run("ip", "netns", "add", ns)
        self._made.append(i)
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _run("ip", "link", "set", ns_if, "netns", ns)
        _run("ip", "addr", "add", f"{self.gateway(i)}/24", "dev", host_if)
        _run("ip", "link", "set", host_if, "up")
        _run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", ns_if)
        _run("ip", "-n", ns, "link", "set", ns_if, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", ns, "route", "add", "default", "via", self.gateway(i))

    @staticmethod
    def address(i: int) -> str:
        return f"{SUBNET}.{i}.2"

    @staticmethod
    def gateway(i: int) -> str:
        return f"{SUBNET}.{i}.1"

    def prefix(self, i: int) -> list[str]:
        """What runs a command in broker ``i``'s namespace."""
        return ["ip", "netns", "exec", self.ns[i]]

    def _filter(self, i: int, rules_in: list[str], rules_out: list[str]) -> None:
        chains = "".join(
            f"  chain {name} {{\n    type filter hook {name} priority 0; policy accept;\n"
            + "".join(f"    {r}\n" for r in rules) + "  }\n"
            for name, rules in (("input", rules_in), ("output", rules_out)))
        _run("ip", "netns", "exec", self.ns[i], "nft", "-f", "-", stdin=f"table inet {CUT_TABLE} {{\n{chains}}}\n")

    def cut(self, i: int, zk_port: int) -> None:
        """Broker ``i`` loses ZooKeeper and the other brokers; its clients still reach it."""
        others = f"ip saddr {SUBNET}.0.0/16 ip saddr != {self.gateway(i)} drop"
        others_out = f"ip daddr {SUBNET}.0.0/16 ip daddr != {self.gateway(i)} drop"
        self._filter(i, [f"tcp sport {zk_port} drop", others], [f"tcp dport {zk_port} drop", others_out])

    def cut_zookeeper(self, zk_port: int) -> None:
        """Every broker loses ZooKeeper (an outage, as they see it); they still reach each other."""
        for i in self.ids:
            self._filter(i, [f"tcp sport {zk_port} drop"], [f"tcp dport {zk_port} drop"])

    def heal(self, i: int) -> None:
        _run("ip", "netns", "exec", self.ns[i], "nft", "delete", "table", "inet", CUT_TABLE)

    def close(self) -> None:
        for i in self._made:
            # The pair goes explicitly: a namespace outlives its name while a process is in it.
            subprocess.run(["ip", "link", "del", self.host_ifs[i]], capture_output=True)
            subprocess.run(["ip", "netns", "del", self.ns[i]], capture_output=True)
        self._made.clear()
        IP_FORWARD.write_text(self._forward)
