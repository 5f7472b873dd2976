"""Which standard judges an output, and at which level: msprobe 26.2's rules.

Standard library only (the server reads the tables for plan-time checks and
the report).  Sources, in mindstudio-probe 26.2.0
(``msprobe/pytorch/api_accuracy_checker/``; references/behavior.md cites
each line):

- ``L1_API_LIST`` / ``L2_API_LIST`` and ``LEVEL_THRESHOLDS``:
  ``precision_standard/standard_config.py: StandardConfig.L1_API_LIST``,
  ``L2_API_LIST``, ``get_api_level`` and ``get_benchmark_ratio_threshold``.
  A name is matched exactly (msprobe matches the API name of its dump,
  ``Torch.matmul.0`` -> ``matmul``; a backward row takes the forward name).
- ``route``: ``precision_standard/standard_register.py:
  StandardRegistry._get_standard_category``.  In 26.2 every float16,
  bfloat16, float32 and float64 output goes to the benchmark standard (its
  API lists that send matmul to ULP, conv to thousandth and elementwise ops
  to absolute threshold are not consulted for floating outputs: that was
  8.3.x); a float8 output goes to ULP; any float8 input (with a non-float8
  output) to absolute threshold; integer and bool outputs to binary
  consistency, except the integer outputs of the quantization APIs
  (``config.yaml: quantization_api_list``; ``compare/compare.py:
  Comparator._compare_quantization_tensor``).
"""

from __future__ import annotations

MSPROBE = "msprobe 26.2"

STANDARDS = ("benchmark", "ulp", "binary", "thousandth", "absolute", "quantization")
LEVELS = ("L0", "L1", "L2")

L1_API_LIST = frozenset({"embedding", "npu_fusion_attention_grad", "npu_fusion_attention", "scatter_", "scatter_add_"})
L2_API_LIST = frozenset(
    {
        "addmm",
        "npu_cross_entropy_loss",
        "npu_cross_entropy_loss_backward",
        "GELU",
        "layer_norm",
        "matmul",
        "mm",
        "index",
        "one_hot",
        "sum",
        "npu_rms_norm",
        "npu_rms_norm_backward",
        "nonzero",
    }
)
# quantization APIs with integer outputs: pass iff max |cand - truth| <= 1 (msprobe's stage 1; its stage 2
# records SKIP for them, see references/behavior.md)
QUANTIZATION_API_LIST = frozenset({"npu_rms_norm_dynamic_quant", "npu_dynamic_quant", "npu_quant_lightning_indexer"})

# the benchmark standard's ratio thresholds by level: only these three move with the level
LEVEL_THRESHOLDS: dict[str, dict[str, float]] = {
    "L0": {"max_rel": 10.0, "mean_rel": 2.0, "rmse": 2.0},
    "L1": {"max_rel": 5.0, "mean_rel": 1.5, "rmse": 1.5},
    "L2": {"max_rel": 2.0, "mean_rel": 1.2, "rmse": 1.2},
}
SMALL_VALUE_THRESHOLD = 2.0  # every level (StandardConfig._small_value_threshold error_threshold)
EB_THRESHOLD = 2.0  # computed and shown; msprobe leaves it out of the status

FLOAT8 = ("float8_e4m3fn", "float8_e5m2", "hifloat8")
FLOATING = ("float16", "bfloat16", "float32", "float64")
INTEGER = ("bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def api_level(name: str) -> str:
    """msprobe's level of one API name (exact match): L2, else L1, else L0."""
    if name in L2_API_LIST:
        return "L2"
    if name in L1_API_LIST:
        return "L1"
    return "L0"


def api_names(operator: dict) -> list[str]:
    """The names msprobe could know the operator by: the last segment of the
    candidate (``torch_npu.npu_rms_norm`` -> ``npu_rms_norm``,
    ``torch.Tensor.scatter_`` -> ``scatter_``), then ``operator.name``."""
    names = []
    for dotted in (operator.get("candidate") or "", operator.get("name") or ""):
        name = dotted.rsplit(".", 1)[-1].strip()
        if name and name not in names:
            names.append(name)
    return names


def level_for(asked: str | None, operator: dict) -> tuple[str, str]:
    """(level, why).  ``asked`` L0/L1/L2 is taken as given; ``auto`` (or None)
    takes msprobe's level of the first of :func:`api_names` that is in one of
    its lists, else L0 (msprobe's default)."""
    if asked in LEVELS:
        return asked, "the config's judge_level"
    for name in api_names(operator):
        level = api_level(name)
        if level != "L0":
            return level, f"{MSPROBE}'s {level} list names {name}"
    return "L0", f"{MSPROBE}'s default (no level list names {' or '.join(api_names(operator)) or 'the operator'})"


def route(
    out_dtype: str, in_dtypes: list[str], asked: str | None = None, operator: dict | None = None
) -> tuple[str, str]:
    """(standard, why) for one output of dtype ``out_dtype`` (a name such as
    "float16"); ``asked`` a standard from STANDARDS overrides; ``auto`` (or
    None) routes as msprobe 26.2 does."""
    if asked in STANDARDS:
        return asked, "the config's standard"
    if out_dtype in FLOAT8:
        return "ulp", f"a {out_dtype} output ({MSPROBE} routes float8 outputs to ULP)"
    fp8_in = [d for d in in_dtypes if d in FLOAT8]
    if fp8_in:
        return "absolute", f"a {fp8_in[0]} input ({MSPROBE} routes float8 inputs to absolute threshold)"
    if out_dtype in FLOATING or out_dtype.startswith("complex"):
        return "benchmark", f"a {out_dtype} output ({MSPROBE} routes every floating output to the benchmark standard)"
    if out_dtype in INTEGER and any(n in QUANTIZATION_API_LIST for n in api_names(operator or {})):
        return "quantization", f"an integer output of a quantization API ({MSPROBE}: max abs error <= 1)"
    return "binary", f"a {out_dtype} output ({MSPROBE} routes integer and bool outputs to binary consistency)"


def needs_baseline(standard: str) -> bool:
    """The standards that divide by a correct same-dtype computation's metrics (the others use the candidate's)."""
    return standard in ("benchmark", "ulp")
