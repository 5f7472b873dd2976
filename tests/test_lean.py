"""A lean in a passing output's errors is checked whatever the judge, and the float64 truth
serves gradients as it serves outputs.

- Under the tolerance judge, a passing output whose errors lean one way (precision.lean_shares)
  makes the runner compute the same-dtype baseline once, as NaN/Inf the truth has not already do;
  the analysis warns when that baseline does not lean the same way: a truncating bfloat16 kernel
  (tests/operators/truncating_exp.py) is warned about, a correct one and the README demo are not.
- A half-precision case whose float32 reference overflows in its backward alone is widened to
  float64 (tests/operators/naive_sigmoid.py).

Real runs: the worker's execute_case, and plan_cases / run_case_remote / analyze_failures over the
local transport."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tools.analyze_failures import analyze_failures
from tools.examples import demo_request
from tools.plan_cases import plan_cases
from tools.remote.pool import REGISTRY
from tools.run_case_remote import run_case_remote
from tools.runner.devices import make_device
from tools.runner.execute import environment, execute_case

OPERATORS = Path(__file__).parent / "operators"
SHAPES = [[16, 64], [8, 64], [32, 16]]


@pytest.fixture(scope="module")
def device():
    dev = make_device("cpu")
    return dev, environment(dev)


def run(module: str | None, case: dict, device, *, candidate: str | None = None, judge: str = "tolerance",
        **config) -> dict:
    dev, env = device
    op = {"name": "op", "candidate": candidate or f"{module}.cand", "reference": f"{module}.ref" if module
          else candidate}
    if module:
        op["modules"] = [f"{module}.py"]
    request = {"config": {"run_id": "r", "judge": judge, "operator": op, **config}, "case": case,
               "modules_dir": str(OPERATORS) if module else None}
    return execute_case(request, dev, env)


def bf16_case(cid: str = "c", shape=(16, 64)) -> dict:
    return {"id": cid, "seed": 3, "inputs": [{"name": "x", "shape": list(shape), "dtype": "bfloat16"}]}


def test_the_tolerance_judge_runs_the_baseline_for_a_lean_and_only_for_one(device) -> None:
    # truncation: every error toward zero, all within the bfloat16 tolerance - the case passes, and the
    # baseline (a correct bfloat16 exp) is measured beside the output for the analysis
    answer = run("truncating_exp", bf16_case(), device)
    result = answer["result"]
    (comp,) = result["comparisons"]
    assert result["status"] == "passed" and comp["judge"] == "tolerance", comp.get("verdict")
    assert comp["precision"]["sign_balance"] < -0.9 and comp["precision"]["nonzero_errors"] >= 20
    assert "baseline_us" in result["timing_us"] and abs(comp["baseline"]["sign_balance"]) < 0.2
    # the same exp rounded to nearest: no lean, no baseline computed, nothing beside the output
    right = run(None, {"id": "c", "seed": 3, "inputs": [{"name": "input", "shape": [16, 64], "dtype": "bfloat16"}]},
                device, candidate="torch.exp")["result"]
    assert right["status"] == "passed" and "baseline" not in right["comparisons"][0]
    assert "baseline_us" not in right["timing_us"]


def test_a_gradient_whose_float32_truth_overflows_is_judged_against_float64(device) -> None:
    case = {"id": "g", "seed": 5, "grad_inputs": ["input"], "inputs": [
        {"name": "input", "shape": [4, 32], "dtype": "bfloat16", "values": {"kind": "uniform", "low": -110.0,
                                                                            "high": -95.0}}]}
    answer = run("naive_sigmoid", case, device, reference_dtype="auto")
    meta, result = answer["input_metadata"], answer["result"]
    by = {c["output"]: c for c in result["comparisons"]}
    # the forward is finite on both sides (0): only the gradients overflowed in float32 (0 * inf)
    assert meta["reference_widened"]["elements"] == 128 and meta["reference_dtype"] == "float64", meta
    assert result["status"] == "passed", [c.get("verdict") for c in result["comparisons"]]
    assert by["grad.input"]["nan_mismatch"] == 0 and by["grad.input"]["expected_dtype"] == "float64"


def _planned_run(root: Path, run_id: str, operator: dict, module: str | None, dtype: str = "bfloat16") -> None:
    name = "x" if module else "input"  # torch.exp's own argument name
    cases = [{"id": f"c{i}", "seed": 3 + i, "inputs": [{"name": name, "shape": s, "dtype": dtype}]}
             for i, s in enumerate(SHAPES)]
    request = {"config": {"run_id": run_id, "operator": operator}, "cases": cases}
    if module:
        request["module_sources"] = {f"{module}.py": (OPERATORS / f"{module}.py").read_text()}
    plan_cases(request, root=root)


def test_a_truncating_kernel_is_warned_about_and_a_correct_one_and_the_demo_are_not(tmp_path: Path) -> None:
    _planned_run(tmp_path, "trunc", {"name": "exp", "candidate": "truncating_exp.cand",
                                     "reference": "truncating_exp.ref", "modules": ["truncating_exp.py"]},
                 "truncating_exp")
    _planned_run(tmp_path, "right", {"name": "exp", "candidate": "torch.exp", "reference": "torch.exp"}, None)
    plan_cases(demo_request("demo"), root=tmp_path)

    async def main() -> None:
        try:
            for run_id in ("trunc", "right"):
                await run_case_remote(run_id, root=tmp_path)
            # every case of the README demo but its compiled one (the same numbers as eager, minutes of
            # inductor on a loaded CPU)
            await run_case_remote("demo", root=tmp_path, case_ids=["rms", "rms.dtype-float16",
                                                                   "rms.dtype-bfloat16", "rms.x.strides-1-8"])
        finally:
            await REGISTRY.close_all()

    asyncio.run(main())
    trunc = analyze_failures("trunc", root=tmp_path)
    assert trunc.status_counts.get("passed") == 3, trunc.summary
    (w,) = trunc.consistency.bias
    assert w.output == "out" and w.dtype == "bfloat16" and sorted(w.cases) == ["c0", "c1", "c2"], w
    assert "truncation instead of round-to-nearest" in w.message and w.baseline_share is not None, w.message
    right = analyze_failures("right", root=tmp_path)
    assert right.status_counts.get("passed") == 3 and right.consistency.bias == [], right.consistency.bias
    demo = analyze_failures("demo", root=tmp_path)
    assert demo.recorded == 4 and demo.consistency.bias == [], demo.consistency.bias
