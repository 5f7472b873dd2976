"""A regression test for the operator's own repository.

``DIR/test_<operator>_regression.py`` is a pytest file parametrised over the
run's failing cases (and, on request, their passing one-axis neighbours):
each case is the standalone reproducer exported beside it (repro.py), run in
a child process, and must pass.  The whole module skips cleanly where torch,
or the recorded device (npu: torch_npu; cuda), is missing.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ..cases.axes import differing_axes
from ..errors import ToolError
from ..evidence import RunStore, unknown_cases
from ..schemas import RegressionExport
from .common import GENERATED_MARK, failing_ids, write_text_new
from .repro import device_kind, export_repro

TEMPLATE = '''"""Regression test for {operator} from run {run_id!r} ({mark}).

Each case below failed on {device} ({statuses}); once the operator is fixed
every case passes.  Each case is the standalone reproducer beside this file
(stdlib + torch), run in a child process so a crash fails the test instead of
killing pytest.  Set OPDEBUG_CANDIDATE=package.module.fixed_op to test another
candidate than the one recorded.
"""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICE = {device!r}
# case id -> what the recorded run saw
CASES = {cases!r}

torch = pytest.importorskip("torch")


def _device_missing():
    if DEVICE == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError:
            return "torch_npu is not installed"
        return None if torch.npu.is_available() else "no NPU is visible"
    if DEVICE == "cuda":
        return None if torch.cuda.is_available() else "no CUDA device is visible"
    return None


_MISSING = _device_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason="device %s: %s" % (DEVICE, _MISSING))


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_case_passes(case_id):
    cmd = [sys.executable, os.path.join(HERE, case_id + ".py"), "--json"]
    if os.environ.get("OPDEBUG_CANDIDATE"):
        cmd += ["--candidate", os.environ["OPDEBUG_CANDIDATE"]]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{{")]
    assert lines, "the reproducer printed no result (exit %s):\\n%s" % (proc.returncode, proc.stderr[-3000:])
    result = json.loads(lines[-1])["result"]
    failed = {{c["output"]: {{k: c.get(k) for k in ("max_abs", "mismatch_ratio", "worst_index")}}
              for c in result.get("comparisons") or [] if not c.get("passed")}}
    assert result["status"] == "passed", (
        "case %s: %s (recorded %s); failed outputs %s; error %s"
        % (case_id, result["status"], CASES[case_id], failed, (result.get("error") or {{}}).get("signature")))
'''


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_").lower() or "operator"


def export_regression(
    run_id: str, out_dir: str | Path, *, root=None, case_ids: list[str] | None = None, neighbours: bool = False
) -> RegressionExport:
    """Write the reproducers of the failing cases (or ``case_ids``) and a
    pytest file over them into ``out_dir``."""
    store = RunStore(root, run_id)
    store.require()
    config = store.read_config()
    cases = store.read_cases()
    results = store.read_results()
    by_id = {c.id: c for c in cases}
    if case_ids:
        unknown = [c for c in case_ids if c not in by_id]
        if unknown:
            raise unknown_cases(run_id, unknown, by_id)
        failing = list(dict.fromkeys(case_ids))
    else:
        failing = failing_ids(results, [c.id for c in cases])
    if not failing:
        raise ToolError(
            f"run {run_id!r} has no failing case (crash or numerical_mismatch) to guard against; run its cases first",
            code="nothing_to_export",
        )
    near: list[str] = []
    if neighbours:
        for case in cases:
            result = results.get(case.id)
            if case.id in failing or result is None or result.status != "passed":
                continue
            if any(len(differing_axes(case, by_id[f])) == 1 for f in failing):
                near.append(case.id)
    out = Path(out_dir).expanduser().resolve()
    files: list[str] = []
    for cid in [*failing, *near]:
        exported = export_repro(store.run_id, cid, out, root=root)
        files += [f for f in exported.files if f not in files]
    kind = device_kind(results.get(failing[0]))
    statuses = sorted({results[c].status for c in failing if c in results})
    text = TEMPLATE.format(
        operator=config.operator.name,
        run_id=store.run_id,
        mark=GENERATED_MARK,
        device=kind,
        statuses=", ".join(statuses) or "pending",
        cases={c: (results[c].status if c in results else "pending") for c in [*failing, *near]},
    )
    test_file = out / f"test_{_slug(config.operator.name)}_regression.py"
    write_text_new(test_file, text)
    return RegressionExport(
        run_id=store.run_id,
        test_file=str(test_file),
        failing_cases=failing,
        neighbour_cases=near,
        files=[str(test_file), *files],
        command=f"python -m pytest -q {shlex.quote(str(test_file))}",
    )
