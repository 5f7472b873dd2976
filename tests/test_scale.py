"""Planning and errors at scale: the grouped multi-axis check flags exactly the
cases the pairwise definition flags, caps its warnings, and refusals name a
few ids, not thousands.  (Speed is measured by benchmarks/bench_scale.py.)"""

from __future__ import annotations

import random

import pytest

from tools.errors import ToolError
from tools.cases.axes import axes_difference, distance_axes
from tools.cases.neighbours import multi_axis_warnings
from tools.plan_cases import plan_cases
from tools.schemas import Case


def _case(i: int, rng: random.Random) -> Case:
    rows = rng.choice([2, 4, 8, 16])
    x = {"name": "x", "shape": [rows, 8], "dtype": rng.choice(["float32", "float16", "bfloat16"])}
    if rng.random() < 0.3:
        x["strides"] = [16, 1]
    return Case.model_validate({"id": f"c{i}", "mode": rng.choice(["eager", "graph", "compile"]),
                                "inputs": [x, {"name": "w", "shape": [8]}],
                                "attributes": {"eps": rng.choice([1e-6, 1e-5, 1e-4])}})


def _lonely_pairwise(cases: list[Case]) -> set[str]:
    axes = [distance_axes(c) for c in cases]
    return {cases[i].id for i in range(len(cases))
            if all(len(axes_difference(axes[i], axes[j])) > 1 for j in range(len(cases)) if j != i)}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_grouped_multi_axis_check_flags_what_the_pairwise_check_flags(seed: int) -> None:
    rng = random.Random(seed)
    cases = [_case(i, rng) for i in range(30)]
    expected = _lonely_pairwise(cases)
    warnings = multi_axis_warnings(cases, limit=len(cases))
    flagged = {w.split("'")[1] for w in warnings}
    assert flagged == expected
    assert expected and len(expected) < len(cases)  # some flagged, some not: else the test proves nothing


def test_thousands_of_lonely_cases_give_ten_warnings_and_a_count() -> None:
    cases = [Case.model_validate({"id": f"c{i}", "inputs": [{"name": "x", "shape": [i + 1, 8]}],
                                  "attributes": {"alpha": i}}) for i in range(2000)]
    warnings = multi_axis_warnings(cases)
    assert len(warnings) == 11
    assert warnings[-1].startswith("... and 1990 more case(s)")


def test_refusals_name_a_few_ids_at_ten_thousand_cases(evidence_root, plan_request_dict) -> None:
    request = plan_request_dict("big-plan", ("c0",))
    case = request["cases"][0]
    request["cases"] = [dict(case, id=f"c{i}", seed=i) for i in range(10_000)]
    resp = plan_cases(request, root=evidence_root)
    assert resp.case_count == 10_000 and len(resp.cases) == 50 and resp.cases_omitted == 9_950
    again = {"run_id": "big-plan", "append": True, "cases": request["cases"]}
    with pytest.raises(ToolError) as info:
        plan_cases(again, root=evidence_root)
    assert info.value.code == "duplicate_case" and "(9995 more)" in info.value.message
    assert len(info.value.message) < 500


MANIFEST_LAG_SCRIPT = """
import json, sys
sys.path[:0] = [{repo!r}, {tests!r}]
from conftest import minimal_plan_request, passed_result
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.record_result import record_result
root = {root!r}
plan_cases(minimal_plan_request("lag", ("a", "b", "c")), root=root)
store = RunStore(root, "lag")
synced = []
for cid in ("a", "b"):
    record_result("lag", passed_result(cid), root=root, lazy_manifest=True, pending=False)
    synced.append(RunStore(root, "lag").sync_manifest(lazy=True))
on_disk = json.loads((store.dir / "manifest.json").read_text())["recorded_count"]
print(json.dumps({{"synced": synced, "on_disk": on_disk, "read": store.read_manifest()["recorded_count"]}}))
record_result("lag", passed_result("c"), root=root, lazy_manifest=True, pending=False)
RunStore(root, "lag").sync_manifest(lazy=True)
"""


def test_a_lagging_manifest_is_current_when_read_and_after_exit(evidence_root) -> None:
    """A lazy manifest sync right after a write leaves the file behind the index
    (one file replace per case saved); reading it through the store, and the
    process exiting, bring it up to the index."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    script = MANIFEST_LAG_SCRIPT.format(repo=str(tests.parent), tests=str(tests), root=str(evidence_root))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["synced"] == [False, False]  # planning wrote the manifest just before: both syncs lag
    assert seen["on_disk"] < 2 and seen["read"] == 2
    manifest = json.loads((evidence_root / "lag" / "manifest.json").read_text())
    assert manifest["recorded_count"] == 3 and manifest["case_count"] == 3  # flushed at exit
