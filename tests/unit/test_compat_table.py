"""docs/compatibility.md's API table is the one the code's version ranges give."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_compat", ROOT / "tools" / "gen_compat.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_committed_api_table_is_current():
    gen = _generator()
    text = (ROOT / "docs" / "compatibility.md").read_text()
    assert gen.render(text) == text, "docs/compatibility.md's API table is stale: run python tools/gen_compat.py"


def test_every_supported_api_is_in_the_table():
    from rivulet.server.apis import SUPPORTED_VERSIONS
    gen = _generator()
    table = gen.table()
    rows = {int(cells[1]): cells[3] for cells in (line.split("|") for line in table.splitlines()[2:])}
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        assert rows[key].strip() == f"{lo}-{hi}", key
    for key, (lo, hi) in gen.CLUSTER_ONLY.items():
        assert rows[key].strip() == f"{lo}-{hi} (cluster mode)", key
