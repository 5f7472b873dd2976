"""The judgement's comparison cost, side by side with torch.testing.assert_close (run by hand):

    .venv/bin/python benchmarks/bench_compare.py [--repeats 7] [--threads N]

On 2**24 float32 elements (a passing candidate, its baseline, the float32
reference), interleaved so each contender sees the same machine load, best
of ``repeats``:

- the full metric set of one output (compare_tensor: the tolerance metrics
  plus the Ascend benchmark set, one chunked pass),
- the baseline's benchmark set (precision_metrics: one chunked pass),
- the whole judgement: both, plus the baseline judge's decision,
- torch.testing.assert_close on the same pair,
- one torch.dot of the two tensors (one read of both).

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
    args = parser.parse_args()
    import torch

    from tools.runner.compare import compare_tensor, precision_metrics
    from tools.runner.precision import judge_baseline

    if args.threads:
        torch.set_num_threads(args.threads)
    n = 1 << args.log2
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(n, generator=g)
    cand = ref + 1e-6 * torch.randn(n, generator=g)  # a realistic, passing candidate
    base = ref + 1e-6 * torch.randn(n, generator=g)  # its baseline

    def assert_close():
        try:
            torch.testing.assert_close(cand, ref)  # float32 defaults: rtol 1.3e-6, atol 1e-5
        except AssertionError:
            pass

    def judgement():
        comp = compare_tensor("out", cand, ref, atol=1e-5, rtol=1.3e-6)
        judge_baseline(comp["precision"], precision_metrics(base, ref), "float32")

    contenders = {
        "metric set (candidate)": lambda: compare_tensor("out", cand, ref, atol=1e-5, rtol=1.3e-6),
        "baseline's benchmark set": lambda: precision_metrics(base, ref),
        "judgement (both + decision)": judgement,
        "torch.testing.assert_close": assert_close,
        "one torch.dot (one read)": lambda: torch.dot(cand, ref).item(),
    }
    times = {k: [] for k in contenders}
    for fn in contenders.values():
        fn()
    for _ in range(args.repeats):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    best = {k: min(v) * 1e3 for k, v in times.items()}
    ac = best["torch.testing.assert_close"]
    print(f"== comparison of 2**{args.log2} float32 elements (best of {args.repeats}, "
          f"{torch.get_num_threads()} threads) ==")
    print(f"{'':30s} {'ms':>8s} {'/ assert_close':>15s}")
    for name, ms in best.items():
        print(f"{name:30s} {ms:8.1f} {ms / ac:15.2f}")
    print(f"judgement / assert_close = {best['judgement (both + decision)'] / ac:.2f}   target < 0.50")
    return 0


if __name__ == "__main__":
    sys.exit(main())
