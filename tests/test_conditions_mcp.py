"""Conditions the agent states, tested through the real MCP client over stdio (three planted kinds run
for real on host ``local``: a ratio of a dimension and an attribute, a statistic of the values built
against a dtype limit, an interval of an index input's values).

For each, ``analyze_failures`` answers the conditions stated with it: the right one agrees with
every recorded case, plausible wrong ones are refuted with a named counterexample (a ratio without
its second term; the same ratio read from the wrong end at another rank; a large value alone; a
bound near the table's end), and a misspelt name is a clear error naming the field and listing the
run's properties.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp.client import Client
from test_mcp_stdio import error_text, with_server

RUN = "groups"
MODULE = '''\
import torch


def ref(x, groups=1):
    return torch.nn.functional.group_norm(x, groups)


def cand(x, groups=1):
    out = torch.nn.functional.group_norm(x, groups)
    per = x.shape[1] // groups
    if per > 8 and per % 8 != 0:  # the planted bug: a tail of channels per group is mishandled
        out = out + 0.5
    return out
'''
# (channels, groups, rank): channels per group 8, 12, 16, 8, 10, 6, 18, and 12 at rank 4
CASES = [(16, 2, 3), (36, 3, 3), (48, 3, 3), (24, 3, 3), (20, 2, 3), (18, 3, 3), (72, 4, 3), (36, 3, 4)]
RIGHT = "x.shape[1] // attr.groups > 8 and x.shape[1] // attr.groups % 8 != 0"
NO_TAIL = "x.shape[1] // attr.groups > 8"  # 16 per group passes
FROM_THE_BACK = "x.shape[-2] // attr.groups > 8 and x.shape[-2] // attr.groups % 8 != 0"  # rank 4: -2 is H
PAST_THE_RANK = "x.shape[3] > 1"  # rank-3 cases have no dimension 3


def _id(channels: int, groups: int, rank: int) -> str:
    return f"c{channels}-g{groups}-r{rank}"


def _fails(channels: int, groups: int) -> bool:
    per = channels // groups
    return per > 8 and per % 8 != 0


def _plan() -> dict[str, Any]:
    cases = []
    for channels, groups, rank in CASES:
        shape = [2, channels, 4] if rank == 3 else [2, channels, 2, 2]
        cases.append(
            {
                "id": _id(channels, groups, rank),
                "inputs": [{"name": "x", "shape": shape}],
                "attributes": {"groups": groups},
                "seed": 3,
            }
        )
    config = {
        "run_id": RUN,
        "operator": {"name": "group_norm", "candidate": "gn.cand", "reference": "gn.ref", "modules": ["gn.py"]},
        "tolerance": {"atol": 1e-4, "rtol": 1e-4},
    }
    return {"config": config, "cases": cases, "module_sources": {"gn.py": MODULE}}


def test_stated_conditions_are_tested_on_the_recorded_cases_over_stdio(evidence_root: Path) -> None:
    async def scenario(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["plan"] = await client.call_tool("plan_cases", _plan())
        out["run"] = await client.call_tool("run_case_remote", {"run_id": RUN})
        out["analysis"] = await client.call_tool(
            "analyze_failures", {"run_id": RUN, "conditions": [RIGHT, NO_TAIL, FROM_THE_BACK, PAST_THE_RANK]}
        )
        out["unknown"] = await client.call_tool(
            "analyze_failures", {"run_id": RUN, "conditions": [RIGHT, "x.shape[1] // attr.group > 8"]}
        )
        out["unsafe"] = await client.call_tool("analyze_failures", {"run_id": RUN, "conditions": ["__import__('os')"]})
        out["too_many"] = await client.call_tool("analyze_failures", {"run_id": RUN, "conditions": [RIGHT] * 17})
        return out

    stage = {k: v for k, v in os.environ.items() if k == "OPDEBUG_RUNNER_STAGE"}  # conftest's, per worker
    out = with_server(evidence_root, scenario, env=stage)
    assert not out["plan"].is_error, error_text(out["plan"])
    assert not out["run"].is_error, error_text(out["run"])
    assert not out["analysis"].is_error, error_text(out["analysis"])
    every = [_id(*c) for c in CASES]
    failing = sorted(_id(*c) for c in CASES if _fails(c[0], c[1]))
    analysis = out["analysis"].structured_content
    assert sorted(f["case_id"] for f in analysis["failures"]) == failing  # the planted bug, as run
    right, no_tail, from_back, past = analysis["conditions"]

    assert right["condition"] == RIGHT and right["fate"] == "surviving"
    assert sorted(right["agree"]) == sorted(every) and right["agree_count"] == len(every)
    assert right["contradict"] == [] and right["undefined"] == []

    assert no_tail["fate"] == "refuted" and no_tail["contradict"] == [_id(48, 3, 3)]
    assert no_tail["counterexamples"] == [
        {"case_id": _id(48, 3, 3), "refutes": NO_TAIL, "predicted": "fail", "observed": "pass", "probe": None}
    ]
    assert f"{_id(48, 3, 3)} passed where it is true (attr.groups = 3, x.shape[1] = 48)" in no_tail["text"]

    # x.shape[-2] is the channels at rank 3 but the height at rank 4: the rank-4 failure refutes it
    assert from_back["fate"] == "refuted" and from_back["contradict"] == [_id(36, 3, 4)]
    assert "failed (numerical_mismatch) where it is false" in from_back["text"]

    assert past["undefined_count"] == len(every) - 1 and past["agree"] == [_id(36, 3, 4)]

    # analysis.json keeps the answers of the call
    stored = json.loads((evidence_root / RUN / "analysis.json").read_text())
    assert [c["condition"] for c in stored["conditions"]] == [RIGHT, NO_TAIL, FROM_THE_BACK, PAST_THE_RANK]
    report = (evidence_root / RUN / "report.md").read_text()
    assert f"- `{NO_TAIL}`: **refuted** - refuted by 1 recorded case: {_id(48, 3, 3)} passed" in report

    unknown = error_text(out["unknown"])
    assert "conditions[1]" in unknown and "attr.group is not a property of any case of this run" in unknown
    assert "did you mean attr.groups?" in unknown and "this run's cases have: attr.groups" in unknown
    unsafe = error_text(out["unsafe"])
    assert "conditions[0]" in unsafe and "only min(), max(), abs(), pow2() may be called" in unsafe
    assert "conditions" in error_text(out["too_many"]) and "16" in error_text(out["too_many"])


SUMSQ_RUN = "sumsq"
SUMSQ_MODULE = '''\
import torch


def rms(x):
    ss = (x * x).sum(-1, keepdim=True)  # in x's dtype: a float16 row past 65504 is inf, the row becomes 0
    return x / torch.sqrt(ss / x.shape[-1])


cand = rms
ref = rms  # on CPU with float16 upcast to float32: no overflow
'''
RIGHT_SUMSQ = "x.dtype == float16 and x.values.sumsq[-1] > float16.max"
OUTLIER = "x.values.max_abs > 100"  # a large value alone: 200 passes, and long rows of 3 fail
# where it shows: rows the candidate gives entirely 0 (none in a passing output), though not whole wrong rows:
# a 0 in place of a reference value within atol of 0 is not wrong
ZERO_ROWS = "out.wrong.rows_zero >= 1"
WHOLE_ROWS = "out.wrong.rows >= 1"


def _sumsq_plan() -> dict[str, Any]:
    def case(cid: str, dtype: str, cols: int, values: dict[str, Any]) -> dict[str, Any]:
        return {"id": cid, "inputs": [{"name": "x", "shape": [4, cols], "dtype": dtype, "values": values}], "seed": 5}

    normal = {"kind": "normal"}
    threes = {"kind": "uniform", "low": 2.9, "high": 3.1}
    cases = [
        case("f16-plain", "float16", 64, normal),
        case("f16-300", "float16", 64, {**normal, "place": [{"index": [1, 5], "value": 300.0}]}),  # 9e4 in row 1
        case("f16-200", "float16", 64, {**normal, "place": [{"index": [1, 5], "value": 200.0}]}),  # 4e4
        case("f32-300", "float32", 64, {**normal, "place": [{"index": [1, 5], "value": 300.0}]}),
        case("f16-threes-4096", "float16", 4096, threes),  # about 3.7e4 per row
        case("f16-threes-8192", "float16", 8192, threes),  # about 7.4e4 per row
    ]
    config = {
        "run_id": SUMSQ_RUN,
        "operator": {"name": "rms", "candidate": "rms_mod.cand", "reference": "rms_mod.ref", "modules": ["rms_mod.py"]},
        "tolerance": {"atol": 1e-2, "rtol": 1e-2},
    }
    return {"config": config, "cases": cases, "module_sources": {"rms_mod.py": SUMSQ_MODULE}}


def test_a_statistic_of_the_values_built_against_a_dtype_limit_over_stdio(evidence_root: Path) -> None:
    async def scenario(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {"plan": await client.call_tool("plan_cases", _sumsq_plan())}
        out["run"] = await client.call_tool("run_case_remote", {"run_id": SUMSQ_RUN})
        out["analysis"] = await client.call_tool(
            "analyze_failures", {"run_id": SUMSQ_RUN, "conditions": [RIGHT_SUMSQ, OUTLIER, ZERO_ROWS, WHOLE_ROWS]}
        )
        return out

    stage = {k: v for k, v in os.environ.items() if k == "OPDEBUG_RUNNER_STAGE"}
    out = with_server(evidence_root, scenario, env=stage)
    for step in ("plan", "run", "analysis"):
        assert not out[step].is_error, error_text(out[step])
    analysis = out["analysis"].structured_content
    assert sorted(f["case_id"] for f in analysis["failures"]) == ["f16-300", "f16-threes-8192"]
    right, outlier, zero_rows, whole_rows = analysis["conditions"]
    assert right["fate"] == "surviving" and right["agree_count"] == 6 and right["contradict"] == []
    assert outlier["fate"] == "refuted" and sorted(outlier["contradict"]) == ["f16-200", "f16-threes-8192", "f32-300"]
    assert "f16-200 passed where it is true (x.values.max_abs = 200)" in outlier["text"]
    assert zero_rows["fate"] == "surviving" and zero_rows["agree_count"] == 6
    assert whole_rows["fate"] == "refuted" and whole_rows["contradict"] == ["f16-300"]  # 13 of its 0s are within atol


POS_RUN = "positions"
POS_MODULE = '''\
import torch


def ref(x, positions):
    return x * torch.cos(positions.to(x.dtype)).unsqueeze(-1)


def cand(x, positions):
    clamped = positions.clamp(0, 4095)  # the planted bug: a position outside the table is clamped into it
    return x * torch.cos(clamped.to(x.dtype)).unsqueeze(-1)
'''
RIGHT_POS = "positions.values.min < 0 or positions.values.max > 4095"
NEAR_THE_END = "positions.values.max > 4000"  # 4095 is in the table and passes; negatives fail


def _positions_plan() -> dict[str, Any]:
    def case(cid: str, values: dict[str, Any]) -> dict[str, Any]:
        inputs = [
            {"name": "x", "shape": [8, 16]},
            {"name": "positions", "shape": [8], "dtype": "int64", "values": values},
        ]
        return {"id": cid, "inputs": inputs, "seed": 11}

    cases = [
        case("in-table", {"kind": "randint", "low": 0, "high": 4096}),
        case("last-entry", {"kind": "full", "fill": 4095}),
        case("past-the-end", {"kind": "full", "fill": 4096}),
        case("high", {"kind": "randint", "low": 4000, "high": 5000}),
        case("negative", {"kind": "randint", "low": -20, "high": 0}),
    ]
    config = {
        "run_id": POS_RUN,
        "operator": {
            "name": "rope",
            "candidate": "rope_mod.cand",
            "reference": "rope_mod.ref",
            "modules": ["rope_mod.py"],
        },
        "tolerance": {"atol": 1e-4, "rtol": 1e-4},
    }
    return {"config": config, "cases": cases, "module_sources": {"rope_mod.py": POS_MODULE}}


def test_an_interval_of_an_index_inputs_values_over_stdio(evidence_root: Path) -> None:
    async def scenario(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {"plan": await client.call_tool("plan_cases", _positions_plan())}
        out["run"] = await client.call_tool("run_case_remote", {"run_id": POS_RUN})
        out["analysis"] = await client.call_tool(
            "analyze_failures", {"run_id": POS_RUN, "conditions": [RIGHT_POS, NEAR_THE_END]}
        )
        return out

    stage = {k: v for k, v in os.environ.items() if k == "OPDEBUG_RUNNER_STAGE"}
    out = with_server(evidence_root, scenario, env=stage)
    for step in ("plan", "run", "analysis"):
        assert not out[step].is_error, error_text(out[step])
    analysis = out["analysis"].structured_content
    assert sorted(f["case_id"] for f in analysis["failures"]) == ["high", "negative", "past-the-end"]
    right, near = analysis["conditions"]
    assert right["fate"] == "surviving" and right["agree_count"] == 5
    assert near["fate"] == "refuted" and near["contradict"] == ["last-entry", "negative"]
    assert "last-entry passed where it is true (positions.values.max = 4095)" in near["text"]
    assert "negative failed (numerical_mismatch) where it is false (positions.values.max = " in near["text"]
