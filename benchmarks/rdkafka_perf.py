"""librdkafka's ``rdkafka_performance`` as a native load generator: build it, run it, read it.

A Python loop around confluent-kafka tops out at a few hundred thousand small records a
second, so against a fast broker it measures itself. ``rdkafka_performance`` is librdkafka's
own C load generator (its ``examples/`` directory); it is built here from the upstream source
tarball that Debian ships (``.orig.tar.gz``, fetched from Debian's pool and checked against a
pinned SHA-256), into the cache next to Kafka's jars. Nothing built is ever committed.

    python -m benchmarks.rdkafka_perf build     # idempotent; installs the build deps with apt-get
    python -m benchmarks.rdkafka_perf path      # prints the binary's path (exit 1 if not built)

Debian has no 2.16 (the librdkafka of the installed confluent-kafka); 2.14.2 (sid) is the
newest it has. The build uses the bundled nanopb/cJSON, as upstream does (Debian's three
patches only switch those to the system copies), and leaves out libcurl and GSSAPI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from benchmarks.reference.kafka import cache_root, locked  # noqa: E402

RDKAFKA_VERSION = "2.14.2"
_ORIG = f"librdkafka_{RDKAFKA_VERSION}.orig.tar.gz"
ORIG_URL = f"http://deb.debian.org/debian/pool/main/libr/librdkafka/{_ORIG}"
# From the Checksums-Sha256 of librdkafka_2.14.2-1.dsc (Debian sid), itself covered by the
# signed Sources index; pinning it makes the download safe over plain HTTP.
ORIG_SHA256 = "4d53568c13717b167d12c7b2a0fe12aeb5d6bfe02de53df5b68f86d870a81b33"
BUILD_DEPS = ("build-essential", "pkg-config", "python3", "zlib1g-dev", "libssl-dev", "libsasl2-dev",
              "libzstd-dev", "liblz4-dev")
CONFIGURE = ("--no-download", "--disable-curl", "--disable-gssapi")
_MARKER = "build.json"


class RdkafkaPerfError(RuntimeError):
    """The binary is missing, failed, or printed no summary we understand."""


# ---------------------------------------------------------------------------- building


def home(version: str = RDKAFKA_VERSION) -> Path:
    return cache_root() / f"rdkafka-{version}"


def binary(version: str = RDKAFKA_VERSION) -> Path:
    return home(version) / "rdkafka_performance"


def is_built(version: str = RDKAFKA_VERSION) -> bool:
    return binary(version).is_file() and (home(version) / _MARKER).is_file()


def require_binary(version: str = RDKAFKA_VERSION) -> Path:
    if not is_built(version):
        raise RdkafkaPerfError(f"rdkafka_performance {version} is not built; run: python -m benchmarks.rdkafka_perf build")
    return binary(version)


def _missing_packages(packages: Sequence[str]) -> list[str]:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Status}\n", *packages],
                         capture_output=True, text=True).stdout
    installed = {ln.split()[0] for ln in out.splitlines() if ln.endswith(" installed")}
    return [p for p in packages if p not in installed]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build(*, jobs: int | None = None, log=print) -> Path:
    """Download, verify, configure and make; returns the binary. Idempotent, and concurrent
    callers take turns on a lock file."""
    if is_built():
        return binary()
    dest = home()
    with locked(dest.with_name(dest.name + ".lock")):
        if is_built():
            return binary()
        missing = _missing_packages(BUILD_DEPS)
        if missing:
            log(f"installing build dependencies: {' '.join(missing)}")
            subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *missing], check=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="rdkafka-build-") as tmp:
            tarball = Path(tmp) / _ORIG
            log(f"fetching {ORIG_URL}")
            with urllib.request.urlopen(ORIG_URL, timeout=120) as r, open(tarball, "wb") as f:
                shutil.copyfileobj(r, f)
            digest = _sha256(tarball)
            if digest != ORIG_SHA256:
                raise RdkafkaPerfError(f"{_ORIG}: SHA-256 {digest}, expected {ORIG_SHA256}")
            with tarfile.open(tarball) as tf:
                tf.extractall(tmp, filter="data")
            src = next(p for p in Path(tmp).iterdir() if p.is_dir())
            jobs = jobs or os.cpu_count() or 1
            for cmd in (["./configure", *CONFIGURE], ["make", f"-j{jobs}", "-C", "src", "librdkafka.a"],
                        ["make", "-C", "examples", "rdkafka_performance"]):
                log("$ " + " ".join(cmd))
                proc = subprocess.run(cmd, cwd=src, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RdkafkaPerfError(f"{' '.join(cmd)} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
            dest.mkdir(parents=True, exist_ok=True)
            tmp_bin = dest / "rdkafka_performance.tmp"
            shutil.copy2(src / "examples" / "rdkafka_performance", tmp_bin)
            os.replace(tmp_bin, binary())
        info = {"version": RDKAFKA_VERSION, "source": ORIG_URL, "sha256": ORIG_SHA256,
                "configure": list(CONFIGURE), "seconds": round(time.monotonic() - started, 1),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (dest / _MARKER).write_text(json.dumps(info, indent=1))
    return binary()


# ---------------------------------------------------------------------------- reading its output


@dataclass(frozen=True)
class Summary:
    """One run's summary line, as the tool measured it (MB is 10^6 bytes)."""

    records: int
    bytes: int
    ms: int  # producer: first send to last delivery report; consumer: from the first record
    records_per_sec: float
    mb_per_sec: float
    failed: int = 0  # producer: delivery reports with an error


_PRODUCED = re.compile(
    r"^% (\d+) messages produced \((\d+) bytes\), (\d+) delivered \(offset -?\d+, (\d+) failed\) "
    r"in (\d+)ms: (\d+) msgs/s and ([\d.]+) MB/s", re.M)
_CONSUMED = re.compile(r"^% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms: (\d+) msgs/s \(([\d.]+) MB/s\)", re.M)


def parse_producer(text: str) -> Summary:
    """The last producer summary: figures count delivered records only."""
    matches = list(_PRODUCED.finditer(text))
    if not matches:
        raise RdkafkaPerfError("no producer summary in the output")
    _sent, _bytes, delivered, failed, ms, rps, mbps = matches[-1].groups()
    size = int(_bytes) // max(1, int(_sent))
    return Summary(int(delivered), int(delivered) * size, int(ms), float(rps), float(mbps), int(failed))


def parse_consumer(text: str) -> Summary:
    """The last consumer summary (the tool also prints one before the first record)."""
    matches = list(_CONSUMED.finditer(text))
    if not matches:
        raise RdkafkaPerfError("no consumer summary in the output")
    n, b, ms, rps, mbps = matches[-1].groups()
    return Summary(int(n), int(b), int(ms), float(rps), float(mbps))


# ---------------------------------------------------------------------------- running it


def config_args(props: Mapping[str, str]) -> list[str]:
    """librdkafka client properties as ``-X key=value`` arguments (for ``extra``)."""
    return [a for k, v in props.items() for a in ("-X", f"{k}={v}")]


def producer_args(bootstrap: str, topic: str, count: int, size: int, acks: str, *,
                  compression: str | None = None, extra: Sequence[str] = ()) -> list[str]:
    """Keyless records over all the topic's partitions (librdkafka's partitioner), the batching
    of issue 17's table: ``linger.ms=10``, ``batch.size=1000000``; idempotence stays off."""
    args = ["-P", "-t", topic, "-b", bootstrap, "-s", str(size), "-c", str(count),
            "-a", "-1" if acks == "all" else acks, "-X", "linger.ms=10", "-X", "batch.size=1000000"]
    if compression:
        args += ["-z", compression]
    return [*args, *extra]


def consumer_args(bootstrap: str, topic: str, partitions: int | Sequence[int], count: int, *,
                  extra: Sequence[str] = (), tail: int | None = None) -> list[str]:
    """Assigned (no group), every partition (a count: 0 to n - 1; or these) from the beginning
    (or its last ``tail`` records), until ``count`` records."""
    start = "beginning" if tail is None else f"-{tail}"
    args = ["-C", "-t", topic, "-b", bootstrap, "-o", start, "-c", str(count)]
    for p in range(partitions) if isinstance(partitions, int) else partitions:
        args += ["-p", str(p)]
    return [*args, *extra]


def run_many(argvs: Sequence[Sequence[str]], *, timeout: float = 600.0) -> list[str]:
    """Run one ``rdkafka_performance`` per argv, all at once; their stdouts, in order. Raises
    with the output when any fails or outlives ``timeout``."""
    exe = str(require_binary())
    procs = []
    outs: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="rdkafka-perf-") as tmp:
        # Files, not pipes: several children, no reader threads, nothing blocks on a full pipe.
        files = []
        try:
            for i, argv in enumerate(argvs):
                out, err = open(Path(tmp) / f"{i}.out", "w+"), open(Path(tmp) / f"{i}.err", "w+")
                files += [out, err]
                procs.append(subprocess.Popen([exe, *argv], stdout=out, stderr=err, stdin=subprocess.DEVNULL))
            deadline = time.monotonic() + timeout
            for p in procs:
                try:
                    p.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            for i, p in enumerate(procs):
                if p.poll() is None:
                    p.kill()
                    p.wait()
                files[2 * i].seek(0)
                files[2 * i + 1].seek(0)
                outs.append((files[2 * i].read(), files[2 * i + 1].read()))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for f in files:
                f.close()
    for p, argv, (out, err) in zip(procs, argvs, outs):
        if p.returncode != 0:
            raise RdkafkaPerfError(f"rdkafka_performance {' '.join(argv)} exited {p.returncode}:\n"
                                   f"{out[-3000:]}\n{err[-3000:]}")
    return [out for out, _ in outs]


def produce(bootstrap: str, topic: str, count: int, size: int, acks: str, *, compression: str | None = None,
            extra: Sequence[str] = (), timeout: float = 600.0) -> Summary:
    """``extra``: more arguments, such as ``-X security.protocol=SSL``."""
    out = run_many([producer_args(bootstrap, topic, count, size, acks, compression=compression, extra=extra)],
                   timeout=timeout)[0]
    s = parse_producer(out)
    if s.records != count or s.failed:
        raise RdkafkaPerfError(f"{s.records} of {count} records delivered, {s.failed} failed:\n{out[-3000:]}")
    return s


def consume(bootstrap: str, topic: str, partitions: int, count: int, *, extra: Sequence[str] = (),
            timeout: float = 600.0) -> Summary:
    out = run_many([consumer_args(bootstrap, topic, partitions, count, extra=extra)], timeout=timeout)[0]
    s = parse_consumer(out)
    if s.records < count:
        raise RdkafkaPerfError(f"consumed {s.records} of {count} records:\n{out[-3000:]}")
    return s


# ---------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.rdkafka_perf", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help=f"build rdkafka_performance {RDKAFKA_VERSION} into {home()}")
    b.add_argument("-j", "--jobs", type=int, default=None)
    sub.add_parser("path", help="print the binary's path")
    args = ap.parse_args(argv)
    if args.cmd == "path":
        if not is_built():
            print("not built; run: python -m benchmarks.rdkafka_perf build", file=sys.stderr)
            return 1
        print(binary())
        return 0
    was = is_built()
    try:
        path = build(jobs=args.jobs, log=lambda m: print(m, file=sys.stderr, flush=True))
    except (RdkafkaPerfError, OSError, subprocess.CalledProcessError) as e:
        print(f"build failed: {e}", file=sys.stderr)
        return 1
    info = json.loads((home() / _MARKER).read_text())
    state = "already built" if was else f"built in {info['seconds']}s"
    print(f"rdkafka_performance {RDKAFKA_VERSION}: {state}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
