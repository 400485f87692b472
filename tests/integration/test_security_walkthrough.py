"""docs/security.md's "SASL_SSL and ACLs from zero", run as written in an empty directory: the
certificates, the broker, the administrator's topic and ACLs, and alice allowed to produce and
consume but refused the rest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rivulet.testing import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def walkthrough() -> str:
    text = (ROOT / "docs" / "security.md").read_text()
    block = text.split("<!-- walkthrough:start -->", 1)[1].split("<!-- walkthrough:end -->", 1)[0]
    return re.search(r"```sh\n(.*?)```", block, flags=re.S).group(1)


def test_walkthrough_runs(tmp_path):
    port = free_port()
    script = walkthrough().replace("9094", str(port))
    # Wait for the broker the script starts in the background before the next command.
    wait = f"for i in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.1; done\n"
    script = re.sub(r"^(rivulet broker .*&)\n", lambda m: m.group(1) + "\n" + wait, script, flags=re.M)
    # `rivulet` as an executable (not a shell function), so the background broker is the job
    # the trap kills rather than a subshell that would outlive it holding the output pipes.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rivulet").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rivulet "$@"\n')
    (bin_dir / "rivulet").chmod(0o755)
    prelude = "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\nset -e\n"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    (tmp_path / "work").mkdir()
    r = subprocess.run(["bash", "-c", prelude + script], cwd=tmp_path / "work", capture_output=True, text=True,
                       timeout=240, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "first order" in r.stdout, out[-4000:]
    assert "TOPIC_AUTHORIZATION_FAILED" in r.stderr and re.search(r"^refused$", r.stdout, flags=re.M), out[-4000:]
    assert "User:alice" in r.stdout and "orders-app" in r.stdout, out[-4000:]
