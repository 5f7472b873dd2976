"""A baseline host's side of a case (``baseline_host`` in the config).

msprobe judges an NPU output by dividing its error against a CPU golden by
the error of the same API on a GPU against its own CPU golden: each device
measures its own output (stage 1) and only the numbers meet (stage 2).  This
module is that split:

- on the **baseline host** (``config.role == "baseline"``) the worker runs
  the config's baseline callable (``operator.baseline``, else the reference)
  on its device in the case's dtypes, the reference on its CPU, and
  :func:`measure` returns every output's stage-1 numbers for the standard it
  will be judged by, with the sha256 of each input it built;
- on the **candidate host** the case arrives with those numbers
  (``case.baseline_side``); :func:`check_inputs` refuses them unless the
  inputs are the same bytes, and judge.apply_judge divides by them instead of
  running a CPU baseline.

Standard library and torch only.
"""

from __future__ import annotations

from .compare import as_tensor, dtype_name, exact_metrics, name_outputs, precision_metrics
from .inputs import tensors_of
from .judge import BaselineError, choose
from .routing import needs_baseline
from .standards import stage1_in_dtype


def input_digests(built: list) -> dict[str, str]:
    """Each input tensor's sha256 (list members as ``x[0]``), from its metadata."""
    return {b.metadata["name"]: b.metadata["sha256"] for b in tensors_of(built)}


def measure(out, ref_out, *, names: list[str] | None, config: dict, in_dtypes: list[str], built: list) -> dict:
    """The baseline's stage-1 numbers per output against the reference (both on this host)."""
    outs, refs = name_outputs(out, names), name_outputs(ref_out, names)
    measured = {}
    for name, ref in refs.items():
        if ref is None or outs.get(name) is None:
            continue
        o, r = as_tensor(outs[name]), as_tensor(ref)
        dtype = dtype_name(o.dtype)
        standard = choose(config, name, dtype, in_dtypes)["standard"]
        entry = {"dtype": dtype, "shape": list(o.shape), "standard": standard}
        if list(o.shape) == list(r.shape) and o.numel():
            if o.dtype.is_floating_point or o.dtype.is_complex:
                entry["precision"] = precision_metrics(o, r)
                if standard != "benchmark" and needs_baseline(standard):
                    entry["metrics"] = stage1_in_dtype(standard, o, r)
            else:
                entry["mismatch_count"] = exact_metrics(o, r)["mismatch_count"]
        measured[name] = entry
    return {"outputs": measured, "input_sha256": input_digests(built)}


def check_inputs(built: list, side: dict) -> None:
    """Raise BaselineError unless the baseline host built the same input bytes as this host."""
    theirs = side.get("input_sha256") or {}
    ours = input_digests(built)
    differ = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
    if differ:
        raise BaselineError(
            f"the baseline host built other input bytes than the candidate host for "
            f"{', '.join(differ)} (sha256 differ): its numbers cannot be a baseline for this case"
        )
