"""Check the runner's device adapter on a real accelerator (run by hand).

    python3 scripts/device_check.py --device cuda      # or npu on an Ascend host

Needs only the standard library and torch (torch_npu on NPU), like the
runner: it starts ``python -m tools.runner supervise --device KIND`` from
this checkout and speaks the runner protocol to it directly.  It runs a small
matrix with known answers - the built-in RMSNorm demo (bfloat16 wrong,
float16/float32 right) in eager, strided, compile and graph mode, a storage
format, and a real segmentation fault followed by a case on the fresh worker;
and with gradients (issue 23): a weight gradient wrong only in bfloat16 in
eager, compile and graph mode, a backward that segfaults then a case on the
fresh worker, and a compile backend whose dynamic-shape backward is wrong -
and checks every status.  Exit code 0 when every expectation held.
With $OUT set, the answers are written to $OUT/device-check.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO_DIR = REPO / "tools" / "examples"
OPERATORS = REPO / "tests" / "operators"


def rms_config(backend: str | None) -> dict:
    return {"schema_version": 1, "run_id": "device-check",
            "operator": {"name": "rms_norm", "candidate": "rmsnorm_demo.rms_norm",
                         "reference": "rmsnorm_demo.rms_norm_reference", "modules": ["rmsnorm_demo.py"],
                         "compile_backend": backend},
            "tolerance": {"atol": 1e-5, "rtol": 1e-5, "per_dtype": {
                "float16": {"atol": 1e-3, "rtol": 1e-3}, "bfloat16": {"atol": 8e-3, "rtol": 8e-3}}}}


def rms_case(case_id: str, dtype: str = "float32", mode: str = "eager", strides=None, layout: str = "ND") -> dict:
    x = {"name": "x", "shape": [8, 4096], "dtype": dtype, "layout": layout}
    if strides:
        x["strides"] = strides
    return {"id": case_id, "mode": mode, "seed": 7, "attributes": {"eps": 1e-6},
            "inputs": [x, {"name": "weight", "shape": [4096], "dtype": dtype}]}


SEGV_CONFIG = {"schema_version": 1, "run_id": "device-check",
               "operator": {"name": "segv", "candidate": "segfault_large.cand", "reference": "segfault_large.ref",
                            "modules": ["segfault_large.py"]},
               "tolerance": {"atol": 1e-5, "rtol": 1e-5}}


def grad_config(module: str, **operator) -> dict:
    stem = module[:-3]
    return {"schema_version": 1, "run_id": "device-check", "judge": "baseline",
            "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref", "modules": [module],
                         **operator}}


def grad_case(case_id: str, dtype: str = "float32", mode: str = "eager", rows: int = 256, **extra) -> dict:
    return {"id": case_id, "mode": mode, "seed": 1, "grad_inputs": ["x", "weight"],
            "inputs": [{"name": "x", "shape": [rows, 64], "dtype": dtype},
                       {"name": "weight", "shape": [64], "dtype": dtype}], **extra}


def backward_plan(device: str) -> list[tuple[dict, dict, str, str]]:
    """Gradients on the device (issue 23): (config, case, modules_dir, expected status)."""
    graph = "unsupported" if device == "cpu" else None
    ops = str(OPERATORS)
    gw = grad_config("grad_weight_bf16.py")
    segv = dict(grad_config("backward_segfault.py"), judge="tolerance", tolerance={"atol": 1e-5, "rtol": 1e-5})
    dyn = dict(grad_config("dynamic_backend.py", compile_backend="dynamic_backend.backend"), judge="tolerance",
               tolerance={"atol": 1e-5, "rtol": 1e-5})
    x = lambda n: [{"name": "x", "shape": [n, n]}]  # noqa: E731
    return [
        (gw, grad_case("bw-f32"), ops, "passed"),
        (gw, grad_case("bw-bf16", "bfloat16"), ops, "numerical_mismatch"),  # grad.weight only
        (gw, grad_case("bw-f32-compile", mode="compile"), ops, "passed"),
        (gw, grad_case("bw-f32-graph", mode="graph"), ops, graph or "passed"),
        (gw, grad_case("bw-bf16-graph", "bfloat16", mode="graph"), ops, graph or "numerical_mismatch"),
        (segv, {"id": "bw-segv", "grad_inputs": ["x"], "inputs": x(64)}, ops, "crash"),  # backward: SIGSEGV
        (segv, {"id": "bw-after-segv", "grad_inputs": ["x"], "inputs": x(8)}, ops, "passed"),
        (dyn, grad_case("bw-static", mode="compile"), ops, "passed"),
        (dyn, grad_case("bw-dynamic", mode="compile", compile_dynamic=True), ops, "numerical_mismatch"),
    ]


def plan(backend: str | None, device: str) -> list[tuple[dict, dict, str, str]]:
    """(config, case, modules_dir, expected status)."""
    cfg, demo = rms_config(backend), str(DEMO_DIR)
    graph = "unsupported" if device == "cpu" else None
    segv = str(OPERATORS)
    return [
        (cfg, rms_case("rms-f32"), demo, "passed"),
        (cfg, rms_case("rms-f16", "float16"), demo, "passed"),
        (cfg, rms_case("rms-bf16", "bfloat16"), demo, "numerical_mismatch"),
        (cfg, rms_case("rms-f32-strided", strides=[1, 8]), demo, "passed"),
        (cfg, rms_case("rms-f32-compile", mode="compile"), demo, "passed"),
        (cfg, rms_case("rms-f32-graph", mode="graph"), demo, graph or "passed"),
        (cfg, rms_case("rms-bf16-graph", "bfloat16", mode="graph"), demo, graph or "numerical_mismatch"),
        (cfg, rms_case("rms-f32-nz", layout="FRACTAL_NZ"), demo, "passed" if device == "npu" else "unsupported"),
        (SEGV_CONFIG, {"id": "segv", "inputs": [{"name": "x", "shape": [64, 64]}]}, segv, "crash"),
        (SEGV_CONFIG, {"id": "after-segv", "inputs": [{"name": "x", "shape": [4, 4]}]}, segv, "passed"),
        *backward_plan(device),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda", "npu"])
    parser.add_argument("--compile-backend", default=None,
                        help="torch.compile backend (default: inductor; torchair's NPU backend on npu)")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "tools.runner", "supervise", "--device", args.device],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)

    def ask(msg: dict, until: str) -> dict:
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        while True:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("the supervisor closed its output")
            event = json.loads(line)
            if event.get("event") == until:
                return event

    hello = ask({"op": "hello"}, "hello")
    print(f"device {hello.get('device')} ({hello.get('device_count')} visible), torch {hello.get('torch')}, "
          f"torch_npu {hello.get('torch_npu')}, worker_error {hello.get('worker_error')}")
    rows, answers, failed = [], [], 0
    for i, (config, case, modules, expected) in enumerate(plan(args.compile_backend, args.device)):
        started = time.perf_counter()
        done = ask({"op": "run", "request_id": f"r{i}", "config": config, "case": case, "timeout_s": 300,
                    "modules_dir": modules, "captured_dir": None}, "case_done")
        wall = time.perf_counter() - started
        answers.append(done)
        if done.get("outcome") == "result":
            result = done["result"]
            status = result["status"]
            comps = result.get("comparisons") or []
            detail = (result.get("error") or {}).get("signature") or ", ".join(
                f"{c['output']}: max_abs={c.get('max_abs')}, ratio={c.get('mismatch_ratio')}" for c in comps)
        else:
            status = "harness_error"
            err = done.get("harness_error") or {}
            detail = f"{err.get('where')}: {err.get('type')}: {err.get('message')}"[:300]
        ok = status == expected
        failed += not ok
        rows.append((case["id"], expected, status, "ok" if ok else "WRONG", f"{wall:.2f}s", detail))
    ask({"op": "shutdown"}, "bye")
    proc.wait(timeout=30)
    width = max(len(r[0]) for r in rows)
    for r in rows:
        print(f"{r[0]:<{width}}  expected {r[1]:<18} got {r[2]:<18} {r[3]:<5} {r[4]:>7}  {r[5]}")
    print(f"{len(rows) - failed} passed, {failed} failed")
    out = os.environ.get("OUT")
    if out:
        Path(out, "device-check.json").write_text(json.dumps({"hello": hello, "answers": answers}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
