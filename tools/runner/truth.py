"""When the float32 truth of half-precision inputs is no truth: widen it to float64.

The reference of float16/bfloat16 inputs runs in float32 (``reference_dtype``
``auto``, as msprobe's CPU golden does).  bfloat16 has float32's range, so a
correct bfloat16 kernel on large values can stay finite (it keeps its
intermediates in range: a two-pass variance, another summation order) where
the float32 reference's own intermediates overflow to Inf, or to NaN
(inf - inf).  Such a NaN/Inf from finite inputs is the reference's overflow,
not the truth: the case's reference runs again in float64, the truth every
other float32 operator already gets (``auto``), and the case's input metadata
says so (``reference_dtype`` and ``reference_widened``).  The gradients of a
case with a backward count alike: a float32 backward that overflows where the
forward did not (``0 * exp(100)``: NaN) widens the case too, and the counted
elements are the outputs' and the gradients' together.  The candidate's own
NaN/Inf where the float32 reference has them is no reason to widen: both agree.
Standard library and torch only.
"""

from __future__ import annotations

import torch

from .compare import name_outputs


def overflowed_truth(candidate, reference, names: list[str] | None) -> int:
    """The elements where a float32 reference output is NaN/Inf and the candidate's (same shape) is
    finite: 0 when the reference is all finite (one pass over each float32 output)."""
    cand = name_outputs(candidate, names)
    count = 0
    for name, r in name_outputs(reference, names).items():
        c = cand.get(name)
        if (
            not isinstance(r, torch.Tensor)
            or r.dtype != torch.float32
            or not isinstance(c, torch.Tensor)
            or list(c.shape) != list(r.shape)
            or not c.dtype.is_floating_point
        ):
            continue
        bad = ~torch.isfinite(r)
        if bool(bad.any()):
            count += int(torch.count_nonzero(bad & torch.isfinite(c.detach().cpu())).item())
    return count


def widened_reference(metadata: dict, elements: int) -> dict:
    """The metadata fields of a case whose reference ran again in float64."""
    for entry in metadata.get("inputs") or []:
        if isinstance(entry, dict) and entry.get("reference_dtype") == "float32":
            entry["reference_dtype"] = "float64"
    return {
        "reference_dtype": "float64",
        "reference_widened": {
            "from": "float32",
            "to": "float64",
            "elements": elements,
            "why": f"the float32 reference was NaN/Inf at {elements} elements where the "
            "candidate is finite: its own overflow, so the truth is float64",
        },
    }
