"""A native transactional load generator: ``benchmarks/go/txnperf``, franz-go (Go), committing a
transaction every N records.

Why not the others: Kafka's ProducerPerformance takes ``--transaction-duration-ms`` (commits by
time, not by count), so "every 100 records" would depend on the broker's speed; a Python loop
around confluent-kafka (``benchmarks.transactions``) spends a core of its own on every record at
100 B, so against a fast broker it would measure itself. franz-go is the Go client the tests
already build (``tests/integration/test_franz_go_suite.py``), its module is in the local cache, and
its transactional producer is a few lines: begin, produce N, flush, commit. The program times
from the first BeginTransaction to the last commit's answer; InitProducerId and one aborted
warm-up transaction come first, outside the clock.

    python -m benchmarks.txn_perf build      # idempotent; into the cache next to Kafka's jars
    python -m benchmarks.txn_perf run --bootstrap 127.0.0.1:9092 --topic t --records 100000 --per-txn 100

The binary is cached per content of the sources (``main.go``, ``go.mod``, ``go.sum``), so an edit
rebuilds it; nothing built is committed. The build reads the modules from Go's module cache
(``GOFLAGS=-mod=mod``) and verifies them against the committed go.sum.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from benchmarks.reference.kafka import cache_root, locked  # noqa: E402

SOURCE = Path(__file__).resolve().parent / "go" / "txnperf"
_SOURCES = ("main.go", "go.mod", "go.sum")
# The franz-go the program is built with: go.mod's requirement, its one pin.
FRANZ_GO_VERSION = re.search(r"^require github.com/twmb/franz-go (\S+)$", (SOURCE / "go.mod").read_text(), re.M)[1]
_SUMMARY = re.compile(r"^records=(\d+) transactions=(\d+) seconds=([0-9.]+)$", re.M)


class TxnPerfError(RuntimeError):
    """Go is missing, the build failed, or the run failed or printed no summary."""


@dataclass(frozen=True)
class Summary:
    records: int
    transactions: int
    seconds: float

    @property
    def records_per_sec(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def mb_per_sec(self, size: int) -> float:
        return self.records_per_sec * size / 1e6


def parse_summary(text: str) -> Summary:
    """The program's one summary line, from its stdout."""
    m = _SUMMARY.search(text)
    if m is None:
        raise TxnPerfError(f"no txnperf summary in: {text[-2000:]!r}")
    return Summary(int(m[1]), int(m[2]), float(m[3]))


def _digest() -> str:
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update(name.encode() + b"\0" + (SOURCE / name).read_bytes())
    return h.hexdigest()[:12]


def binary() -> Path:
    return cache_root() / f"txnperf-{_digest()}" / "txnperf"


def build() -> Path:
    """Build the binary unless this version of the sources already is; returns its path."""
    out = binary()
    if out.is_file():
        return out
    if shutil.which("go") is None:
        raise TxnPerfError("go not found on PATH; the transaction rows need Go to build their load generator")
    with locked(out.parent.with_name(out.parent.name + ".lock")):
        if out.is_file():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".partial")
        env = dict(os.environ, GOFLAGS="-mod=mod -buildvcs=false")
        r = subprocess.run(["go", "build", "-o", str(partial), "."], cwd=SOURCE, env=env, capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            raise TxnPerfError(f"go build failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        partial.rename(out)
    return out


def args_for(bootstrap: str, topic: str, records: int, per_txn: int, size: int, transactional_id: str) -> list[str]:
    return [str(binary()), "-brokers", bootstrap, "-topic", topic, "-records", str(records),
            "-per-txn", str(per_txn), "-size", str(size), "-transactional-id", transactional_id]


def run(bootstrap: str, topic: str, records: int, per_txn: int, size: int, transactional_id: str, *,
        timeout: float = 1800.0) -> Summary:
    """Run to completion (building first if needed); raises TxnPerfError when it fails."""
    build()
    r = subprocess.run(args_for(bootstrap, topic, records, per_txn, size, transactional_id), capture_output=True,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise TxnPerfError(f"txnperf exited with {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return parse_summary(r.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.txn_perf", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build the binary into the cache (idempotent) and print its path")
    r = sub.add_parser("run", help="one run against a broker")
    r.add_argument("--bootstrap", required=True)
    r.add_argument("--topic", required=True)
    r.add_argument("--records", type=int, default=100_000)
    r.add_argument("--per-txn", type=int, default=100)
    r.add_argument("--size", type=int, default=100)
    r.add_argument("--transactional-id", default="txnperf")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        print(build())
        return 0
    s = run(args.bootstrap, args.topic, args.records, args.per_txn, args.size, args.transactional_id)
    print(f"{s.records:,} records in {s.transactions:,} transactions, {s.seconds:.2f} s: "
          f"{s.records_per_sec:,.0f} records/s, {s.mb_per_sec(args.size):.1f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
