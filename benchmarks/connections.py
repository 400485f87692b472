"""What idle connections cost the broker: RSS with N idle connections open, and after they close.

    python -m benchmarks.connections --connections 10000

Each connection has sent one ApiVersions request and had its answer, then stays idle. The
load generator is this process (plain sockets); docs/performance.md records the results.
"""

from __future__ import annotations

import argparse
import resource
import socket
import time

from rivulet.testing import BrokerProcess


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def api_versions(sock: socket.socket) -> None:
    body = b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x03raw"
    sock.sendall(len(body).to_bytes(4, "big") + body)
    size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
    sock.recv(size, socket.MSG_WAITALL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=10_000)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.connections + 1024), hard))
    with BrokerProcess() as broker:
        pid = broker.proc.pid
        first = socket.create_connection(("127.0.0.1", broker.port))
        api_versions(first)
        time.sleep(0.5)
        base = rss_kib(pid)
        socks = []
        for _ in range(args.connections):
            s = socket.create_connection(("127.0.0.1", broker.port))
            api_versions(s)
            socks.append(s)
        time.sleep(1.0)
        opened = rss_kib(pid)
        for s in socks:
            s.close()
        time.sleep(2.0)
        api_versions(first)
        closed = rss_kib(pid)
        print(f"| idle connections | {args.connections:,} |")
        print(f"| broker RSS before | {base / 1024:.1f} MiB |")
        print(f"| broker RSS with them open | {opened / 1024:.1f} MiB |")
        print(f"| per idle connection | {(opened - base) / args.connections:.1f} KiB |")
        print(f"| broker RSS after they closed | {closed / 1024:.1f} MiB |")


if __name__ == "__main__":
    main()
