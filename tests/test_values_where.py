"""The values actually built (CaseResult.values, input-metadata's ``measured``), values placed at
given positions (ValueSpec.place), and where the wrong elements are (Comparison.wrong and its
sentences), end to end through run_case_remote on the local transport with real torch."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from tools.analyze_failures import analyze_failures
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.render.wrong import wrong_sentences
from tools.run_case_remote import run_case_remote
from tools.runner.inputs import build_input
from tools.runner.value_stats import DISTINCT_CAP, measure
from tools.runner.wrong_where import locate
from tools.schemas.case import InputSpec
from tools.schemas.result import WrongWhere

OPERATORS = Path(__file__).resolve().parent / "operators"
FLOAT16_MAX = 65504.0


def plan(root: Path, run_id: str, module: str, cases: list[dict], tolerance: dict) -> None:
    stem = module[:-3]
    config = {"run_id": run_id, "tolerance": tolerance,
              "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref", "modules": [module]}}
    plan_cases({"config": config, "cases": cases, "module_sources": {module: (OPERATORS / module).read_text()}},
               root=root)


def x(shape, std=1.0, dtype="float16", place=None) -> dict:
    values: dict = {"kind": "normal", "std": std}
    if place:
        values["place"] = place
    return {"name": "x", "shape": list(shape), "dtype": dtype, "values": values}


def test_row_sum_of_squares_past_float16_max_is_recorded_and_said(loop, tmp_path: Path) -> None:
    cases = [
        {"id": "base", "inputs": [x((4, 64))]},
        {"id": "outlier", "inputs": [x((4, 64), place=[{"index": [1, 5], "value": 300}])]},
        {"id": "wide-std", "inputs": [x((4, 64), std=40.0)]},  # every row: 64 * 1600 > 65504
        {"id": "short-wide-std", "inputs": [x((4, 16), std=40.0)]},  # the same std, rows too short to overflow
    ]
    plan(tmp_path, "sumsq", "half_row_sumsq.py", cases, {"atol": 1e-2, "rtol": 1e-2})
    resp = loop.run_until_complete(run_case_remote("sumsq", root=tmp_path))
    states = {o.case_id: o.state for o in resp.outcomes}
    assert states == {"base": "passed", "outlier": "numerical_mismatch", "wide-std": "numerical_mismatch",
                      "short-wide-std": "passed"}, resp.outcomes
    results = RunStore(tmp_path, "sumsq").read_results()
    for cid, result in results.items():
        measured = result.values["x"]
        assert (measured.sumsq[-1] > FLOAT16_MAX) == (result.status == "numerical_mismatch"), (cid, measured)
        assert measured.sumsq[1] == measured.sumsq[-1] and measured.numel == (
            64 if cid == "short-wide-std" else 256)
    # the placed outlier: in the recorded max_abs, its row the one that comes out 0
    outlier = results["outlier"]
    assert outlier.values["x"].max_abs == 300 and outlier.values["x"].max == 300
    wrong = outlier.comparisons[0].wrong
    # the row is all 0; its smallest reference elements are within tolerance of 0, so not all of it is "wrong"
    assert wrong is not None and wrong.rows_zero == 1 and wrong.zero_row_index == [1] and 0 < wrong.count < 64
    assert wrong.zeros == wrong.count and wrong.tail == [None, None]
    summary = next(o for o in resp.outcomes if o.case_id == "outlier").summary
    assert "row 1 of 4 is entirely 0" in summary, summary
    assert "every row is entirely 0" in next(o for o in resp.outcomes if o.case_id == "wide-std").summary
    # input-metadata carries the same measurement
    meta = json.loads((tmp_path / "sumsq" / "input-metadata" / "outlier.json").read_text())["inputs"][0]
    assert meta["measured"]["max_abs"] == 300 and meta["measured"]["sumsq"][-1] > FLOAT16_MAX
    # the analysis's answer and report.md say it too
    analysis = analyze_failures("sumsq", root=tmp_path)
    reason = next(f.reason for f in analysis.failures if f.case_id == "outlier")
    assert "row 1 of 4 is entirely 0" in reason and "the wrong elements are 0 where the reference is not" in reason
    assert "row 1 of 4 is entirely 0" in (tmp_path / "sumsq" / "report.md").read_text()


def test_a_placed_value_reaches_candidate_and_reference_at_its_index(loop, tmp_path: Path) -> None:
    out_dir = tmp_path / "seen"
    out_dir.mkdir()
    spec = x((3, 7), dtype="bfloat16", place=[{"index": [2, 6], "value": 300}, {"index": [0, 0], "value": "-inf"}])
    spec.update(strides=[1, 4], storage_offset=2)
    plan(tmp_path, "placed", "recorder.py", [{"id": "c1", "inputs": [spec], "attributes": {"out_dir": str(out_dir)}}],
         {"atol": 1e-2, "rtol": 1e-2})
    resp = loop.run_until_complete(run_case_remote("placed", root=tmp_path))
    assert [o.state for o in resp.outcomes] == ["passed"], resp.outcomes
    cand = torch.load(out_dir / "candidate.pt", weights_only=True)["x"]
    ref = torch.load(out_dir / "reference.pt", weights_only=True)["x"]
    assert cand[2, 6].item() == 300 and cand[0, 0].item() == float("-inf")
    assert torch.equal(cand.float().contiguous().view(torch.int32), ref.contiguous().view(torch.int32))
    measured = RunStore(tmp_path, "placed").read_results()["c1"].values["x"]
    assert measured.max == 300 and measured.max_abs == 300 and measured.inf == 1 and measured.nan == 0


def test_a_tail_block_and_a_period_get_their_sentences(loop, tmp_path: Path) -> None:
    cases = [{"id": mode, "inputs": [x((4, 128), dtype="float32")], "attributes": {"mode": mode}}
             for mode in ("none", "tail", "period")]
    plan(tmp_path, "where", "tail_and_period.py", cases, {"atol": 1e-5, "rtol": 1e-5})
    resp = loop.run_until_complete(run_case_remote("where", root=tmp_path))
    summaries = {o.case_id: (o.state, o.summary) for o in resp.outcomes}
    assert summaries["none"][0] == "passed"
    assert "every wrong element lies at out[..., 96:]" in summaries["tail"][1], summaries
    assert "wrong every 8th column (period 8)" in summaries["period"][1], summaries
    results = RunStore(tmp_path, "where").read_results()
    tail, period = results["tail"].comparisons[0].wrong, results["period"].comparisons[0].wrong
    assert tail.tail == [None, 96] and tail.period == [None, None] and tail.fraction == 0.25
    assert period.period == [None, 8] and period.tail == [None, None] and period.cols == 16
    analysis = analyze_failures("where", root=tmp_path)
    assert any("every wrong element lies at out[..., 96:]" in (f.reason or "") for f in analysis.failures)


def test_measuring_reads_only_and_counts_exactly() -> None:
    built = build_input(x((64, 33), place=[{"index": [3, 4], "value": "nan"}]), seed=7)
    before = built.storage.clone()
    m = measure(built.view())
    assert torch.equal(built.storage.view(torch.int16), before.view(torch.int16))  # bit-identical after
    v = built.view().float()
    finite = torch.where(torch.isfinite(v), v, 0.0).double()
    assert m["nan"] == 1 and m["inf"] == 0 and m["numel"] == 64 * 33
    assert m["sumsq"][-1] == pytest.approx(float((finite * finite).sum(-1).max()))
    assert m["sumsq"][0] == pytest.approx(float((finite * finite).sum(0).max()))
    assert m["sum_abs"][-1] == pytest.approx(float(finite.abs().sum(-1).max()))
    assert m["distinct"] == torch.unique(v[~torch.isnan(v)]).numel() + 1 and not m["distinct_capped"]
    # -0.0 is 0.0, NaN is one value; past the cap the count says "at least"
    assert measure(torch.tensor([0.0, -0.0, float("nan"), float("nan"), 1.0]))["distinct"] == 3
    big = measure(torch.arange(DISTINCT_CAP + 10, dtype=torch.float32))
    assert big["distinct"] == DISTINCT_CAP and big["distinct_capped"] is True
    ints = measure(torch.tensor([[-5, 0, 7], [7, 7, 0]], dtype=torch.int32))
    assert (ints["min"], ints["max"], ints["max_abs"], ints["zeros"], ints["distinct"]) == (-5, 7, 7, 2, 3)
    assert ints["sumsq"] == [25.0 + 49.0, 49.0 + 49.0] and measure(torch.tensor(2.5))["sumsq"] == []


def test_a_placed_value_is_checked_against_the_shape_and_the_dtype() -> None:
    with pytest.raises(ValueError, match=r"values.place\[0\].index \[4, 0\] is outside the input's shape \[4, 8\]"):
        InputSpec.model_validate(x((4, 8), place=[{"index": [4, 0], "value": 1}]))
    with pytest.raises(ValueError, match=r"values.place\[0\].value 'nan' needs a floating dtype"):
        InputSpec.model_validate(dict(x((4, 8), dtype="int32", place=[{"index": [0, 0], "value": "nan"}])))
    with pytest.raises(ValueError, match="at most 64"):
        InputSpec.model_validate(x((4, 8), place=[{"index": [0, 0], "value": 1}] * 65))
    with pytest.raises(Exception, match=r"overflows float16"):
        build_input(x((4, 8), place=[{"index": [0, 0], "value": 1e6}]), seed=1)


def test_wrong_where_names_rows_channels_and_specials() -> None:
    ref = torch.randn(2, 16, 4, 4)
    cand = ref.clone()
    cand[:, 4:8] += 1
    wrong = WrongWhere.model_validate(locate(cand, ref, 1e-5, 1e-5))
    assert wrong.channels == [4, 8]
    assert wrong_sentences(wrong, "y")[0] == "every wrong element lies in channels 4..7 of 16 (y[:, 4:8, ...])"
    cand = ref.clone()
    cand[0, 0, 0, :2] = float("nan")
    wrong = WrongWhere.model_validate(locate(cand, ref, 1e-5, 1e-5))
    assert wrong.nan == wrong.count == 2 and "the wrong elements are NaN where the reference is not" in (
        wrong_sentences(wrong, "y"))
    assert locate(ref, ref.clone(), 1e-5, 1e-5) is None


def test_measuring_16m_elements_stays_modest() -> None:
    """benchmarks/bench_values.py reports the figures; here a generous bound on a shared host."""
    t = torch.randn(4096, 4096)
    start = time.perf_counter()
    m = measure(t)
    took = time.perf_counter() - start
    assert m["numel"] == 1 << 24 and m["distinct_capped"] and took < 20, took


def test_a_trend_reads_the_values_actually_built_not_the_generator_parameter() -> None:
    from tools.analysis.trend import trend_finding
    from tools.schemas.result import CaseResult

    # the generator's std does not order the cases; the values drawn do (std 1022 drew |x| at most 292)
    stds = [1022.0, 8.0, 300.0, 2.0, 40.0, 600.0]
    drawn = [292.0, 3.0, 150.0, 1.0, 20.0, 400.0]
    ids = [f"c{i}" for i in range(6)]
    hax = {c: {"x.magnitude": s} for c, s in zip(ids, stds, strict=True)}
    dist = {c: {"x.values": f"normal(std={s})"} for c, s in zip(ids, stds, strict=True)}
    failing = [c for c, d in zip(ids, drawn, strict=True) if d not in (3.0, 150.0)]
    results = {
        c: CaseResult.model_validate({
            "case_id": c, "status": "numerical_mismatch" if c in failing else "passed",
            "comparisons": [{"output": "out", "passed": c not in failing, "max_abs": d / 1e3, "max_rel": d / 1e3,
                             "mismatch_count": int(c in failing)}],
            "values": {"x": {"numel": 8, "min": -d, "max": d / 2, "max_abs": d}}})
        for c, d in zip(ids, drawn, strict=True)
    }
    found = trend_finding(hax, dist, results, failing, [c for c in ids if c not in failing])
    assert found is not None and found.axis in ("x.values.max_abs", "x.values.min"), found
    assert "values actually built" in found.statement and 1022.0 not in found.failing_values + found.passing_values
