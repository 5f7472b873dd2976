"""The layout stays one way: no import cycle among the modules of tools/ and
mcp_server/, and no private name imported across modules.

Read with ast, so function-level imports (a lazy import that only dodges a
cycle is still a cycle of responsibilities) and ``TYPE_CHECKING`` imports count.
The runner, shipped to the device host, imports nothing of the server side.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO_ROOT

PACKAGES = ("tools", "mcp_server")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO_ROOT / pkg).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    """Module -> the project modules it imports; and every ``from X import _name`` across modules."""
    files = _modules()
    packages = {m for m, p in files.items() if p.name == "__init__.py"}

    def resolve(current: str, level: int, module: str | None) -> str:
        if level == 0:
            return module or ""
        base = current.split(".") if current in packages else current.split(".")[:-1]
        base = base[: len(base) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    edges: dict[str, set[str]] = {m: set() for m in files}
    private: list[str] = []
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                edges[module].update(a.name for a in node.names if a.name in files)
            elif isinstance(node, ast.ImportFrom):
                target = resolve(module, node.level, node.module)
                for alias in node.names:
                    sub = f"{target}.{alias.name}" if target else alias.name
                    if sub in files:
                        edges[module].add(sub)
                    elif target in files:
                        edges[module].add(target)
                        if alias.name.startswith("_") and not alias.name.startswith("__") and target != module:
                            private.append(f"{module} imports {alias.name} from {target}")
        edges[module].discard(module)
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_cycles_are_found_by_the_checker_itself() -> None:
    # the check can fail: a two-module loop and a three-module loop are both reported
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(cycles(edges)) == [["a", "b"], ["c", "d", "e"]]


def test_no_import_cycle_among_the_project_modules() -> None:
    edges, _private = import_graph()
    assert len(edges) > 50  # the graph was read (every module of tools/ and mcp_server/)
    assert cycles(edges) == [], "import cycles (keep imports one way; move the shared part down)"


def test_no_private_name_is_imported_across_modules() -> None:
    _edges, private = import_graph()
    assert private == [], "make the helper public (or move it where both sides can import it)"


def test_the_runner_imports_nothing_of_the_server_side() -> None:
    edges, _private = import_graph()
    runner = {m for m in edges if m == "tools.runner" or m.startswith("tools.runner.")}
    outside = {f"{m} -> {t}" for m in runner for t in edges[m] if t not in runner}
    assert outside == set()


def test_the_case_library_and_the_renderers_run_nothing() -> None:
    # cases/ is pure (schemas only); render/ reads models and files, never runs cases or records them
    edges, _private = import_graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for t in edges[todo.pop()]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return seen

    doers = {"tools.run_case_remote", "tools.record_result", "tools.plan_cases", "tools.narrow",
             "tools.remote.pool", "tools.artifacts.verify", "tools.artifacts.shrink", "tools.analysis.build"}
    for module in [m for m in edges if m.startswith(("tools.cases", "tools.render"))]:
        assert reach(module) & doers == set(), module
