"""The built-in demo's planted bug fails for bfloat16 only (the runner's
case execution in-process, on the very cases `opdebug demo` plans)."""

from __future__ import annotations

from pathlib import Path

from tools.evidence import RunStore
from tools.examples import demo_request
from tools.plan_cases import plan_cases
from tools.runner.devices import make_device
from tools.runner.execute import environment, execute_case


def test_demo_star_fails_for_bfloat16_only(tmp_path: Path) -> None:
    plan = plan_cases(demo_request("demo-test"), root=tmp_path)
    store = RunStore(tmp_path, "demo-test")
    config = store.read_config().model_dump(mode="json")
    device = make_device("cpu")
    env = environment(device)
    statuses = {}
    for case in store.read_cases():
        if case.mode == "compile":
            continue  # compiled on the real demo run (tests/test_cli.py); slow in-process
        answer = execute_case({"config": config, "case": case.model_dump(mode="json"),
                               "modules_dir": str(store.path("artifacts", "modules"))}, device, env)
        assert answer["outcome"] == "result", answer
        statuses[case.id] = answer["result"]["status"]
    assert {p.id for p in plan.cases} >= set(statuses) | {"rms.mode-compile"}
    assert statuses == {"rms": "passed", "rms.dtype-float16": "passed", "rms.dtype-bfloat16": "numerical_mismatch",
                        "rms.x.strides-1-8": "passed"}
