"""The launcher's modules import each other without cycles, counting imports inside functions too
(a lazy import hides a cycle from Python, not from a reader): control.py and launch/execute.py once
imported each other."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _graph(package: str) -> dict[str, set[str]]:
    mods = {}
    for p in (ROOT / package).rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        mods[name] = p
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in mods:
                graph[m].add(node.module)
                graph[m] |= {f"{node.module}.{a.name}" for a in node.names} & mods.keys()
            elif isinstance(node, ast.Import):
                graph[m] |= {a.name for a in node.names} & mods.keys()
    for m in graph:
        graph[m].discard(package)  # `from launcher import x` names x, not the package's __init__
        graph[m].discard(m)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_checker_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_launcher_has_no_import_cycle():
    graph = _graph("launcher")
    assert "launcher.launch.execute" in graph["launcher.cli.up"]  # the graph sees real imports
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
