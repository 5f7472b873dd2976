"""The operator sweep of the judgement tests (tests/test_judge.py) and of
benchmarks/sweep_judge.py: PyTorch operators, the inputs and attributes of
one call each, over every dtype the runner builds.

Each entry: name -> (torch callable, inputs {name: shape}, attributes).
An input named ``condition`` is always bool; ``positive`` values are made in
[0.5, 2) for log/sqrt/rsqrt.  Shapes stay small: the sweep is about dtypes.
"""

from __future__ import annotations

DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")
X = {"input": [4, 8]}
XY = {"input": [4, 8], "other": [4, 8]}

OPS: dict[str, tuple[str, dict, dict]] = {
    "add": ("torch.add", XY, {}),
    "mul": ("torch.mul", XY, {}),
    "div": ("torch.div", XY, {}),
    "sum": ("torch.sum", X, {}),
    "mean": ("torch.mean", X, {}),
    "prod": ("torch.prod", X, {"dim": -1}),
    "std": ("torch.std", X, {}),
    "var": ("torch.var", X, {}),
    "softmax": ("torch.softmax", X, {"dim": -1}),
    "log_softmax": ("torch.log_softmax", X, {"dim": -1}),
    "relu": ("torch.relu", X, {}),
    "silu": ("torch.nn.functional.silu", X, {}),
    "gelu": ("torch.nn.functional.gelu", X, {}),
    "hardtanh": ("torch.nn.functional.hardtanh", X, {"min_val": -1.0, "max_val": 1.0}),
    "exp": ("torch.exp", X, {}),
    "log": ("torch.log", X, {}),
    "sqrt": ("torch.sqrt", X, {}),
    "rsqrt": ("torch.rsqrt", X, {}),
    "sin": ("torch.sin", X, {}),
    "cos": ("torch.cos", X, {}),
    "tanh": ("torch.tanh", X, {}),
    "sigmoid": ("torch.sigmoid", X, {}),
    "matmul": ("torch.matmul", {"input": [4, 8], "other": [8, 3]}, {}),
    "bmm": ("torch.bmm", {"input": [2, 4, 8], "mat2": [2, 8, 3]}, {}),
    "cumsum": ("torch.cumsum", X, {"dim": -1}),
    "amax": ("torch.amax", X, {"dim": -1}),
    "argmax": ("torch.argmax", X, {"dim": -1}),
    "abs": ("torch.abs", X, {}),
    "neg": ("torch.neg", X, {}),
    "floor": ("torch.floor", X, {}),
    "round": ("torch.round", X, {}),
    "clamp": ("torch.clamp", X, {"min": -0.5, "max": 0.5}),
    "where": ("torch.where", {"condition": [4, 8], "input": [4, 8], "other": [4, 8]}, {}),
    "layer_norm": ("torch.nn.functional.layer_norm", X, {"normalized_shape": [8]}),
}
POSITIVE = {"log", "sqrt", "rsqrt"}


def case(op: str, dtype: str, seed: int = 0) -> dict:
    _, inputs, attributes = OPS[op]
    values = {"kind": "uniform", "low": 0.5, "high": 2.0} if op in POSITIVE else {"kind": "normal", "std": 2.0}
    return {"id": f"{op}-{dtype}".replace("_", "-"), "mode": "eager", "seed": seed, "attributes": attributes,
            "inputs": [{"name": n, "shape": s, "dtype": "bool" if n == "condition" else dtype, "values": values}
                       for n, s in inputs.items()]}


def sweep_case(op: str, dtype: str, *, precise: bool = False, seed: int = 0) -> dict:
    """The case for the one-run sweep (candidate sweep_dispatch.call): the op is an attribute."""
    c = case(op, dtype, seed)
    c["attributes"] = dict(c["attributes"], op=OPS[op][0], **({"precise": True} if precise else {}))
    if precise:
        c["id"] = f"{c['id']}-precise"
    return c


def direct_refusal(op: str, dtype: str) -> str | None:
    """PyTorch's own answer: the op called directly on CPU in this dtype raises (its message) or not (None)."""
    from tools.runner.callables import resolve
    from tools.runner.inputs import build_inputs

    c = case(op, dtype)
    built = build_inputs(c, None)
    kwargs = {b.name: b.view() for b in built}
    kwargs.update(c["attributes"])
    try:
        resolve(OPS[op][0])(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the answer
        return f"{type(exc).__name__}: {exc}"
    return None


FLOATING = ("float16", "bfloat16", "float32", "float64")


def grad_case(op: str, dtype: str, *, precise: bool = False, seed: int = 0) -> dict:
    """The sweep case with gradients (issue 23): every floating input's gradient compared
    (``grad_inputs``; ``condition`` is bool and has none)."""
    c = sweep_case(op, dtype, precise=precise, seed=seed)
    c["id"] = "grad-" + c["id"]
    c["grad_inputs"] = [i["name"] for i in c["inputs"] if i["name"] != "condition"]
    return c


def direct_backward_refusal(op: str, dtype: str) -> str | None:
    """PyTorch's own answer for the backward: the op called directly on CPU with its floating
    inputs requiring grad, then autograd.grad of its floating outputs - the exception text, or
    None when it has a backward."""
    import torch

    from tools.runner.callables import resolve
    from tools.runner.inputs import build_inputs

    c = case(op, dtype)
    built = build_inputs(c, None)
    kwargs = {b.name: b.view().clone() for b in built}
    leaves = []
    for name in [n for n in kwargs if n != "condition"]:
        kwargs[name].requires_grad_(True)
        leaves.append(kwargs[name])
    kwargs.update(c["attributes"])
    try:
        out = resolve(OPS[op][0])(**kwargs)
        outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                if isinstance(o, torch.Tensor) and o.requires_grad]
        if not outs:
            return "no output carries a grad_fn"
        torch.autograd.grad(outs, leaves, [torch.ones_like(o) for o in outs], allow_unused=True)
    except Exception as exc:  # noqa: BLE001 - the answer
        return f"{type(exc).__name__}: {exc}"
    return None
