"""Shared fixtures.  Others may append fixtures at the end; do not change the
existing ones (tests across the suite rely on them)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# The project importable from the tests without an install.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# Every test owns its runner stage: the suite never uses the machine's default stage
# (``<tmp>/opdebug-runner-<uid>``, where an ``opdebug`` run outside the suite leases its
# devices), so no test waits on a device something outside the suite holds.  Under
# pytest-xdist (scripts/test.sh runs ``-n 2 --dist loadfile``) each worker gets a stage of
# its own, so one worker's local slots (cpu:0 ...) never make the other's tests wait; nor
# does another session of the suite (its own id).  The MCP servers and CLIs the tests
# start get it too: through the inherited environment, or ``server_env()`` where a test
# builds a server's environment from nothing.  It is removed when the session ends.
_SESSION = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8] or str(os.getpid())
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER") or "main"
_STAGE = os.path.join(tempfile.gettempdir(), f"opdebug-runner-{os.getuid()}-tests-{_SESSION}-{_XDIST_WORKER}")
os.environ["OPDEBUG_RUNNER_STAGE"] = _STAGE


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    shutil.rmtree(_STAGE, ignore_errors=True)


def private_stage() -> str:
    """A runner stage of one server's own, inside the session's: its device leases are its
    own, so it never waits for this test process's warm slots, another server's, or a run
    outside the suite."""
    os.makedirs(_STAGE, mode=0o700, exist_ok=True)
    return tempfile.mkdtemp(prefix="server-", dir=_STAGE)


def server_env(**extra: str) -> dict[str, str]:
    """The environment of an MCP server a test starts from nothing (the SDK's stdio client
    passes only what it is given): the repository importable and a private runner stage."""
    return {"PYTHONPATH": str(REPO_ROOT), "OPDEBUG_RUNNER_STAGE": private_stage(), **extra}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with every Slurm test file as one file: a file's tests
    run on one worker (its module-scoped warm slots and clusters start once) and
    two real Slurm clusters never run at once.  (xdist's ``loadgroup`` marks do
    not reach its scheduler under pytest 9: it renames ``item._nodeid``, which
    pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SlurmFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "tests/test_slurm*" if Path(path).name.startswith("test_slurm") else path

        def _assign_work_unit(self, node: Any) -> None:
            # the longest file left goes first: the run ends on short files, neither worker idles long
            longest = max(self.workqueue, key=lambda scope: SLOW_FILES_S.get(scope.split("/")[-1], 0))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return SlurmFilesTogether(config, log)


# The files that take longest, seconds on one of two busy CI workers (scripts/test.sh's
# --durations and per-file runs; only their order matters): each worker takes the longest
# file left, the rest follow in xdist's order (most tests first).
SLOW_FILES_S = {
    "test_slurm*": 300, "test_diagnosis.py": 250, "test_mcp_answers_due.py": 230, "test_backward.py": 200,
    "test_ssh_pool.py": 150, "test_mcp_economy.py": 140, "test_conditions_mcp.py": 130, "test_page.py": 130,
    "test_run_local.py": 120, "test_settlement_mcp.py": 115, "test_falsify.py": 100, "test_findings.py": 80,
    "test_hardening_ssh.py": 60, "test_settlement_kinds.py": 60, "test_mcp_surface.py": 50,
    "test_artifacts.py": 50, "test_judge.py": 50, "test_causes.py": 40, "test_consistency.py": 40,
}


# A tiny user module: the data for plan/record/analyze tests.  It is valid
# Python the runner could execute (candidate and reference of a scaled add),
# but the pure-Python tests only store it.
DEMO_MODULE = '''\
def cand(x, y, alpha=1.0):
    return x + alpha * y


def ref(x, y, alpha=1.0):
    return x + alpha * y
'''


def minimal_plan_request(
    run_id: str = "run-1",
    case_ids: tuple[str, ...] = ("eager-f32", "graph-f32"),
    *,
    modes: tuple[str, ...] | None = None,
    source_model_failure: str | None = None,
) -> dict[str, Any]:
    """A valid PlanRequest dict: a scaled add from a user module, one case per
    id (modes default to eager for the first id and graph for the rest)."""
    if modes is None:
        modes = tuple("eager" if i == 0 else "graph" for i in range(len(case_ids)))
    cases = [
        {
            "id": cid,
            "mode": mode,
            "inputs": [
                {"name": "x", "shape": [4, 8], "dtype": "float32"},
                {"name": "y", "shape": [4, 8], "dtype": "float32"},
            ],
            "attributes": {"alpha": 0.5},
            "seed": 7,
        }
        for cid, mode in zip(case_ids, modes)
    ]
    config: dict[str, Any] = {
        "run_id": run_id,
        "operator": {
            "name": "scaled_add",
            "candidate": "scaled_add_mod.cand",
            "reference": "scaled_add_mod.ref",
            "modules": ["scaled_add_mod.py"],
        },
        "tolerance": {"atol": 1e-5, "rtol": 1e-5},
    }
    if source_model_failure is not None:
        config["source_model_failure"] = source_model_failure
    return {"config": config, "cases": cases, "module_sources": {"scaled_add_mod.py": DEMO_MODULE}}


def passed_result(case_id: str) -> dict[str, Any]:
    return {
        "case_id": case_id,
        "status": "passed",
        "comparisons": [{"output": "out", "passed": True, "numel": 32, "max_abs": 0.0, "atol": 1e-5, "rtol": 1e-5}],
    }


def mismatch_result(case_id: str) -> dict[str, Any]:
    return {
        "case_id": case_id,
        "status": "numerical_mismatch",
        "comparisons": [{
            "output": "out", "passed": False, "numel": 32, "atol": 1e-5, "rtol": 1e-5,
            "max_abs": 0.25, "mismatch_count": 8, "mismatch_ratio": 0.25,
        }],
    }


@pytest.fixture
def evidence_root(tmp_path: Path) -> Path:
    """A fresh evidence root for one test."""
    root = tmp_path / "evidence"
    root.mkdir()
    return root


@pytest.fixture
def plan_request_dict() -> Callable[..., dict[str, Any]]:
    """Factory: ``plan_request_dict(run_id, case_ids, modes=..., source_model_failure=...)``."""
    return minimal_plan_request


@pytest.fixture
def result_dicts() -> dict[str, Callable[[str], dict[str, Any]]]:
    """Factories of valid CaseResult dicts: ``result_dicts['passed'](case_id)``,
    ``result_dicts['numerical_mismatch'](case_id)``."""
    return {"passed": passed_result, "numerical_mismatch": mismatch_result}


@pytest.fixture(scope="session")
def venv_python() -> str:
    """The Python running the tests (the project's venv)."""
    return sys.executable


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def subprocess_env(evidence_root: Path) -> dict[str, str]:
    """Environment for a subprocess of the project: the repo importable, the
    evidence root set, no inherited inventory."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OPDEBUG_EVIDENCE_ROOT"] = str(evidence_root)
    env.pop("OPDEBUG_INVENTORY", None)
    return env


# --------------------------------------------------------------------------
# Tests never write into the repository: every test gets a temporary evidence
# root in the environment (so a tool called with root=None, e.g.
# check_host("local"), never falls back to .vaws-local/ under the working
# directory), and the session fails if the repository gained a .vaws-local.
# --------------------------------------------------------------------------

_REPO_EVIDENCE = REPO_ROOT / ".vaws-local"


def _tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")} if path.is_dir() else set()


@pytest.fixture(autouse=True)
def _evidence_root_outside_the_repo(tmp_path_factory: pytest.TempPathFactory,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPDEBUG_EVIDENCE_ROOT", str(tmp_path_factory.mktemp("default-evidence-root")))


@pytest.fixture(autouse=True, scope="session")
def _repository_stays_clean() -> Any:
    before = _tree(_REPO_EVIDENCE)
    yield
    new = sorted(_tree(_REPO_EVIDENCE) - before)
    assert not new, f"the tests wrote into the repository ({_REPO_EVIDENCE}): {new[:10]}"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Keep each phase's report on the test item (``item.rep_call.failed``), so a
    fixture can tell that its test failed (e.g. to replace a shared warm worker)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="module")
def loop():
    """One event loop per test module, for tests that run cases on the shared warm
    local slot; the module's warm slots are closed with it."""
    import asyncio

    from tools.remote.pool import REGISTRY

    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(REGISTRY.close_all())
    loop.close()
