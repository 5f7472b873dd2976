"""Planted operator kinds shared by tests/test_diagnosis.py and
benchmarks/bench_narrow.py: each is a module in tests/operators/, a first
star with distractors, and the finding the loop must end with."""

from __future__ import annotations

from pathlib import Path

OPERATORS = Path(__file__).resolve().parent.parent / "tests" / "operators"
HALF_TOL = {"atol": 1e-5, "rtol": 1e-5, "per_dtype": {"float16": {"atol": 2e-3, "rtol": 2e-3},
                                                      "bfloat16": {"atol": 2e-2, "rtol": 2e-2}}}


def _x(shape=(4, 32), **kw) -> dict:
    return {"name": "x", "shape": list(shape), **kw}


def _base(inputs=None, **kw) -> dict:
    return {"id": "base", "inputs": inputs or [_x()], "seed": 3, **kw}


DTYPE_DISTRACTOR = {"axis": "dtype", "values": ["float16"]}
STRIDE_DISTRACTOR = {"axis": "strides", "input": "x", "values": [[1, 4]]}
OFFSET_DISTRACTOR = {"axis": "storage_offset", "input": "x", "values": [3]}

# kind -> (operator module, first star, the finding's axis, its exact predicate)
KINDS: dict[str, dict] = {
    "dim_threshold": dict(
        module="planted_tail_dim.py",
        star={"base": _base(), "vary": [{"axis": "shape", "input": "x", "values": [[4, 256]]},
                                        DTYPE_DISTRACTOR, STRIDE_DISTRACTOR]},
        axis="x.shape[-1]", predicate="x.shape[-1] > 64"),
    "numel_threshold": dict(
        module="planted_numel.py",
        star={"base": _base(), "vary": [{"axis": "shape", "input": "x", "values": [[64, 256]]},
                                        DTYPE_DISTRACTOR, OFFSET_DISTRACTOR]},
        axis="x.numel", predicate="x.numel > 4096"),
    "zero_size": dict(
        module="planted_zero_size.py",
        star={"base": _base(), "vary": [{"axis": "shape", "input": "x", "values": [[0, 32]]},
                                        DTYPE_DISTRACTOR, STRIDE_DISTRACTOR]},
        axis="x.zero_size", predicate="x.zero_size"),
    "non_contiguous": dict(
        module="contiguous_only.py",
        star={"base": _base(), "vary": [STRIDE_DISTRACTOR, DTYPE_DISTRACTOR, OFFSET_DISTRACTOR]},
        axis="x.contiguity", predicate="x.contiguity != contiguous"),
    "offset": dict(
        module="planted_offset.py",
        star={"base": _base(), "vary": [{"axis": "storage_offset", "input": "x", "values": [5]},
                                        DTYPE_DISTRACTOR, STRIDE_DISTRACTOR]},
        axis="x.offset", predicate="x.offset > 0"),
    "attribute": dict(
        module="planted_attr.py",
        star={"base": _base(attributes={"reduction": "mean"}),
              "vary": [{"axis": "attribute", "name": "reduction", "values": ["sum", "none"]},
                       DTYPE_DISTRACTOR, STRIDE_DISTRACTOR]},
        axis="attr.reduction", predicate="attr.reduction == 'sum'"),
    "nan": dict(
        module="nan_wrong.py",
        star={"base": _base(), "vary": [{"axis": "values", "input": "x", "values": [
            {"kind": "normal", "specials": [{"value": "nan", "count": 3}]},
            {"kind": "normal", "specials": [{"value": "denormal", "count": 3}]}]},
            DTYPE_DISTRACTOR, STRIDE_DISTRACTOR]},
        axis="x.has_nan", predicate="x.has_nan"),
    "large_values": dict(
        module="planted_large.py",
        star={"base": _base(), "vary": [{"axis": "values", "input": "x", "values": [
            {"kind": "normal", "specials": [{"value": "large", "count": 2}]},
            {"kind": "normal", "specials": [{"value": "nan", "count": 2}]}]},
            STRIDE_DISTRACTOR, OFFSET_DISTRACTOR]},
        axis="x.has_large", predicate="x.has_large"),
    "dtype": dict(
        module="bf16_only.py",
        star={"base": _base(), "vary": [{"axis": "dtype", "values": ["bfloat16"]},
                                        STRIDE_DISTRACTOR, OFFSET_DISTRACTOR]},
        axis="dtype", predicate="dtype == bfloat16"),
    "alignment": dict(
        module="planted_align.py",
        star={"base": _base(), "vary": [{"axis": "shape", "input": "x", "values": [[4, 33]]},
                                        DTYPE_DISTRACTOR, OFFSET_DISTRACTOR]},
        axis="x.last_align", predicate="x.last_align < 16"),
    "rows": dict(
        module="planted_rows_norm.py",
        star={"base": _base([_x((4, 32)), {"name": "weight", "shape": [32]}]),
              "vary": [{"axis": "dim", "dims": ["x.shape[0]"], "values": [32]},
                       {"axis": "dim", "dims": ["x.shape[-1]", "weight.shape[0]"], "values": [64]},
                       DTYPE_DISTRACTOR]},
        axis="x.shape[0]", predicate="x.shape[0] > 8"),
}


def config(run_id: str, module: str) -> dict:
    stem = module[:-3]
    return {"run_id": run_id, "tolerance": HALF_TOL,
            "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref",
                         "modules": [module]}}


def plan_request(run_id: str, kind: str) -> dict:
    spec = KINDS[kind]
    return {"config": config(run_id, spec["module"]), "stars": [spec["star"]],
            "module_sources": {spec["module"]: (OPERATORS / spec["module"]).read_text()}}


# Kinds beyond one clean axis (issue 20): an interaction, a derived quantity, a relation between two
# axes, a values class, and a bug with no clean boundary.  ``predicate`` is the exact finding the loop
# must end with; None: no exact finding may be claimed (``trend`` names the axis the error grows with).
HARD_KINDS: dict[str, dict] = {
    "interaction": dict(
        module="planted_half_long.py",
        star={"base": _base([_x((4, 2048), dtype="float16")]),
              "vary": [{"axis": "dtype", "values": ["float32"]},
                       {"axis": "shape", "input": "x", "values": [[4, 256]]}, OFFSET_DISTRACTOR]},
        axis="dtype & x.shape[-1]", predicate="dtype == float16 and x.shape[-1] > 1024"),
    "bytes": dict(
        module="planted_bytes.py",
        star={"base": _base([_x((4, 256))]), "vary": [{"axis": "shape", "input": "x", "values": [[16, 512]]},
                                                      DTYPE_DISTRACTOR, STRIDE_DISTRACTOR]},
        axis="x.bytes", predicate="x.bytes > 16384"),
    "dims_compared": dict(
        module="planted_tall.py",
        star={"base": _base(), "vary": [{"axis": "shape", "input": "x", "values": [[64, 32]]},
                                        DTYPE_DISTRACTOR, STRIDE_DISTRACTOR]},
        axis="x.shape[0]~x.shape[-1]", predicate="x.shape[0] > x.shape[-1]"),
    "mixed_dtype": dict(
        module="planted_mixed_dtype.py",
        star={"base": _base([_x(), {"name": "y", "shape": [4, 32]}]),
              "vary": [{"axis": "dtype", "input": "x", "values": ["bfloat16"]}, DTYPE_DISTRACTOR,
                       OFFSET_DISTRACTOR]},
        axis="x.dtype~y.dtype", predicate="x.dtype != y.dtype"),
    "rank": dict(
        module="planted_rank.py",
        star={"base": _base(), "vary": [{"axis": "shape", "input": "x", "values": [[2, 4, 32]]},
                                        DTYPE_DISTRACTOR, STRIDE_DISTRACTOR]},
        axis="x.rank", predicate="x.rank > 2"),
    "zero_rows": dict(
        module="planted_zero_rows.py",
        star={"base": _base(), "vary": [{"axis": "values", "input": "x", "values": [
            {"kind": "zeros"}, {"kind": "normal", "std": 0.001}]}, DTYPE_DISTRACTOR, STRIDE_DISTRACTOR]},
        axis="x.zero_rows", predicate="x.zero_rows"),
    "accumulation": dict(
        module="planted_accumulate.py",
        star={"base": _base([_x((8, 64), dtype="float16")]),
              "vary": [{"axis": "shape", "input": "x", "values": [[8, 16], [8, 128], [8, 512], [8, 2048]]},
                       {"axis": "dtype", "values": ["float32"]}]},
        axis=None, predicate=None, trend="x.shape[-1]"),
}


def hard_plan_request(run_id: str, kind: str) -> dict:
    spec = HARD_KINDS[kind]
    return {"config": config(run_id, spec["module"]), "stars": [spec["star"]],
            "module_sources": {spec["module"]: (OPERATORS / spec["module"]).read_text()}}
