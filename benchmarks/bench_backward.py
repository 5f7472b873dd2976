"""What gradients cost (issue 23), run by hand (not part of the tests).

    .venv/bin/python benchmarks/bench_backward.py               # both sections
    .venv/bin/python benchmarks/bench_backward.py --section 1   # a 64x64 case with backward, local transport
    .venv/bin/python benchmarks/bench_backward.py --section 2   # comparing 2**24-element gradients

Section 1 runs a 64x64 float32 ``torch.mul`` case through the real local
transport (the staged runner's supervisor and its warm worker, driven by the
SupervisorClient, as benchmarks/bench.py section 1 does) with the gradients
of both inputs compared (``grad_inputs``: candidate forward + backward,
reference forward + backward by CPU autograd, three outputs compared), next to
the same case forward only, interleaved; it prints the median wall time per
case and the worker's own phases.

Section 2 judges the gradients of a 2**24-element input the way a case does
(backward.Backward.compare: the comparison engine's full metric set, per
output ``grad.<input>``, plus the tolerance judge's verdict) against
torch.testing.assert_close on the same two gradients (the forward budget of
benchmarks/bench.py section 2: at most 0.5 of assert_close), interleaved,
best of N.  The gradients are real: autograd of ``sin(x * w)`` in float32
(candidate) and in float64 rounded to float32 (reference).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CONFIG = {"run_id": "bench-bw", "operator": {"name": "mul", "candidate": "torch.mul", "reference": "torch.mul"},
          "tolerance": {"atol": 1e-5, "rtol": 1e-5}}


def case(i: int, backward: bool) -> dict:
    doc = {"id": f"c{i}", "mode": "eager", "seed": i,
           "inputs": [{"name": "input", "shape": [64, 64]}, {"name": "other", "shape": [64, 64]}]}
    if backward:
        doc["grad_inputs"] = ["input", "other"]
    return doc


def section_1(cases: int = 200) -> dict:
    from tools.remote.local import LocalSlot

    class Run:
        config = CONFIG
        modules_dir = None
        captured_dir = None

    async def measure() -> dict:
        slot = LocalSlot()
        await slot.start()
        try:
            for i in range(20):  # warm-up, both kinds (the first backward initialises autograd's engine)
                await slot.run_case(Run, case(i, i % 2 == 0), 30)
            walls = {True: [], False: []}
            phases: dict[str, list[float]] = {}
            for i in range(2 * cases):
                backward = i % 2 == 0
                t0 = time.perf_counter()
                event = await slot.run_case(Run, case(i, backward), 30)
                walls[backward].append(time.perf_counter() - t0)
                result = event["result"]
                assert result["status"] == "passed", event
                assert len(result["comparisons"]) == (3 if backward else 1), result["comparisons"]
                if backward:
                    for key, value in result["timing_us"].items():
                        phases.setdefault(key, []).append(value / 1e3)
            return {"walls": walls, "phases": phases}
        finally:
            await slot.close()

    got = asyncio.run(measure())
    with_bw = statistics.median(got["walls"][True]) * 1e3
    without = statistics.median(got["walls"][False]) * 1e3
    phases = {k: statistics.median(v) for k, v in got["phases"].items()}
    print(f"== 1. a 64x64 torch.mul case on the local transport, warm worker ({cases} cases each, interleaved) ==")
    print(f"forward only (1 output)                 : median {without:7.2f} ms per case")
    print(f"forward + backward (out, grad.input, grad.other): median {with_bw:7.2f} ms per case "
          f"(+{with_bw - without:.2f} ms)")
    print("inside the worker, with backward (median ms): "
          + ", ".join(f"{k[:-3]} {v:.3f}" for k, v in sorted(phases.items())))
    return {"forward_ms": without, "backward_ms": with_bw, "phases_ms": phases}


def section_2(n: int = 1 << 24, repeats: int = 7) -> dict:
    import torch

    from tools.runner.backward import Backward
    from tools.runner.judge import apply_judge

    g = torch.Generator().manual_seed(0)
    x64 = torch.randn(n, generator=g, dtype=torch.float64)
    w64 = torch.randn(n, generator=g, dtype=torch.float64)
    up = torch.randn(n, generator=g, dtype=torch.float64)

    def grads(dtype):
        x, w = x64.to(dtype).requires_grad_(), w64.to(dtype).requires_grad_()
        out = torch.sin(x * w)
        gx, gw = torch.autograd.grad(out, [x, w], up.to(dtype))
        return {"grad.x": gx.float(), "grad.w": gw.float()}

    cand, ref = grads(torch.float32), grads(torch.float64)
    tolerance = {"atol": 1e-5, "rtol": 1e-5}
    bw = Backward({"grad_inputs": ["x", "w"]}, {"id": "b"}, 0, None)

    def judged():
        comps = bw.compare(cand, ref, tolerance, strict_dtype=True)
        apply_judge(comps, "tolerance", names=None)
        return comps

    def assert_close():
        for name in cand:
            try:
                torch.testing.assert_close(cand[name], ref[name], atol=1e-5, rtol=1e-5)
            except AssertionError:
                pass

    from tools.runner.compare import compare_tensor

    fwd_ref = torch.randn(n, generator=g)  # bench.py section 2's pair, twice: the forward outputs' cost here
    fwd_cand = fwd_ref + 1e-6 * torch.randn(n, generator=g)

    def forward_pair():
        for _ in cand:
            compare_tensor("out", fwd_cand, fwd_ref, atol=1e-5, rtol=1e-5)

    comps = judged()
    assert [c["output"] for c in comps] == ["grad.x", "grad.w"] and all("verdict" in c for c in comps)
    contenders = {"judged": judged, "assert_close": assert_close, "forward": forward_pair}
    for fn in contenders.values():  # warm-up
        fn()
    times = {k: [] for k in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    t_judged, t_assert, t_forward = (min(times[k]) for k in contenders)
    print(f"== 2. two gradients of 2**{n.bit_length() - 1} float32 elements each (best of {repeats}, "
          f"{torch.get_num_threads()} threads) ==")
    print(f"{'metric set + verdict per gradient':36s} {t_judged * 1e3:8.1f} ms")
    print(f"{'torch.testing.assert_close':36s} {t_assert * 1e3:8.1f} ms")
    print(f"{'forward outputs, the same count':36s} {t_forward * 1e3:8.1f} ms  (bench.py section 2's pair)")
    print(f"judged / assert_close: {t_judged / t_assert:.2f}   (the forward outputs' budget: <= 0.50); "
          f"mismatching elements: {[c['mismatch_count'] for c in comps]}")
    return {"judged_ms": t_judged * 1e3, "assert_close_ms": t_assert * 1e3, "forward_ms": t_forward * 1e3,
            "ratio": t_judged / t_assert}


SECTIONS = {"1": section_1, "2": section_2}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", action="append", choices=sorted(SECTIONS),
                        help="run only these sections (repeatable); default all")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    parser.add_argument("--threads", type=int, help="torch intra-op threads for section 2 (a busy host: 1)")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    figures = {}
    for name in args.section or sorted(SECTIONS):
        figures[name] = SECTIONS[name]()
        print()
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
