"""Generated (candidate, benchmark, truth) triples for parity with msprobe
(tests/test_msprobe_parity.py, benchmarks/parity_msprobe.py), and the
project's side of each comparison.

The benchmark is a correct computation in the candidate's dtype (msprobe's
GPU side), the truth the float64 result cast to msprobe's golden dtype
(float32 for float16/bfloat16 outputs, float64 for float32).  Families, as
issue 22 lists them: correct kernels; correct but differently rounded;
truncation bias; half-precision accumulation; a zeroed tail; sign flips on
1%; errors only among small values; NaN and Inf injected; integer outputs off
by one; matmul-like outputs a few ULP off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DTYPES = ("float16", "bfloat16", "float32")
FAMILIES = ("correct", "rounded_differently", "truncation", "half_accumulation", "zeroed_tail", "sign_flips",
            "small_value_errors", "nan_injected", "inf_injected", "int_off_by_one", "few_ulp")
GOLDEN = {"float16": torch.float32, "bfloat16": torch.float32, "float32": torch.float64}


@dataclass
class Triple:
    name: str
    family: str
    dtype: str
    candidate: torch.Tensor
    benchmark: torch.Tensor
    truth: torch.Tensor


def _toward_zero(wide: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``wide`` rounded to ``dtype`` toward zero (a truncating kernel)."""
    near = wide.to(dtype)
    away = near.to(wide.dtype).abs() > wide.abs()
    return torch.where(away, torch.nextafter(near, torch.zeros((), dtype=dtype)), near)


def _ulps(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """x moved by k ULPs of its own dtype (k an integer tensor, signed)."""
    out = x.clone()
    for step in range(int(k.abs().max().item()) if k.numel() else 0):
        move = k.abs() > step
        target = torch.where(k > 0, torch.full_like(x, float("inf")), torch.full_like(x, float("-inf")))
        out = torch.where(move, torch.nextafter(out, target), out)
    return out


def _exp_like(n: int, dt: torch.dtype, g: torch.Generator):
    x = (torch.rand(n, generator=g, dtype=torch.float64) * 6 - 3).to(dt)
    truth = torch.exp(x.double())
    wide = torch.float32  # a kernel computes in float32 and rounds once
    correct = torch.exp(x.to(wide)).to(dt)
    other = torch.exp2(x.to(wide) * 1.4426950408889634).to(dt)  # another correct path, other roundings
    return truth, correct, other


def _row_sums(rows: int, k: int, dt: torch.dtype, g: torch.Generator):
    m = (torch.randn(rows, k, generator=g, dtype=torch.float64)).to(dt)
    truth = m.double().sum(-1)
    wide = torch.float32
    correct = m.to(wide).sum(-1).to(dt)
    other = m.to(wide).flip(-1).cumsum(-1)[..., -1].to(dt)
    return m, truth, correct, other


def triples(n: int = 4096, seeds=(0,), dtypes=DTYPES) -> list[Triple]:
    out: list[Triple] = []
    for seed in seeds:
        for dname in dtypes:
            dt = getattr(torch, dname)
            g = torch.Generator().manual_seed(1000 * seed + DTYPES.index(dname))
            gold = GOLDEN[dname]

            def add(family: str, cand, bench, truth, tag=""):
                out.append(Triple(f"{family}{tag}-{dname}-s{seed}", family, dname, cand, bench, truth.to(gold)))

            truth, correct, other = _exp_like(n, dt, g)
            add("correct", truth.to(dt), correct, truth)  # rounded once from float64
            add("rounded_differently", other, correct, truth)  # exp2(x*log2(e)) in float32, then rounded
            add("truncation", _toward_zero(truth.to(torch.float64), dt), correct, truth)
            tail = correct.clone()
            tail[-n // 10:] = 0
            add("zeroed_tail", tail, correct, truth)
            flips = correct.clone()
            idx = torch.randperm(n, generator=g)[: max(1, n // 100)]
            flips[idx] = -flips[idx]
            add("sign_flips", flips, correct, truth)
            for kind in ("nan", "inf"):
                bad = correct.clone()
                bad[torch.randperm(n, generator=g)[: max(1, n // 100)]] = float(kind)
                add(f"{kind}_injected", bad, correct, truth)
            # small values: a tenth of the truth below msprobe's small-value threshold, errors only there
            small_truth = truth.clone()
            where = torch.randperm(n, generator=g)[: n // 10]
            small_truth[where] *= 1e-5
            s_correct = small_truth.to(dt)
            s_bad = s_correct.clone()
            s_bad[where] = (small_truth[where] * 1.5 + 2 ** -12).to(dt)
            add("small_value_errors", s_bad, s_correct, small_truth)
            # reductions: accumulating in the output's dtype, a few ULPs off (matmul-like)
            m, rtruth, rcorrect, rother = _row_sums(n // 8 if n >= 64 else n, 64, dt, g)
            acc = torch.zeros(m.shape[0], dtype=dt)
            for i in range(m.shape[1]):
                acc = acc + m[:, i]
            add("half_accumulation", acc, rcorrect, rtruth)
            add("correct", rother, rcorrect, rtruth, tag="-rows")
            k = torch.randint(-3, 4, rcorrect.shape, generator=g)
            k[torch.rand(rcorrect.shape, generator=g) > 0.3] = 0
            add("few_ulp", _ulps(rcorrect, k), rcorrect, rtruth)
            # integer outputs: an argmax with some rows off by one
            scores = torch.randn(n // 16, 16, generator=g)
            itruth = scores.argmax(-1)
            for wrong in (0, 1, 3):
                cand = itruth.clone()
                cand[:wrong] = (cand[:wrong] + 1) % 16
                out.append(Triple(f"int_off_by_one{wrong}-{dname}-s{seed}", "int_off_by_one", "int64", cand,
                                  itruth.clone(), itruth.clone()))
    return out


def ours(triple: Triple, level: str, api_name: str = "parity_op", standard: str = "auto") -> dict:
    """The project's comparison of one triple, through the runner's own path (the comparison engine,
    then the baseline judge): the Comparison dict."""
    from tools.runner.compare import compare_tensor
    from tools.runner.judge import apply_judge

    comp = compare_tensor("out", triple.candidate, triple.truth, atol=1e-5, rtol=1e-5, strict_dtype=False)
    config = {"judge": "baseline", "judge_level": level, "standard": standard,
              "operator": {"name": api_name, "candidate": api_name, "reference": api_name}}
    apply_judge([comp], "baseline", baseline=triple.benchmark, reference=triple.truth, candidate=triple.candidate,
                config=config, in_dtypes=[triple.dtype])
    return comp


def agree(mine: dict, theirs: dict, rel: float = 1e-6, quantum: float = 1e-12) -> tuple[bool, list[str]]:
    """(verdicts equal, ratios that differ by more than ``rel`` relative).  ``quantum``: msprobe writes
    its stage-1 metrics to CSV with 14 decimals, so a ratio built on a metric below ~1e-8 carries an
    absolute error of that order; the ratios are compared to ``rel`` or to ``quantum``, whichever is larger."""
    same = mine["benchmark"]["passed"] == (theirs["status"] == "pass")
    off = []
    for name, value in theirs["ratios"].items():
        got = mine["benchmark"]["ratios"].get(name)
        if value is None or not math.isfinite(value):  # NaN/inf on msprobe's side: null on ours (JSON)
            if got is not None:
                off.append(f"{name}: ours {got}, msprobe {value}")
            continue
        if got is None or abs(got - value) > max(rel * abs(value), quantum):
            off.append(f"{name}: ours {got}, msprobe {value}")
    return same, off
