"""The checks .ci/run makes besides the tests: import cycles, duplicated lines, ruff's findings
against their baselines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import duplicates  # noqa: E402
import import_cycles  # noqa: E402
import lint  # noqa: E402


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    write(tmp_path, {
        "rivulet/__init__.py": "",
        "rivulet/a.py": "from rivulet import b\n",
        "rivulet/b.py": "def f():\n    from rivulet.a import x\n",
        "rivulet/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n",
        "rivulet/d.py": "import rivulet.c\n",
        "rivulet/e.py": "import rivulet.a\n",
    })
    graph = import_cycles.import_graph(import_cycles.module_names(tmp_path))
    assert import_cycles.cycles(graph) == [["rivulet.a", "rivulet.b"], ["rivulet.c", "rivulet.d"]]
    assert import_cycles.one_cycle(["rivulet.a", "rivulet.b"], graph) == ["rivulet.a", "rivulet.b", "rivulet.a"]


def test_only_a_cycle_outside_the_baseline_fails(tmp_path, monkeypatch, capsys):
    write(tmp_path, {"rivulet/__init__.py": "", "rivulet/a.py": "from rivulet import b\n",
                     "rivulet/b.py": "from rivulet import a\n"})
    monkeypatch.setattr(import_cycles, "ROOT", tmp_path)
    monkeypatch.setattr(import_cycles, "BASELINE", tmp_path / "baseline.json")
    assert import_cycles.main([]) == 1
    assert "import cycle (NEW): rivulet.a -> rivulet.b -> rivulet.a" in capsys.readouterr().out
    assert import_cycles.main(["--update"]) == 0
    assert import_cycles.main([]) == 0


def test_six_shared_lines_are_one_pair_and_five_are_none(tmp_path):
    body = "".join(f"    total = total + compute_{i}(value, other)\n" for i in range(8))
    write(tmp_path, {
        "rivulet/a.py": "def f():\n" + body,
        "rivulet/b.py": "def g():\n    # a comment does not count\n\n" + body + "    return total\n",
        "rivulet/c.py": "def h():\n" + body[: body.index("compute_5")].rpartition("\n")[0] + "\n",
        "rivulet/protocol/messages/gen.py": "def f():\n" + body,
    })
    pairs = duplicates.find_pairs(tmp_path)
    assert [(p.a, p.a_line, p.b, p.b_line, p.lines) for p in pairs] == [
        ("rivulet/a.py", 2, "rivulet/b.py", 4, 8)]


def test_new_ruff_findings_fail_and_baselined_ones_pass(monkeypatch, capsys, tmp_path):
    finding = {"filename": str(ROOT / "rivulet" / "x.py"), "code": "C901",
               "message": "`f` is too complex (30 > 25)", "location": {"row": 3, "column": 1}}
    monkeypatch.setattr(lint, "findings", lambda: [finding, {**finding, "message": "`g` is too complex (26 > 25)"}])
    monkeypatch.setattr(lint, "BASELINE", tmp_path / "baseline.json")
    (tmp_path / "baseline.json").write_text(json.dumps({"rivulet/x.py C901 `f` is too complex": 1}))
    assert lint.main([]) == 1
    out = capsys.readouterr().out
    assert "NEW rivulet/x.py:3:1: C901 `g` is too complex (26 > 25)" in out and "`f`" not in out.split("NEW")[1]


@pytest.mark.parametrize("check", [lint.main, import_cycles.main, duplicates.main])
def test_the_repository_passes_its_checks(check):
    assert check([]) == 0
