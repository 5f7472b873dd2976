"""Consistency checks (issue 21), end to end: planted operators of each kind
(tests/operators/) through the real MCP client over stdio and the real local
transport - nondeterministic, order-dependent, writes its input,
batch-variant, biased - each named for what it is and none ending on a
finding about an axis; the order-dependent one names the earlier case that
poisons it.  Then right operators repeated: no flag.  And the runner's checks
on their own (declared writes, a large input's checksum, batch check mode)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from mcp.client import Client

from sweep_spec import OPS, sweep_case
from test_mcp_stdio import error_text, with_server

OPERATORS = Path(__file__).parent / "operators"


def request(run_id: str, module: str, *, cases=None, stars=None, **config) -> dict[str, Any]:
    req: dict[str, Any] = {
        "config": {"run_id": run_id, "operator": {"name": module, "candidate": f"{module}.cand",
                                                  "reference": f"{module}.ref", "modules": [f"{module}.py"]},
                   **config},
        "module_sources": {f"{module}.py": (OPERATORS / f"{module}.py").read_text()}}
    if cases:
        req["cases"] = cases
    if stars:
        req["stars"] = stars
    return req


def x_case(case_id: str, shape: list[int], dtype: str = "float32", seed: int = 3) -> dict[str, Any]:
    return {"id": case_id, "seed": seed, "inputs": [{"name": "x", "shape": shape, "dtype": dtype}]}


def test_planted_consistency_bugs_are_named_for_what_they_are_over_mcp(evidence_root: Path) -> None:
    plans = {
        # a lost update in about one call in two; every case repeated (repeats_passing) so each shows its spread
        "racy": request("racy", "racy_sum", repeats_passing=100, stars=[{
            "base": x_case("base", [64, 32]), "vary": [{"axis": "shape", "input": "x",
                                                         "values": [[64, 16], [64, 48], [64, 64], [128, 32],
                                                                    [96, 32], [64, 96], [80, 32]]}]}]),
        # a plan cache keyed by element count: 64x8 and 16x32 reuse base's 8x64 layout
        "order": request("order", "plan_cache", stars=[{
            "base": x_case("base", [8, 64]), "vary": [{"axis": "shape", "input": "x",
                                                       "values": [[2, 64], [64, 8], [16, 32], [8, 128]]}]}]),
        "scratch": request("scratch", "scratch_input", stars=[{
            "base": x_case("base", [8, 64]), "vary": [{"axis": "shape", "input": "x", "values": [[4, 64], [8, 32]]}]}]),
        "batch": request("batch", "batch_split", batch_invariance={"input": "x", "dim": 0}, stars=[{
            "base": x_case("base", [8, 1024]), "vary": [{"axis": "shape", "input": "x", "values": [[16, 1024]]}]}]),
        "bias": request("bias", "truncating_exp", judge="baseline", stars=[{
            "base": x_case("base", [16, 64], "bfloat16"), "vary": [{"axis": "shape", "input": "x",
                                                                    "values": [[8, 64], [32, 16]]}]}]),
    }

    async def scenario(client: Client) -> Any:
        out: dict[str, Any] = {}
        for run_id, req in plans.items():
            plan = await client.call_tool("plan_cases", req)
            assert not plan.is_error, error_text(plan)
            run = await client.call_tool("run_case_remote", {"run_id": run_id})
            assert not run.is_error, error_text(run)
            out[run_id] = {"run": run}
        narrow = await client.call_tool("narrow_failure", {"run_id": "order", "max_cases": 12})
        assert not narrow.is_error, error_text(narrow)
        out["order"]["narrow"] = narrow
        for run_id in plans:
            analysis = await client.call_tool("analyze_failures", {"run_id": run_id})
            assert not analysis.is_error, error_text(analysis)
            report = await client.read_resource(f"opdebug://runs/{run_id}/report")
            out[run_id].update(analysis=analysis, report=report.contents[0].text)
        return out

    got = with_server(evidence_root, scenario)
    a = {run_id: v["analysis"].structured_content for run_id, v in got.items()}
    text = {run_id: "\n".join(b.text for b in v["analysis"].content if getattr(b, "type", "") == "text")
            for run_id, v in got.items()}
    for run_id, analysis in a.items():  # none ends on a finding about an axis
        assert analysis["findings"] == [], (run_id, analysis["findings"])
        assert not any(ax["explains_all"] for ax in analysis["failure_axes"]), (run_id, analysis["failure_axes"])

    # nondeterministic: the failing cases carry their spread, are kept out of the findings, and the verdict says so
    racy = a["racy"]
    flagged = {f["case_id"]: f for f in racy["consistency"]["flagged"]}
    failing = {f["case_id"] for f in racy["failures"]}
    assert racy["verdict"] == "diagnosed" and failing and failing <= set(flagged)
    assert all(flagged[c]["flag"] == "nondeterministic" and "distinct results in 3 runs" in flagged[c]["detail"]
               for c in failing)
    assert failing <= set(racy["consistency"]["excluded_from_findings"])
    assert "nondeterministic" in racy["summary"] and "none as evidence of an axis" in racy["summary"]
    assert "nondeterministic" in text["racy"]
    outcomes = got["racy"]["run"].structured_content["outcomes"]
    assert any("nondeterministic: " in o["summary"] and "nondeterministic" in o["flags"] for o in outcomes)

    # order-dependent: passes alone, and the autopilot's probes name the case that poisons it
    order = a["order"]
    od = [f for f in order["consistency"]["flagged"] if f["flag"] == "order_dependent"]
    assert [f["case_id"] for f in od] == ["base.x.shape-64x8"]
    assert od[0]["poisoned_by"] == ["base"], od[0]
    assert "fails after `base` (same x.numel 512" in order["summary"] and "passes alone" in order["summary"]
    assert set(order["consistency"]["excluded_from_findings"]) >= {"base.x.shape-64x8", "base.x.shape-16x32"}
    narrow = got["order"]["narrow"].structured_content
    assert narrow["stopped"] == "consistency" and narrow["steps"][0]["kinds"] == ["order"]
    # each probe is an ordinary recorded case: run after named cases on a fresh worker
    assert any(s == "numerical_mismatch" for s in od[0]["probes"].values())
    assert "## Consistency checks" in got["order"]["report"] and "Poisoned by: `base`" in got["order"]["report"]

    # writes its input: a numerical mismatch whose comparison is the input itself
    scratch = a["scratch"]
    assert scratch["verdict"] == "diagnosed" and scratch["status_counts"]["numerical_mismatch"] == 3
    assert all("input:x" in f["signature"] for f in scratch["failures"])
    assert "the candidate modified its input x: 512 elements changed" in " ".join(
        f["reason"] for f in scratch["failures"])
    assert "writes its input x in 3 case(s)" in scratch["summary"]

    # batch-variant (evidence, not a check): the run passes, and says the rows differ alone
    batch = a["batch"]
    assert batch["verdict"] == "passed"
    assert {f["flag"] for f in batch["consistency"]["flagged"]} == {"batch_variant"}
    assert "batch-variant" in batch["summary"] and "bit for bit" in batch["summary"]

    # biased: within the bfloat16 tolerance, but every error negative where a correct bfloat16 computation's
    # are balanced - the baseline judge's error-balance check fails it (a lean is measured against the
    # baseline's, never against zero: no separate bias warning)
    bias = a["bias"]
    assert bias["status_counts"]["numerical_mismatch"] == 3 and bias["consistency"]["bias"] == [], bias["summary"]
    reasons = " ".join(f["reason"] for f in bias["failures"])
    assert "the sign imbalance of a correct bfloat16 computation" in reasons and "a biased rounding" in reasons


def test_right_operators_repeated_get_no_flag(evidence_root: Path) -> None:
    """An OpInfo-style sweep of right operators (tests/sweep_spec.py), every case repeated:
    no consistency flag, no bias warning (benchmarks/sweep_judge.py --consistency does more seeds)."""
    from tools.analyze_failures import analyze_failures
    from tools.plan_cases import plan_cases
    from tools.remote.pool import REGISTRY
    from tools.run_case_remote import run_case_remote

    cases = [sweep_case(op, dtype) for op in OPS for dtype in ("bfloat16", "float16", "float32")]
    plan_cases({"config": {"run_id": "right", "repeats_passing": 1000, "batch_invariance": None, "operator": {
        "name": "sweep", "candidate": "sweep_dispatch.call", "reference": "sweep_dispatch.reference",
        "modules": ["sweep_dispatch.py"]}}, "cases": cases,
        "module_sources": {"sweep_dispatch.py": (OPERATORS / "sweep_dispatch.py").read_text()}}, root=evidence_root)

    async def main() -> None:
        try:
            await run_case_remote("right", root=evidence_root)
        finally:
            await REGISTRY.close_all()

    asyncio.run(main())
    analysis = analyze_failures("right", root=evidence_root)
    assert analysis.consistency.repeated == analysis.recorded - analysis.status_counts["unsupported"] > 50
    assert analysis.consistency.flagged == [] and analysis.consistency.bias == [], json.dumps(
        analysis.consistency.model_dump(mode="json"))[:2000]


def test_runner_checks_declared_writes_large_inputs_and_batch_check_mode() -> None:
    """The runner alone (execute_case): a declared written input is compared like an output; an undeclared
    write of a large input is found by its checksum and counted exactly; batch_invariance with check: true
    makes a differing slice a numerical mismatch."""
    import sys

    sys.path.insert(0, str(OPERATORS))
    from tools.runner.devices import make_device
    from tools.runner.execute import environment, execute_case

    device = make_device("cpu")
    env = environment(device)

    def run(module: str, inputs: list, **config) -> dict:
        op = {"name": module, "candidate": f"{module}.cand", "reference": f"{module}.ref",
              **config.pop("operator", {})}
        answer = execute_case({"config": {"run_id": "r", "operator": op, "repeats": 2, **config},
                               "case": {"id": "c", "seed": 3, "inputs": inputs}}, device, env)
        assert answer["outcome"] == "result", answer
        return answer["result"]

    pair = [{"name": "x", "shape": [4, 8]}, {"name": "out", "shape": [4, 8], "values": {"kind": "zeros"}}]
    declared = run("writes_declared", pair, operator={"writes": ["out"]})
    comp = {c["output"]: c for c in declared["comparisons"]}
    assert declared["status"] == "numerical_mismatch" and comp["input:out"]["mismatch_count"] == 4  # column 0
    assert "modified its input" not in comp["input:out"]["verdict"]
    assert declared["consistency"]["flags"] == [] and declared["consistency"]["inputs_written"][0]["declared"]
    undeclared = run("writes_declared", pair)
    assert "the candidate modified its input out: 32 elements changed" in \
        {c["output"]: c for c in undeclared["comparisons"]}["input:out"]["verdict"]

    big = run("scratch_input", [{"name": "x", "shape": [1024, 1024]}])  # 4 MiB: the checksum path
    assert big["consistency"]["inputs_written"] == [{"input": "x", "changed": 1024 * 1024, "numel": 1024 * 1024,
                                                      "declared": False, "outside_view": False}]
    assert {c["output"]: c["passed"] for c in big["comparisons"]} == {"out": True, "input:x": False}

    checked = run("batch_split", [{"name": "x", "shape": [8, 1024]}],
                  batch_invariance={"input": "x", "dim": 0, "check": True})
    comp = {c["output"]: c for c in checked["comparisons"]}
    assert checked["status"] == "numerical_mismatch" and comp["out"]["passed"] and not comp["batch:out"]["passed"]
    assert checked["consistency"]["flags"] == ["batch_variant"] and checked["consistency"]["batch"]["differing"] == 1
    within = run("batch_split", [{"name": "x", "shape": [8, 1024]}],
                 batch_invariance={"input": "x", "dim": 0, "exact": False, "check": True})
    assert within["status"] == "passed" and within["consistency"]["batch"]["equal"]


def _leaning(cid: str, sign: float, base_sign: float | None) -> Any:
    from tools.schemas import CaseResult

    def metrics(balance: float) -> dict:
        return {"count": 1000, "small_value": 1e-3, "small_value_count": 0, "small_value_error_ratio": 0.0,
                "max_rel_error": 1e-3, "mean_rel_error": 1e-4, "rmse": 1e-4, "error_balance": abs(balance),
                "nonzero_errors": 400, "thousandth_ratio": 1.0, "ten_thousandth_ratio": 1.0,
                "special_mismatch": 0, "sign_balance": balance}

    comp = {"output": "out", "passed": True, "expected_dtype": "bfloat16", "actual_dtype": "bfloat16",
            "precision": metrics(sign)}
    if base_sign is not None:
        comp["baseline"] = metrics(base_sign)
    return CaseResult.model_validate({"case_id": cid, "status": "passed", "comparisons": [comp]})


def test_a_lean_is_warned_about_only_against_a_correct_computations_lean() -> None:
    from tools.analysis.consistency import bias_warnings
    from tools.schemas import Case

    case = Case.model_validate({"id": "c", "inputs": [{"name": "x", "shape": [1000], "dtype": "bfloat16"}]})
    # 360 of 400 errors positive where a correct bfloat16 computation's are balanced: a biased rounding
    (w,) = bias_warnings([case], {"c": _leaning("c", 0.36, 0.0)})
    assert (w.kind, w.direction, w.cases) == ("sign", "positive", ["c"]) and w.baseline_share == 0.0
    # the same lean in the baseline (float32 arithmetic against a float64 truth), or no baseline: no warning
    assert bias_warnings([case], {"c": _leaning("c", 0.36, 0.35)}) == []
    assert bias_warnings([case], {"c": _leaning("c", 0.36, None)}) == []
