"""The baseline host of a run (``config.baseline_host``): the same-dtype baseline on another device.

msprobe compares an NPU output with the same API on a GPU, each measured
against its own CPU golden, and divides the two sets of numbers.  With a
``baseline_host`` in the config, run_case_remote does the same in two passes:

1. every case to run goes to the baseline host first, with the config's
   ``role`` set to ``baseline`` (read by the runner only, never stored): its
   worker builds the case's inputs from the seed, runs the baseline callable
   (``operator.baseline``, else the reference) on its device in the case's
   dtypes and the reference on its CPU, and answers with each output's
   stage-1 numbers (tools/runner/baseline_side.py) and the inputs' sha256;
2. the case then runs on the candidate host as usual, carrying those numbers
   (``case.baseline_side``): the candidate's worker refuses them unless its
   inputs have the same sha256, and judges against them instead of a CPU
   baseline.  The result's ``environment.baseline_host`` names the baseline
   host, its device and environment; ``raw-results/<case>/baseline-worker-result.json``
   keeps the baseline host's answer.

Nothing is recorded in pass 1: a case whose baseline fails (a harness
error, a crash or a refusal of the baseline on its device, a lost
connection) stays pending with that reason.
"""

from __future__ import annotations

import json
from typing import Any

from .remote import pool
from .remote.envelopes import HARNESS_WHERE_TEXT, MalformedEnvelope, parse_case_done
from .remote.inventory import as_inventory
from .remote.slot import RunFiles, slot_specs

BASELINE_RAW = "baseline-worker-result.json"


def baseline_run(run: RunFiles) -> RunFiles:
    """The run as the baseline host gets it: the same files, the config with ``role: baseline``."""
    return RunFiles(
        run_id=run.run_id,
        config=dict(run.config, role="baseline"),
        modules_dir=run.modules_dir,
        captured_dir=run.captured_dir,
    )


def read_side(event: dict, host: str, device: str, callable_name: str) -> tuple[dict | None, str | None]:
    """(the baseline side to ship with the case, None) or (None, why the case stays pending)."""
    try:
        done = parse_case_done(event)
    except MalformedEnvelope as exc:
        return None, f"the baseline host {host} answered a malformed envelope ({exc})"
    if done.outcome != "result":
        err = done.harness_error
        assert err is not None
        return None, (f"on the baseline host {host}: {HARNESS_WHERE_TEXT[err.where]} ({err.type}: {err.message})")
    result = done.result
    assert result is not None  # CaseDone's validator
    if result.status != "passed" or done.baseline_side is None:
        error = result.error
        why = (error.signature or error.message) if error is not None else "no numbers"
        return None, f"the baseline {callable_name} on {host} {device} did not give a baseline: {result.status}: {why}"
    side = dict(done.baseline_side)
    side.update(
        host=host,
        device=device,
        environment=result.environment,
        where=f"{callable_name} on host {host} ({device}), in the candidate's dtype",
    )
    return side, None


async def baseline_sides(
    config, cases: dict, todo: list[str], run: RunFiles, inventory=None
) -> tuple[dict[str, dict], dict[str, str], dict[str, str]]:
    """Pass 1 on ``config.baseline_host``: (case id -> baseline side, case id -> why it stays pending,
    case id -> the baseline host's raw answer as JSON text)."""
    host = as_inventory(inventory).get(config.baseline_host)  # [unknown_host] before anything runs
    specs = slot_specs([host])
    brun = baseline_run(run)
    name = config.operator.baseline or config.operator.reference
    sides: dict[str, dict] = {}
    errors: dict[str, str] = {}
    raw: dict[str, str] = {}

    async def run_one(slot: Any, case_id: str) -> None:
        case = cases[case_id]
        event = await slot.run_case(brun, case.model_dump(mode="json"), case.timeout_s or config.default_timeout_s)
        raw[case_id] = json.dumps(event, separators=(",", ":")) + "\n"
        side, why = read_side(event, slot.host, slot.device, name)
        if side is None:
            errors[case_id] = f"{why}; nothing recorded, the case stays pending"
        else:
            sides[case_id] = side

    report = await pool.run_queue(specs, todo, brun, run_one)
    for case_id, why in report.lost.items():
        errors[case_id] = f"the baseline host {host.name} lost the case ({why}); nothing recorded"
    for case_id in report.not_started:
        slots = "; ".join(f"{k}: {v}" for k, v in report.slot_errors.items()) or "no slot was left"
        errors[case_id] = f"the baseline host {host.name} could not run it ({slots}); nothing recorded"
    return sides, errors, raw
