"""The open-file limit: raising it and what it holds in partitions."""

from __future__ import annotations

import os
import resource

import pytest

from rivulet.server import fd_limit
from rivulet.server.fd_limit import FdLimit, describe, partitions_within, raise_open_file_limit
from rivulet.storage import LogConfig
from rivulet.storage.log import Log
from tests.unit.test_zero_copy import open_fds

pytestmark = pytest.mark.fast


def test_partitions_within_keeps_a_reserve():
    assert partitions_within(1024) == 1024 - 256
    assert partitions_within(100_000) == 100_000 - 10_000
    assert partitions_within(100) == 0


def test_describe_names_the_limit_and_the_room():
    line = describe(FdLimit(4096, 4096, 1024), 12)
    assert "open-file limit 4096 (raised from 1024)" in line
    assert f"about {partitions_within(4096)} partitions" in line and "(12 now)" in line


def test_raise_to_the_hard_limit(monkeypatch):
    calls = []
    monkeypatch.setattr(resource, "getrlimit", lambda r: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", lambda r, v: calls.append(v))
    assert raise_open_file_limit() == FdLimit(4096, 4096, 1024)
    assert calls == [(4096, 4096)]


def test_a_refused_raise_keeps_the_limit(monkeypatch):
    def refuse(r, v):
        raise ValueError("not allowed")
    monkeypatch.setattr(resource, "getrlimit", lambda r: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert raise_open_file_limit() == FdLimit(1024, 4096, None)


def test_already_at_the_hard_limit(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda r: (4096, 4096))
    assert raise_open_file_limit().raised_from is None


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd to count descriptors")
def test_an_idle_partition_holds_one_descriptor(tmp_path):
    assert open_fds(tmp_path) == 0
    logs = [Log(str(tmp_path / f"t-{i}"), LogConfig()) for i in range(20)]
    assert open_fds(tmp_path) == 20  # the active segment's .log; the indexes hold none
    assert all(os.path.exists(os.path.join(lg.dir, "00000000000000000000.index")) for lg in logs)
    for lg in logs:
        lg.close()
    assert open_fds(tmp_path) == 0
    assert fd_limit.FDS_PER_PARTITION == 1
