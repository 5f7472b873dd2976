"""Built-in examples.  ``demo_request`` is what ``opdebug demo`` plans, runs
and analyzes: an RMSNorm with a planted bfloat16-only accumulation bug
(rmsnorm_demo.py, shipped to the runner as a user module) and a star of
one-axis variations around a float32 eager base case.

Importing this package does not import torch (the MCP server imports it).
"""

from __future__ import annotations

from pathlib import Path

DEMO_MODULE = "rmsnorm_demo.py"
HIDDEN = 4096
ROWS = 8


def demo_module_source() -> str:
    return (Path(__file__).resolve().parent / DEMO_MODULE).read_text(encoding="utf-8")


def demo_request(run_id: str) -> dict:
    """A PlanRequest dict for the RMSNorm demo under ``run_id``."""
    base = {
        "id": "rms",
        "mode": "eager",
        "inputs": [
            {"name": "x", "shape": [ROWS, HIDDEN], "dtype": "float32", "values": {"kind": "normal"}},
            {
                "name": "weight",
                "shape": [HIDDEN],
                "dtype": "float32",
                "values": {"kind": "uniform", "low": 0.5, "high": 1.5},
            },
        ],
        "attributes": {"eps": 1e-6},
        "seed": 1234,
        "description": "RMSNorm over a hidden size of 4096, float32 eager (the base of the star)",
    }
    return {
        "config": {
            "run_id": run_id,
            "operator": {
                "name": "rms_norm",
                "candidate": "rmsnorm_demo.rms_norm",
                "reference": "rmsnorm_demo.rms_norm_reference",
                "modules": [DEMO_MODULE],
            },
            # Fixed before any result: about one unit in the last place of each dtype.
            "tolerance": {
                "atol": 1e-5,
                "rtol": 1e-5,
                "per_dtype": {"float16": {"atol": 1e-3, "rtol": 1e-3}, "bfloat16": {"atol": 8e-3, "rtol": 8e-3}},
            },
            "source_model_failure": (
                "Llama-style decoder on Ascend: generations degrade and the loss drifts only when the model runs "
                "in bfloat16; the same checkpoint in float16 or float32 matches the GPU baseline. The hidden "
                "states going into the final RMSNorm already differ by a few percent in bfloat16."
            ),
            "model": "llama-style decoder, hidden size 4096",
            "command": "opdebug demo",
        },
        "stars": [
            {
                "base": base,
                "vary": [
                    {"axis": "dtype", "values": ["float16", "bfloat16"]},
                    {"axis": "strides", "input": "x", "values": [[1, ROWS]]},  # the same data, column-major
                    {"axis": "mode", "values": ["compile"]},
                ],
            }
        ],
        "module_sources": {DEMO_MODULE: demo_module_source()},
    }
