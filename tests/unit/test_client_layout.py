"""The client's parts import one way: no circle among rivulet/client's modules, counting the
imports made inside functions and under TYPE_CHECKING, which hide a circle from Python but not
from a reader."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rivulet.client

pytestmark = pytest.mark.fast

ROOT = Path(rivulet.client.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ["rivulet", "client", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` imports, wherever the import statement stands."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def _graph() -> dict[str, set[str]]:
    known = _modules()
    # A package's __init__ re-exporting its modules is not a circle with them.
    return {m: {t for t in _imports(m, p, known) if not m.startswith(t + ".")} for m, p in known.items()}


def test_the_client_has_no_import_circles() -> None:
    graph = _graph()
    assert len(graph) > 25
    assert _cycles(graph) == []


def test_the_parts_stand_on_the_shared_core_only() -> None:
    """producer/, consumer/, share/ and admin/ import the shared core, never one another; the
    group membership knows the consumer only through its GroupConsumer interface."""
    graph = _graph()
    parts = ("producer", "consumer", "share", "admin")
    for m, deps in graph.items():
        mine = next((p for p in parts if m.startswith(f"rivulet.client.{p}.")), None)
        if mine is None:
            continue
        others = {d for d in deps for p in parts if p != mine and d.startswith(f"rivulet.client.{p}")}
        assert not others, (m, others)
    for m in ("rivulet.client.consumer.coordinator", "rivulet.client.consumer.membership"):
        assert "rivulet.client.consumer.consumer" not in graph[m]
    assert "rivulet.client.producer.producer" not in graph["rivulet.client.producer.transactions"]
