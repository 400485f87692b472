"""A broker process started with properties that break one of Kafka's rules between them
stops at once: one line naming the rule, exit status 2, as the other configuration errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rivulet.testing import free_port

pytestmark = pytest.mark.integration


def test_a_broker_with_queued_bytes_below_the_request_size_refuses_to_start(tmp_path):
    (tmp_path / "server.properties").write_text(
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}\nlog.dirs={tmp_path / 'data'}\n"
        "socket.request.max.bytes=1048576\nqueued.max.request.bytes=65536\n")
    r = subprocess.run([sys.executable, "-m", "rivulet", "broker", "--config",
                        str(tmp_path / "server.properties")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "rivulet broker: queued.max.request.bytes must be larger or equal to socket.request.max.bytes"], r.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was written
