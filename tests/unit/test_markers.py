"""Every test carries `fast` or `integration`: tests/conftest.py marks each by where it lives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _collect(marks: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m", marks, "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr
    return proc.stdout


def test_no_test_is_left_without_fast_or_integration():
    # Before the hook, tests/unit/test_schema_sets.py's four tests carried neither.
    out = _collect("not fast and not integration")
    assert "no tests collected" in out, out[-3000:]

