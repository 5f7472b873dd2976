"""The judgement sweep, bigger than the in-suite one (run by hand):

    .venv/bin/python benchmarks/sweep_judge.py [--seeds 3] [--rows 64] [--consistency] [--overflow]

Every operator of tests/sweep_spec.py x every dtype the runner builds, over
several seeds and a larger shape, through the real local transport (one warm
worker), under both judges:

- refusal agreement: the tool's ``unsupported`` against PyTorch's own answer
  (the op called directly on CPU in that dtype raises or not);
- right operators (the op itself, and the op computed in float32 and rounded
  once) judged failing by the ``baseline`` judge and by the ``tolerance``
  judge with torch.testing's per-dtype defaults;
- a planted bfloat16 accumulation bug (tests/operators/bf16_accumulate.py)
  over several row lengths: caught by each judge or not, with its ratio;
- issue 23: the same right operators with the gradients of every floating
  input compared (``grad_inputs``; the op itself and the float32-then-rounded
  candidate, whose backward runs in float32 too), in every floating dtype:
  a table per operator of the cases each judge fails in backward, and
  PyTorch's own answer for the operators without a derivative (unsupported).
  ``--gradients`` runs this part alone.

``--overflow`` runs the right operators in float16 and bfloat16 with values
whose results overflow the dtype (std 2*sqrt(max) and max/3) under the
tolerance, baseline and both judges: the failing cases per judge (a correct
kernel's infinity where the truth is beyond the dtype's range is no failure), and of
those how many are the op's own inaccuracy (the op in that dtype outside the
tolerance of the op in float64 on the same inputs) rather than false alarms.
log_softmax runs with its own atol (``overflow_tolerance``: one ulp of the
inputs' magnitude, the rounding of its logsumexp), the others with
torch.testing's defaults.

``--consistency`` (issue 21) instead runs the right operators with every case
repeated (``repeats_passing``) and the batch slice asked for (input ``input``,
rows [0, 1), and of the other inputs with those rows), under both judges, and counts the consistency flags and bias
warnings the analysis raises: a flag on a right operator is a false flag
(batch-variance of a right operator on this CPU is reported apart: it is real,
e.g. a matmul that picks another kernel for one row).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "operators"))

from sweep_spec import DTYPES, FLOATING, OPS, direct_backward_refusal, direct_refusal, grad_case, sweep_case  # noqa: E402,E501

from tools.plan_cases import plan_cases  # noqa: E402
from tools.remote.pool import REGISTRY  # noqa: E402
from tools.run_case_remote import run_case_remote  # noqa: E402
from tools.runner.precision import DEFAULT_TOLERANCES  # noqa: E402

OPERATORS = REPO / "tests" / "operators"
GROUP = 80


async def run_cases(root: Path, tag: str, operator: dict, module: str, cases: list[dict], judge: str,
                    extra: dict | None = None, run_ids: list | None = None) -> dict:
    got = {}
    for i in range(0, len(cases), GROUP):
        run_id = f"{tag}-{judge}-{i // GROUP}"
        if run_ids is not None:
            run_ids.append(run_id)
        plan_cases({"config": {"run_id": run_id, "judge": judge, "operator": dict(operator, modules=[module]),
                               **(extra or {})},
                    "cases": cases[i:i + GROUP], "module_sources": {module: (OPERATORS / module).read_text()}},
                   root=root)
        resp = await run_case_remote(run_id, root=root)
        got.update({o.case_id: o for o in resp.outcomes})
    return got


def shaped(case: dict, rows: int) -> dict:
    """The sweep's [4, 8] inputs as [rows, 8] (the others keep their shapes)."""
    for inp in case["inputs"]:
        if inp["shape"] == [4, 8]:
            inp["shape"] = [rows, 8]
    return case


async def consistency_sweep(seeds: int, rows: int) -> None:
    from tools.analyze_failures import analyze_failures

    root = Path(tempfile.mkdtemp(prefix="sweep-consistency-"))
    sweep_op = {"name": "sweep", "candidate": "sweep_dispatch.call", "reference": "sweep_dispatch.reference"}
    cases = []
    for seed in range(seeds):
        for op in OPS:
            for d in DTYPES:
                for precise in ((False, True) if d in ("float16", "bfloat16") else (False,)):
                    c = shaped(sweep_case(op, d, precise=precise, seed=seed), rows)
                    c["id"] = f"{c['id']}-s{seed}"
                    cases.append(c)
    extra = {"repeats_passing": 1000, "batch_invariance": {"input": "input", "dim": 0,
                                                           "also": ["other", "condition", "mat2"]}}
    t0 = time.perf_counter()
    for judge in ("tolerance", "baseline"):
        run_ids: list[str] = []
        got = await run_cases(root, "consistency", sweep_op, "sweep_dispatch.py", cases, judge, extra, run_ids)
        flags: dict[str, list[str]] = {}
        batch: list[str] = []
        bias: list[str] = []
        repeated = 0
        for run_id in run_ids:
            a = analyze_failures(run_id, root=root)
            repeated += a.consistency.repeated
            for f in a.consistency.flagged:
                (batch if f.flag == "batch_variant" else flags.setdefault(f.flag, [])).append(f.case_id)
            bias += [f"{w.message} ({', '.join(w.cases[:4])})" for w in a.consistency.bias]
        ran = sum(1 for o in got.values() if o.state != "pending")
        print(f"== consistency, judge {judge}: {len(cases)} right-operator cases ({len(OPS)} ops x {len(DTYPES)} dtypes x "
              f"{seeds} seeds), {ran} ran, {repeated} repeated; {time.perf_counter() - t0:.0f} s so far ==")
        print(f"false flags (nondeterministic, order, writes): {sum(len(v) for v in flags.values())} {flags or ''}")
        print(f"bias warnings: {len(bias)}")
        for line in bias[:10]:
            print(f"    {line[:220]}")
        print(f"batch-variant right operators on this CPU (a real property, not a false flag): {len(batch)}")
        for cid in batch[:12]:
            print(f"    {cid}")
    await REGISTRY.close_all()
    print(f"evidence: {root}")


async def main_async(seeds: int, rows: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="sweep-judge-"))
    sweep_op = {"name": "sweep", "candidate": "sweep_dispatch.call", "reference": "sweep_dispatch.reference"}
    cases = []
    for seed in range(seeds):
        for op in OPS:
            for d in DTYPES:
                c = shaped(sweep_case(op, d, seed=seed), rows)
                c["id"] = f"{c['id']}-s{seed}"
                cases.append(c)
                if d in ("float16", "bfloat16"):
                    p = shaped(sweep_case(op, d, precise=True, seed=seed), rows)
                    p["id"] = f"{p['id']}-s{seed}"
                    cases.append(p)
    truth = {}
    for c in cases:
        op = next(n for n, s in OPS.items() if s[0] == c["attributes"]["op"] and c["id"].startswith(
            n.replace("_", "-") + "-"))
        dtype = next(i["dtype"] for i in c["inputs"] if i["name"] != "condition")
        truth[c["id"]] = (op, dtype, direct_refusal(op, dtype) is not None)
    t0 = time.perf_counter()
    results = {j: await run_cases(root, "sweep", sweep_op, "sweep_dispatch.py", cases, j)
               for j in ("baseline", "tolerance")}
    elapsed = time.perf_counter() - t0
    print(f"== refusals and right operators: {len(cases)} cases per judge ({len(OPS)} ops x {len(DTYPES)} dtypes x "
          f"{seeds} seeds, + float32-then-rounded candidates), {elapsed:.0f} s ==")
    refused = [cid for cid, t in truth.items() if t[2]]
    for judge, got in results.items():
        agree = sum(1 for cid in refused if got[cid].state == "unsupported")
        false_unsup = [cid for cid, t in truth.items() if not t[2] and got[cid].state == "unsupported"]
        right = [cid for cid, t in truth.items() if not t[2]]
        failing = [cid for cid in right if got[cid].state in ("numerical_mismatch", "crash")]
        pending = [cid for cid in got if got[cid].state == "pending"]
        print(f"judge {judge:9s}: refusals classified unsupported {agree}/{len(refused)}; "
              f"unsupported without a refusal {len(false_unsup)}; right operator cases judged failing "
              f"{len(failing)}/{len(right)}; pending {len(pending)}")
        for cid in failing[:12]:
            print(f"    {cid}: {got[cid].summary[:160]}")

    print("== planted bfloat16 accumulation bug (rows of n elements) ==")
    acc_op = {"name": "acc", "candidate": "bf16_accumulate.cand", "reference": "bf16_accumulate.ref"}
    planted = [{"id": f"acc-n{n}-s{s}", "seed": s, "inputs": [{"name": "x", "shape": [16, n], "dtype": "bfloat16"}]}
               for n in (16, 64, 256, 1024) for s in range(seeds)]
    for judge in ("baseline", "tolerance"):
        got = await run_cases(root, "acc", acc_op, "bf16_accumulate.py", planted, judge)
        caught = [cid for cid in got if got[cid].state == "numerical_mismatch"]
        print(f"judge {judge:9s}: caught {len(caught)}/{len(planted)}")
        for cid in sorted(got)[::seeds]:
            print(f"    {cid}: {got[cid].state}: {got[cid].summary[:170]}")
    await REGISTRY.close_all()
    print(f"evidence: {root}")


# Scales that overflow half precision (issue: judges that agree with a correct computation): the values'
# std as a fraction of the dtype's range - sqrt(max)*2 overflows products and sums of squares (mul,
# matmul, var, prod...), max/3 overflows sums (add, sum, cumsum) and anything larger; exp overflows at both.
OVERFLOW_SCALES = {"sqrt": lambda top: 2.0 * top ** 0.5, "edge": lambda top: top / 3.0}


def overflow_case(op: str, dtype: str, scale: str, *, precise: bool, seed: int) -> dict:
    """The sweep's right-operator case with values that overflow ``dtype`` (positive inputs stay positive)."""
    import torch

    c = sweep_case(op, dtype, precise=precise, seed=seed)
    std = OVERFLOW_SCALES[scale](float(torch.finfo(getattr(torch, dtype)).max))
    for inp in c["inputs"]:
        if inp["name"] != "condition":
            inp["values"] = ({"kind": "uniform", "low": 0.5, "high": std} if inp["values"]["kind"] == "uniform"
                             else {"kind": "normal", "std": std})
    c["id"] = f"{c['id']}-{scale}-s{seed}"
    return c


def overflow_tolerance(op: str, dtype: str, scale: str) -> dict:
    """The sweep's tolerance for one overflow case: torch.testing's defaults (the judge's), but for
    log_softmax.  log_softmax(x) = x - logsumexp(x): a correct half-precision computation rounds
    logsumexp, a value of the inputs' magnitude (up to ~4 std), to the dtype, so every output carries an
    absolute error up to one ulp of that magnitude - the largest output (the row's maximum, e.g. the
    truth -4.5e-5 where float16 gives 0 beside inputs ~1000) fails torch.testing's atol 1e-5, which is
    made for outputs whose error scales with themselves.  The atol here is that ulp; rtol stays."""
    if op != "log_softmax":
        return {}
    import torch

    info = torch.finfo(getattr(torch, dtype))
    rtol, _ = DEFAULT_TOLERANCES[dtype]
    return {"per_dtype": {dtype: {"atol": float(info.eps) * 4 * OVERFLOW_SCALES[scale](float(info.max)),
                                  "rtol": rtol}}}


def own_truth_failure(case: dict) -> str | None:
    """Why the sweep's right operator is not right on this case: the candidate called directly (as the
    worker calls it) against the reference in float64 on the same inputs, outside the judge's tolerance at
    elements where both are finite - torch's own kernel in that dtype, not a false alarm (None: within)."""
    import torch
    from sweep_dispatch import call, reference

    from tools.runner.inputs import build_case_inputs

    built = {b.name: b.view() for b in build_case_inputs(case, None)}
    attrs = case["attributes"]
    cand = call(**attrs, **built)
    truth = reference(**attrs, **{k: v.double() if v.dtype.is_floating_point else v for k, v in built.items()})
    if not isinstance(cand, torch.Tensor) or not cand.dtype.is_floating_point:
        return None
    tol = (overflow_tolerance(attrs["op"].split(".")[-1], str(cand.dtype)[6:], case["id"].split("-")[-2])
           .get("per_dtype") or {}).get(str(cand.dtype)[6:])
    rtol, atol = (tol["rtol"], tol["atol"]) if tol else DEFAULT_TOLERANCES[str(cand.dtype)[6:]]
    c, t = cand.double(), truth.double()
    both = torch.isfinite(c) & torch.isfinite(t)
    outside = both & ((c - t).abs() > atol + rtol * t.abs())
    if not bool(outside.any()):
        return None
    i = int(outside.flatten().nonzero()[0])
    return (f"{int(outside.sum())} elements where {attrs['op']} in {cand.dtype} gives {c.flatten()[i].item():.4g} "
            f"and in float64 {t.flatten()[i].item():.4g}")


async def overflow_async(seeds: int, truth: str) -> None:
    """The right operators in float16 and bfloat16 with values whose results overflow the dtype (the
    truth in float32 is finite, or not): failing cases per judge - a correct kernel's infinity where the
    truth rounded to the dtype is infinite, or where the same-dtype baseline has it, is no failure."""
    root = Path(tempfile.mkdtemp(prefix="sweep-overflow-"))
    sweep_op = {"name": "sweep", "candidate": "sweep_dispatch.call", "reference": "sweep_dispatch.reference",
                "reference_dtype": truth}
    cases = [overflow_case(op, d, scale, precise=precise, seed=seed)
             for seed in range(seeds) for op in OPS for d in ("float16", "bfloat16") for scale in OVERFLOW_SCALES
             for precise in (False, True)]
    groups: dict[str, list[dict]] = {}  # one run per tolerance (log_softmax's own: overflow_tolerance)
    for c in cases:
        op = next(n for n in OPS if c["id"].startswith(n.replace("_", "-") + "-"))
        dtype, scale = c["inputs"][0]["dtype"], c["id"].split("-")[-2]
        groups.setdefault(json.dumps(overflow_tolerance(op, dtype, scale), sort_keys=True), []).append(c)
    t0 = time.perf_counter()
    results: dict[str, dict] = {}
    for j in ("tolerance", "baseline", "both"):
        results[j] = {}
        for k, (key, group) in enumerate(groups.items()):
            tolerance = {"tolerance": json.loads(key)} if key != "{}" else None
            results[j].update(await run_cases(root, f"overflow{k}", sweep_op, "sweep_dispatch.py", group, j,
                                              tolerance))
    print(f"== right operators with values that overflow half precision, truth {truth}: {len(cases)} cases per judge "
          f"({len(OPS)} "
          f"ops x 2 dtypes x {len(OVERFLOW_SCALES)} scales x {seeds} seeds x (op, float32-then-rounded)), "
          f"{time.perf_counter() - t0:.0f} s ==")
    for judge, got in results.items():
        ran = [cid for cid in got if got[cid].state not in ("pending", "unsupported")]
        failing = [cid for cid in ran if got[cid].state in ("numerical_mismatch", "crash")]
        special = [cid for cid in failing if "NaN" in got[cid].summary or "Inf" in got[cid].summary]
        f16 = [cid for cid in failing if "-float16-" in cid]
        print(f"judge {judge:9s}: failing {len(failing)}/{len(ran)} ran, {len(special)} of them on a NaN/Inf pattern, "
              f"{len(f16)} float16 (unsupported "
              f"{sum(1 for o in got.values() if o.state == 'unsupported')}, pending "
              f"{sum(1 for o in got.values() if o.state == 'pending')})")
        by_id = {c["id"]: c for c in cases}
        own = {cid: own_truth_failure(by_id[cid]) for cid in failing}
        false = [cid for cid in failing if own[cid] is None]
        print(f"    false alarms (the op itself within tolerance of its float64 truth): {len(false)}; the op "
              f"itself outside its float64 truth (a real inaccuracy of torch's kernel, not the judge's): "
              f"{len(failing) - len(false)}")
        for cid in failing[:12]:
            print(f"    {cid}: {got[cid].summary[:200]}" + (f" [torch's own: {own[cid]}]" if own[cid] else ""))
    await REGISTRY.close_all()
    print(f"evidence: {root}")


async def gradients_async(seeds: int, rows: int) -> None:
    """The right operators with gradients: per operator, the cases each judge fails in backward."""
    root = Path(tempfile.mkdtemp(prefix="sweep-grad-"))
    sweep_op = {"name": "sweep", "candidate": "sweep_dispatch.call", "reference": "sweep_dispatch.reference"}
    cases, op_of, grad_names = [], {}, {}
    for seed in range(seeds):
        for op in OPS:
            for d in FLOATING:
                for precise in ((False, True) if d in ("float16", "bfloat16") else (False,)):
                    c = shaped(grad_case(op, d, precise=precise, seed=seed), rows)
                    c["id"] = f"{c['id']}-s{seed}"
                    cases.append(c)
                    op_of[c["id"]] = (op, d)
                    grad_names[c["id"]] = c["grad_inputs"]
    refused = {key: direct_backward_refusal(*key) for key in set(op_of.values())}
    t0 = time.perf_counter()
    results = {j: await run_cases(root, "grad", sweep_op, "sweep_dispatch.py", cases, j)
               for j in ("baseline", "tolerance")}
    elapsed = time.perf_counter() - t0
    print(f"== right operators with gradients: {len(cases)} cases per judge ({len(OPS)} ops x {len(FLOATING)} floating "
          f"dtypes x {seeds} seeds, + float32-then-rounded candidates), {elapsed:.0f} s ==")
    print(f"{'operator':14s} {'cases':>5s} {'gradients':>9s} {'baseline: failing in backward':>30s} "
          f"{'tolerance: failing in backward':>31s} {'unsupported (no derivative)':>28s}")
    totals = {"cases": 0, "grads": 0, "baseline": 0, "tolerance": 0, "unsupported": 0}
    for op in OPS:
        ids = [cid for cid, (o, _) in op_of.items() if o == op]
        row = {"cases": len(ids), "grads": 0, "baseline": 0, "tolerance": 0, "unsupported": 0}
        for judge in ("baseline", "tolerance"):
            for cid in ids:
                o = results[judge][cid]
                refusal = refused[op_of[cid]] is not None
                if judge == "baseline" and o.state == "unsupported":
                    row["unsupported"] += 1
                if judge == "baseline" and o.state != "unsupported":
                    row["grads"] += len(grad_names[cid])
                # failing in backward: a failed gradient, a crash, or an answer PyTorch disagrees with
                if refusal != (o.state == "unsupported") or o.state == "crash" or \
                        any(f.startswith("grad.") for f in o.failed_outputs):
                    row[judge] += 1
        for k in totals:
            totals[k] += row[k]
        print(f"{op:14s} {row['cases']:5d} {row['grads']:9d} {row['baseline']:30d} {row['tolerance']:31d} "
              f"{row['unsupported']:28d}")
    print(f"{'all':14s} {totals['cases']:5d} {totals['grads']:9d} {totals['baseline']:30d} {totals['tolerance']:31d} "
          f"{totals['unsupported']:28d}")
    for judge in ("baseline", "tolerance"):
        bad = [cid for cid in results[judge] if results[judge][cid].state in ("numerical_mismatch", "crash")]
        for cid in bad[:8]:
            print(f"    {judge}: {cid}: {results[judge][cid].summary[:170]}")
    await REGISTRY.close_all()
    print(f"evidence: {root}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--gradients", action="store_true", help="only the sweep with gradients (issue 23)")
    parser.add_argument("--consistency", action="store_true", help="right operators repeated: count false flags")
    parser.add_argument("--overflow", action="store_true", help="right operators with values that overflow half "
                                                                "precision: failing cases per judge")
    parser.add_argument("--truth", choices=("auto", "float64"), default="auto",
                        help="--overflow: the reference's dtype (auto: float32 for half precision, as msprobe)")
    args = parser.parse_args()
    if args.overflow:
        asyncio.run(overflow_async(args.seeds, args.truth))
        return 0
    if args.consistency:
        asyncio.run(consistency_sweep(args.seeds, args.rows))
        return 0
    if not args.gradients:
        asyncio.run(main_async(args.seeds, args.rows))
    asyncio.run(gradients_async(args.seeds, args.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
