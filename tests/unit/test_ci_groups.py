""".ci/run relies on pytest-xdist's loadgroup keeping each xdist_group on one worker (module
fixtures such as a three-broker cluster are made once; the fault modules run one at a time).
pytest 9.2 with pytest-xdist 3.8 silently stopped grouping: this checks the installed pair."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

CONFTEST = textwrap.dedent("""
    import pytest

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(items):
        for item in items:
            item.add_marker(pytest.mark.xdist_group("together" if item.path.stem != "test_c" else "c"))
""")
MODULE = textwrap.dedent("""
    import os

    def record(name):
        with open(os.environ["WHERE"], "a") as f:
            f.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")
""")


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for mod, n in (("test_a", 4), ("test_b", 4), ("test_c", 2)):
        (tmp_path / f"{mod}.py").write_text(MODULE + "".join(
            f"\ndef test_{i}():\n    record('{mod}')\n" for i in range(n)))
    where = tmp_path / "where.txt"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3",
                          "--dist", "loadgroup", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "WHERE": str(where)})
    assert run.returncode == 0, run.stdout + run.stderr
    lines = where.read_text().splitlines()
    assert len(lines) == 10
    workers: dict[str, set[str]] = {}
    for line in lines:
        mod, worker = line.split()
        workers.setdefault(mod, set()).add(worker)
    assert len(workers["test_a"] | workers["test_b"]) == 1, workers
