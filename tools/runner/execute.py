"""Run one case inside the worker: the phases of phases.py, in order.

``execute_case`` returns the worker's answer for the case: either ``outcome:
"result"`` with a CaseResult-shaped ``result`` (no source/recorded_at: the
server adds them), or ``outcome: "harness_error"`` when the callables cannot be
resolved, the inputs cannot be built, or the reference fails - those say
nothing about the operator, so the case stays pending.  ``CaseRun`` holds one
case's state; each of its phase methods raises a ``HarnessFailure`` or an
``OperatorFailure`` (phases.py) when the case ends there.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from . import RUNNER_VERSION
from .backward import Backward, Fault, ReferenceGradError, UpstreamError, mark_dynamic
from .backward import classify as classify_backward
from .baseline import (
    BindingError,
    baseline_inputs,
    binding_hint,
    check_binding,
    is_binding_message,
    raised_at_call,
    same_refusal,
)
from .baseline_side import check_inputs, measure
from .callables import ResolveError, ascend_only_reason, call_arguments, load_user_modules, resolve, resolve_attributes
from .classify import exception_signature, match_unsupported
from .compare import name_outputs
from .consistency import InputGuard, after_first_run, check_writes, declared_writes
from .devices import Device, Unsupported
from .inputs import auto_reference_float, build_case_inputs, case_seed, map_built, reference_inputs, tensors_of
from .value_stats import measure_inputs
from .judge import BaselineError, special_mismatches
from .judging import Judging, compare_and_judge, status_of
from .phases import (
    HarnessFailure,
    OperatorFailure,
    compile_budget,
    exception_text,
    tail,
    traceback_tail,
    wants_gradients,
)
from .seeding import seed_everything
from .truth import overflowed_truth, widened_reference

# Where the transport placed this worker: the device it was given (and how that was
# decided), the visibility variables, and the scheduler job it runs in (Slurm hosts).
PLACEMENT_VARIABLES = (
    "OPDEBUG_DEVICE_ID",
    "OPDEBUG_DEVICE_SOURCE",
    "ASCEND_RT_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURMD_NODENAME",
)
ASCEND_ONLY_RULE = "runner: Ascend-only dtype needs an npu device"


def environment(device: Device) -> dict:
    env = {
        "runner_version": RUNNER_VERSION,
        "hostname": socket.gethostname(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "num_threads": torch.get_num_threads(),
    }
    env.update(device.info())
    placement = {k: os.environ[k] for k in PLACEMENT_VARIABLES if os.environ.get(k)}
    if placement:
        env["placement"] = placement
    return env


def execute_case(request: dict, device: Device, env: dict, on_phase=None) -> dict:
    """Run the case of ``request``; ``on_phase(name, **fields)`` is called as each phase
    of phases.PHASES begins: ``inputs`` once the callables are resolved; ``compile`` or
    ``candidate`` once the inputs are built (``input_metadata``; the supervisor keeps it
    for a worker that dies), ``candidate`` again when compiling is over; ``backward``
    (``grad_outputs``) once the forward returned; ``reference`` once the candidate
    returned; ``baseline``; ``judge`` (``outputs``: the candidate's and the reference's
    on CPU, with gradients dicts of every output by name - a standalone reproducer
    saves them for pictures); ``consistency`` (``step``: ``repeat1``..., ``batch``)
    before each further candidate run."""
    return CaseRun(request, device, env, on_phase).run()


def harness_answer(failure: HarnessFailure) -> dict:
    error = failure.error()
    return {"outcome": "harness_error", "traceback": error["traceback"], "harness_error": error}


class CaseRun:
    """One case in the worker: its request, what each phase built, and the answer so far."""

    def __init__(self, request: dict, device: Device, env: dict, on_phase=None):
        self.request, self.device, self.env = request, device, env
        self.config, self.case = request["config"], request["case"]
        # role "baseline": this host is a baseline host (baseline_host): the baseline callable runs on the
        # device and the answer is its stage-1 numbers (baseline_side.py); case.baseline_side: those numbers
        self.role, self.side = self.config.get("role"), self.case.get("baseline_side")
        op = self.config["operator"]
        if self.role == "baseline":  # the baseline callable takes the candidate's place (and name) on this device
            op = dict(op, candidate=op.get("baseline") or op["reference"])
        self.op = op
        self.judge = self.config.get("judge") or "tolerance"
        self.mode = self.case.get("mode", "eager")
        self.on_phase = on_phase
        self.answer: dict = {}
        self.timing: dict = {}
        self.flags: dict = {}
        self.t_start = time.perf_counter()
        self.compiled: Callable | None = None
        self.guard: InputGuard | None = None
        self.refused_at_call = False  # eager: the candidate's own argument parsing refused the call
        self.cand_grads: dict | None = None
        # a dict of gradients, or why there are none to compare
        self.ref_grads: dict | str | None = None
        self.base_grads: dict | str | None = None
        self.base_out = None

    def enter(self, name: str, **fields) -> None:
        if self.on_phase is not None:
            self.on_phase(name, **fields)

    def run(self) -> dict:
        try:
            self.resolve()
            self.build_inputs()
            self.check_call()
            self.run_candidate()
            self.run_reference()
            if self.role == "baseline":
                return self.measured_here()
            self.run_baseline()
            return self.consistency(self.judged_first_run())
        except HarnessFailure as failure:
            return dict(self.answer, **harness_answer(failure))
        except OperatorFailure as failure:
            return self.result(failure.status, error=failure.error)

    def result(self, status: str, **fields) -> dict:
        self.timing["total_us"] = (time.perf_counter() - self.t_start) * 1e6
        body = {
            "schema_version": 1,
            "case_id": self.case["id"],
            "status": status,
            "comparisons": [],
            "timing_us": self.timing,
            "environment": dict(self.env, **self.flags),
        }
        if getattr(self, "values", None) is not None:
            body["values"] = self.values
        body.update(fields)
        return dict(self.answer, outcome="result", result=body)

    # -- resolve, inputs ------------------------------------------------------------

    def resolve(self) -> None:
        op = self.op
        try:
            load_user_modules(self.request.get("modules_dir"), op.get("modules") or [])
            self.candidate = resolve(op["candidate"])
            self.reference = resolve(op["reference"])
            self.baseline = resolve(op["baseline"]) if op.get("baseline") else self.reference
        except ResolveError as exc:
            raise HarnessFailure("resolve", exc) from None

    def build_inputs(self) -> None:
        self.enter("inputs")
        case, op = self.case, self.op
        try:
            self.built = build_case_inputs(case, self.request.get("captured_dir"))
            self.values = measure_inputs(tensors_of(self.built))  # the values actually built, read only
        except Exception as exc:  # any input failure is the harness's
            raise HarnessFailure("inputs", exc) from None
        self.seed = case_seed(case)
        self.grads = (
            Backward(self.config, case, self.seed, self.request.get("captured_dir"))
            if wants_gradients(self.config, case)
            else None
        )
        # Reference inputs first (the candidate may write into its inputs): the
        # same storages cast by the per-dtype upcast rule (inputs.reference_dtype,
        # recorded per input), viewed with the same strides and offset.
        asked = op.get("reference_dtype", "float32")  # a config without the field predates "auto": float32
        self.ref_float = ref_float = auto_reference_float(self.built) if asked == "auto" else asked
        self.ref_inputs, self.upcast = reference_inputs(self.built, ref_float)
        self.metadata = {
            "case_id": case["id"],
            "seed": self.seed,
            "mode": self.mode,
            "device": self.device.label,
            "reference_dtype": ref_float if asked != "auto" else f"auto: {ref_float}",
            "inputs": [b.metadata for b in self.built],
        }
        if self.grads is not None:  # the upstream gradients' metadata fills in once the forward returned
            self.metadata.update(grad_inputs=self.grads.names, grad_outputs=self.grads.metadata)
        self.answer = {"input_metadata": self.metadata}
        # compiling (or capturing) has a budget of its own; the case timeout starts after it
        self.enter(
            "candidate" if compile_budget(self.config, case) is None else "compile", input_metadata=self.metadata
        )

    def check_call(self) -> None:
        """What can refuse the case before the candidate runs: the device, the attributes, the call's binding."""
        op, device = self.op, self.device
        ascend_only = ascend_only_reason(self.case, device.kind)
        if ascend_only is not None:
            raise OperatorFailure(
                "unsupported",
                {
                    "type": "Unsupported",
                    "message": ascend_only,
                    "signature": f"unsupported: {ASCEND_ONLY_RULE}",
                    "matched_rule": ASCEND_ONLY_RULE,
                },
            )
        try:
            self.attributes = resolve_attributes(self.case.get("attributes") or {}, device.kind)
        except ResolveError as exc:
            raise HarnessFailure("resolve", exc) from None
        try:  # the call's arguments against every callable's signature, before anything runs
            _check_bindings(
                op,
                map_built(self.built, lambda b: None),
                self.attributes,
                [("candidate", self.candidate), ("reference", self.reference)]
                + ([("baseline", self.baseline)] if op.get("baseline") else []),
            )
        except (BindingError, ResolveError) as exc:
            raise HarnessFailure("binding" if isinstance(exc, BindingError) else "resolve", exc) from None
        # the baseline's inputs: the storages as they are (no upcast), copied before the candidate may write them
        self.base_inputs = (
            baseline_inputs(self.built)
            if self.judge != "tolerance" and self.role != "baseline" and self.side is None
            else None
        )
        try:
            self.cand_inputs = map_built(
                self.built, lambda b: device.to_device(b.storage, b.shape, b.strides, b.storage_offset)
            )
        except Exception as exc:
            raise HarnessFailure("inputs", exc) from None

    # -- candidate --------------------------------------------------------------------

    def run_candidate(self) -> None:
        """The candidate on the device: forward (compiled or captured in those modes), then its backward."""
        device, grads, timing = self.device, self.grads, self.timing
        self.t0 = self.t_forward = time.perf_counter()
        try:
            leaves, args, kwargs, guard = self._candidate_call()
            out = self._forward(leaves, args, kwargs)
            device.synchronize()
            self.t_forward = time.perf_counter()
            if grads is not None and self.cand_grads is None:
                self.cand_grads, timing["backward_us"] = grads.candidate(
                    out, leaves, device, lambda meta: self.enter("backward", grad_outputs=meta)
                )
            self.out = _to_cpu(out)
        except UpstreamError as exc:  # the harness could not build the upstream gradient: pending
            raise HarnessFailure("grad_output", exc) from None
        except Fault as exc:  # the candidate's backward raised
            timing["candidate_us"] = (self.t_forward - self.t0) * 1e6
            self.answer["needs_health_check"] = True
            status, fields = classify_backward(exc, self.op.get("unsupported_rules") or [])
            raise OperatorFailure(status, fields["error"]) from None
        except Unsupported as exc:
            timing["candidate_us"] = (time.perf_counter() - self.t0) * 1e6
            error = {
                "type": "Unsupported",
                "message": exc.reason,
                "signature": f"unsupported: {exc.rule}"[:300],
                "matched_rule": exc.rule,
            }
            if exc.phase:
                error["phase"] = exc.phase
            raise OperatorFailure("unsupported", error) from None
        except ResolveError as exc:
            raise HarnessFailure("resolve", exc) from None
        except BaseException as exc:  # the candidate's failure is the evidence
            raise self._candidate_raised(exc) from None
        timing["candidate_us"] = (self.t_forward - self.t0) * 1e6
        g0 = time.perf_counter()
        self.declared = declared_writes(self.op, self.case)
        self.written, self.write_comps = check_writes(guard, self._pristine, self.declared, self.judge)
        timing["input_check_us"] = timing.get("input_check_us", 0.0) + (time.perf_counter() - g0) * 1e6
        self.enter("reference")

    def _candidate_call(self) -> tuple[list, list, dict, InputGuard]:
        """The candidate's inputs in their layouts, gradients required, the call's arguments, the write guard."""
        device, built = self.device, self.built
        self.cand_inputs = map_built(built, lambda b: device.format_cast(_member(self.cand_inputs, b.name), b.layout))
        leaves = self.grads.require(self.cand_inputs) if self.grads is not None else []
        args, kwargs = call_arguments(self.op.get("call"), self.cand_inputs, self.attributes)
        g0 = time.perf_counter()  # fingerprints of the inputs, to see what the candidate writes (consistency.py)
        self.guard = InputGuard({b.name: _member(self.cand_inputs, b.name) for b in tensors_of(built)})
        self.timing["input_check_us"] = (time.perf_counter() - g0) * 1e6
        self.t0 += time.perf_counter() - g0
        self.metadata["seeded"] = seed_everything(self.seed)
        return leaves, args, kwargs, self.guard

    def _forward(self, leaves: list, args: list, kwargs: dict):
        if self.mode == "eager":
            try:
                return self.candidate(*args, **kwargs)
            except BaseException as exc:  # read here, where the traceback starts at the call
                self.refused_at_call = raised_at_call(exc)
                raise
        if self.mode == "compile":
            return self._compiled_forward(args, kwargs)
        if self.mode == "graph":

            def captured():
                self.timing["compile_us"] = (time.perf_counter() - self.t0) * 1e6
                self.enter("candidate")

            grads = self.grads
            fn = grads.graph_fn(self.candidate, leaves, self.device) if grads is not None else self.candidate
            out = self.device.graph_call(fn, args, kwargs, on_captured=captured)
            if grads is not None:  # forward and backward were captured and replayed together
                out, graph_grads = out
                self.cand_grads = grads.collect(leaves, graph_grads)
            return out
        raise Unsupported(f"mode {self.mode!r} is not one of eager, compile, graph", "runner: unknown mode")

    def _compiled_forward(self, args: list, kwargs: dict):
        """Compile (and warm up) on copies of the inputs, so an in-place candidate applies once; then the timed run."""
        device, grads = self.device, self.grads
        dynamic = self.case.get("compile_dynamic")
        self.compiled = compiled = device.compile(self.candidate, self.op.get("compile_backend"), dynamic=dynamic)
        warm = map_built(
            self.built,
            lambda b: device.format_cast(
                device.to_device(b.storage.clone(), b.shape, b.strides, b.storage_offset), b.layout
            ),
        )
        warm_leaves = grads.require(warm) if grads is not None else []
        mark_dynamic(warm, dynamic)
        mark_dynamic(self.cand_inputs, dynamic)
        wargs, wkwargs = call_arguments(self.op.get("call"), warm, self.attributes)
        warm_out = compiled(*wargs, **wkwargs)
        if grads is not None:  # the backward graph is compiled within the compile budget too
            grads.candidate(warm_out, warm_leaves, device)
        device.synchronize()
        self.timing["compile_us"] = (time.perf_counter() - self.t0) * 1e6
        self.enter("candidate")
        seed_everything(self.seed)  # the timed run draws what the reference draws
        self.t0 = time.perf_counter()
        return compiled(*args, **kwargs)

    def _candidate_raised(self, exc: BaseException) -> Exception:
        """The failure of a candidate that raised: a binding refusal (harness), else its crash or unsupported."""
        op, built = self.op, self.built
        self.timing["candidate_us"] = (time.perf_counter() - self.t0) * 1e6
        self.answer["needs_health_check"] = True
        if is_binding_message(exc) and (
            self.refused_at_call
            or _same_on_cpu(self.reference, op, self.base_inputs or baseline_inputs(built), self.attributes, exc)
        ):
            return HarnessFailure(
                "binding",
                BindingError(
                    f"the candidate {op['candidate']} refused the call's arguments: {type(exc).__name__}: "
                    f"{exception_text(exc)}. {binding_hint(op, [b.name for b in built] + list(self.attributes))}"
                ),
            )
        status, error = _classify(exc, op.get("unsupported_rules") or [])
        if self.grads is not None:
            error["phase"] = "forward"
        if status == "crash" and isinstance(exc, Exception):
            # the same call in the same dtypes on CPU refuses it too: outside the operator's contract
            other: list[str] = []
            if _same_on_cpu(self.baseline, op, self.base_inputs or baseline_inputs(built), self.attributes, exc, other):
                error["matched_rule"] = (
                    f"refused by the reference too: {op.get('baseline') or op['reference']} on CPU with the "
                    f"case's dtypes raised the same {type(exc).__name__}"
                )
                status = "unsupported"
            elif other:  # the reference refuses the call another way: not a valid call (shrink rejects it)
                error["reference_error"] = other[0]
        return OperatorFailure(status, error)

    def _pristine(self, label: str):
        """Input ``label`` (``x`` or ``x[1]``) as built from the case seed, a CPU view (for counting what changed)."""
        for b in tensors_of(build_case_inputs(self.case, self.request.get("captured_dir"))):
            if b.name == label:
                return b.view()
        raise KeyError(label)

    # -- reference, baseline ----------------------------------------------------------

    def run_reference(self) -> None:
        """The reference on CPU (upcast), its backward with the same upstream values; run again in float64
        when its float32 outputs overflowed where the candidate's did not (truth.py)."""
        t0 = time.perf_counter()
        self.ref_out = self._reference_on(self.ref_inputs)
        widened = (
            overflowed_truth(self.out, self.ref_out, self.op.get("outputs"))
            if self.upcast and self.ref_float == "float32"
            else 0
        )
        if widened:
            try:
                self.ref_inputs, _ = reference_inputs(
                    build_case_inputs(self.case, self.request.get("captured_dir")), "float64"
                )
            except Exception as exc:  # the same inputs built again: the harness's
                raise HarnessFailure("inputs", exc) from None
            self.ref_out = self._reference_on(self.ref_inputs)
            self.metadata.update(widened_reference(self.metadata, widened))
        self.timing["reference_us"] = (time.perf_counter() - t0) * 1e6
        if (
            not self.upcast
            and _has_float64(self.ref_out)
            and not any(b.storage.dtype == torch.float64 for b in tensors_of(self.built))
        ):
            # the reference widened to float64 on its own (numpy-style math): its output
            # dtype is not the candidate's contract, only its kind is
            self.upcast = True
        if self.side is not None:  # where the baseline ran, in the result's environment
            self.flags["baseline_host"] = {k: self.side.get(k) for k in ("host", "device", "environment")}

    def _reference_on(self, ref_inputs: dict):
        """The reference's outputs (CPU) on ``ref_inputs``, its gradients in ``ref_grads``."""
        op, grads = self.op, self.grads
        extra = None
        try:
            rargs, rkwargs = call_arguments(op.get("call"), ref_inputs, self.attributes)
            ref_leaves = grads.require(ref_inputs) if grads is not None else []
            seed_everything(self.seed)
            ref_out = self.reference(*rargs, **rkwargs)
            if grads is not None:  # the reference's backward, CPU autograd, the same upstream values upcast
                self.ref_grads = grads.on_cpu(ref_out, ref_leaves, "reference")
                extra = grads.extra_outputs(ref_out)
            if not extra:
                ref_out = _to_cpu(ref_out)
                if op.get("random"):
                    self.flags.update(
                        _check_reproducible(
                            self.reference, op, ref_inputs, self.attributes, self.seed, ref_out, self.device
                        )
                    )
        except BaseException as exc:
            raise HarnessFailure("reference", exc) from None
        if grads is not None and extra:
            raise OperatorFailure(
                "unsupported",
                {
                    "type": "NoDerivative",
                    "phase": "backward",
                    "matched_rule": "runner: no derivative",
                    "signature": "unsupported: runner: no derivative",
                    "message": (
                        f"phase: backward: the reference's outputs {extra} have gradients with respect to "
                        f"{', '.join(grads.names)}, the candidate's do not (no grad_fn): the operator has "
                        "no derivative there; name the outputs to differentiate in grad_output "
                        "({output: spec}) to compare the others"
                    ),
                },
            )
        return ref_out

    def measured_here(self) -> dict:
        """On a baseline host: the baseline's stage-1 numbers (with gradients, grad.<input> too)."""
        in_dtypes = [b.dtype for b in tensors_of(self.built)]
        if self.grads is None:
            b_out, b_ref, b_names = self.out, self.ref_out, self.op.get("outputs")
        else:
            (b_out, b_ref), b_names = self._named_outputs(), None
        return self.result(
            "passed",
            baseline_side=measure(
                b_out, b_ref, names=b_names, config=self.config, in_dtypes=in_dtypes, built=self.built
            ),
        )

    def run_baseline(self) -> None:
        """The baseline: a correct computation in the candidate's dtypes, on CPU (judges other than tolerance;
        the tolerance judge runs it only for NaN/Inf it may explain: ``judged_first_run``)."""
        if self.judge == "tolerance" or self.side is not None:
            return
        if self.base_inputs is not None:  # copied by check_call for every judge but tolerance
            self._baseline_run(self.base_inputs)

    def _baseline_run(self, base_inputs: dict) -> None:
        self.enter("baseline")
        op, grads = self.op, self.grads
        t0 = time.perf_counter()
        try:
            bargs, bkwargs = call_arguments(op.get("call"), base_inputs, self.attributes)
            base_leaves = grads.require(base_inputs) if grads is not None else []
            seed_everything(self.seed)
            base_out = self.baseline(*bargs, **bkwargs)
            if grads is not None:
                self.base_grads = grads.on_cpu(base_out, base_leaves, "baseline")
                if isinstance(self.base_grads, str) and isinstance(self.ref_grads, dict):
                    raise ReferenceGradError(self.base_grads)
            self.base_out = _to_cpu(base_out)
        except BaseException as exc:  # a harness matter, not the operator's verdict
            raise HarnessFailure(
                "baseline",
                RuntimeError(
                    f"the baseline ({op.get('baseline') or op['reference']} on CPU in the case's dtypes) failed: "
                    f"{type(exc).__name__}: {exception_text(exc)}; name another operator.baseline or use judge "
                    "'tolerance'"
                ),
            ) from None
        self.timing["baseline_us"] = (time.perf_counter() - t0) * 1e6

    # -- judge, consistency ---------------------------------------------------------

    def _candidate_grads(self) -> dict:
        """The candidate's gradients: run_candidate collects them whenever the case asks for gradients."""
        if self.cand_grads is None:
            raise RuntimeError("the candidate's gradients were never collected")
        return self.cand_grads

    def _named_outputs(self) -> tuple[Any, Any]:
        """(candidate's, reference's) outputs as they are, or with gradients dicts of every output by name."""
        if self.grads is None:
            return self.out, self.ref_out
        names, ref_grads = self.op.get("outputs"), self.ref_grads
        return (
            dict(name_outputs(self.out, names), **self._candidate_grads()),
            dict(name_outputs(self.ref_out, names), **(ref_grads if isinstance(ref_grads, dict) else {})),
        )

    def judged_first_run(self) -> list[dict]:
        """Every output, gradient and written input of the first run, compared and judged.  Under the
        tolerance judge, NaN/Inf that the truth has not are judged again beside the same-dtype baseline,
        run for that (built again from the seed): a correct computation in the output's dtype may have
        them too (a float16 exp that overflows).  No other case pays for a baseline."""
        comparisons = self._judged_all()
        if self.judge == "tolerance" and self.side is None and any(special_mismatches(c) for c in comparisons):
            try:
                self.base_inputs = base_inputs = baseline_inputs(
                    build_case_inputs(self.case, self.request.get("captured_dir"))
                )
                self._baseline_run(base_inputs)
            except Exception as exc:  # the tolerance judge never needed it: judged without it
                self.flags["specials_baseline"] = f"not run, the NaN/Inf judged against the truth alone: {exc}"
                self.base_inputs = self.base_out = self.base_grads = None
                return comparisons
            comparisons = self._judged_all()
        return comparisons

    def _judged_all(self) -> list[dict]:
        self.kept = self._named_outputs()
        self.enter("judge", outputs=self.kept)
        self.judging = Judging(
            self.judge,
            self.config,
            strict_dtype=not self.upcast,
            in_dtypes=[b.dtype for b in tensors_of(self.built)],
            baseline_side=self.side,
        )
        t0 = time.perf_counter()
        try:
            comparisons = compare_and_judge(
                self.judging, self.out, self.ref_out, baseline=self.base_out, names=self.op.get("outputs")
            )
            if self.side is not None:
                check_inputs(self.built, self.side)
            if self.grads is not None:  # each gradient an output grad.<input>, judged like the others
                comparisons += self._judged_gradients(self.grads)
            comparisons += _declared_comparisons(
                self.judging, self.declared, self.cand_inputs, self.ref_inputs, self.base_inputs
            )
            comparisons += self.write_comps  # an input changed that is not declared written: its own failing one
        except BaselineError as exc:
            raise HarnessFailure("baseline", exc) from None
        except Exception as exc:
            raise HarnessFailure("compare", exc) from None
        self.timing["compare_us"] = (time.perf_counter() - t0) * 1e6
        if not comparisons:
            raise HarnessFailure(
                "compare", RuntimeError("neither the candidate nor the reference returned a tensor output to compare")
            )
        return comparisons

    def _judged_gradients(self, grads: Backward) -> list[dict]:
        ref, base = self.ref_grads, self.base_grads  # a dict of gradients, or why there are none to compare
        cand = self._candidate_grads()
        return compare_and_judge(
            self.judging,
            cand,
            ref if isinstance(ref, dict) else None,
            baseline=base if isinstance(base, dict) else None,
            measured=grads.compare(cand, ref, self.judging.tolerance, not self.upcast),
        )

    def consistency(self, comparisons: list[dict]) -> dict:
        """Repeats of a failing (or sampled) case, the batch slice (consistency.py); the case's result."""
        c0 = time.perf_counter()
        status, comparisons, error, consistency = after_first_run(
            self.case,
            self.config,
            comparisons,
            self.out,
            self.written,
            self.guard.notes if self.guard is not None else [],
            self.built,
            invoke=self._invoke,
            judged=self._judged,
            inputs_again=self._inputs_again,
            raised=self._raised,
            on_step=lambda step: self.enter("consistency", step=step),
        )
        more = {"consistency": consistency} if consistency else {}
        if consistency is not None and (consistency.get("repeats") or consistency.get("batch")):
            self.timing["consistency_us"] = (time.perf_counter() - c0) * 1e6
        if status in ("crash", "unsupported"):  # a further run raised (the worst run's)
            return self.result(status, error=error, **more)
        if status == "numerical_mismatch" and self.config.get("keep_outputs_max_bytes"):
            self.answer.update(_kept_outputs(*self.kept, int(self.config["keep_outputs_max_bytes"])))
        return self.result(status, comparisons=comparisons, **more)

    def _judged(self, out) -> tuple:
        comps = compare_and_judge(self.judging, out, self.ref_out, baseline=self.base_out, names=self.op.get("outputs"))
        return status_of(comps), comps

    def _invoke(self, inputs):
        """The candidate again, as the first run called it."""
        a, k = call_arguments(self.op.get("call"), inputs, self.attributes)
        seed_everything(self.seed)
        if self.compiled is not None:
            o = self.compiled(*a, **k)
        elif self.mode == "graph":
            o = self.device.graph_call(self.candidate, a, k)
        else:
            o = self.candidate(*a, **k)
        self.device.synchronize()
        return _to_cpu(o)

    def _inputs_again(self, slice_of=None) -> dict:
        """Bit-identical from the case seed, on the device."""
        return map_built(
            build_case_inputs(self.case, self.request.get("captured_dir")), lambda b: _placed(self.device, b, slice_of)
        )

    def _raised(self, exc) -> dict:
        """A further run that raises: that run's crash (or unsupported)."""
        self.answer["needs_health_check"] = True
        status, error = _classify(exc, self.op.get("unsupported_rules") or [])
        return {"status": status, "error": error, "text": f"{type(exc).__name__}: {exception_text(exc)}"}


def _placed(device: Device, b, slice_of=None):
    """Built input ``b`` on the device; ``slice_of`` = (names, dim, start, length): rows of those inputs
    as a new contiguous tensor (the batch slice)."""
    if slice_of is not None and b.name in slice_of[0]:
        view = b.view().narrow(slice_of[1], slice_of[2], slice_of[3]).contiguous()
        return device.format_cast(
            device.to_device(view.reshape(-1), list(view.shape), list(view.stride()), 0), b.layout
        )
    return device.format_cast(device.to_device(b.storage, b.shape, b.strides, b.storage_offset), b.layout)


def _declared_comparisons(judging: Judging, declared, cand_inputs, ref_inputs, base_inputs) -> list:
    """Declared written inputs (operator.writes, in-place), compared as outputs ``input:NAME``:
    the candidate's input after its call against the reference's after its own."""
    names = [
        n
        for n in sorted(declared)
        if isinstance(cand_inputs.get(n), torch.Tensor) and isinstance(ref_inputs.get(n), torch.Tensor)
    ]
    if not names:
        return []
    label = {n: f"input:{n}" for n in names}
    base = {label[n]: base_inputs[n] for n in names} if base_inputs is not None else None
    return compare_and_judge(
        judging,
        {label[n]: cand_inputs[n].detach().cpu() for n in names},
        {label[n]: ref_inputs[n] for n in names},
        baseline=base,
    )


def _check_bindings(op: dict, names: dict, attributes: dict, callables: list) -> None:
    args, kwargs = call_arguments(op.get("call"), names, attributes)
    for role, fn in callables:
        check_binding(role, op.get(role) or op["reference"], fn, args, kwargs, op)


def _same_on_cpu(
    fn, op: dict, inputs: dict, attributes: dict, exc: BaseException, other_error: list | None = None
) -> bool:
    """``fn`` called the same way on CPU raises the same exception as the candidate; when it raises
    another, its "type: first line" is appended to ``other_error``."""
    try:
        args, kwargs = call_arguments(op.get("call"), inputs, attributes)
        fn(*args, **kwargs)
    except Exception as other:  # compared, never raised
        same = same_refusal(type(exc).__name__, exception_text(exc), other)
        if not same and other_error is not None:
            other_error.append(f"{type(other).__name__}: {(exception_text(other).splitlines() or [''])[0][:300]}")
        return same
    return False


def _kept_outputs(out, ref_out, cap: int) -> dict:
    """Both outputs of a failing case (torch.save, base64) when they fit in ``cap``
    bytes - the server keeps them as raw-results/<case>/outputs.pt for pictures."""
    import base64
    import io

    buf = io.BytesIO()
    try:
        torch.save({"candidate": out, "reference": ref_out}, buf)
    except Exception as exc:  # pictures are optional, the result is not
        return {"outputs_note": f"outputs not kept: torch.save failed ({type(exc).__name__}: {exc})"[:500]}
    if buf.tell() > cap:
        return {"outputs_note": f"outputs not kept: {buf.tell()} bytes, over the cap of {cap}"}
    return {"outputs_b64": base64.b64encode(buf.getvalue()).decode("ascii")}


def _member(inputs: dict, label: str):
    """The device tensor of input ``x`` or list member ``x[j]``."""
    if label.endswith("]") and "[" in label:
        name, index = label[:-1].split("[", 1)
        return inputs[name][int(index)]
    return inputs[label]


def _check_reproducible(reference, op, ref_inputs, attributes, seed, first, device) -> dict:
    """A random operator (``operator.random``): the reference again from the
    same seed must give the same outputs, else it does not draw from the
    seeded generators and no comparison can hold (a harness error).  A
    candidate on a non-CPU device draws from another generator: the result's
    environment says ``nondeterministic``."""
    rargs, rkwargs = call_arguments(op.get("call"), ref_inputs, attributes)
    seed_everything(seed)
    again = _to_cpu(reference(*rargs, **rkwargs))
    if not _same(first, again):
        raise RuntimeError(
            "operator.random: the reference gave different outputs from the same seed twice; it "
            "does not draw from the seeded global generators, so its cases cannot be compared"
        )
    if device.kind != "cpu":
        return {
            "nondeterministic": f"random operator on {device.kind}: the device's generator is not the CPU's, "
            "so candidate and reference draw different numbers"
        }
    return {}


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and bool(
                torch.equal(a, b)
                or (a.dtype.is_floating_point and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)))
            )
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _classify(exc: BaseException, extra_rules: list) -> tuple[str, dict]:
    """(status, error) of a candidate that raised: unsupported when a rule matches, else crash."""
    exc_type = type(exc).__name__
    message = exception_text(exc)
    error = {"type": exc_type, "message": tail(message, 20000), "traceback_tail": traceback_tail(exc)}
    rule = match_unsupported(exc_type, message, extra_rules)
    error["signature"] = exception_signature(exc_type, message)
    if rule is not None:
        error["matched_rule"] = rule
        return "unsupported", error
    return "crash", error


def _has_float64(out) -> bool:
    if isinstance(out, torch.Tensor):
        return out.dtype == torch.float64
    if isinstance(out, (tuple, list)):
        return any(_has_float64(o) for o in out)
    if isinstance(out, dict):
        return any(_has_float64(o) for o in out.values())
    return False


def _to_cpu(out):
    if isinstance(out, torch.Tensor):
        return out.detach().cpu()
    if isinstance(out, tuple):
        return tuple(_to_cpu(o) for o in out)
    if isinstance(out, list):
        return [_to_cpu(o) for o in out]
    if isinstance(out, dict):
        return {k: _to_cpu(v) for k, v in out.items()}
    return out
