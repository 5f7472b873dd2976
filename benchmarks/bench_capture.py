"""Cost of capture_calls inside a model, run by hand (not part of the tests).

    .venv/bin/python benchmarks/bench_capture.py [--calls 200] [--shape 1024 1024] [--threads 1]

Times one operator (torch.mul of a float32 tensor and a scalar) called
directly, through a capture_calls wrapper whose limit is already reached (the
production steady state: it just runs), recording metadata only (statistics
on every call), and saving full tensors; median microseconds per call.  The
recording calls rewrite index.json each time, so their cost grows with the
number of calls already recorded: that is the reason for ``limit``.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

import torch

MODULE = Path(__file__).resolve().parent.parent / "tools" / "capture" / "opdebug_capture.py"


def load():
    spec = importlib.util.spec_from_file_location("opdebug_capture", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_call_us(fn, x, calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(x, 2.0)
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--shape", type=int, nargs="+", default=[1024, 1024])
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    oc = load()
    x = torch.randn(*args.shape)
    with tempfile.TemporaryDirectory() as tmp:
        full = oc.capture_calls(torch.mul, Path(tmp) / "a", limit=1)
        full(x, 2.0)
        rows = [
            ("direct call", per_call_us(torch.mul, x, args.calls)),
            ("wrapper, limit reached", per_call_us(full, x, args.calls)),
            ("metadata only", per_call_us(oc.capture_calls(torch.mul, Path(tmp) / "b", limit=None), x, args.calls)),
            ("full tensors", per_call_us(oc.capture_calls(torch.mul, Path(tmp) / "c", limit=None, tensors=True,
                                                          budget_bytes=1 << 40), x, min(args.calls, 50))),
        ]
    print(f"torch.mul on {list(x.shape)} float32, median us per call ({args.calls} calls; full tensors: "
          f"{min(args.calls, 50)})")
    for name, us in rows:
        print(f"  {name:24s} {us:10.1f}")


if __name__ == "__main__":
    main()
