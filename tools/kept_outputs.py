"""The outputs run_case_remote kept (``keep_outputs``), as JSON an agent can read.

``raw-results/<case>/outputs.pt`` holds both outputs of a mismatching case
(torch.save of ``{"candidate": ..., "reference": ...}``, written by the runner).
Here each output tensor becomes its shape, dtype, element count, how many
elements are NaN/Inf on each side, where the two differ most (the index and
both values) and the first ``MAX_VALUES`` values of each side in row-major
order; the file itself stays readable as a blob (raw evidence).  Torch is
imported when a file is read, never when the server starts.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import ToolError
from .evidence import RunStore

OUTPUTS_FILE = "outputs.pt"
MAX_VALUES = 64  # values shown per side and output; the whole tensors are the blob outputs.pt


def kept_outputs(root: Any, run_id: str, case_id: str) -> dict:
    """The JSON view of one case's kept outputs (ToolError ``no_outputs`` when none were kept)."""
    store = RunStore(root, run_id)
    store.require()
    path = store.raw_dir(case_id) / OUTPUTS_FILE
    if not path.is_file():
        raise ToolError(
            f"case {case_id!r} of run {run_id!r} has no kept outputs: they are kept for a mismatching "
            "case run with run_case_remote keep_outputs=true (plan it again under a new id to keep them)",
            code="no_outputs",
        )
    import torch

    data = torch.load(path, map_location="cpu", weights_only=True)
    names = _output_names(store.read_result_docs().get(case_id) or {})
    candidate, reference = _tensors(data.get("candidate"), names), _tensors(data.get("reference"), names)
    outputs = [_describe(name, candidate[name], reference.get(name)) for name in candidate]
    return {
        "run_id": store.run_id,
        "case_id": case_id,
        "file": str(path),
        "raw_uri": f"opdebug://runs/{store.run_id}/raw/{case_id}/{OUTPUTS_FILE}",
        "values_shown": MAX_VALUES,
        "outputs": outputs,
    }


def _output_names(result: dict) -> list[str]:
    return [c.get("output") for c in result.get("comparisons") or [] if c.get("output")]


def _tensors(value: Any, names: list[str]) -> dict[str, Any]:
    """name -> tensor for a tensor, a tuple/list of them (named as the result's comparisons) or a dict."""
    import torch

    if isinstance(value, torch.Tensor):
        return {names[0] if names else "out": value}
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items() if isinstance(v, torch.Tensor)}
    if isinstance(value, (list, tuple)):
        tensors = [v for v in value if isinstance(v, torch.Tensor)]
        return {(names[i] if i < len(names) else f"out{i}"): t for i, t in enumerate(tensors)}
    return {}


def _describe(name: str, cand: Any, ref: Any) -> dict:
    out: dict = {
        "output": name,
        "shape": list(cand.shape),
        "dtype": str(cand.dtype).removeprefix("torch."),
        "numel": cand.numel(),
        "candidate": _values(cand),
        "candidate_nonfinite": _nonfinite(cand),
    }
    if ref is None:
        return out
    out.update(
        reference_dtype=str(ref.dtype).removeprefix("torch."),
        reference=_values(ref),
        reference_nonfinite=_nonfinite(ref),
    )
    if ref.shape == cand.shape and cand.numel():
        diff = (cand.double() - ref.double()).abs().nan_to_num(nan=math.inf)
        flat = int(diff.reshape(-1).argmax())
        index = [int(i) for i in _unravel(flat, list(cand.shape))]
        out["worst"] = {
            "index": index,
            "candidate": _number(cand.reshape(-1)[flat]),
            "reference": _number(ref.reshape(-1)[flat]),
            "abs_diff": _number(diff.reshape(-1)[flat]),
        }
    return out


def _values(t: Any) -> list:
    return [_number(v) for v in t.reshape(-1)[:MAX_VALUES].tolist()]


def _number(v: Any) -> float | int | bool | str:
    """A JSON value: NaN and infinities as the strings "nan", "inf", "-inf"."""
    v = v.item() if hasattr(v, "item") else v
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _nonfinite(t: Any) -> dict:
    if not (t.is_floating_point() or t.is_complex()):
        return {"nan": 0, "inf": 0}
    return {"nan": int(t.isnan().sum()), "inf": int(t.isinf().sum())}


def _unravel(flat: int, shape: list[int]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return list(reversed(index))
