"""Consistency checks of one case, inside the worker.

- **Inputs the candidate writes**: every tensor input's storage is
  fingerprinted on the device just before the candidate call and checked
  right after it: a storage of at most ``COPY_BYTES`` is kept as a copy and
  compared byte for byte; a larger one by the sum of its bytes taken as int64
  words plus an exact copy of every ``SAMPLE_STRIDE``-th word (a change of
  values moves the sum, a permutation hits the sample).  Only when something
  changed is the input rebuilt from the case seed to count the elements that
  changed.  Declared written inputs (``operator.writes``, or the first input
  of an in-place candidate whose name ends in ``_``) are compared with the
  reference's input after its call instead, like outputs.
- **Repeats**: the candidate again, on the same worker, with the inputs
  rebuilt bit-identically from the case seed; every run judged like the first
  and its outputs compared bit for bit (bytes) with the other runs'.
- **Batch invariance**: the candidate on a slice of one input's batch
  dimension (a new, contiguous tensor); the same rows of the full run's
  outputs must equal it bit for bit (or within the tolerance).

Standard library and torch only; execute.py calls it at three points: the
fingerprints before the candidate (InputGuard), the check after it
(check_writes), and the further runs once the first is judged
(after_first_run).
"""

from __future__ import annotations

import ctypes
import hashlib
import math

import torch

from .compare import compare_tensor, dtype_name, name_outputs, tolerance_for

COPY_BYTES = 1 << 20  # inputs up to this size are kept as a copy (exact, and the count is free)
SAMPLE_STRIDE = 97  # larger ones: the sum of their int64 words + every 97th word kept
STATUS_RANK = {"passed": 0, "unsupported": 1, "numerical_mismatch": 2, "crash": 3}


# --------------------------------------------------------------------------
# Inputs the candidate writes
# --------------------------------------------------------------------------


def declared_writes(op: dict, case: dict) -> set[str]:
    """The inputs the operator declares written: ``operator.writes``, or the first
    input of an in-place candidate (``torch.Tensor.add_``: its name ends in one ``_``)."""
    names = set(op.get("writes") or [])
    last = str(op.get("candidate", "")).rsplit(".", 1)[-1]
    if last.endswith("_") and not last.endswith("__"):
        order = [n for n in ((op.get("call") or {}).get("order") or [])]
        inputs = [i["name"] for i in case.get("inputs") or []]
        first = next((n for n in order if n in inputs), inputs[0] if inputs else None)
        if first is not None:
            names.add(first)
    return names


def _flat_storage(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``t`` as a 1-D tensor of its dtype (what a write can reach)."""
    storage = t.untyped_storage()
    n = storage.nbytes() // t.element_size()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (n,), (1,))


def _bytes(flat: torch.Tensor) -> torch.Tensor:
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    return flat.view(torch.uint8)


class _Print:
    """One storage's fingerprint: a copy (small), or (sum of int64 words, sampled words, tail bytes)."""

    def __init__(self, flat: torch.Tensor):
        raw = _bytes(flat)
        self.nbytes = raw.numel()
        self.copy: torch.Tensor | None = None
        if self.nbytes <= COPY_BYTES:
            self.copy = flat.clone()
            return
        self.words = self.nbytes // 8
        words = raw[: self.words * 8].view(torch.int64)
        self.total = words.sum()
        self.sample = words[::SAMPLE_STRIDE].clone()
        self.tail = raw[self.words * 8 :].clone()

    def changed(self, flat: torch.Tensor) -> bool:
        if self.copy is not None:
            return not torch.equal(_int_view(self.copy), _int_view(flat))
        raw = _bytes(flat)
        words = raw[: self.words * 8].view(torch.int64)
        return (
            bool(words.sum().item() != self.total.item())
            or not torch.equal(self.sample, words[::SAMPLE_STRIDE])
            or not torch.equal(self.tail, raw[self.words * 8 :])
        )


class InputGuard:
    """Fingerprints of the candidate's tensor inputs, taken just before its call.

    ``tensors``: label -> the device tensor handed to the candidate (``x``, or
    ``x[1]`` for a list member).  A fingerprint that cannot be taken (an exotic
    storage) leaves that input unchecked, said in ``notes``."""

    def __init__(self, tensors: dict):
        self.tensors = {k: t for k, t in tensors.items() if isinstance(t, torch.Tensor)}
        self.prints: dict[str, _Print] = {}
        self.notes: list[str] = []
        for label, t in self.tensors.items():
            try:
                self.prints[label] = _Print(_flat_storage(t))
            except Exception as exc:  # a check we cannot make is said, never fatal
                self.notes.append(f"{label}: not checked for writes ({type(exc).__name__}: {exc})"[:300])

    def changed(self) -> list[str]:
        """Labels of the inputs whose storage changed since the fingerprint."""
        out = []
        for label, fp in self.prints.items():
            try:
                if fp.changed(_flat_storage(self.tensors[label])):
                    out.append(label)
            except Exception as exc:
                self.notes.append(f"{label}: write check failed ({type(exc).__name__}: {exc})"[:300])
        return out


def _int_view(t: torch.Tensor) -> torch.Tensor:
    """The same elements as integers of their width (bitwise comparison: NaN payloads and -0 count)."""
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.view(width) if t.dtype != width else t


def differing(a: torch.Tensor, b: torch.Tensor) -> tuple[int, float | None]:
    """(elements whose bits differ, largest finite |a - b| among them) of two same-shape CPU tensors."""
    count = _count_differing(a.contiguous(), b.contiguous())
    if not count:
        return 0, None
    if a.dtype == torch.bool:
        return count, None
    wide = torch.float64
    av, bv = (
        (torch.view_as_real(a) if a.is_complex() else a).to(wide),
        (torch.view_as_real(b) if b.is_complex() else b).to(wide),
    )
    d = (av - bv).abs()
    d = torch.where(torch.isfinite(d), d, torch.zeros((), dtype=wide))
    top = float(d.max().item()) if d.numel() else 0.0
    return count, top if math.isfinite(top) else None


def _count_differing(a: torch.Tensor, b: torch.Tensor) -> int:
    ne = _int_view(a) != _int_view(b)
    if a.is_complex():
        ne = ne.any(-1)
    return int(ne.sum().item())


def write_comparison(
    label: str, changed: int | None, numel: int, dtype: str, judge: str, max_abs, outside: bool
) -> dict:
    """The failing comparison of an input the candidate modified without declaring it."""
    count = changed if changed is not None else 1
    where = (
        f"{changed} storage elements outside its view changed"
        if outside
        else f"{changed} elements changed"
        if changed is not None
        else "its checksum changed"
    )
    verdict = (
        f"the candidate modified its input {label}: {where} (not declared in operator.writes; a model's next "
        "layer would read the changed tensor)"
    )
    comp = {
        "output": f"input:{label}",
        "passed": False,
        "expected_dtype": dtype,
        "actual_dtype": dtype,
        "numel": numel,
        "mismatch_count": min(count, numel) if numel else count,
        "mismatch_ratio": min(1.0, count / numel) if numel else 1.0,
        "judge": judge,
        "verdict": verdict,
    }
    if max_abs is not None:
        comp["max_abs"] = max_abs
    return comp


def check_writes(guard: InputGuard, pristine, declared: set[str], judge: str) -> tuple[list[dict], list[dict]]:
    """(evidence entries, failing comparisons) for the inputs that changed.  ``pristine(label)``
    gives the input as built (a CPU view rebuilt from the case seed), for the count."""
    evidence, comparisons = [], []
    for label in guard.changed():
        t = guard.tensors[label]
        name = label.split("[", 1)[0]
        changed, max_abs, outside = None, None, False
        try:
            before = pristine(label)
            after = t.detach().cpu()
            if list(before.shape) == list(after.shape) and before.dtype == after.dtype:
                changed, max_abs = differing(after, before)
                if not changed:  # the view is as built: the write went to the storage around it
                    outside = True
                    changed = _storage_changes(guard, label)
        except Exception as exc:  # the count is a detail, the change is the evidence
            guard.notes.append(f"{label}: changed, not counted ({type(exc).__name__}: {exc})"[:300])
        numel = t.numel()
        is_declared = name in declared or label in declared
        evidence.append(
            {"input": label, "changed": changed, "numel": numel, "declared": is_declared, "outside_view": outside}
        )
        if not is_declared:
            comparisons.append(write_comparison(label, changed, numel, dtype_name(t.dtype), judge, max_abs, outside))
    return evidence, comparisons


def _storage_changes(guard: InputGuard, label: str) -> int | None:
    fp = guard.prints[label]
    if fp.copy is None:
        return None
    return _count_differing(_flat_storage(guard.tensors[label]).cpu(), fp.copy.cpu()) or None


# --------------------------------------------------------------------------
# Repeats
# --------------------------------------------------------------------------


def output_digest(out) -> dict:
    """Output name -> md5 of its bytes (None for a non-tensor), as Ascend's test kit compares runs."""
    digests = {}
    for name, value in name_outputs(out, None).items():
        if isinstance(value, torch.Tensor):
            data = value.detach().cpu().contiguous()
            nbytes = data.numel() * data.element_size()  # no numpy: the runner needs torch alone
            raw = ctypes.string_at(data.data_ptr(), nbytes) if nbytes else b""
            digests[name] = hashlib.md5(raw).hexdigest() + f":{list(data.shape)}:{data.dtype}"
        else:
            digests[name] = repr(value)
    return digests


def _max_diff(a, b) -> tuple[float | None, list[str]]:
    top = None
    names: list[str] = []
    oa, ob = name_outputs(a, None), name_outputs(b, None)
    for name in oa:
        x, y = oa.get(name), ob.get(name)
        if (
            not isinstance(x, torch.Tensor)
            or not isinstance(y, torch.Tensor)
            or x.shape != y.shape
            or x.dtype != y.dtype
        ):
            if output_digest(x) != output_digest(y):
                names.append(name)
            continue
        count, diff = differing(x.detach().cpu(), y.detach().cpu())
        if count:
            names.append(name)
            if diff is not None:
                top = diff if top is None else max(top, diff)
    return top, names


def repeat_runs(n: int, first: dict, rerun, on_step=None) -> tuple[dict, dict]:
    """Run the candidate ``n`` more times.  ``first`` is the first run's
    ``{"status", "comparisons", "out", "error"}``; ``rerun()`` runs it again and
    returns the same shape (its own exception handling).  Returns (evidence, the
    worst run, whose status and comparisons the result carries)."""
    runs = [first]
    for k in range(1, n + 1):
        if on_step is not None:
            on_step(f"repeat{k}")
        runs.append(rerun())
    digests = [
        output_digest(r["out"]) if r.get("out") is not None else {"error": (r.get("error") or {}).get("signature")}
        for r in runs
    ]
    distinct = len({tuple(sorted(d.items())) for d in digests})
    top = None
    names: list[str] = []
    for r in runs[1:]:
        if r.get("out") is None or first.get("out") is None:
            continue
        diff, differ = _max_diff(first["out"], r["out"])
        names.extend(x for x in differ if x not in names)
        if diff is not None:
            top = diff if top is None else max(top, diff)
    worst = max(range(len(runs)), key=lambda i: (STATUS_RANK.get(runs[i]["status"], 0), -i))
    evidence = {
        "runs": len(runs),
        "distinct": distinct,
        "statuses": [r["status"] for r in runs],
        "passed_runs": [i for i, r in enumerate(runs) if r["status"] == "passed"],
        "max_diff": top,
        "differing_outputs": names,
        "worst_run": worst,
    }
    return evidence, runs[worst]


# --------------------------------------------------------------------------
# Batch invariance
# --------------------------------------------------------------------------


def batch_slice(spec: dict, built_by_name: dict, full_out, run_slice, tolerance: dict) -> tuple[dict, list[dict]]:
    """The candidate on rows ``[start, start+length)`` of input ``spec['input']``
    (and of the inputs in ``spec['also']`` whose size along the dimension is the
    batch's; ``run_slice(names, dim, start, length)`` runs it and returns its
    outputs), against the same rows of ``full_out``.  Returns (evidence, failing
    comparisons when ``spec['check']``)."""
    ev = _batch_evidence(spec)
    name, start, length = ev["input"], ev["start"], ev["length"]
    size = _batch_size(ev, built_by_name.get(name))
    if size is None:
        return ev, []
    dim = ev["dim"]
    names = [name] + [
        n
        for n in spec.get("also") or []
        if n != name
        and hasattr(built_by_name.get(n), "shape")
        and len(built_by_name[n].shape) > dim
        and built_by_name[n].shape[dim] == size
    ]
    ev["sliced"] = names
    part = name_outputs(run_slice(names, dim, start, length), None)
    odd = []
    comparisons = []
    for out_name, full in name_outputs(full_out, None).items():
        if not isinstance(full, torch.Tensor) or full.dim() <= dim or full.shape[dim] != size:
            continue  # an output without this batch dimension is not compared
        got = part.get(out_name)
        want = full.narrow(dim, start, length)
        if not isinstance(got, torch.Tensor) or list(got.shape) != list(want.shape) or got.dtype != want.dtype:
            # not the rows' shape: another input shares the batch (name it in 'also'), or the output is not batched
            odd.append(
                f"{out_name}: {list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__} "
                f"for rows {list(want.shape)}"
            )
            continue
        ev["outputs"].append(out_name)
        count, diff = _rows_differing(out_name, got, want, ev["exact"], tolerance)
        if count:
            ev["equal"] = False
            ev["differing"] += count
            if diff is not None:
                ev["max_diff"] = diff if ev["max_diff"] is None else max(ev["max_diff"], diff)
            if spec.get("check"):
                comparisons.append(_batch_variant_comparison(ev, out_name, got, want, count, diff, size))
    if odd:
        ev["note"] = (
            "not compared, the slice's output is not the full output's rows (is another input batched "
            f"too? name it in batch_invariance.also): {'; '.join(odd)}"
        )[:500]
    elif not ev["outputs"]:
        ev["note"] = f"no output has {name!r}'s batch dimension {dim} (size {size}) to compare"
    return ev, comparisons


def _batch_evidence(spec: dict) -> dict:
    """The batch slice's evidence before anything is run: the slice asked for, equal so far."""
    return {
        "input": spec["input"],
        "dim": int(spec.get("dim", 0)),
        "start": int(spec.get("start", 0)),
        "length": int(spec.get("length", 1)),
        "exact": bool(spec.get("exact", True)),
        "equal": True,
        "outputs": [],
        "differing": 0,
        "max_diff": None,
    }


def _batch_size(ev: dict, b) -> int | None:
    """The batch's size along ``ev['dim']`` of input ``b`` (the dim made non-negative in ``ev``), or None
    with ``ev['note']`` saying why the slice cannot be taken."""
    name, start, length = ev["input"], ev["start"], ev["length"]
    if b is None or not hasattr(b, "shape"):
        ev["note"] = f"no tensor input named {name!r} to slice"
        return None
    rank = len(b.shape)
    dim = ev["dim"] + rank if ev["dim"] < 0 else ev["dim"]
    if not 0 <= dim < rank:
        ev["note"] = f"dim {ev['dim']} is outside the rank {rank} of input {name!r}"
        return None
    ev["dim"] = dim
    size = b.shape[dim]
    if start + length > size or length >= size:
        ev["note"] = (
            f"rows [{start}, {start + length}) are not a proper slice of {name!r}'s batch of {size} along dim {dim}"
        )
        return None
    return size


def _rows_differing(out_name: str, got: torch.Tensor, want: torch.Tensor, exact: bool, tolerance: dict):
    """(elements differing, largest difference) of the slice's rows against the full run's: bit for bit
    when ``exact``, else elements outside the tolerance."""
    if exact:
        return differing(got, want)
    atol, rtol = tolerance_for(tolerance, got.dtype)
    comp = compare_tensor(out_name, got, want, atol=atol, rtol=rtol, strict_dtype=True)
    return comp.get("mismatch_count", 0), comp.get("max_abs")


def _batch_variant_comparison(ev: dict, out_name: str, got, want, count: int, diff, size: int) -> dict:
    """The failing comparison ``batch:<output>`` of rows that differ from the full batch's."""
    start, length, name, dim = ev["start"], ev["length"], ev["input"], ev["dim"]
    how = "bit for bit" if ev["exact"] else "within the tolerance"
    return {
        "output": f"batch:{out_name}",
        "passed": False,
        "numel": want.numel(),
        "expected_shape": list(want.shape),
        "actual_shape": list(got.shape),
        "expected_dtype": dtype_name(want.dtype),
        "actual_dtype": dtype_name(got.dtype),
        "mismatch_count": count,
        "mismatch_ratio": min(1.0, count / max(1, want.numel())),
        **({"max_abs": diff} if diff is not None else {}),
        "judge": "tolerance",
        "verdict": (
            f"batch_variant: rows [{start}, {start + length}) of {name!r} run alone differ "
            f"{how} from the same rows of the full batch of {size} (dim {dim}): {count} of "
            f"{want.numel()} elements"
        ),
    }


# --------------------------------------------------------------------------
# After the first run: repeats, then the batch slice
# --------------------------------------------------------------------------


def after_first_run(
    case: dict,
    config: dict,
    comparisons: list,
    out,
    written: list,
    notes: list,
    built: list,
    *,
    invoke,
    judged,
    inputs_again,
    raised,
    on_step=None,
) -> tuple[str, list, dict | None, dict | None]:
    """The checks that run the candidate again, once the first run is judged.

    ``invoke(inputs)`` runs the candidate as the first run did and returns its
    outputs on CPU; ``judged(outputs)`` gives (status, comparisons) against the
    reference; ``inputs_again(slice_of=None)`` the inputs rebuilt from the seed on
    the device (``slice_of``: the batch slice); ``raised(exc)`` the run's crash.
    Returns (status, comparisons, error of a crash run, the ``consistency`` evidence
    or None when there is nothing to say)."""
    doc: dict = {"flags": []}
    if written:
        doc["inputs_written"] = written
        if any(not w["declared"] for w in written):
            doc["flags"].append("writes_input")

    def rerun() -> dict:
        try:
            o = invoke(inputs_again())
        except BaseException as exc:  # a run that raises is that run's crash
            failed = raised(exc)
            return {"status": failed["status"], "comparisons": [], "out": None, "error": failed["error"]}
        st, comps = judged(o)
        return {"status": st, "comparisons": comps, "out": o, "error": None}

    status, comparisons, error = _repeats_checked(case, config, comparisons, out, rerun, doc, on_step)
    spec = case.get("batch_invariance") or config.get("batch_invariance")
    if spec and status is None:

        def run_slice(names, dim, start, length):
            return invoke(inputs_again((names, dim, start, length)))

        comparisons = comparisons + _batch_checked(spec, built, out, run_slice, config, raised, doc, on_step)
    if status is None:
        status = "passed" if all(c["passed"] for c in comparisons) else "numerical_mismatch"
    if notes:
        doc["notes"] = notes[:8]
    return status, comparisons, error, (doc if len(doc) > 1 or doc["flags"] else None)


def _repeats_checked(case, config, comparisons, out, rerun, doc, on_step) -> tuple[str | None, list, dict | None]:
    """The repeats when the case asks for them: (the status of a repeat that raised or None, the
    comparisons of the worst run, that run's error); ``doc`` gets the evidence and the flag."""
    # the inputs' comparisons and the gradients' stay as the first run judged them: a repeat re-runs
    # the forward call (a case failing in a gradient only is not repeated)
    op = config["operator"]
    own = [c for c in comparisons if c["output"].startswith(("input:", "grad."))]
    outputs = [c for c in comparisons if not c["output"].startswith(("input:", "grad."))]
    output_status = "passed" if all(c["passed"] for c in outputs) else "numerical_mismatch"
    repeats = case.get("repeats") if case.get("repeats") is not None else config.get("repeats", 0)
    if not repeats or op.get("random") or (output_status == "passed" and not case.get("repeat_passing")):
        return None, comparisons, None
    evidence, worst = repeat_runs(
        int(repeats), {"status": output_status, "out": out, "error": None, "comparisons": outputs}, rerun, on_step
    )
    doc["repeats"] = evidence
    if evidence["distinct"] > 1:
        doc["flags"].append("nondeterministic")
    if evidence["worst_run"]:
        comparisons = worst["comparisons"] + own
        if worst["status"] in ("crash", "unsupported"):  # a run that raised: its error is the result's
            return worst["status"], comparisons, worst["error"]
    return None, comparisons, None


def _batch_checked(spec: dict, built: list, out, run_slice, config: dict, raised, doc: dict, on_step) -> list:
    """The batch slice: its evidence (and the flag) in ``doc``; returns its failing comparisons."""
    if on_step is not None:
        on_step("batch")
    try:
        doc["batch"], batch_comps = batch_slice(
            spec, {b.name: b for b in built}, out, run_slice, config.get("tolerance") or {}
        )
    except BaseException as exc:  # the slice's own failure is evidence, not the case's crash
        doc["batch"], batch_comps = (
            {
                "input": spec.get("input"),
                "dim": spec.get("dim", 0),
                "start": spec.get("start", 0),
                "length": spec.get("length", 1),
                "exact": spec.get("exact", True),
                "equal": False,
                "note": f"the candidate raised on the slice: {raised(exc)['text']}"[:500],
            },
            [],
        )
    if not doc["batch"]["equal"]:
        doc["flags"].append("batch_variant")
    return batch_comps
