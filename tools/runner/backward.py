"""Backward: the operator's gradients, judged like its outputs.

A case whose ``grad_inputs`` (else its config's) name inputs runs the
candidate forward and backward on the device, and the reference (and the
baseline) forward and backward on CPU with autograd:

- the named inputs (a tensor, or every member of a tensor list) are marked
  ``requires_grad`` on each side; an input that cannot have a gradient (an
  integer dtype, None) makes the case ``unsupported``;
- the **upstream gradient** of each differentiated output is built on CPU
  from the case seed exactly like an input (``inputs.build_input``, seeded by
  ``input_seed(seed, -1, "grad_output.<output>")``), in the candidate output's
  dtype, then moved to the device - the reference gets the same values
  upcast to its output's dtype, bit for bit.  ``grad_output`` says how: a
  value spec for every output, ``{output: spec}`` (only those outputs are
  differentiated), or ``"sum"`` / ``"mean"`` (the gradient of that reduction:
  ones, ``1/numel``).  The differentiated outputs are, by default, the
  candidate's floating outputs that carry a ``grad_fn``; a failure to build
  an upstream gradient is a harness error (``where: grad_output``, pending);
- each gradient is an output ``grad.<input>`` (``grad.x[1]`` for a list
  member), compared and judged like a forward output (compare.py, judge.py):
  same tolerances (``tolerance.per_output`` first), same metrics;
- a fault in the candidate's backward is a ``Fault``: classified by the same
  unsupported rules plus the autograd ones below (``derivative for ... is not
  implemented``), else a ``crash``, its error carrying ``phase: backward`` and
  a signature ``backward: ...``; an operator with no derivative (no output
  carries a ``grad_fn``) is ``unsupported``.

Modes: eager; compile (the backward runs through the compiled graph -
AOTAutograd - and is warmed up with the forward inside the compile budget);
graph (forward and backward captured together and replayed, on devices that
capture graphs).  Standard library and torch only.
"""

from __future__ import annotations

import re
import time
from typing import Any

import torch

from .classify import exception_signature, match_unsupported
from .compare import compare_outputs, name_outputs
from .devices import Unsupported
from .inputs import BuiltInput, build_input, input_seed
from .phases import exception_text, grad_names, traceback_tail

PREFIX = "grad."
SIGNATURE_PREFIX = "backward: "
# autograd's own refusals: the operator has no derivative here (unsupported, not a crash)
RULES = (
    r"derivative for .* is not implemented",
    r"must implement either the backward or vjp method",
    r"does not require grad and does not have a grad_fn",
    r"is not differentiable",
)
NO_DERIVATIVE_RULE = "runner: no derivative (no output carries a grad_fn)"
NOT_FLOATING_RULE = "runner: gradients need floating inputs"


class UpstreamError(Exception):
    """The upstream gradient cannot be built as the case says (a harness error: pending)."""


class NoDerivative(Unsupported):
    """The candidate has no derivative here: unsupported, phase backward."""

    phase = "backward"

    def __init__(self, reason: str, rule: str = NO_DERIVATIVE_RULE):
        super().__init__(reason, rule)


class Fault(Exception):
    """The candidate's backward raised ``original``."""

    def __init__(self, original: BaseException):
        super().__init__(str(original))
        self.original = original


class ReferenceGradError(Exception):
    """The reference (or baseline) cannot give the gradients (a harness error)."""


def _is_output_map(spec) -> bool:
    return isinstance(spec, dict) and bool(spec) and all(isinstance(v, dict) for v in spec.values())


class Backward:
    """The backward of one case: which leaves, which outputs, which upstream gradients."""

    def __init__(self, config: dict, case: dict, seed: int, captured_dir: str | None):
        self.names = grad_names(config, case)
        spec = case.get("grad_output")
        if spec is None:
            spec = config.get("grad_output")
        self.spec: str | dict[str, Any] = spec if spec not in (None, {}) else {"kind": "normal"}
        self.seed = seed
        self.captured_dir = captured_dir
        self.output_names = (config.get("operator") or {}).get("outputs")
        self.upstream: list[tuple[str, BuiltInput]] = []  # (output name, upstream gradient on CPU)
        self.metadata: list[dict] = []

    # -- leaves -------------------------------------------------------------

    def require(self, inputs: dict) -> list[tuple[str, torch.Tensor]]:
        """Mark the named inputs ``requires_grad``; their (label, tensor) in order."""
        leaves = []
        for name in self.names:
            value = inputs.get(name)
            members = value if isinstance(value, (list, tuple)) else [value]
            labels = [f"{name}[{j}]" for j in range(len(members))] if isinstance(value, (list, tuple)) else [name]
            for label, t in zip(labels, members, strict=True):
                if not isinstance(t, torch.Tensor):
                    raise NoDerivative(
                        f"grad_inputs names {label!r}, which this case passes as None: a None argument has no gradient",
                        NOT_FLOATING_RULE,
                    )
                if not (t.dtype.is_floating_point or t.dtype.is_complex):
                    raise NoDerivative(
                        f"grad_inputs names {label!r}, whose dtype is "
                        f"{str(t.dtype).replace('torch.', '')}: only floating and complex tensors "
                        "have gradients",
                        NOT_FLOATING_RULE,
                    )
                t.requires_grad_(True)
                leaves.append((label, t))
        return leaves

    # -- upstream gradients -------------------------------------------------------

    def differentiated(self, out) -> list[tuple[str, torch.Tensor, str]]:
        """The candidate's outputs the backward starts from: (name, tensor, grad_output key).  A
        grad_output key may also name an output by position (``out0``, ``out1``: how a capture
        names them) when operator.outputs names them otherwise."""
        named = name_outputs(out, self.output_names)
        if _is_output_map(self.spec):
            positional = list(name_outputs(out, None))
            aliases = dict(zip(positional, named, strict=True)) if len(positional) == len(named) else {}
            chosen = []
            for key in self.spec:
                name = key if key in named else aliases.get(key)
                if name is None:
                    raise UpstreamError(
                        f"grad_output names output {key!r}, which the candidate does not "
                        f"return (its outputs: {sorted(named)})"
                    )
                t = named[name]
                if not isinstance(t, torch.Tensor) or not t.requires_grad:
                    raise NoDerivative(
                        f"the candidate's output {name!r} has no gradient with respect to "
                        f"{', '.join(self.names)} (it carries no grad_fn): the operator has no "
                        "derivative there"
                    )
                chosen.append((name, t, key))
            return chosen
        chosen = [
            (n, t, n)
            for n, t in named.items()
            if isinstance(t, torch.Tensor) and t.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex)
        ]
        if not chosen:
            raise NoDerivative(
                f"no output of the candidate has a gradient with respect to {', '.join(self.names)} "
                f"(outputs {sorted(named)} carry no grad_fn): the operator has no derivative here"
            )
        return chosen

    def build_upstream(self, chosen: list[tuple[str, torch.Tensor, str]]) -> None:
        """The upstream gradient of each output, on CPU, from the case seed (recorded in ``metadata``)."""
        if self.upstream:
            return
        name = None
        try:
            for name, t, key in chosen:
                values = self._values(key, t)
                spec = {
                    "name": f"grad_output.{name}",
                    "shape": list(t.shape),
                    "dtype": str(t.dtype).replace("torch.", ""),
                    "values": values,
                }
                built = build_input(spec, input_seed(self.seed, -1, f"grad_output.{name}"), self.captured_dir)
                meta = dict(built.metadata, output=name)
                if isinstance(self.spec, str):
                    meta["reduction"] = self.spec
                self.upstream.append((name, built))
                self.metadata.append(meta)
        except Exception as exc:  # the harness's, not the operator's
            self.upstream.clear()
            self.metadata.clear()
            raise UpstreamError(
                f"the upstream gradient of output {name!r} could not be built: {type(exc).__name__}: {exc}"
            ) from exc

    def _values(self, name: str, t: torch.Tensor) -> dict:
        if self.spec == "sum":
            return {"kind": "ones"}
        if self.spec == "mean":
            return {"kind": "full", "fill": 1.0 / max(t.numel(), 1)}
        if isinstance(self.spec, str):  # schemas/case.py GradOutput: only these two reductions
            raise UpstreamError(f"grad_output {self.spec!r} is neither 'sum', 'mean' nor a value spec")
        if _is_output_map(self.spec):
            return self.spec[name]
        return self.spec

    # -- the candidate ------------------------------------------------------------

    def candidate(self, out, leaves: list, device, on_backward=None) -> tuple[dict, float]:
        """The candidate's gradients on CPU (``grad.<label>`` -> tensor) and the backward's microseconds.
        Raises UpstreamError, NoDerivative, or Fault (the backward itself raised)."""
        chosen = self.differentiated(out)
        self.build_upstream(chosen)
        if on_backward is not None:
            on_backward(self.metadata)
        grads_out = [device.to_device(u.storage, u.shape, u.strides, u.storage_offset) for _, u in self.upstream]
        t0 = time.perf_counter()
        try:
            grads = torch.autograd.grad([t for _, t, _ in chosen], [t for _, t in leaves], grads_out, allow_unused=True)
            device.synchronize()
        except BaseException as exc:  # the candidate's backward failed: the evidence
            raise Fault(exc) from None
        elapsed = (time.perf_counter() - t0) * 1e6
        return self.collect(leaves, grads), elapsed

    def collect(self, leaves: list, grads) -> dict:
        """Gradients on CPU by output name (an input the outputs do not use: zeros)."""
        out = {}
        for (label, leaf), g in zip(leaves, grads, strict=True):  # autograd.grad: one per input
            g = torch.zeros_like(leaf) if g is None else g
            out[PREFIX + label] = g.detach().cpu()
        return out

    def graph_fn(self, fn, leaves: list, device):
        """``fn`` followed by its backward, for graph capture: returns (out, gradients).
        The upstream gradients are made on the first (warm-up) call and reused by the capture."""
        state: dict = {}

        def forward_backward(*args, **kwargs):
            out = fn(*args, **kwargs)
            chosen = self.differentiated(out)
            if "grads_out" not in state:
                self.build_upstream(chosen)
                state["grads_out"] = [
                    device.to_device(u.storage, u.shape, u.strides, u.storage_offset) for _, u in self.upstream
                ]
            try:
                grads = torch.autograd.grad(
                    [t for _, t, _ in chosen], [t for _, t in leaves], state["grads_out"], allow_unused=True
                )
            except BaseException as exc:  # the candidate's backward failed: the evidence
                raise Fault(exc) from None
            return out, grads

        return forward_backward

    # -- the reference and the baseline (CPU) ----------------------------------------

    def on_cpu(self, out, leaves: list, who: str) -> dict | str:
        """``who``'s (the reference's, the baseline's) gradients on CPU with the same upstream
        values; or a string saying why they cannot be compared (the forward outputs differ in
        shape: the forward comparison shows it).  Raises ReferenceGradError."""
        named = name_outputs(out, self.output_names)
        chosen = []
        for name, up in self.upstream:
            t = named.get(name)
            if not isinstance(t, torch.Tensor):
                return f"not compared: the {who} returns no tensor output {name!r} to start the backward from"
            if list(t.shape) != list(up.shape):
                return (
                    f"not compared: the forward output {name!r} has shape {list(up.shape)} on the candidate, "
                    f"{list(t.shape)} on the {who}"
                )
            if not t.requires_grad:
                raise ReferenceGradError(
                    f"the {who}'s output {name!r} has no gradient with respect to {', '.join(self.names)} (no "
                    "grad_fn): a reference for gradients must be written in differentiable torch operations"
                )
            chosen.append((name, t, up))
        try:
            grads = torch.autograd.grad(
                [t for _, t, _ in chosen],
                [t for _, t in leaves],
                [up.view().to(t.dtype) for _, t, up in chosen],
                allow_unused=True,
            )
        except Exception as exc:  # the trusted side failed: the harness's
            raise ReferenceGradError(f"the {who}'s backward raised {type(exc).__name__}: {exc}") from exc
        return self.collect(leaves, grads)

    def extra_outputs(self, ref_out) -> list[str]:
        """Outputs the reference differentiates that the candidate does not (all-outputs mode only)."""
        if _is_output_map(self.spec):
            return []
        named = name_outputs(ref_out, self.output_names)
        have = {n for n, _ in self.upstream}
        return [
            n
            for n, t in named.items()
            if isinstance(t, torch.Tensor)
            and t.requires_grad
            and (t.dtype.is_floating_point or t.dtype.is_complex)
            and n not in have
        ]

    # -- comparison ---------------------------------------------------------------

    def compare(self, cand: dict, ref, tolerance: dict, strict_dtype: bool) -> list[dict]:
        """One comparison per gradient; ``ref`` a dict of gradients or the reason they are not compared."""
        if isinstance(ref, str):
            return [{"output": name, "contract_mismatch": ref} for name in cand]
        return compare_outputs(cand, ref, names=None, tolerance=tolerance, strict_dtype=strict_dtype)


def classify(fault: Fault, extra_rules: list) -> tuple[str, dict]:
    """(status, fields) of a candidate whose backward raised: unsupported when a rule
    matches (the built-in ones, the config's, autograd's refusals), else crash."""
    exc = fault.original
    exc_type = type(exc).__name__
    message = exception_text(exc)
    tb = traceback_tail(exc)
    rule = match_unsupported(exc_type, message, list(extra_rules) + list(RULES))
    error = {
        "type": exc_type,
        "message": f"phase: backward: {message}"[:20000],
        "traceback_tail": tb,
        "signature": (SIGNATURE_PREFIX + exception_signature(exc_type, message))[:300],
        "phase": "backward",
    }
    if rule is not None:
        error["matched_rule"] = rule
        return "unsupported", {"error": error}
    return "crash", {"error": error}


def mark_dynamic(inputs: dict, dims) -> None:
    """``torch._dynamo.mark_dynamic`` on each ``NAME.shape[INDEX]`` of compile_dynamic; a
    dimension of size 0 or 1 cannot be dynamic (torch specializes it): unsupported."""
    if not isinstance(dims, list):
        return
    import torch._dynamo

    for ref in dims:
        m = re.match(r"^(\w+)\.shape\[(-?\d+)\]$", ref)
        if m is None:
            continue
        t = inputs.get(m.group(1))
        if not isinstance(t, torch.Tensor):
            continue
        index = int(m.group(2)) % max(t.dim(), 1)
        if t.shape[index] < 2:
            raise Unsupported(
                f"compile_dynamic: {ref} has size {t.shape[index]}; torch specializes sizes 0 and 1, "
                "so it cannot be a dynamic dimension",
                "runner: a dynamic dimension needs size >= 2",
            )
        torch._dynamo.mark_dynamic(t, index)
