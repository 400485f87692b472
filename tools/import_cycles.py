"""Fail on a new import cycle among rivulet/'s modules.

The graph holds every import in a module: those inside functions (they hide a cycle, they do
not break it) and those under ``if TYPE_CHECKING:`` (a type-only cycle still ties the modules
together) too.
Cycles known today are listed in tools/import_cycles_baseline.json, one strongly connected
group of modules each: a group that is, or lies within, a listed one passes; anything else
fails the run. Shrink the baseline as cycles go.

Usage: python tools/import_cycles.py            (print the cycles, exit 1 on a new one)
       python tools/import_cycles.py --update   (write the baseline from today's cycles)
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "rivulet"
BASELINE = Path(__file__).with_name("import_cycles_baseline.json")


def module_names(root: Path | None = None) -> dict[str, Path]:
    root = root or ROOT
    out: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module itself, or the nearest enclosing one that exists."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = mod.split(".")
                    base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                # `from a import b` is module a.b when that exists, else a name in a.
                targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]
            for t in targets:
                if not t.startswith(PACKAGE):
                    continue
                r = _resolve(t, modules)
                if r is not None and r != mod:
                    graph[mod].add(r)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    counter = 0

    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    group.append(m)
                    if m == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def one_cycle(group: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from the group's first module back to itself, within the group."""
    members = set(group)
    start = group[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for m in frontier:
            for n in sorted(graph[m] & members):
                if n == start:
                    return paths[m] + [start]
                if n not in paths:
                    paths[n] = paths[m] + [n]
                    nxt_frontier.append(n)
        frontier = nxt_frontier
    return group


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="write the baseline from today's cycles")
    args = ap.parse_args(argv)
    graph = import_graph(module_names())
    found = cycles(graph)
    if args.update:
        BASELINE.write_text("[\n" + ",\n".join(json.dumps(g) for g in found) + "\n]\n")
        print(f"import cycles: baseline written, {len(found)} group(s)")
        return 0
    known = [set(g) for g in json.loads(BASELINE.read_text())] if BASELINE.exists() else []
    new = [g for g in found if not any(set(g) <= k for k in known)]
    for g in found:
        tag = "NEW" if g in new else "baselined"
        print(f"import cycle ({tag}): {' -> '.join(one_cycle(g, graph))}  [{len(g)} modules: {', '.join(g)}]")
    gone = [sorted(k) for k in known if not any(set(g) & k for g in found)]
    if gone:
        print(f"import cycles: {len(gone)} baselined group(s) gone; tighten with --update")
    print(f"import cycles: {len(found)} group(s) in {PACKAGE}/, {len(new)} new, {len(known)} baselined")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
