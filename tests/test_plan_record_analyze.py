"""plan_cases -> record_result -> analyze_failures on the seed scenarios,
everything read back from the evidence directory."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import tools.evidence as evidence
from tools.analyze_failures import analyze_failures
from tools.errors import ToolError
from tools.evidence import RunStore
from tools.cases.axes import case_axes
from tools.cases.stars import expand_star
from tools.plan_cases import plan_cases
from tools.record_result import record_result
from tools.schemas import Analysis, Case, StarSpec


def crash_result(case_id: str, signature: str = "RuntimeError: aclnn failed <N>") -> dict:
    return {"case_id": case_id, "status": "crash",
            "error": {"type": "RuntimeError", "message": "aclnn failed 561103", "signature": signature}}


def unsupported_result(case_id: str) -> dict:
    return {"case_id": case_id, "status": "unsupported",
            "error": {"type": "RuntimeError", "message": "\"rms_norm\" not implemented for 'Int'",
                      "signature": "RuntimeError: not implemented for <T>", "matched_rule": "not implemented for"}}


def read_results_file(root: Path, run_id: str) -> dict:
    """The recorded results as the append-only index holds them (results.json is a view)."""
    lines = (root / run_id / "results.jsonl").read_text().splitlines()
    return {"results": {doc["case_id"]: doc for doc in map(json.loads, lines)}}


def star_request(run_id: str, vary: list[dict], base: dict | None = None, **extra) -> dict:
    base = base or {"id": "rms", "inputs": [{"name": "x", "shape": [2, 8]}, {"name": "w", "shape": [8]}],
                    "attributes": {"eps": 1e-6}}
    return {"config": {"run_id": run_id, "operator": {"name": "rms", "candidate": "torch_npu.npu_rms_norm",
                                                      "reference": "ref_mod.rms"}},
            "stars": [{"base": base, "vary": vary, **extra}]}


# --------------------------------------------------------------------------
# plan_cases
# --------------------------------------------------------------------------


def test_plan_creates_the_evidence_layout(evidence_root, plan_request_dict):
    resp = plan_cases(plan_request_dict("run-1"), root=evidence_root)
    run = evidence_root / "run-1"
    assert resp.created and resp.added == ["eager-f32", "graph-f32"]
    assert [c.state for c in resp.cases] == ["pending", "pending"]
    # the first case with every axis, the others with what differs from it (issue 25)
    assert resp.cases[0].axes["x.shape"] == "4x8" and resp.cases[0].differs_from is None
    assert resp.cases[1].axes == {"mode": "graph"} and resp.cases[1].differs_from == "eager-f32"
    for name in ("manifest.json", "operator-config.json", "case-matrix.json", "results.json", "results.jsonl"):
        assert (run / name).is_file()
    assert (run / "artifacts" / "modules" / "scaled_add_mod.py").read_text().startswith("def cand")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "planned" and manifest["case_count"] == 2
    assert "artifacts/modules/scaled_add_mod.py" in manifest["artifacts"]


def test_duplicate_case_ids_are_refused(evidence_root, plan_request_dict):
    req = plan_request_dict("run-1", ("a", "b", "a"))
    with pytest.raises(ToolError) as info:
        plan_cases(req, root=evidence_root)
    assert info.value.code == "duplicate_case" and "['a']" in info.value.message
    assert not (evidence_root / "run-1").exists()


def test_star_base_colliding_with_an_explicit_case_is_refused(evidence_root):
    req = star_request("run-1", [{"axis": "mode", "values": ["graph"]}])
    req["cases"] = [dict(req["stars"][0]["base"])]
    with pytest.raises(ToolError) as info:
        plan_cases(req, root=evidence_root)
    assert "'rms'" in info.value.message


def test_plan_refuses_to_overwrite_an_existing_run(evidence_root, plan_request_dict, result_dicts):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    record_result("run-1", result_dicts["passed"]("eager-f32"), root=evidence_root)
    before = {p.name: p.read_bytes() for p in (evidence_root / "run-1").glob("*.json")}
    with pytest.raises(ToolError) as info:
        plan_cases(plan_request_dict("run-1", ("other",)), root=evidence_root)
    assert info.value.code == "run_exists"
    after = {p.name: p.read_bytes() for p in (evidence_root / "run-1").glob("*.json")}
    assert before == after


def test_call_order_names_must_exist_in_every_case(evidence_root, plan_request_dict):
    req = plan_request_dict("run-1")
    req["config"]["operator"]["call"] = {"style": "positional", "order": ["x", "y", "gamma"]}
    with pytest.raises(ToolError) as info:
        plan_cases(req, root=evidence_root)
    assert "gamma" in info.value.message and "eager-f32" in info.value.message
    req["config"]["operator"]["call"]["order"] = ["x", "y", "alpha"]
    assert plan_cases(req, root=evidence_root).created


def test_append_adds_cases_without_touching_results(evidence_root, plan_request_dict, result_dicts):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    record_result("run-1", result_dicts["passed"]("eager-f32"), root=evidence_root)
    results_before = (evidence_root / "run-1" / "results.jsonl").read_bytes()

    extra = plan_request_dict("run-1", ("compile-f32",), modes=("compile",))
    resp = plan_cases({"run_id": "run-1", "append": True, "cases": extra["cases"]}, root=evidence_root)
    assert not resp.created and resp.added == ["compile-f32"]
    # the answer carries the cases this call added; the rest of the run is counted
    assert {c.id: c.state for c in resp.cases} == {"compile-f32": "pending"}
    assert (resp.case_count, resp.recorded_count) == (3, 1)
    assert (evidence_root / "run-1" / "results.jsonl").read_bytes() == results_before
    manifest = RunStore(evidence_root, "run-1").read_manifest()
    assert manifest["case_count"] == 3 and manifest["recorded_count"] == 1

    with pytest.raises(ToolError) as info:
        plan_cases({"run_id": "run-1", "append": True, "cases": extra["cases"]}, root=evidence_root)
    assert info.value.code == "duplicate_case" and "compile-f32" in info.value.message
    assert len(RunStore(evidence_root, "run-1").read_cases()) == 3


def test_append_after_an_analysis_reopens_the_run_even_without_results(evidence_root, plan_request_dict):
    plan_cases(plan_request_dict("run-1", ("eager-f32",)), root=evidence_root)
    assert analyze_failures("run-1", root=evidence_root).verdict == "inconclusive"
    more = plan_request_dict("run-1", ("graph-f32",))["cases"]
    plan_cases({"run_id": "run-1", "append": True, "cases": more}, root=evidence_root)
    manifest = RunStore(evidence_root, "run-1").read_manifest()
    # the old verdict no longer holds for the grown matrix
    assert manifest["status"] == "running"
    assert [h["status"] for h in manifest["history"]] == ["planned", "inconclusive", "running"]


def test_appending_a_star_around_a_planned_case_says_to_leave_its_base_out(evidence_root):
    # the natural follow-up to a next case {base_case, change}: a star around that planned case
    plan_cases(star_request("grow", [{"axis": "mode", "values": ["graph"]}]), root=evidence_root)
    base = RunStore(evidence_root, "grow").read_cases()[0].model_dump(mode="json")
    star = {"base": base, "vary": [{"axis": "dtype", "values": ["bfloat16"]}]}
    with pytest.raises(ToolError) as info:
        plan_cases({"run_id": "grow", "append": True, "stars": [star]}, root=evidence_root)
    assert info.value.code == "duplicate_case"
    assert "include_base" in info.value.message and "'rms'" in info.value.message
    added = plan_cases({"run_id": "grow", "append": True, "stars": [star | {"include_base": False}]},
                       root=evidence_root).added
    assert added == ["rms.dtype-bfloat16"]


def test_append_refuses_a_changed_config_or_module(evidence_root, plan_request_dict):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    req = plan_request_dict("run-1", ("more",))
    req["append"] = True
    req["config"]["tolerance"]["atol"] = 1.0
    req["config"]["operator"]["reference"] = "scaled_add_mod.cand"
    with pytest.raises(ToolError) as info:
        plan_cases(req, root=evidence_root)
    assert info.value.code == "config_changed"
    # the refusal names what changed
    assert "config.tolerance.atol" in info.value.message and "config.operator.reference" in info.value.message

    req = plan_request_dict("run-1", ("more",))
    req["append"] = True
    req["module_sources"] = {"scaled_add_mod.py": "def cand(x, y, alpha=1.0):\n    return x\n"}
    with pytest.raises(ToolError) as info:
        plan_cases(req, root=evidence_root)
    assert info.value.code == "module_changed"
    assert [c.id for c in RunStore(evidence_root, "run-1").read_cases()] == ["eager-f32", "graph-f32"]

    req = plan_request_dict("run-1", ("more",))  # same config and module: fine
    req["append"] = True
    assert plan_cases(req, root=evidence_root).added == ["more"]


def test_append_to_a_missing_run_is_refused(evidence_root, plan_request_dict):
    req = plan_request_dict("nope")
    with pytest.raises(ToolError) as info:
        plan_cases({"run_id": "nope", "append": True, "cases": req["cases"]}, root=evidence_root)
    assert info.value.code == "unknown_run"


# --------------------------------------------------------------------------
# stars and axes
# --------------------------------------------------------------------------


def test_star_expansion_changes_one_axis_per_case():
    star = StarSpec.model_validate(star_request("r", [
        {"axis": "dtype", "values": ["bfloat16", "float32"]},        # float32 is the base: skipped
        {"axis": "mode", "values": ["graph"]},
        {"axis": "strides", "input": "x", "values": [[1, 4]]},
        {"axis": "shape", "values": [[4, 16]]},
        {"axis": "attribute", "name": "keepdim", "values": [True]},
        {"axis": "layout", "input": "x", "values": ["FRACTAL_NZ"]},
        {"axis": "storage_offset", "input": "w", "values": [3]},
        {"axis": "values", "input": "x", "values": [{"kind": "normal", "specials": [{"value": "nan", "count": 1}]}]},
    ])["stars"][0])
    cases = expand_star(star)
    ids = [c.id for c in cases]
    assert ids == ["rms", "rms.dtype-bfloat16", "rms.mode-graph", "rms.x.strides-1-4", "rms.x.shape-4x16",
                   "rms.attr-keepdim-true", "rms.x.layout-FRACTAL_NZ", "rms.w.offset-3", "rms.x.values-normal-nan"]
    base_axes = case_axes(cases[0])
    changed = {c.id: {k for k, v in case_axes(c).items() if base_axes.get(k) != v} for c in cases[1:]}
    assert changed["rms.dtype-bfloat16"] == {"dtype", "x.dtype", "w.dtype"}
    assert changed["rms.mode-graph"] == {"mode"}
    assert changed["rms.x.strides-1-4"] == {"x.strides"}
    assert changed["rms.x.shape-4x16"] == {"x.shape"}
    assert changed["rms.attr-keepdim-true"] == {"attr.keepdim"}
    assert changed["rms.x.layout-FRACTAL_NZ"] == {"x.layout"}
    assert changed["rms.w.offset-3"] == {"w.offset"}
    assert changed["rms.x.values-normal-nan"] == {"x.values"}
    assert case_axes(cases[3])["x.strides"] == "1,4"
    assert case_axes(cases[-1])["x.values"] == "normal+nan"


def test_star_ids_keep_signs():
    specials = [{"kind": "normal", "specials": [{"value": v, "count": 1}]} for v in ("large", "-large", "+0", "-0")]
    star = StarSpec.model_validate(star_request("r", [
        {"axis": "values", "input": "x", "values": specials + [{"kind": "normal", "mean": m} for m in (-3.0, 3.0)]},
        {"axis": "attribute", "name": "dim", "values": [-1, 1]},
    ])["stars"][0])
    ids = [c.id for c in expand_star(star)][1:]
    assert ids == ["rms.x.values-normal-large", "rms.x.values-normal-neg-large", "rms.x.values-normal-pos0",
                   "rms.x.values-normal-neg0", "rms.x.values-normal-mean-neg3.0", "rms.x.values-normal-mean-3.0",
                   "rms.attr-dim-neg1", "rms.attr-dim-1"]


def test_star_dtype_keeps_integer_inputs_and_shape_drops_strides():
    base = {"id": "gather", "inputs": [
        {"name": "src", "shape": [4, 4], "strides": [1, 4]},
        {"name": "index", "shape": [4], "dtype": "int64", "values": {"kind": "randint", "low": 0, "high": 4}}]}
    star = StarSpec.model_validate({"base": base, "vary": [
        {"axis": "dtype", "values": ["float16"]}, {"axis": "shape", "input": "src", "values": [[8, 4]]}],
        "include_base": False})
    f16, reshaped = expand_star(star)
    assert [i.dtype for i in f16.inputs] == ["float16", "int64"]
    assert reshaped.inputs[0].shape == [8, 4] and reshaped.inputs[0].strides is None
    assert reshaped.id == "gather.src.shape-8x4"


def test_star_ids_are_sanitized_truncated_and_unique():
    long_base = "b" * 90
    star = StarSpec.model_validate({"base": {"id": long_base, "inputs": [{"name": "x", "shape": [2]}]}, "vary": [
        {"axis": "attribute", "name": "reduce", "values": ["a b/c", "a-b-c", "mean" * 10, "sum" * 10]}]})
    cases = expand_star(star)
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids) == 5
    for cid in ids:
        Case.model_validate({"id": cid, "inputs": [{"name": "x", "shape": [1]}]})  # a valid slug
        assert len(cid) <= 96 and "/" not in cid and ".." not in cid
    short = StarSpec.model_validate({"base": {"id": "r", "inputs": [{"name": "x", "shape": [2]}]}, "vary": [
        {"axis": "attribute", "name": "reduce", "values": ["a b/c", "a-b-c"]}]})
    ids = [c.id for c in expand_star(short)]
    assert ids[:2] == ["r", "r.attr-reduce-a-b-c"]
    assert ids[2].startswith("r.attr-reduce-a-b-c-") and len(ids[2]) == len(ids[1]) + 7


def test_star_errors_name_the_star_variation_and_value(evidence_root):
    req = star_request("run-1", [{"axis": "mode", "values": ["graph"]},
                                 {"axis": "strides", "input": "x", "values": [[1, 2, 3]]}])
    with pytest.raises(ToolError) as info:
        plan_cases(req, root=evidence_root)
    msg = info.value.message
    assert msg.startswith("stars[0]: star vary[1]") and "'strides'" in msg and "[1, 2, 3]" in msg
    req = star_request("run-1", [{"axis": "dtype", "values": ["float8"]}])
    with pytest.raises(ToolError) as info:
        plan_cases(req, root=evidence_root)
    assert "vary[0]" in info.value.message and "float8" in info.value.message and "inputs.0.dtype" in info.value.message
    assert not (evidence_root / "run-1").exists()


def test_stars_that_expand_to_no_case_are_refused_not_planned_as_an_empty_run(evidence_root):
    # every value gives back the base (float32 is the base dtype) and the base is left out
    req = star_request("empty", [{"axis": "dtype", "values": ["float32"]}], include_base=False)
    req["config"]["source_model_failure"] = "loss is NaN at step 3"
    with pytest.raises(ToolError) as info:
        plan_cases(req, root=evidence_root)
    assert info.value.code == "validation_error"
    assert "no case" in info.value.message and "include_base" in info.value.message
    assert not (evidence_root / "empty").exists()
    # appending such a star adds nothing: refused the same way, the run unchanged
    plan_cases(star_request("grow", [{"axis": "mode", "values": ["graph"]}]), root=evidence_root)
    again = star_request("grow", [{"axis": "mode", "values": ["eager"]}], include_base=False)
    with pytest.raises(ToolError) as info:
        plan_cases(dict(again, append=True, config=None, run_id="grow"), root=evidence_root)
    assert "no case" in info.value.message
    assert [c.id for c in RunStore(evidence_root, "grow").read_cases()] == ["rms", "rms.mode-graph"]


def test_multi_axis_warning(evidence_root, plan_request_dict):
    req = plan_request_dict("run-1", ("a", "b"), modes=("eager", "graph"))
    req["cases"][1]["inputs"][0]["dtype"] = "bfloat16"
    resp = plan_cases(req, root=evidence_root)
    # the fixture's atol = rtol = 1e-5 is below bfloat16's resolution: said too
    assert [w for w in resp.warnings if "resolution" in w] == [resp.warnings[-1]] and "bfloat16" in resp.warnings[-1]
    assert len(resp.warnings) == 3
    assert "'a'" in resp.warnings[0] and "'b'" in resp.warnings[0] and "mode" in resp.warnings[0]
    assert "dtype" in resp.warnings[0]

    star = plan_cases(star_request("run-2", [{"axis": "mode", "values": ["graph", "compile"]},
                                             {"axis": "dtype", "values": ["float16"]},
                                             {"axis": "shape", "values": [[3, 8]]}]), root=evidence_root)
    assert [w for w in star.warnings if not w.startswith("tolerance:")] == []
    one = plan_cases(plan_request_dict("run-3", ("only",)), root=evidence_root)
    assert one.warnings == []


# --------------------------------------------------------------------------
# record_result
# --------------------------------------------------------------------------


def test_record_keeps_the_submitted_result_and_its_source(evidence_root, plan_request_dict, result_dicts):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    submitted = result_dicts["passed"]("eager-f32")
    submitted["source"] = {"tool": "manual-npu-session", "host": "npu-7", "note": "ran by hand"}
    resp = record_result("run-1", submitted, root=evidence_root)
    assert resp.status == "passed" and resp.pending == ["graph-f32"]
    assert resp.raw_path == "raw-results/eager-f32"
    raw = evidence_root / "run-1" / resp.raw_path
    assert json.loads((raw / "submitted.json").read_text()) == submitted
    stored = read_results_file(evidence_root, "run-1")["results"]["eager-f32"]
    assert stored["source"]["kind"] == "record_result" and stored["source"]["host"] == "npu-7"
    recorded_at = datetime.fromisoformat(stored["recorded_at"])  # when the store recorded it, in UTC
    assert recorded_at.utcoffset() == timedelta(0)
    assert abs((datetime.now(timezone.utc) - recorded_at).total_seconds()) < 600


def test_recorded_raw_path_names_where_the_raw_evidence_was_stored(evidence_root, plan_request_dict, result_dicts):
    # a submitted source.raw_path (here one outside the run) must not replace where the tool kept the evidence
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    submitted = result_dicts["numerical_mismatch"]("graph-f32")
    submitted["source"] = {"raw_path": "../../etc/passwd"}
    resp = record_result("run-1", submitted, root=evidence_root)
    assert resp.raw_path == "raw-results/graph-f32"
    stored = read_results_file(evidence_root, "run-1")["results"]["graph-f32"]
    assert stored["source"]["raw_path"] == "raw-results/graph-f32"
    assert json.loads((evidence_root / "run-1" / resp.raw_path / "submitted.json").read_text()) == submitted
    analyze_failures("run-1", root=evidence_root)
    assert "etc/passwd" not in (evidence_root / "run-1" / "reproduction.md").read_text()


def test_second_record_of_a_case_is_refused(evidence_root, plan_request_dict, result_dicts):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    record_result("run-1", result_dicts["passed"]("eager-f32"), root=evidence_root)
    first = read_results_file(evidence_root, "run-1")
    with pytest.raises(ToolError) as info:
        record_result("run-1", result_dicts["numerical_mismatch"]("eager-f32"), root=evidence_root)
    assert info.value.code == "already_recorded" and "never overwritten" in info.value.message
    assert read_results_file(evidence_root, "run-1") == first


def test_record_refuses_unknown_case_and_unknown_run(evidence_root, plan_request_dict, result_dicts):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    with pytest.raises(ToolError) as info:
        record_result("run-1", result_dicts["passed"]("nope"), root=evidence_root)
    assert info.value.code == "unknown_case" and "eager-f32" in info.value.message
    with pytest.raises(ToolError) as info:
        record_result("run-2", result_dicts["passed"]("eager-f32"), root=evidence_root)
    assert info.value.code == "unknown_run"
    with pytest.raises(ToolError) as info:
        record_result("../run-1", result_dicts["passed"]("eager-f32"), root=evidence_root)
    assert info.value.code == "invalid_id"


def test_a_failing_write_leaves_previous_evidence_intact(evidence_root, plan_request_dict, result_dicts,
                                                         monkeypatch):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    record_result("run-1", result_dicts["passed"]("eager-f32"), root=evidence_root)
    results_path = evidence_root / "run-1" / "results.jsonl"
    before = results_path.read_bytes()
    real_rename = evidence.os.rename

    def failing_rename(src, dst):
        if Path(dst).name == "graph-f32":
            raise OSError(28, "No space left on device")
        return real_rename(src, dst)

    monkeypatch.setattr(evidence.os, "rename", failing_rename)
    with pytest.raises(ToolError) as err:  # said so: which write failed, and why
        record_result("run-1", result_dicts["numerical_mismatch"]("graph-f32"), root=evidence_root)
    assert err.value.code == "write_failed" and "graph-f32 failed: No space left on device (ENOSPC)" in \
        err.value.message
    monkeypatch.setattr(evidence.os, "rename", real_rename)

    assert results_path.read_bytes() == before
    store = RunStore(evidence_root, "run-1")
    assert set(store.read_results()) == {"eager-f32"}
    assert store.pending_case_ids() == ["graph-f32"]
    run = evidence_root / "run-1"
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp") or p.name == ".recording.json"]
    assert sorted(p.name for p in (run / "raw-results").iterdir()) == ["eager-f32"]
    assert store.read_manifest()["recorded_count"] == 1
    # The case can still be recorded once the disk is back.
    assert record_result("run-1", result_dicts["numerical_mismatch"]("graph-f32"), root=evidence_root).pending == []


# --------------------------------------------------------------------------
# analyze_failures
# --------------------------------------------------------------------------


def test_eager_pass_graph_mismatch_is_diagnosed_on_mode_graph(evidence_root, plan_request_dict, result_dicts):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    record_result("run-1", result_dicts["passed"]("eager-f32"), root=evidence_root)
    record_result("run-1", result_dicts["numerical_mismatch"]("graph-f32"), root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    assert analysis.verdict == "diagnosed"
    assert [f.case_id for f in analysis.failures] == ["graph-f32"]
    assert "max_abs=0.25" in analysis.failures[0].reason
    top = analysis.failure_axes[0]
    assert (top.axis, top.value, top.explains_all, top.failing, top.total_with_value) == ("mode", "graph", True, 1, 1)
    assert all(a.axis != "dtype" for a in analysis.failure_axes)  # every case is float32: no explanation
    assert analysis.status_counts == {"passed": 1, "numerical_mismatch": 1, "crash": 0, "unsupported": 0,
                                      "missing": 0}
    assert any(n.change.get("axis") == "mode" and n.change["values"] == ["compile"] for n in analysis.next_cases)

    run = evidence_root / "run-1"
    on_disk = Analysis.model_validate_json((run / "analysis.json").read_text())
    assert on_disk.verdict == "diagnosed" and on_disk.failure_axes == analysis.failure_axes
    report = (run / "report.md").read_text()
    assert "**Verdict: diagnosed**" in report
    assert "| mode | graph | 1 | 1 | yes |" in report
    repro = (run / "reproduction.md").read_text()
    assert f"opdebug plan --output-dir {run} --append --cases graph-f32.rerun.json" in repro
    assert f"opdebug run --root {evidence_root} --run-id run-1 --case graph-f32.rerun" in repro
    assert f"opdebug analyze --root {evidence_root} --run-id run-1" in repro
    assert "scaled_add_mod.cand" in repro and '"mode": "graph"' in repro
    assert RunStore(evidence_root, "run-1").read_manifest()["status"] == "diagnosed"


def test_missing_case_is_inconclusive_and_named(evidence_root, plan_request_dict, result_dicts):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    record_result("run-1", result_dicts["passed"]("eager-f32"), root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    assert analysis.verdict == "inconclusive"
    assert analysis.missing == ["graph-f32"] and analysis.failures == []
    assert "graph-f32" in analysis.summary
    assert [n.base_case for n in analysis.next_cases] == ["graph-f32"]
    assert "`graph-f32` is planned but has no result" in (evidence_root / "run-1" / "report.md").read_text()
    assert RunStore(evidence_root, "run-1").read_manifest()["status"] == "inconclusive"


def test_all_pass_with_source_failure_gives_the_integration_hint(evidence_root, plan_request_dict,
                                                                 result_dicts):
    source = "loss became NaN at step 1200 in LlamaDecoderLayer (npu_rms_norm, bf16)"
    plan_cases(plan_request_dict("run-1", source_model_failure=source), root=evidence_root)
    for cid in ("eager-f32", "graph-f32"):
        record_result("run-1", result_dicts["passed"](cid), root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    assert analysis.verdict == "passed" and analysis.failure_axes == []
    assert analysis.integration_hint and "integration boundary" in analysis.integration_hint
    assert source in analysis.integration_hint
    assert "## Integration boundary" in (evidence_root / "run-1" / "report.md").read_text()
    assert RunStore(evidence_root, "run-1").read_manifest()["status"] == "passed"

    plan_cases(plan_request_dict("run-2"), root=evidence_root)
    for cid in ("eager-f32", "graph-f32"):
        record_result("run-2", result_dicts["passed"](cid), root=evidence_root)
    assert analyze_failures("run-2", root=evidence_root).integration_hint is None


def test_pasted_markdown_in_the_config_cannot_break_the_report(evidence_root, plan_request_dict, result_dicts):
    # an agent pastes the model's failure as it saw it: fenced, with a heading-like line
    pasted = "loss became NaN:\n```\nRuntimeError: aclnnRmsNorm failed\n```\n# step 3"
    req = plan_request_dict("run-1", source_model_failure=pasted)
    req["config"]["operator"]["name"] = "rms_norm\n# fused"
    plan_cases(req, root=evidence_root)
    record_result("run-1", result_dicts["passed"]("eager-f32"), root=evidence_root)
    record_result("run-1", result_dicts["passed"]("graph-f32"), root=evidence_root)
    analyze_failures("run-1", root=evidence_root)
    report = (evidence_root / "run-1" / "report.md").read_text()
    lines = report.splitlines()
    # the pasted text sits in one fenced block whose fence its own ``` cannot close
    start = lines.index("## Source model failure") + 2
    fence = lines[start]
    assert fence.startswith("````") and set(fence) == {"`"}
    end = lines.index(fence, start + 1)
    assert "\n".join(lines[start + 1:end]) == pasted
    # outside that block, only the report's own headings start with '#'
    headings = [ln for i, ln in enumerate(lines) if ln.startswith("#") and not start < i < end]
    assert headings[0].startswith("# Operator debug report: rms_norm # fused")
    assert "# step 3" not in headings and "# fused" not in headings
    assert "## Integration boundary" in headings


def test_unsupported_only_is_inconclusive_and_kept_apart(evidence_root, plan_request_dict, result_dicts):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    record_result("run-1", result_dicts["passed"]("eager-f32"), root=evidence_root)
    record_result("run-1", unsupported_result("graph-f32"), root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    assert analysis.verdict == "inconclusive"
    assert analysis.failures == [] and analysis.failure_axes == [] and analysis.crash_groups == {}
    assert [u.case_id for u in analysis.unsupported] == ["graph-f32"]
    assert "unsupported" in analysis.summary
    report = (evidence_root / "run-1" / "report.md").read_text()
    assert "not implemented for" in report and "No case crashed or mismatched." in report


def test_crashes_group_by_signature_and_the_axis_they_follow(evidence_root):
    req = star_request("run-1", [{"axis": "dtype", "values": ["bfloat16", "float16"]},
                                 {"axis": "mode", "values": ["graph"]}])
    resp = plan_cases(req, root=evidence_root)
    ids = [c.id for c in resp.cases]
    assert ids == ["rms", "rms.dtype-bfloat16", "rms.dtype-float16", "rms.mode-graph"]
    record_result("run-1", {"case_id": "rms", "status": "passed"}, root=evidence_root)
    record_result("run-1", crash_result("rms.dtype-bfloat16"), root=evidence_root)
    record_result("run-1", crash_result("rms.dtype-float16"), root=evidence_root)
    record_result("run-1", {"case_id": "rms.mode-graph", "status": "passed"}, root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    assert analysis.verdict == "diagnosed"
    assert analysis.crash_groups == {"RuntimeError: aclnn failed <N>": ["rms.dtype-bfloat16", "rms.dtype-float16"]}
    # bf16 and f16 share no dtype value, so no dtype=... axis; nothing else
    # separates them from the passing cases either.
    assert all(not a.explains_all for a in analysis.failure_axes)
    assert analysis.status_counts["crash"] == 2


def test_analysis_follows_one_failing_dtype(evidence_root):
    req = star_request("run-1", [{"axis": "dtype", "values": ["bfloat16", "float16"]},
                                 {"axis": "strides", "input": "x", "values": [[1, 2]]}])
    plan_cases(req, root=evidence_root)
    for cid in ("rms", "rms.dtype-float16", "rms.x.strides-1-2"):
        record_result("run-1", {"case_id": cid, "status": "passed"}, root=evidence_root)
    record_result("run-1", {"case_id": "rms.dtype-bfloat16", "status": "numerical_mismatch",
                            "comparisons": [{"output": "y", "passed": False, "max_abs": 0.1,
                                             "mismatch_count": 2, "mismatch_ratio": 0.125, "numel": 16}]},
                  root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    top = analysis.failure_axes[0]
    assert (top.axis, top.value, top.explains_all) == ("dtype", "bfloat16", True)
    # x.dtype=bfloat16 picks out the same case: reported once, as the general axis.
    assert not any(a.axis == "x.dtype" and a.value == "bfloat16" for a in analysis.failure_axes)
    # float16 (the other half precision) passed and float32 passes; float64 would teach nothing, so no
    # dtype case for every input is proposed.  But which input's dtype it follows is open (issue 20): x's,
    # w's or both - the next cases change one input's dtype, and the finding is not exact yet.
    finding = next(f for f in analysis.findings if f.axis == "dtype")
    assert (finding.predicate, finding.exact) == ("dtype == bfloat16", False)
    assert {"x.dtype == bfloat16", "w.dtype == bfloat16"} <= {f.predicate for f in analysis.competing}
    assert (finding.minimal_pair.passing, finding.minimal_pair.failing) == ("rms", "rms.dtype-bfloat16")
    assert not [n for n in analysis.next_cases if n.change.get("axis") == "dtype" and "input" not in n.change]
    splits = [n for n in analysis.next_cases if n.kind == "discriminate"]
    assert splits and all(n.change["axis"] == "dtype" and n.change["input"] in ("x", "w") for n in splits)
    # The failure is then crossed with the other axis that passed: bfloat16 strided.
    crossing = [n for n in analysis.next_cases if n.change.get("axis") == "strides"]
    assert len(crossing) == 1 and crossing[0].base_case == "rms.dtype-bfloat16"
    assert crossing[0].change == {"axis": "strides", "input": "x", "values": [[1, 2]]}
    # Once planned, the crossing is no longer suggested.
    plan_cases({"run_id": "run-1", "append": True, "stars": [{
        "base": json.loads((evidence_root / "run-1" / "case-matrix.json").read_text())["cases"][1],
        "include_base": False, "vary": [crossing[0].change]}]}, root=evidence_root)
    again = analyze_failures("run-1", root=evidence_root)
    assert not [n for n in again.next_cases if n.change.get("axis") == "strides" and n.base_case == "rms.dtype-bfloat16"]


def test_a_failure_that_follows_an_unset_attribute_is_found(evidence_root):
    # the base leaves keepdim to the operator's default; the star sets it: only the default path is wrong
    req = star_request("run-1", [{"axis": "attribute", "name": "keepdim", "values": [True]},
                                 {"axis": "dtype", "values": ["float16"]}])
    ids = [c.id for c in plan_cases(req, root=evidence_root).cases]
    assert ids == ["rms", "rms.attr-keepdim-true", "rms.dtype-float16"]
    mismatch = {"status": "numerical_mismatch", "comparisons": [{"output": "y", "passed": False, "max_abs": 1.0}]}
    record_result("run-1", {"case_id": "rms", **mismatch}, root=evidence_root)
    record_result("run-1", {"case_id": "rms.dtype-float16", **mismatch}, root=evidence_root)
    record_result("run-1", {"case_id": "rms.attr-keepdim-true", "status": "passed"}, root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    top = analysis.failure_axes[0]
    assert (top.axis, top.value, top.failing, top.total_with_value, top.explains_all) == \
        ("attr.keepdim", "unset", 2, 2, True)
    assert "attr.keepdim=unset" in analysis.summary


def test_a_failure_on_one_input_dtype_is_named_by_that_input_not_as_dtype_mixed(evidence_root):
    # mixed precision: x goes bfloat16 while the weight stays float32
    req = star_request("run-1", [{"axis": "dtype", "input": "x", "values": ["bfloat16"]},
                                 {"axis": "mode", "values": ["compile"]}])
    ids = [c.id for c in plan_cases(req, root=evidence_root).cases]
    assert ids == ["rms", "rms.x.dtype-bfloat16", "rms.mode-compile"]
    record_result("run-1", {"case_id": "rms", "status": "passed"}, root=evidence_root)
    record_result("run-1", {"case_id": "rms.mode-compile", "status": "passed"}, root=evidence_root)
    record_result("run-1", {"case_id": "rms.x.dtype-bfloat16", "status": "numerical_mismatch",
                            "comparisons": [{"output": "y", "passed": False}]}, root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    top = analysis.failure_axes[0]
    assert (top.axis, top.value, top.explains_all) == ("x.dtype", "bfloat16", True)
    assert not any(a.value == "mixed" for a in analysis.failure_axes)
    assert "the failures follow x.dtype=bfloat16" in analysis.summary
    # the other half precision first (float32 is the planned base case; float64 would teach nothing)
    assert analysis.next_cases[0].change == {"axis": "dtype", "input": "x", "values": ["float16"]}
    assert analysis.next_cases[0].kind in ("probe", "discriminate")


def test_analysis_reads_what_another_writer_recorded(evidence_root, plan_request_dict, result_dicts):
    plan_cases(plan_request_dict("run-1"), root=evidence_root)
    record_result("run-1", result_dicts["passed"]("eager-f32"), root=evidence_root)
    assert analyze_failures("run-1", root=evidence_root).verdict == "inconclusive"
    # A second store object (as another process would have) records the rest.
    record_result("run-1", result_dicts["numerical_mismatch"]("graph-f32"), root=str(evidence_root))
    assert analyze_failures("run-1", root=evidence_root).verdict == "diagnosed"
    manifest = RunStore(evidence_root, "run-1").read_manifest()
    assert [h["status"] for h in manifest["history"]] == ["planned", "running", "inconclusive", "running", "diagnosed"]


def test_analyze_unknown_run_is_refused(evidence_root):
    with pytest.raises(ToolError) as info:
        analyze_failures("nope", root=evidence_root)
    assert info.value.code == "unknown_run"


def test_a_lone_failing_case_gets_isolating_suggestions(evidence_root):
    base = {"id": "lone", "mode": "graph",
            "inputs": [{"name": "x", "shape": [4, 4], "strides": [1, 4], "dtype": "bfloat16"}]}
    req = star_request("run-1", [{"axis": "mode", "values": ["graph"]}], base=base)  # same as base: no new case
    assert [c.id for c in plan_cases(req, root=evidence_root).cases] == ["lone"]
    record_result("run-1", {"case_id": "lone", "status": "numerical_mismatch",
                            "comparisons": [{"output": "y", "passed": False}]}, root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    assert analysis.verdict == "diagnosed" and analysis.failure_axes == []
    assert analysis.failures[0].reason == "output 'y': comparison failed"
    changes = {n.change["axis"]: n.change["values"] for n in analysis.next_cases}
    assert changes["mode"] == ["eager", "compile"]
    assert changes["dtype"] == ["float32"]  # each axis varied once (issue 20), toward a plain case
    assert changes["strides"] == [None]  # contiguous
    assert all("no case passes yet" in n.reason for n in analysis.next_cases)


def test_with_no_passing_case_no_axis_is_said_to_explain_the_failures(evidence_root):
    # eager crashes, graph is unsupported: nothing passed, so nothing contrasts mode=eager
    plan_cases(star_request("run-1", [{"axis": "mode", "values": ["graph"]}]), root=evidence_root)
    record_result("run-1", crash_result("rms"), root=evidence_root)
    record_result("run-1", unsupported_result("rms.mode-graph"), root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    assert analysis.verdict == "diagnosed"
    assert not any(a.explains_all for a in analysis.failure_axes)
    assert "follow mode" not in analysis.summary and "no case passes" in analysis.summary
    # once a case passes, the contrast holds
    plan_cases({"run_id": "run-1", "append": True, "stars": [{
        "base": RunStore(evidence_root, "run-1").read_cases()[0].model_dump(mode="json"), "include_base": False,
        "vary": [{"axis": "mode", "values": ["compile"]}]}]}, root=evidence_root)
    record_result("run-1", {"case_id": "rms.mode-compile", "status": "passed"}, root=evidence_root)
    analysis = analyze_failures("run-1", root=evidence_root)
    top = analysis.failure_axes[0]
    assert (top.axis, top.value, top.explains_all) == ("mode", "eager", True)
    assert "the failures follow mode=eager" in analysis.summary


def test_case_axes_are_stable_strings():
    case = Case.model_validate({
        "id": "c", "mode": "compile", "attributes": {"dims": [0, -1], "keepdim": True, "eps": 1e-6},
        "inputs": [
            {"name": "s", "shape": [], "dtype": "float16"},
            {"name": "x", "shape": [2, 3], "strides": [1, 2], "storage_offset": 5, "layout": "NCHW",
             "values": {"kind": "uniform", "low": -1, "high": 1,
                        "specials": [{"value": "inf", "count": 1}, {"value": "nan", "count": 2}]}},
            {"name": "y", "shape": [2, 3], "strides": [3, 1]}]})
    axes = case_axes(case)
    assert list(axes)[:2] == ["mode", "dtype"]
    assert axes["mode"] == "compile" and axes["dtype"] == "mixed"
    assert axes["s.shape"] == "scalar" and axes["s.strides"] == "contiguous" and axes["s.offset"] == "0"
    assert axes["x.shape"] == "2x3" and axes["x.strides"] == "1,2" and axes["x.offset"] == "5"
    assert axes["x.layout"] == "NCHW" and axes["x.values"] == "uniform(high=1.0,low=-1.0)+inf+nan"
    assert axes["y.strides"] == "contiguous"  # explicit but contiguous strides
    assert axes["attr.dims"] == "[0, -1]" and axes["attr.keepdim"] == "true" and axes["attr.eps"] == "1e-06"
    assert case_axes(Case.model_validate(case.model_dump())) == axes
