"""The judgement's comparison cost, side by side with torch.testing.assert_close (run by hand):

    .venv/bin/python benchmarks/bench_compare.py [--repeats 7] [--threads N] [--log2 24] [--msprobe]

On 2**24 float32 elements (a passing candidate, its baseline, the
reference), interleaved so each contender sees the same machine load, best
of ``repeats``:

- the full metric set of one output (compare_tensor: the tolerance metrics
  plus msprobe's benchmark set, one chunked pass),
- the baseline's benchmark set (precision_metrics: one chunked pass),
- the whole judgement: both, plus the standard's decision and the checks
  (judge.apply_judge, the runner's own path),
- the same three against a **float64** truth (``reference_dtype: auto`` for a
  float32 operator, issue 22), and the reference itself (torch.exp) computed
  in float64 instead of float32,
- torch.testing.assert_close on the same pair,
- one torch.dot of the two tensors (one read of both).

``--msprobe``: also one judgement of 2**20 float16 elements by this project
and by msprobe 26.2's own code (tests/msprobe_adapter.py; needs its wheel:
MSPROBE_WHEEL_ROOT), one thread, as issue 22 measured them.

Target: the whole judgement under half of assert_close's time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--log2", type=int, default=24, help="elements = 2**log2")
    parser.add_argument("--msprobe", action="store_true", help="also time msprobe's own judgement (its wheel)")
    args = parser.parse_args()
    import torch

    from tools.runner.compare import compare_tensor, precision_metrics

    if args.threads:
        torch.set_num_threads(args.threads)
    n = 1 << args.log2
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, generator=g) * 4 - 2
    ref = torch.exp(x)
    ref64 = torch.exp(x.double())
    cand = (ref + 1e-6 * torch.randn(n, generator=g)).float()  # a realistic, passing candidate
    base = (ref + 1e-6 * torch.randn(n, generator=g)).float()  # its baseline

    def assert_close():
        try:
            torch.testing.assert_close(cand, ref)  # float32 defaults: rtol 1.3e-6, atol 1e-5
        except AssertionError:
            pass

    contenders = {
        "metric set (candidate)": lambda: compare_tensor("out", cand, ref, atol=1e-5, rtol=1.3e-6),
        "baseline's benchmark set": lambda: precision_metrics(base, ref),
        "judgement (both + decision)": lambda: judgement(cand, base, ref),
        "metric set, float64 truth": lambda: compare_tensor("out", cand, ref64, atol=1e-5, rtol=1.3e-6,
                                                            strict_dtype=False),
        "baseline's set, float64 truth": lambda: precision_metrics(base, ref64),
        "judgement, float64 truth": lambda: judgement(cand, base, ref64),
        "reference exp in float32": lambda: torch.exp(x),
        "reference exp in float64": lambda: torch.exp(x.double()),
        "torch.testing.assert_close": assert_close,
        "one torch.dot (one read)": lambda: torch.dot(cand, ref).item(),
    }
    best = interleaved(contenders, args.repeats)
    ac = best["torch.testing.assert_close"]
    print(f"== comparison of 2**{args.log2} float32 elements (best of {args.repeats}, "
          f"{torch.get_num_threads()} threads) ==")
    print(f"{'':32s} {'ms':>8s} {'/ assert_close':>15s}")
    for name, ms in best.items():
        print(f"{name:32s} {ms:8.1f} {ms / ac:15.2f}")
    print(f"judgement / assert_close = {best['judgement (both + decision)'] / ac:.2f}   target < 0.50")
    f64 = best["judgement, float64 truth"] + best["reference exp in float64"]
    f32 = best["judgement (both + decision)"] + best["reference exp in float32"]
    print(f"float64 truth: reference + judgement {f64:.1f} ms vs {f32:.1f} ms with a float32 truth "
          f"({f64 / f32:.2f}x; {f64 / ac:.2f}x assert_close)")
    if args.msprobe:
        versus_msprobe(args.repeats)
    return 0


def judgement(cand, base, ref) -> dict:
    """The runner's judgement of one output: the engine's metrics, then the baseline judge."""
    from tools.runner.compare import compare_tensor
    from tools.runner.judge import apply_judge

    comp = compare_tensor("out", cand, ref, atol=1e-5, rtol=1.3e-6, strict_dtype=False)
    apply_judge([comp], "baseline", baseline=base, reference=ref, candidate=cand, config={},
                in_dtypes=[str(cand.dtype).replace("torch.", "")])
    return comp


def interleaved(contenders: dict, repeats: int) -> dict:
    """Best wall time of each contender in ms, run in turn so each sees the same load."""
    times = {k: [] for k in contenders}
    for fn in contenders.values():
        fn()
    for _ in range(repeats):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: min(v) * 1e3 for k, v in times.items()}


def versus_msprobe(repeats: int) -> None:
    """One judgement of 2**20 float16 elements (a correct exp against another correct path), one thread:
    this project's runner against msprobe 26.2's own two stages."""
    import torch

    sys.path.insert(0, str(REPO / "tests"))
    import msprobe_adapter

    ok, why = msprobe_adapter.available()
    if not ok:
        print(f"msprobe: not timed ({why})")
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(1)
        x = (torch.rand(1 << 20, generator=g) * 6 - 3).half()
        truth = torch.exp(x.double()).float()
        cand = torch.exp(x.float()).half()
        base = torch.exp2(x.float() * 1.4426950408889634).half()
        best = interleaved({"this project": lambda: judgement(cand, base, truth),
                            "msprobe 26.2": lambda: msprobe_adapter.judge("auto", None, cand, base, truth)}, repeats)
    finally:
        torch.set_num_threads(threads)
    print(f"== one judgement of 2**20 float16 elements, one thread (best of {repeats}) ==")
    for name, ms in best.items():
        print(f"{name:32s} {ms:8.1f} ms")
    print(f"msprobe / this project = {best['msprobe 26.2'] / best['this project']:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
