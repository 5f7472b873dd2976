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


# -- short functions, and the case's life defined once --------------------------

RUNNER_MAX_LINES = 80
TOOLS_MAX_LINES = 100
# Functions of tools/ allowed past TOOLS_MAX_LINES: declarative tables and parsers, and (marked) the
# long ones of modules being restructured elsewhere - each entry is a debt with its reason.
# path::function -> why it may stay long (only declarative tables and parsers)
LONG_ALLOWED: dict[str, str] = {
    "tools/cli/__init__.py::build_parser": "argparse's declarative table of the CLI's subcommands and options",
}
# The phase table's module: the one home of the decisions below.
PHASES_MODULE = "tools/runner/phases.py"


def _functions(root: str):
    """(path relative to the repo, function name, lines) of every function under ``root``."""
    for path in sorted((REPO_ROOT / root).rglob("*.py")):
        rel = path.relative_to(REPO_ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield rel, node.name, node.end_lineno - node.lineno + 1


def test_no_runner_function_is_over_80_lines() -> None:
    long = [f"{p}::{n} ({k} lines)" for p, n, k in _functions("tools/runner") if k > RUNNER_MAX_LINES]
    assert long == []


def test_no_function_of_tools_is_over_100_lines_but_the_listed_ones() -> None:
    found = {f"{p}::{n}": k for p, n, k in _functions("tools") if k > TOOLS_MAX_LINES}
    assert sorted(set(found) - set(LONG_ALLOWED)) == []
    assert sorted(set(LONG_ALLOWED) - set(found)) == [], "shortened: remove it from LONG_ALLOWED"


def test_the_line_counter_sees_a_long_function() -> None:
    # the checks above can fail: an 81-line function is counted as such
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    node = ast.parse(f"def f():\n{body}\n").body[0]
    assert node.end_lineno - node.lineno + 1 == 81


def _definitions(tree: ast.AST) -> list[str]:
    """What a module defines of the case's shared decisions, by kind."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for kind in ("killed_from_outside", "harness_error", "compile_budget", "import_budget", "file_tail"):
                if kind in node.name:
                    found.append(kind)
        elif isinstance(node, ast.Name) and node.id == "EXTERNAL_SIGNALS" and isinstance(node.ctx, ast.Store):
            found.append("EXTERNAL_SIGNALS")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            strings = {e.value for e in node.elts if isinstance(e, ast.Constant)}
            if {"SIGTERM", "SIGHUP"} <= strings:
                found.append("a list of external signals")
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"where", "type", "message"} <= keys:
                found.append("a harness_error body")
        elif isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value in (
                "compile_timeout_s", "import_timeout_s") for a in node.args):
            found.append("a budget read from a config or case")
        elif isinstance(node, ast.Attribute) and node.attr == "SEEK_END":
            found.append("a file tail")
    return found


def test_the_case_lifecycle_decisions_are_defined_once() -> None:
    """EXTERNAL_SIGNALS, the kill decision, the compile (and import) budget rule, the harness-error
    builder and the file tail live in the phase table's module; nowhere else in tools/ or mcp_server/."""
    elsewhere = {}
    for module, path in _modules().items():
        rel = path.relative_to(REPO_ROOT).as_posix()
        found = _definitions(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if rel == PHASES_MODULE:
            assert {"EXTERNAL_SIGNALS", "killed_from_outside", "harness_error", "compile_budget",
                    "a budget read from a config or case", "a file tail"} <= set(found)
        elif found:
            elsewhere[rel] = sorted(set(found))
    assert elsewhere == {}


def test_the_definitions_check_finds_a_second_copy() -> None:
    copy = ('EXTERNAL_SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")\n'
            'def _killed_from_outside(event):\n    return event.get("signal") in EXTERNAL_SIGNALS\n'
            'def _harness(where, exc):\n    return {"where": where, "type": "X", "message": str(exc)}\n'
            'def budget(case, config):\n    return case.get("compile_timeout_s") or config.get("compile_timeout_s")\n')
    assert set(_definitions(ast.parse(copy))) == {"EXTERNAL_SIGNALS", "a list of external signals",
                                                  "killed_from_outside", "a harness_error body",
                                                  "a budget read from a config or case"}


def attributes_set_outside_init(source: str, class_name: str) -> dict[str, str]:
    """Attribute -> the method of ``class_name`` that first sets ``self.<attribute>`` outside ``__init__``
    (assignments, augmented or annotated, tuple targets included)."""
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    in_init: set[str] = set()
    elsewhere: dict[str, str] = {}
    for fn in cls.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for target in targets:
                for e in ast.walk(target):
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                        if fn.name == "__init__":
                            in_init.add(e.attr)
                        else:
                            elsewhere.setdefault(e.attr, fn.name)
    return {a: where for a, where in elsewhere.items() if a not in in_init}


def test_the_case_run_keeps_no_state_a_phase_leaves_behind() -> None:
    """Each phase of the runner's CaseRun returns a typed result the next phase takes as an argument:
    every attribute is set in ``__init__``, none first appears in a phase."""
    source = (REPO_ROOT / "tools" / "runner" / "execute.py").read_text(encoding="utf-8")
    assert attributes_set_outside_init(source, "CaseRun") == {}
    planted = "class CaseRun:\n    def __init__(self):\n        self.a = 1\n\n    def phase(self):\n" \
              "        self.a, self.out = 2, 3\n        self.a += 1\n"
    assert attributes_set_outside_init(planted, "CaseRun") == {"out": "phase"}


# --------------------------------------------------------------------------
# One settlement: a finding is called exact in one place
# --------------------------------------------------------------------------

SETTLEMENT = "tools/analysis/settlement.py"
# other meanings of the word: the runner's "exact" is a comparison mode (bit for bit), a capture's origin
# says a replay is made of the exact captured tensors - neither is a finding's claim
OTHER_MEANINGS = ("tools/runner/", "tools/capture/")


def exact_assignments(tree: ast.AST) -> list[int]:
    """Lines that set ``exact`` to anything but a constant False: an attribute assigned (``f.exact = ...``, in a
    tuple too), a keyword (``Finding(exact=...)``), a dict key (``model_copy(update={"exact": ...})``)."""

    def false(v: ast.AST | None) -> bool:  # False from construction, or the settlement's own run-level answer
        read = isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "run_exact"
        return read or (isinstance(v, ast.Constant) and v.value is False)

    def refuted(v: ast.AST | None) -> bool:  # a fate other than exact may be set anywhere (predict.py's)
        return isinstance(v, ast.Constant) and v.value in ("refuted", "surviving")

    def targets(t: ast.AST) -> list[ast.AST]:
        return [x for e in t.elts for x in targets(e)] if isinstance(t, (ast.Tuple, ast.List)) else [t]

    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            tgts = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            for tgt in tgts:
                values = value.elts if isinstance(value, ast.Tuple) and isinstance(tgt, ast.Tuple) else None
                for i, t in enumerate(targets(tgt)):
                    v = values[i] if values is not None and i < len(values) else value
                    if isinstance(t, ast.Attribute) and t.attr == "exact" and not false(v):
                        out.append(node.lineno)
                    if isinstance(t, ast.Attribute) and t.attr == "fate" and not refuted(v):  # a stated condition's
                        out.append(node.lineno)
                    if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "exact":
                        out.append(node.lineno)
        elif isinstance(node, ast.Call):
            out += [node.lineno for k in node.keywords if k.arg == "exact" and not false(k.value)]
            out += [
                node.lineno
                for k in node.keywords
                if k.arg == "fate" and isinstance(k.value, ast.Constant) and k.value.value == "exact"
            ]
            if isinstance(node.func, ast.Name) and node.func.id == "setattr" and len(node.args) > 1:
                if isinstance(node.args[1], ast.Constant) and node.args[1].value == "exact":
                    out.append(node.lineno)
            for k in node.keywords:  # a pydantic copy: model_copy(update={"exact": ...})
                if k.arg == "update" and isinstance(k.value, ast.Dict):
                    out += [
                        node.lineno
                        for key, v in zip(k.value.keys, k.value.values, strict=True)
                        if isinstance(key, ast.Constant) and key.value == "exact" and not false(v)
                    ]
    return out


def test_exactness_is_decided_in_settlement_alone() -> None:
    assert (REPO_ROOT / SETTLEMENT).is_file()
    offenders = []
    for path in _modules().values():
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel == SETTLEMENT or rel.startswith(OTHER_MEANINGS):
            continue
        offenders += [f"{rel}:{n}" for n in exact_assignments(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, f"exact is set outside {SETTLEMENT}: {offenders}"
    settled = exact_assignments(ast.parse((REPO_ROOT / SETTLEMENT).read_text(encoding="utf-8")))
    assert settled  # the one place does set it


def test_the_exactness_scan_finds_every_way_of_setting_it() -> None:
    for src in ("f.exact = True", "f.necessary_only, f.exact = True, ok", "Finding(exact=not why)",
                "g(update={'exact': x})", "setattr(f, 'exact', 1)", "d['exact'] = y", "a.fate = 'exact'",
                "ConditionAnswer(fate='exact')"):
        assert exact_assignments(ast.parse(src)), src
    for src in ("f.exact = False", "Finding(exact=False)", "R(exact=run_exact(a))", "f.necessary_only, f.exact = True, False", "x = f.exact"):
        assert not exact_assignments(ast.parse(src)), src
