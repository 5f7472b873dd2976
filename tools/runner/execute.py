"""Run one case inside the worker: inputs, candidate, reference, comparison.

Returns the worker's answer for the case: either ``outcome: "result"`` with a
CaseResult-shaped ``result`` (no source/recorded_at: the server adds them),
or ``outcome: "harness_error"`` when the callables cannot be resolved, the
inputs cannot be built, or the reference fails - those say nothing about the
operator, so the case stays pending.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback

import torch

from . import RUNNER_VERSION
from .backward import (Backward, Fault, ReferenceGradError, UpstreamError, classify as classify_backward,
                       mark_dynamic, wants_gradients)
from .baseline import (BindingError, baseline_inputs, binding_hint, check_binding, is_binding_message,
                       raised_at_call, same_refusal)
from .callables import ResolveError, ascend_only_reason, call_arguments, load_user_modules, resolve, \
    resolve_attributes
from .classify import exception_signature, match_unsupported
from .baseline_side import check_inputs, measure
from .compare import compare_outputs, name_outputs
from .consistency import InputGuard, after_first_run, check_writes, declared_writes
from .judge import BaselineError, apply_judge
from .devices import Device, Unsupported
from .inputs import auto_reference_float, build_case_inputs, case_seed, map_built, reference_inputs, tensors_of
from .seeding import seed_everything

TAIL = 4000


def tail(text: str, limit: int = TAIL) -> str:
    return text if len(text) <= limit else "..." + text[-(limit - 3):]


# Where the transport placed this worker: the device it was given (and how that was
# decided), the visibility variables, and the scheduler job it runs in (Slurm hosts).
PLACEMENT_VARIABLES = ("OPDEBUG_DEVICE_ID", "OPDEBUG_DEVICE_SOURCE", "ASCEND_RT_VISIBLE_DEVICES",
                       "CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURMD_NODENAME")


def environment(device: Device) -> dict:
    env = {"runner_version": RUNNER_VERSION, "hostname": socket.gethostname(), "python": sys.version.split()[0],
           "torch": torch.__version__, "num_threads": torch.get_num_threads()}
    env.update(device.info())
    placement = {k: os.environ[k] for k in PLACEMENT_VARIABLES if os.environ.get(k)}
    if placement:
        env["placement"] = placement
    return env


def execute_case(request: dict, device: Device, env: dict, on_inputs=None, on_candidate_done=None,
                 on_imported=None, on_outputs=None, on_compile_done=None, on_backward=None, on_step=None) -> dict:
    """``on_imported()`` is called once the user modules are imported and the
    callables resolved (the import has a budget of its own); ``on_inputs(metadata)`` is called once the inputs are built, before the
    candidate runs (the supervisor keeps it for a worker that dies);
    ``on_compile_done()`` in compile and graph modes once the candidate is
    compiled or captured, before the timed run (compiling has its own budget);
    ``on_candidate_done()`` once the candidate returned, before the reference
    runs (the supervisor's case timeout covers the candidate only);
    ``on_outputs(candidate_out, reference_out)`` with both outputs on CPU,
    before they are compared (a standalone reproducer saves them for pictures; with gradients, dicts of
    every output by name, ``grad.<input>`` included); ``on_backward(upstream_metadata)`` once the
    candidate's forward returned and its backward starts (backward.py: a case with grad_inputs);
    ``on_step(name)`` before each further candidate run of the consistency checks (``repeat1``...,
    ``batch``: each gets the case timeout again)."""
    config, case = request["config"], request["case"]
    op = config["operator"]
    # role "baseline": this host is a baseline host (baseline_host): the baseline callable runs on the
    # device and the answer is its stage-1 numbers (baseline_side.py); case.baseline_side: those numbers
    role, side = config.get("role"), case.get("baseline_side")
    if role == "baseline":  # the baseline callable takes the candidate's place (and name) on this device
        op = dict(op, candidate=op.get("baseline") or op["reference"])
    t_start = time.perf_counter()
    try:
        load_user_modules(request.get("modules_dir"), op.get("modules") or [])
        candidate = resolve(op["candidate"])
        reference = resolve(op["reference"])
        baseline = resolve(op["baseline"]) if op.get("baseline") else reference
    except ResolveError as exc:
        return _harness("resolve", exc)
    if on_imported is not None:
        on_imported()
    judge = config.get("judge") or "tolerance"
    try:
        built = build_case_inputs(case, request.get("captured_dir"))
    except Exception as exc:  # noqa: BLE001 - any input failure is the harness's
        return _harness("inputs", exc)
    mode = case.get("mode", "eager")
    seed = case_seed(case)
    grads = Backward(config, case, seed, request.get("captured_dir")) if wants_gradients(config, case) else None
    # Reference inputs first (the candidate may write into its inputs): the
    # same storages cast by the per-dtype upcast rule (inputs.reference_dtype,
    # recorded per input), viewed with the same strides and offset.
    asked = op.get("reference_dtype", "float32")  # a config without the field predates "auto": float32
    ref_float = auto_reference_float(built) if asked == "auto" else asked
    ref_inputs, upcast = reference_inputs(built, ref_float)
    metadata = {"case_id": case["id"], "seed": seed, "mode": mode, "device": device.label,
                "reference_dtype": ref_float if asked != "auto" else f"auto: {ref_float}",
                "inputs": [b.metadata for b in built]}
    if grads is not None:  # the upstream gradients' metadata fills in once the forward returned
        metadata.update(grad_inputs=grads.names, grad_outputs=grads.metadata)
    answer = {"input_metadata": metadata}
    if on_inputs is not None:
        on_inputs(metadata)

    def result(status, **fields):
        timing["total_us"] = (time.perf_counter() - t_start) * 1e6
        body = {"schema_version": 1, "case_id": case["id"], "status": status, "comparisons": [],
                "timing_us": timing, "environment": dict(env, **flags)}
        body.update(fields)
        return dict(answer, outcome="result", result=body)

    timing, flags = {}, {}
    ascend_only = ascend_only_reason(case, device.kind)
    if ascend_only is not None:
        return result("unsupported", error={"type": "Unsupported", "message": ascend_only,
                                            "signature": "unsupported: runner: Ascend-only dtype needs an npu device",
                                            "matched_rule": "runner: Ascend-only dtype needs an npu device"})
    try:
        attributes = resolve_attributes(case.get("attributes") or {}, device.kind)
    except ResolveError as exc:
        return dict(answer, **_harness("resolve", exc))
    try:  # the call's arguments against every callable's signature, before anything runs
        _check_bindings(op, map_built(built, lambda b: None), attributes,
                        [("candidate", candidate), ("reference", reference)] +
                        ([("baseline", baseline)] if op.get("baseline") else []))
    except (BindingError, ResolveError) as exc:
        return dict(answer, **_harness("binding" if isinstance(exc, BindingError) else "resolve", exc))
    # the baseline's inputs: the storages as they are (no upcast), copied before the candidate may write them
    base_inputs = baseline_inputs(built) if judge != "tolerance" and role != "baseline" and side is None else None
    # Candidate on the device.
    try:
        cand_inputs = map_built(built, lambda b: device.to_device(b.storage, b.shape, b.strides, b.storage_offset))
    except Exception as exc:  # noqa: BLE001
        return dict(answer, **_harness("inputs", exc))
    t0 = t_forward = time.perf_counter()
    cand_grads = None
    compiled = guard = None
    try:
        cand_inputs = map_built(built, lambda b: device.format_cast(_member(cand_inputs, b.name), b.layout))
        leaves = grads.require(cand_inputs) if grads is not None else []
        args, kwargs = call_arguments(op.get("call"), cand_inputs, attributes)
        g0 = time.perf_counter()  # fingerprints of the inputs, to see what the candidate writes (consistency.py)
        guard = InputGuard({b.name: _member(cand_inputs, b.name) for b in tensors_of(built)})
        timing["input_check_us"] = (time.perf_counter() - g0) * 1e6
        t0 += time.perf_counter() - g0
        metadata["seeded"] = seed_everything(seed)
        if mode == "eager":
            out = candidate(*args, **kwargs)
        elif mode == "compile":
            # compile (and warm up) on copies of the inputs, so an in-place candidate applies once
            dynamic = case.get("compile_dynamic")
            compiled = device.compile(candidate, op.get("compile_backend"), dynamic=dynamic)
            warm = map_built(built, lambda b: device.format_cast(
                device.to_device(b.storage.clone(), b.shape, b.strides, b.storage_offset), b.layout))
            warm_leaves = grads.require(warm) if grads is not None else []
            mark_dynamic(warm, dynamic)
            mark_dynamic(cand_inputs, dynamic)
            wargs, wkwargs = call_arguments(op.get("call"), warm, attributes)
            warm_out = compiled(*wargs, **wkwargs)
            if grads is not None:  # the backward graph is compiled within the compile budget too
                grads.candidate(warm_out, warm_leaves, device)
            device.synchronize()
            timing["compile_us"] = (time.perf_counter() - t0) * 1e6
            if on_compile_done is not None:
                on_compile_done()
            seed_everything(seed)  # the timed run draws what the reference draws
            t0 = time.perf_counter()
            out = compiled(*args, **kwargs)
        elif mode == "graph":
            def captured():
                timing["compile_us"] = (time.perf_counter() - t0) * 1e6
                if on_compile_done is not None:
                    on_compile_done()
            fn = grads.graph_fn(candidate, leaves, device) if grads is not None else candidate
            out = device.graph_call(fn, args, kwargs, on_captured=captured)
            if grads is not None:  # forward and backward were captured and replayed together
                out, graph_grads = out
                cand_grads = grads.collect(leaves, graph_grads)
        else:
            raise Unsupported(f"mode {mode!r} is not one of eager, compile, graph", "runner: unknown mode")
        device.synchronize()
        t_forward = time.perf_counter()
        if grads is not None and cand_grads is None:
            cand_grads, timing["backward_us"] = grads.candidate(out, leaves, device, on_backward)
        out = _to_cpu(out)
    except UpstreamError as exc:  # the harness could not build the upstream gradient: pending
        return dict(answer, **_harness("grad_output", exc))
    except Fault as exc:  # the candidate's backward raised
        timing["candidate_us"] = (t_forward - t0) * 1e6
        answer["needs_health_check"] = True
        status, fields = classify_backward(exc, op.get("unsupported_rules") or [])
        return result(status, **fields)
    except Unsupported as exc:
        timing["candidate_us"] = (time.perf_counter() - t0) * 1e6
        error = {"type": "Unsupported", "message": exc.reason, "signature": f"unsupported: {exc.rule}"[:300],
                 "matched_rule": exc.rule}
        if getattr(exc, "phase", None):
            error["phase"] = exc.phase
        return result("unsupported", error=error)
    except ResolveError as exc:
        return dict(answer, **_harness("resolve", exc))
    except BaseException as exc:  # noqa: BLE001 - the candidate's failure is the evidence
        timing["candidate_us"] = (time.perf_counter() - t0) * 1e6
        answer["needs_health_check"] = True
        if is_binding_message(exc) and ((mode == "eager" and raised_at_call(exc)) or _same_on_cpu(
                reference, op, base_inputs or baseline_inputs(built), attributes, exc)):
            return dict(answer, **_harness("binding", BindingError(
                f"the candidate {op['candidate']} refused the call's arguments: {type(exc).__name__}: "
                f"{_text(exc)}. {binding_hint(op, [b.name for b in built] + list(attributes))}")))
        status, fields = _classify(exc, op.get("unsupported_rules") or [])
        if grads is not None:
            fields["error"]["phase"] = "forward"
        if status == "crash" and isinstance(exc, Exception):
            # the same call in the same dtypes on CPU refuses it too: outside the operator's contract
            other: list[str] = []
            if _same_on_cpu(baseline, op, base_inputs or baseline_inputs(built), attributes, exc, other):
                fields["error"]["matched_rule"] = (
                    f"refused by the reference too: {op.get('baseline') or op['reference']} on CPU with the "
                    f"case's dtypes raised the same {type(exc).__name__}")
                status = "unsupported"
            elif other:  # the reference refuses the call another way: not a valid call (shrink rejects it)
                fields["error"]["reference_error"] = other[0]
        return result(status, **fields)
    timing["candidate_us"] = (t_forward - t0) * 1e6
    g0 = time.perf_counter()
    declared = declared_writes(op, case)
    written, write_comps = check_writes(guard, lambda label: _pristine(case, request, label), declared, judge)
    timing["input_check_us"] = timing.get("input_check_us", 0.0) + (time.perf_counter() - g0) * 1e6
    if on_candidate_done is not None:
        on_candidate_done()

    t0 = time.perf_counter()
    ref_grads = base_grads = None
    try:
        rargs, rkwargs = call_arguments(op.get("call"), ref_inputs, attributes)
        ref_leaves = grads.require(ref_inputs) if grads is not None else []
        seed_everything(seed)
        ref_out = reference(*rargs, **rkwargs)
        if grads is not None:  # the reference's backward, CPU autograd, the same upstream values upcast
            ref_grads = grads.on_cpu(ref_out, ref_leaves, "reference")
            extra = grads.extra_outputs(ref_out)
            if extra:
                return result("unsupported", error={
                    "type": "NoDerivative", "phase": "backward", "matched_rule": "runner: no derivative",
                    "signature": "unsupported: runner: no derivative",
                    "message": (f"phase: backward: the reference's outputs {extra} have gradients with respect to "
                                f"{', '.join(grads.names)}, the candidate's do not (no grad_fn): the operator has "
                                "no derivative there; name the outputs to differentiate in grad_output "
                                "({output: spec}) to compare the others")})
        ref_out = _to_cpu(ref_out)
        if op.get("random"):
            flags.update(_check_reproducible(reference, op, ref_inputs, attributes, seed, ref_out, device))
    except BaseException as exc:  # noqa: BLE001
        return dict(answer, **_harness("reference", exc))
    timing["reference_us"] = (time.perf_counter() - t0) * 1e6
    if not upcast and _has_float64(ref_out) and not any(b.storage.dtype == torch.float64 for b in tensors_of(built)):
        # the reference widened to float64 on its own (numpy-style math): its output
        # dtype is not the candidate's contract, only its kind is
        upcast = True

    in_dtypes = [b.dtype for b in tensors_of(built)]
    if side is not None:  # where the baseline ran, in the result's environment
        flags["baseline_host"] = {k: side.get(k) for k in ("host", "device", "environment")}
    if role == "baseline":  # with gradients, the baseline host measures them too (grad.<input>)
        b_out, b_ref, b_names = (out, ref_out, op.get("outputs")) if grads is None else (
            dict(name_outputs(out, op.get("outputs")), **cand_grads),
            dict(name_outputs(ref_out, op.get("outputs")), **(ref_grads if isinstance(ref_grads, dict) else {})), None)
        return result("passed", baseline_side=measure(b_out, b_ref, names=b_names, config=config,
                                                      in_dtypes=in_dtypes, built=built))
    base_out = None
    if judge != "tolerance" and side is None:  # the baseline: a correct computation in the candidate's dtypes, on CPU
        t0 = time.perf_counter()
        try:
            bargs, bkwargs = call_arguments(op.get("call"), base_inputs, attributes)
            base_leaves = grads.require(base_inputs) if grads is not None else []
            seed_everything(seed)
            base_out = baseline(*bargs, **bkwargs)
            if grads is not None:
                base_grads = grads.on_cpu(base_out, base_leaves, "baseline")
                if isinstance(base_grads, str) and isinstance(ref_grads, dict):
                    raise ReferenceGradError(base_grads)
            base_out = _to_cpu(base_out)
        except BaseException as exc:  # noqa: BLE001 - a harness matter, not the operator's verdict
            return dict(answer, **_harness("baseline", RuntimeError(
                f"the baseline ({op.get('baseline') or op['reference']} on CPU in the case's dtypes) failed: "
                f"{type(exc).__name__}: {_text(exc)}; name another operator.baseline or use judge 'tolerance'")))
        timing["baseline_us"] = (time.perf_counter() - t0) * 1e6

    kept = (out, ref_out) if grads is None else (
        dict(name_outputs(out, op.get("outputs")), **cand_grads),
        dict(name_outputs(ref_out, op.get("outputs")), **(ref_grads if isinstance(ref_grads, dict) else {})))
    if on_outputs is not None:
        on_outputs(*kept)
    t0 = time.perf_counter()
    try:
        comparisons = compare_outputs(out, ref_out, names=op.get("outputs"), tolerance=config.get("tolerance") or {},
                                      strict_dtype=not upcast)
        if side is not None:
            check_inputs(built, side)
        apply_judge(comparisons, judge, baseline=base_out, reference=ref_out, names=op.get("outputs"), candidate=out,
                    config=config, in_dtypes=in_dtypes, baseline_side=side)
        if grads is not None:  # each gradient an output grad.<input>, judged like the others
            grad_comps = grads.compare(cand_grads, ref_grads, config.get("tolerance") or {}, not upcast)
            apply_judge(grad_comps, judge, baseline=base_grads if isinstance(base_grads, dict) else None,
                        reference=ref_grads if isinstance(ref_grads, dict) else None, names=None,
                        candidate=cand_grads, config=config, in_dtypes=in_dtypes, baseline_side=side)
            comparisons += grad_comps
        comparisons += _declared_comparisons(declared, cand_inputs, ref_inputs, base_inputs, config, judge, upcast,
                                             in_dtypes, side)
        comparisons += write_comps  # an input changed that is not declared written: its own failing comparison
    except BaselineError as exc:
        return dict(answer, **_harness("baseline", exc))
    except Exception as exc:  # noqa: BLE001
        return dict(answer, **_harness("compare", exc))
    timing["compare_us"] = (time.perf_counter() - t0) * 1e6
    if not comparisons:
        return dict(answer, **_harness("compare", RuntimeError(
            "neither the candidate nor the reference returned a tensor output to compare")))
    status = "passed" if all(c["passed"] for c in comparisons) else "numerical_mismatch"

    # Consistency checks (issue 21, consistency.py): repeats of a failing (or sampled) case, the batch slice.
    def judged(o) -> tuple:
        comps = compare_outputs(o, ref_out, names=op.get("outputs"), tolerance=config.get("tolerance") or {},
                                strict_dtype=not upcast)
        apply_judge(comps, judge, baseline=base_out, reference=ref_out, names=op.get("outputs"), candidate=o,
                    config=config, in_dtypes=in_dtypes, baseline_side=side)
        return ("passed" if all(c["passed"] for c in comps) else "numerical_mismatch"), comps

    def invoke(inputs):  # the candidate again, as the first run called it
        a, k = call_arguments(op.get("call"), inputs, attributes)
        seed_everything(seed)
        o = compiled(*a, **k) if compiled is not None else device.graph_call(candidate, a, k) \
            if mode == "graph" else candidate(*a, **k)
        device.synchronize()
        return _to_cpu(o)

    def inputs_again(slice_of=None) -> dict:  # bit-identical from the case seed, on the device
        return map_built(build_case_inputs(case, request.get("captured_dir")), lambda b: _placed(device, b, slice_of))

    def raised(exc) -> dict:  # a further run that raises: that run's crash (or unsupported)
        answer["needs_health_check"] = True
        st, fields = _classify(exc, op.get("unsupported_rules") or [])
        return {"status": st, "error": fields["error"], "text": f"{type(exc).__name__}: {_text(exc)}"}

    c0 = time.perf_counter()
    status, comparisons, error, consistency = after_first_run(
        case, config, comparisons, out, written, guard.notes if guard is not None else [], built,
        invoke=invoke, judged=judged, inputs_again=inputs_again, raised=raised, on_step=on_step)
    if consistency is not None and (consistency.get("repeats") or consistency.get("batch")):
        timing["consistency_us"] = (time.perf_counter() - c0) * 1e6
    if status in ("crash", "unsupported"):  # a further run raised (the worst run's)
        return result(status, error=error, **({"consistency": consistency} if consistency else {}))
    if status == "numerical_mismatch" and config.get("keep_outputs_max_bytes"):
        answer.update(_kept_outputs(*kept, int(config["keep_outputs_max_bytes"])))
    return result(status, comparisons=comparisons, **({"consistency": consistency} if consistency else {}))


def _placed(device: Device, b, slice_of=None):
    """Built input ``b`` on the device; ``slice_of`` = (names, dim, start, length): rows of those inputs
    as a new contiguous tensor (the batch slice)."""
    if slice_of is not None and b.name in slice_of[0]:
        view = b.view().narrow(slice_of[1], slice_of[2], slice_of[3]).contiguous()
        return device.format_cast(device.to_device(view.reshape(-1), list(view.shape), list(view.stride()), 0),
                                  b.layout)
    return device.format_cast(device.to_device(b.storage, b.shape, b.strides, b.storage_offset), b.layout)


def _pristine(case: dict, request: dict, label: str):
    """Input ``label`` (``x`` or ``x[1]``) as built from the case seed, a CPU view (for counting what changed)."""
    for b in tensors_of(build_case_inputs(case, request.get("captured_dir"))):
        if b.name == label:
            return b.view()
    raise KeyError(label)


def _declared_comparisons(declared, cand_inputs, ref_inputs, base_inputs, config, judge, upcast,
                          in_dtypes=None, side=None) -> list:
    """Declared written inputs (operator.writes, in-place), compared as outputs ``input:NAME``:
    the candidate's input after its call against the reference's after its own."""
    names = [n for n in sorted(declared) if isinstance(cand_inputs.get(n), torch.Tensor)
             and isinstance(ref_inputs.get(n), torch.Tensor)]
    if not names:
        return []
    label = {n: f"input:{n}" for n in names}
    comps = compare_outputs({label[n]: cand_inputs[n].detach().cpu() for n in names},
                            {label[n]: ref_inputs[n] for n in names}, names=None,
                            tolerance=config.get("tolerance") or {}, strict_dtype=not upcast)
    base = {label[n]: base_inputs[n] for n in names} if base_inputs is not None else None
    apply_judge(comps, judge, baseline=base, reference={label[n]: ref_inputs[n] for n in names}, names=None,
                candidate={label[n]: cand_inputs[n].detach().cpu() for n in names}, config=config,
                in_dtypes=in_dtypes, baseline_side=side)
    return comps


def _check_bindings(op: dict, names: dict, attributes: dict, callables: list) -> None:
    args, kwargs = call_arguments(op.get("call"), names, attributes)
    for role, fn in callables:
        check_binding(role, op.get(role) or op["reference"], fn, args, kwargs, op)


def _same_on_cpu(fn, op: dict, inputs: dict, attributes: dict, exc: BaseException,
                 other_error: list | None = None) -> bool:
    """``fn`` called the same way on CPU raises the same exception as the candidate; when it raises
    another, its "type: first line" is appended to ``other_error``."""
    try:
        args, kwargs = call_arguments(op.get("call"), inputs, attributes)
        fn(*args, **kwargs)
    except Exception as other:  # noqa: BLE001 - compared, never raised
        same = same_refusal(type(exc).__name__, _text(exc), other)
        if not same and other_error is not None:
            other_error.append(f"{type(other).__name__}: {(_text(other).splitlines() or [''])[0][:300]}")
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
    except Exception as exc:  # noqa: BLE001 - pictures are optional, the result is not
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
        raise RuntimeError("operator.random: the reference gave different outputs from the same seed twice; it "
                           "does not draw from the seeded global generators, so its cases cannot be compared")
    if device.kind != "cpu":
        return {"nondeterministic": f"random operator on {device.kind}: the device's generator is not the CPU's, "
                                    "so candidate and reference draw different numbers"}
    return {}


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b) or (
            a.dtype.is_floating_point and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _classify(exc: BaseException, extra_rules: list) -> tuple:
    exc_type = type(exc).__name__
    message = _text(exc)
    tb = tail("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    rule = match_unsupported(exc_type, message, extra_rules)
    error = {"type": exc_type, "message": tail(message, 20000), "traceback_tail": tb}
    if rule is not None:
        error.update(signature=exception_signature(exc_type, message), matched_rule=rule)
        return "unsupported", {"error": error}
    error["signature"] = exception_signature(exc_type, message)
    return "crash", {"error": error}


def _text(exc: BaseException) -> str:
    try:
        return str(exc) or repr(exc)
    except Exception as inner:  # noqa: BLE001 - the candidate's exception cannot say what it is
        return f"<{type(exc).__name__}: str() failed with {type(inner).__name__}>"


def _harness(where: str, exc: BaseException) -> dict:
    tb = tail("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    return {"outcome": "harness_error", "traceback": tb,
            "harness_error": {"where": where, "type": type(exc).__name__, "message": tail(_text(exc)),
                              "traceback": tb}}


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
