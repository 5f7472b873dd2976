"""The cost of measuring the values actually built and of locating the wrong elements (run by hand):

    .venv/bin/python benchmarks/bench_values.py [--repeats 3] [--threads 1] [--log2 24]

On 2**log2 elements, best of ``repeats``, beside what the runner pays anyway for such an input
(generating it: torch.randn into the storage, as runner/inputs.py does, then the cast):

- value_stats.measure (min, max, max_abs, nan, inf, zeros, distinct to its cap, the largest slice
  sums along every dimension) of float32 and float16 inputs of rank 1, 2 and 4, and of a float32
  input of ten distinct values (the distinct count's worst case: it never reaches its cap);
- wrong_where.locate of a float32 output whose last quarter of columns is wrong, beside
  compare.compare_tensor of the same pair.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    parser.add_argument("--log2", type=int, default=24)
    args = parser.parse_args()
    import torch

    from tools.runner.compare import compare_tensor
    from tools.runner.value_stats import measure
    from tools.runner.wrong_where import locate

    if args.threads:
        torch.set_num_threads(args.threads)
    n = 1 << args.log2
    side = 1 << (args.log2 // 2)
    print(f"{n} elements, {torch.get_num_threads()} thread(s), best of {args.repeats}")
    gen = torch.Generator().manual_seed(0)
    print(
        f"  generating (randn float32 + cast to float16): {best(lambda: torch.randn(n, generator=gen).half(), args.repeats):.3f} s"
    )
    shapes = {"rank 1": (n,), "rank 2": (n // side, side), "rank 4": (16, 16, n // 4096, 16)}
    for dtype in (torch.float32, torch.float16):
        for label, shape in shapes.items():
            x = torch.randn(n, generator=gen).to(dtype).reshape(shape)
            took = best(lambda x=x: measure(x), args.repeats)
            print(f"  measure {str(dtype)[6:]:8} {label} {list(shape)}: {took:.3f} s")
    few = torch.randint(0, 10, (n // side, side), generator=gen).float()
    print(f"  measure float32 ten distinct values: {best(lambda: measure(few), args.repeats):.3f} s")
    ref = torch.randn(n // side, side, generator=gen)
    cand = ref.clone()
    cand[:, -side // 4 :] += 1
    print(f"  locate (a tail block of columns): {best(lambda: locate(cand, ref, 1e-5, 1e-5), args.repeats):.3f} s")
    took = best(lambda: compare_tensor("out", cand, ref, atol=1e-5, rtol=1e-5), args.repeats)
    print(f"  compare_tensor of the same pair: {took:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
