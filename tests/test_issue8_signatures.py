"""Real torch_npu signatures and dtypes (issue 8), through the MCP server.

One real MCP client over stdio drives ``python -m mcp_server`` on the local
transport (device cpu): tensor-list operators (torch.cat and a grouped matmul
written as a loop in a user module), a dtype attribute (torch.sum(dtype=)),
float8 and complex inputs, a dtype star over integer and floating dtypes
whose value spec is keyed by family (no multi-axis warning), a seeded random
operator, and every catalogue config planned and run with its reference as
the candidate.  Nothing is mocked.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from test_mcp_stdio import with_server
from tools.catalogue import catalogue_names, cpu_self_check, load_config
from tools.schemas import PlanRequest

GROUPED = '''
import torch

def grouped_matmul(x, weight, bias=None):
    out = []
    for i, (xi, wi) in enumerate(zip(x, weight)):
        y = xi @ wi
        out.append(y if bias is None else y + bias[i])
    return out
'''
CAST = '''
def to_float32(x):
    return x.float()
'''


def request(run_id: str, candidate: str, inputs: list, *, attributes=None, vary=None, modules=None, call=None,
            tolerance=None, random=False) -> dict[str, Any]:
    op: dict[str, Any] = {"name": run_id, "candidate": candidate, "reference": candidate}
    if modules:
        op["modules"] = sorted(modules)
    if call:
        op["call"] = call
    if random:
        op["random"] = True
    base = {"id": "base", "inputs": inputs, "attributes": attributes or {}, "seed": 11}
    doc: dict[str, Any] = {"config": {"run_id": run_id, "operator": op,
                                      "tolerance": tolerance or {"atol": 1e-5, "rtol": 1e-5}},
                           "module_sources": modules or {}}
    if vary:
        doc["stars"] = [{"base": base, "vary": vary}]
    else:
        doc["cases"] = [base]
    return doc


REQUESTS = {
    "cat": request("i8-cat", "torch.cat", [{"name": "tensors", "tensors": [
        {"shape": [2, 3]}, {"shape": [4, 3], "strides": [1, 4]}]}], attributes={"dim": 0},
        call={"style": "positional", "order": ["tensors"]},
        vary=[{"axis": "length", "input": "tensors", "values": [3]},
              {"axis": "shape", "input": "tensors", "member": 0, "values": [[5, 3]]},
              {"axis": "dtype", "input": "tensors", "values": ["bfloat16"]}]),
    "gmm": request("i8-gmm", "gmm.grouped_matmul", [
        {"name": "x", "tensors": [{"shape": [4, 8]}, {"shape": [2, 8]}]},
        {"name": "weight", "tensors": [{"shape": [8, 3]}, {"shape": [8, 5]}]},
        {"name": "bias", "tensors": [{"shape": [3]}, {"shape": [5]}]}],
        modules={"gmm.py": GROUPED}, tolerance={"atol": 1e-4, "rtol": 1e-4},
        vary=[{"axis": "none", "input": "bias", "values": [True]},
              {"axis": "shape", "input": "x", "member": 1, "values": [[1, 8]]}]),
    "sum": request("i8-sum", "torch.sum", [{"name": "input", "shape": [4, 6], "dtype": "int8",
                                            "values": {"kind": "randint", "low": -100, "high": 100}}],
                   attributes={"dtype": {"kind": "dtype", "value": "int64"}},
                   vary=[{"axis": "attribute", "name": "dtype", "values": [{"kind": "dtype", "value": "int32"}]}]),
    "f8": request("i8-f8", "cast.to_float32", [{"name": "x", "shape": [16], "dtype": "float8_e4m3fn",
                                                 "values": {"kind": "normal", "std": 1000}}],
                  modules={"cast.py": CAST}, vary=[{"axis": "dtype", "values": ["float8_e5m2"]}]),
    "cplx": request("i8-cplx", "torch.mul", [{"name": "input", "shape": [3, 4], "dtype": "complex64"},
                                              {"name": "other", "shape": [3, 4], "dtype": "complex64"}],
                    vary=[{"axis": "dtype", "values": ["complex128"]}]),
    "family": request("i8-family", "torch.div", [
        {"name": "input", "shape": [8], "dtype": "float32",
         "values": {"by_dtype": {"int": {"kind": "randint", "low": -50, "high": 50},
                                 "uint": {"kind": "randint", "low": 0, "high": 50}}}},
        {"name": "other", "shape": [8], "dtype": "float32",
         "values": {"exclude_zero": True, "by_dtype": {"int": {"kind": "randint", "low": -3, "high": 3,
                                                                "exclude_zero": True},
                                                        "uint": {"kind": "randint", "low": -3, "high": 3,
                                                                 "exclude_zero": True}}}}],
        attributes={"rounding_mode": "floor"},
        vary=[{"axis": "dtype", "values": ["float16", "int8", "uint8", "int32", "int64"]}],
        tolerance={"atol": 1e-3, "rtol": 1e-3}),
    "dropout": request("i8-dropout", "torch.nn.functional.dropout", [{"name": "input", "shape": [64]}],
                       attributes={"p": 0.5, "training": True}, random=True,
                       vary=[{"axis": "attribute", "name": "p", "values": [0.2]}]),
}


@pytest.fixture(scope="module")
def through_mcp(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("evidence")
    catalogue = {op: cpu_self_check(load_config(op)) for op in catalogue_names()}

    async def scenario(client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, doc in [*REQUESTS.items(), *catalogue.items()]:
            plan = await client.call_tool("plan_cases", doc)
            assert not plan.is_error, (key, plan.content)
            run = await client.call_tool("run_case_remote", {"run_id": plan.structured_content["run_id"]})
            assert not run.is_error, (key, run.content)
            out[key] = (plan.structured_content, run.structured_content)
        return out

    return {"root": root, "runs": with_server(root, scenario)}


def outcomes(through_mcp, key: str) -> dict[str, dict]:
    return {o["case_id"]: o for o in through_mcp["runs"][key][1]["outcomes"]}


def metadata(through_mcp, key: str, case_id: str) -> dict:
    run_id = through_mcp["runs"][key][0]["run_id"]
    return json.loads((through_mcp["root"] / run_id / "input-metadata" / f"{case_id}.json").read_text())


def test_tensor_list_operators_plan_axes_and_pass(through_mcp) -> None:
    plan, _ = through_mcp["runs"]["cat"]
    cases = {c["id"]: c for c in plan["cases"]}
    assert set(cases) == {"base", "base.tensors.len-3", "base.tensors.0.shape-5x3", "base.tensors.dtype-bfloat16"}
    assert cases["base"]["axes"]["tensors.len"] == "2"
    assert cases["base"]["axes"]["tensors[1].strides"] == "1,4"
    assert cases["base.tensors.len-3"]["axes"]["tensors[2].shape"] == "4x3"  # the last member copied
    assert cases["base.tensors.0.shape-5x3"]["axes"]["tensors[0].shape"] == "5x3"
    assert plan["warnings"] == []
    assert {o["state"] for o in outcomes(through_mcp, "cat").values()} == {"passed"}
    meta = metadata(through_mcp, "cat", "base.tensors.len-3")
    members = meta["inputs"][0]["members"]
    assert meta["inputs"][0]["kind"] == "list" and [m["name"] for m in members] == ["tensors[0]", "tensors[1]",
                                                                                      "tensors[2]"]
    assert members[1]["strides"] == [1, 4] and members[0]["sha256"] != members[1]["sha256"]

    plan, _ = through_mcp["runs"]["gmm"]
    axes = {c["id"]: c["axes"] for c in plan["cases"]}
    assert axes["base.bias.none-true"]["bias.none"] == "true" and "bias[0].shape" not in axes["base.bias.none-true"]
    assert plan["warnings"] == []
    gmm = outcomes(through_mcp, "gmm")
    assert {o["state"] for o in gmm.values()} == {"passed"} and len(gmm) == 3
    assert metadata(through_mcp, "gmm", "base.bias.none-true")["inputs"][2] == {"name": "bias", "kind": "none"}


def test_dtype_attribute_float8_and_complex_inputs(through_mcp) -> None:
    assert {o["state"] for o in outcomes(through_mcp, "sum").values()} == {"passed"}
    plan, _ = through_mcp["runs"]["sum"]
    assert {c["axes"]["attr.dtype"] for c in plan["cases"]} == {'{"kind": "dtype", "value": "int64"}',
                                                               '{"kind": "dtype", "value": "int32"}'}
    assert {o["state"] for o in outcomes(through_mcp, "f8").values()} == {"passed"}
    meta = metadata(through_mcp, "f8", "base")["inputs"][0]
    assert meta["dtype"] == "float8_e4m3fn" and meta["reference_dtype"] == "float32"
    assert "clamped to [-448, 448]" in meta["conversion"] and "representable" in meta["conversion"]
    assert meta["stats"]["max"] <= 448 and meta["stats"]["min"] >= -448
    e5 = metadata(through_mcp, "f8", "base.dtype-float8_e5m2")["inputs"][0]
    assert "[-57344, 57344]" in e5["conversion"]
    assert {o["state"] for o in outcomes(through_mcp, "cplx").values()} == {"passed"}
    assert metadata(through_mcp, "cplx", "base")["inputs"][0]["reference_dtype"] == "complex64"


def test_dtype_star_over_int_and_float_with_values_per_family(through_mcp) -> None:
    plan, _ = through_mcp["runs"]["family"]
    assert plan["warnings"] == []  # a dtype star with per-family values changes one axis
    states = {o["case_id"]: o["state"] for o in outcomes(through_mcp, "family").values()}
    assert states == {cid: "passed" for cid in ("base", "base.dtype-float16", "base.dtype-int8", "base.dtype-uint8",
                                                "base.dtype-int32", "base.dtype-int64")}
    axes = {c["id"]: c["axes"] for c in plan["cases"]}
    assert axes["base.dtype-uint8"]["other.values"] == "randint(high=3.0,low=-3.0)+nonzero"
    assert axes["base"]["other.values"] == "normal+nonzero"
    other = metadata(through_mcp, "family", "base.dtype-uint8")["inputs"][1]
    assert other["values_from"] == "by_dtype.uint"
    assert "clipped to [0, 3) for uint8" in other["conversion"] and other["stats"]["min"] >= 1


def test_seeded_random_operator_cases_pass(through_mcp) -> None:
    runs = outcomes(through_mcp, "dropout")
    assert {o["state"] for o in runs.values()} == {"passed"} and len(runs) == 2
    assert "torch" in metadata(through_mcp, "dropout", "base")["seeded"]


@pytest.mark.parametrize("op", catalogue_names())
def test_catalogue_config_plans_and_its_reference_runs(through_mcp, op: str) -> None:
    plan, run = through_mcp["runs"][op]
    assert plan["warnings"] == [] and len(plan["cases"]) >= 3
    states = {o["case_id"]: o["state"] for o in run["outcomes"]}
    assert set(states.values()) == {"passed"}, states
    # the shipped config itself (NPU candidate) is a valid plan request
    PlanRequest.model_validate(load_config(op))
    assert load_config(op)["config"]["operator"]["candidate"] == f"torch_npu.{op}"


def test_catalogue_names_the_nine_operators() -> None:
    assert catalogue_names() == sorted(["npu_rms_norm", "npu_add_rms_norm", "npu_rotary_mul", "npu_swiglu",
                                        "npu_dynamic_quant", "npu_quant_matmul", "npu_grouped_matmul",
                                        "npu_moe_gating_top_k_softmax", "npu_fused_infer_attention_score"])
