"""One case executed in-process (the worker's execute_case on the cpu
device), for what the candidate and reference return."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools.runner.devices import make_device
from tools.runner.execute import environment, execute_case

MODULE = "opdebug_exec_ops"


@pytest.fixture()
def ops(tmp_path: Path):
    """Writes the module source and returns a runner for one case of it."""
    device = make_device("cpu")
    env = environment(device)

    def run(source: str, case: dict, **operator) -> dict:
        (tmp_path / f"{MODULE}.py").write_text(source)
        config = {"run_id": "r", "tolerance": {"atol": 1e-5, "rtol": 1e-5},
                  "operator": {"name": "op", "candidate": f"{MODULE}.cand", "reference": f"{MODULE}.ref",
                               "modules": [f"{MODULE}.py"], **operator}}
        return execute_case({"config": config, "case": case, "modules_dir": str(tmp_path)}, device, env)

    yield run
    sys.modules.pop(MODULE, None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def case(dtype: str = "float32", **kw) -> dict:
    return {"id": "c", "inputs": [{"name": "x", "shape": [4, 8], "dtype": dtype}], **kw}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_reference_that_computes_in_float64_does_not_fail_a_right_candidate(ops, dtype) -> None:
    # A reference written with float64 math (numpy-style) returns float64 for float32 inputs:
    # its dtype is not the candidate's contract, so a right candidate passes (as it does for float16).
    source = "def cand(x):\n    return x * 2\n\ndef ref(x):\n    return x.double() * 2\n"
    answer = ops(source, case(dtype))
    assert answer["outcome"] == "result"
    result = answer["result"]
    assert result["status"] == "passed", result["comparisons"]


def test_a_candidate_that_returns_the_wrong_float_dtype_still_fails(ops) -> None:
    source = "def cand(x):\n    return (x * 2).half()\n\ndef ref(x):\n    return x * 2\n"
    result = ops(source, case("float32"))["result"]
    assert result["status"] == "numerical_mismatch"
    assert "float16" in result["comparisons"][0]["contract_mismatch"]
    # float64 inputs: the reference's float64 output is the contract, a float32 candidate output is not
    source = "def cand(x):\n    return (x * 2).float()\n\ndef ref(x):\n    return x * 2\n"
    result = ops(source, case("float64"))["result"]
    assert result["status"] == "numerical_mismatch" and result["comparisons"][0]["contract_mismatch"]


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="graph capture needs a cuda device")
def test_graph_mode_applies_an_in_place_candidate_once(tmp_path: Path) -> None:
    # Graph mode runs the candidate for warm-up, captures it and replays it: an in-place
    # operator (a cache update, x.mul_) must see its original inputs at the replay.
    device = make_device("cuda")
    (tmp_path / f"{MODULE}.py").write_text("def cand(x):\n    return x.mul_(2).add_(1)\n\n"
                                           "def ref(x):\n    return x * 2 + 1\n")
    config = {"run_id": "r", "tolerance": {"atol": 1e-5, "rtol": 1e-5},
              "operator": {"name": "op", "candidate": f"{MODULE}.cand", "reference": f"{MODULE}.ref",
                           "modules": [f"{MODULE}.py"]}}
    try:
        for mode in ("eager", "graph"):
            for strides in (None, [1, 4]):
                spec = {"name": "x", "shape": [4, 8], "dtype": "float32", "strides": strides}
                answer = execute_case({"config": config, "case": {"id": "c", "mode": mode, "inputs": [spec]},
                                       "modules_dir": str(tmp_path)}, device, environment(device))
                assert answer["result"]["status"] == "passed", (mode, strides, answer["result"])
    finally:
        sys.modules.pop(MODULE, None)
        while str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))


def test_a_candidate_exception_whose_str_fails_is_still_its_crash(ops) -> None:
    source = ("class Odd(Exception):\n    def __str__(self):\n        raise ValueError('no text')\n\n"
              "def cand(x):\n    raise Odd()\n\ndef ref(x):\n    return x\n")
    answer = ops(source, case())
    assert answer["outcome"] == "result", answer
    error = answer["result"]["error"]
    assert answer["result"]["status"] == "crash" and error["type"] == "Odd" and error["signature"].startswith("Odd")


def test_a_reference_output_that_is_not_a_tensor_leaves_the_case_pending(ops) -> None:
    # e.g. a numpy reference returning an ndarray: the reference's failure, not the operator's mismatch
    source = ("class Array:\n    pass\n\n"
              "def cand(x):\n    return x * 1\n\ndef ref(x):\n    return Array()\n")
    answer = ops(source, case())
    assert answer["outcome"] == "harness_error", answer.get("result")
    assert "reference" in answer["harness_error"]["message"] and "Array" in answer["harness_error"]["message"]
    # the candidate's non-tensor output stays its own contract mismatch
    source = "def cand(x):\n    return 'text'\n\ndef ref(x):\n    return x * 1\n"
    result = ops(source, case())["result"]
    assert result["status"] == "numerical_mismatch" and "str" in result["comparisons"][0]["contract_mismatch"]
