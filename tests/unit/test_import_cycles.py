"""Import cycles in the launcher, counting imports inside functions too (a lazy import hides a cycle
from Python, not from a reader; `if TYPE_CHECKING:` imports do not count): run/control.py and
launch/execute.py do not import each other, and no cycle exists at all. The recovery status that
`status` shows lives in run/recovery_status.py, below both run/control.py and recover/replace.py,
so the replacement may call the run commands while they never import it."""

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
        tree = ast.parse(p.read_text(), str(p))
        typing_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for n in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in mods:
                graph[m].add(node.module)
                graph[m] |= {f"{node.module}.{a.name}" for a in node.names} & mods.keys()
            elif isinstance(node, ast.Import):
                graph[m] |= {a.name for a in node.names} & mods.keys()
    for m in graph:
        graph[m].discard(package)  # `from launcher import x` names x, not the package's __init__
        graph[m].discard(m)
    return graph


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module: every module in one reaches
    every other through imports."""
    reach = {m: _reachable(graph, m) for m in graph}
    comps: list[set[str]] = []
    for m in sorted(graph):
        comp = {n for n in reach[m] if m in reach[n]} | {m}
        if len(comp) > 1 and comp not in comps:
            comps.append(comp)
    return comps


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for n in graph[todo.pop()]:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def test_the_checker_finds_a_cycle():
    assert _components({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [{"a", "b", "c"}]
    assert _components({"a": {"b"}, "b": set()}) == []
    assert _components({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [{"a", "b"}]


def test_control_and_execute_do_not_import_each_other():
    graph = _graph("launcher")
    assert "launcher.launch.execute" in graph["launcher.cli.up"]  # the graph sees real imports
    assert "launcher.run.control" in graph["launcher.launch.execute"]  # one way only:
    assert "launcher.launch.execute" not in graph["launcher.run.control"]


def test_recovery_status_is_below_control_and_replace():
    graph = _graph("launcher")
    assert "launcher.run.recovery_status" in graph["launcher.run.control"]
    assert "launcher.run.recovery_status" in graph["launcher.recover.replace"]
    assert "launcher.recover.replace" not in graph["launcher.run.control"]  # the cycle issue 25 removed
    assert "launcher.recover.watcher" not in graph["launcher.recover.replace"]


def test_launcher_has_no_import_cycle():
    assert _components(_graph("launcher")) == []


# docs/ARCHITECTURE.md, "The launcher's layers": a package imports only packages of its rank or below
# (entry.py, the console script, is the one module flat at the root: above cli/, which it guards)
RANK = {"core": 0, "host": 1, "config": 1, "ssh": 1, "run": 2, "providers": 2, "launch": 3, "recover": 4,
        "cli": 5, "dashboard": 5, "entry": 6}  # fmt: skip
UPWARD_OK = {("launcher.ssh.openssh", "launcher.run.registry")}  # the ControlMaster sockets live in home()


def _layer_breaches(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    def layer(m: str) -> str:
        return m.split(".")[1]

    return sorted(
        (m, d)
        for m, deps in graph.items()
        if m.count(".")
        for d in deps
        if d.count(".") and RANK[layer(d)] > RANK[layer(m)] and (m, d) not in UPWARD_OK
    )


def test_launcher_packages_import_only_downward():
    graph = _graph("launcher")
    # no module flat at the launcher root but entry.py, no package without a rank
    assert {m.split(".")[1] for m in graph if m.count(".")} == set(RANK)
    assert _layer_breaches(graph) == []
    assert _layer_breaches({"launcher.run.control": {"launcher.recover.replace"}}) == [
        ("launcher.run.control", "launcher.recover.replace")
    ]


def test_the_host_agent_imports_only_core_ports():
    """The agent runs on the host from the synced checkout: it must stay light (no rich, no fabric)."""
    graph = _graph("launcher")
    outside = {d for m, deps in graph.items() if m.startswith("launcher.host") for d in deps}
    assert {d for d in outside if not d.startswith("launcher.host")} == {"launcher.core.ports"}
