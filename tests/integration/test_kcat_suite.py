"""kcat's own test suite (``tests/`` of kcat 1.7.1's source, Debian's orig tarball) run with
Debian's kcat against a Rivulet broker, set up as the suite's README asks: auto topic creation
and at least 3 partitions a topic.

The scripts are run as its Makefile runs them, each from ``tests/`` with ``$BROKERS`` set,
calling kcat as ``../kcat``: the one file written into the unpacked tree is that link to the
installed kcat. Their stdin is a pseudo-terminal, as from the terminal they are written for:
kcat picks producer mode when stdin is not a terminal, so without one 0001's consumers would
produce instead. The tarball is fetched from deb.debian.org on first use, checked against the
SHA-256 in Debian's .dsc and cached in ``~/.cache/rivulet/``; it is unpacked afresh for every
run (the run skips, saying why, when the mirror cannot be reached).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import urllib.request
from pathlib import Path

import pytest

from benchmarks.reference.kafka import cache_root, locked
from rivulet.testing import BrokerProcess

pytestmark = [pytest.mark.integration]

KCAT_VERSION = "1.7.1"
_ORIG = f"kafkacat_{KCAT_VERSION}.orig.tar.gz"  # Debian's source package is still named kafkacat
ORIG_URL = f"http://deb.debian.org/debian/pool/main/k/kafkacat/{_ORIG}"
# From the Checksums-Sha256 of kafkacat_1.7.1-2.dsc (bookworm), covered by the signed Sources
# index; pinning it makes the plain-HTTP download safe.
ORIG_SHA256 = "4b957b7ffc728a88e163bc4e581aa371e56c7e74c8b84b1fe0583d0302ef8d58"
# Every script of the suite with what it ends in, on Apache Kafka 4.3.1 as on Rivulet (checked
# 2026-11-30). 0003 needs a schema registry and a kcat built with Avro, which Debian's is not.
EXPECTED = {"0000-unit.sh": "passed", "0001-exit_eof.sh": "passed", "0002-delim.sh": "passed",
            "0003-avro.sh": "skipped"}


def _tarball() -> Path:
    dest = cache_root() / f"kcat-{KCAT_VERSION}"
    tarball = dest / _ORIG
    with locked(dest.with_name(dest.name + ".lock")):
        if tarball.exists():
            return tarball
        dest.mkdir(parents=True, exist_ok=True)
        part = tarball.with_name(_ORIG + ".part")
        try:
            with urllib.request.urlopen(ORIG_URL, timeout=60) as r, open(part, "wb") as f:
                shutil.copyfileobj(r, f)
        except OSError as e:
            pytest.skip(f"cannot download {ORIG_URL}: {e}")
        with open(part, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        assert digest == ORIG_SHA256, f"{_ORIG}: SHA-256 {digest}, expected {ORIG_SHA256}"
        os.replace(part, tarball)
    return tarball


def _unpack(tmp_path: Path, kcat: str) -> Path:
    with tarfile.open(_tarball()) as tf:
        tf.extractall(tmp_path, filter="data")
    src = tmp_path / f"kafkacat-{KCAT_VERSION}"
    (src / "kcat").symlink_to(kcat)
    return src / "tests"


def _run_script(tests: Path, script: str, bootstrap: str) -> tuple[str, str]:
    """(passed|failed|skipped, its output) of one script, stdin a pseudo-terminal."""
    leader, follower = os.openpty()
    try:
        r = subprocess.run(["bash", f"./{script}"], cwd=tests, stdin=follower, capture_output=True, text=True,
                           errors="replace", timeout=180, env={**os.environ, "BROKERS": bootstrap})
    finally:
        os.close(follower)
        os.close(leader)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        return "failed", out
    return ("skipped" if "TEST SKIPPED" in out else "passed"), out


@pytest.mark.timeout(600)
def test_kcat_own_suite(tmp_path):
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.fail("kcat is not installed (.ci/run installs it with apt-get)")
    if shutil.which("jq") is None:
        pytest.fail("jq is not installed (0002 reads kcat's JSON with it; .ci/run installs it with apt-get)")
    tests = _unpack(tmp_path, kcat)
    scripts = sorted(p.name for p in tests.glob("0[0-9][0-9][0-9]*.sh"))  # as its Makefile's TESTS
    assert scripts == sorted(EXPECTED), scripts
    with BrokerProcess({"num.partitions": "3", "auto.create.topics.enable": "true"}) as broker:
        outcomes = {s: _run_script(tests, s, broker.bootstrap) for s in scripts}
        for s, (state, out) in sorted(outcomes.items()):
            if state == "failed":
                # Once more, alone (each run makes topics and groups of its own): a pass then is
                # printed as flaky, with the first failure's output.
                again = _run_script(tests, s, broker.bootstrap)
                if again[0] == "passed":
                    print(f"kcat {s} failed, then passed when run again (flaky):\n{out[-3000:]}")
                    outcomes[s] = again
    for s, (state, _) in sorted(outcomes.items()):
        print(f"kcat {KCAT_VERSION} tests/{s} against Rivulet: {state}")
    failed = {s: out[-3000:] for s, (state, out) in outcomes.items() if state != EXPECTED[s]}
    assert not failed, failed
