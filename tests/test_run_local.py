"""End to end through run_case_remote on the local transport (a real
supervisor + warm worker subprocess, the runner staged as opdebug_runner),
with deliberately buggy candidate operators from tests/operators/.

All tests of this module share one event loop, hence one warm local slot
(torch is imported once); the tests that kill the worker come last but one,
the cancellation test last.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from proc_util import alive, live_children

from tools.errors import ToolError
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.remote.pool import REGISTRY
from tools.run_case_remote import run_case_remote

OPERATORS = Path(__file__).resolve().parent / "operators"


def warm_slots_broken() -> list[str]:
    """The warm local slots whose supervisor lost its worker without starting a new one."""
    return [f"{key}: supervisor {e.slot.pid} has no live worker" for key, e in REGISTRY._entries.items()
            if e.slot.alive and e.slot.pid and not live_children(e.slot.pid)]


@pytest.fixture(autouse=True)
def fresh_warm_worker_after_a_break(loop, request):
    """One defect fails one test: when a test failed, or left the shared warm slot without a
    live worker, the slot is shut down and the next test starts a fresh one."""
    yield
    call = getattr(request.node, "rep_call", None)
    if (call is not None and call.failed) or warm_slots_broken():
        loop.run_until_complete(REGISTRY.close_all())


def plan(root: Path, run_id: str, module: str, cases: list[dict], *, tolerance: dict | None = None,
         **operator) -> None:
    stem = module[:-3]
    config = {"run_id": run_id,
              "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref",
                           "modules": [module], **operator},
              "tolerance": tolerance or {"atol": 1e-5, "rtol": 1e-5}}
    plan_cases({"config": config, "cases": cases,
                "module_sources": {module: (OPERATORS / module).read_text()}}, root=root)


def inp(name="x", shape=(4, 8), dtype="float32", **kw) -> dict:
    return {"name": name, "shape": list(shape), "dtype": dtype, **kw}


def run(loop, root, run_id, **kw):
    return loop.run_until_complete(run_case_remote(run_id, root=root, **kw))


def states(response) -> dict[str, str]:
    return {o.case_id: o.state for o in response.outcomes}


def worker_answer(root: Path, run_id: str, case_id: str) -> dict:
    return json.loads((root / run_id / "raw-results" / case_id / "worker-result.json").read_text())


def test_wrong_for_bfloat16_only(loop, tmp_path: Path) -> None:
    cases = [{"id": f"x-{d}", "inputs": [inp(dtype=d)]} for d in ("float32", "float16", "bfloat16")]
    plan(tmp_path, "bf16", "bf16_only.py", cases,
         tolerance={"atol": 1e-5, "rtol": 1e-5, "per_dtype": {"float16": {"atol": 1e-3, "rtol": 1e-3},
                                                               "bfloat16": {"atol": 8e-3, "rtol": 8e-3}}})
    seen = []

    async def progress(done, total, outcome):
        seen.append((done, total, outcome.case_id))

    resp = run(loop, tmp_path, "bf16", progress=progress)
    assert states(resp) == {"x-float32": "passed", "x-float16": "passed", "x-bfloat16": "numerical_mismatch"}
    assert [d for d, _, _ in seen] == [1, 2, 3] and {t for _, t, _ in seen} == {3}
    bad = next(o for o in resp.outcomes if o.case_id == "x-bfloat16")
    assert bad.recorded is True and bad.failed_outputs == ["out"] and bad.max_abs == pytest.approx(0.25, abs=0.01)
    assert sorted(resp.recorded) == sorted(states(resp)) and resp.pending == []
    # raw evidence and input metadata on disk, the result recorded through record_result
    raw = tmp_path / "bf16" / "raw-results" / "x-bfloat16"
    # stdout/stderr/traceback files only when there was output (all of it is in worker-result.json too)
    assert {"worker-result.json", "result.json", "input-metadata.json"} <= {p.name for p in raw.iterdir()}
    meta = json.loads((tmp_path / "bf16" / "input-metadata" / "x-bfloat16.json").read_text())
    assert meta["inputs"][0]["dtype"] == "bfloat16" and meta["inputs"][0]["shape"] == [4, 8]
    result = RunStore(tmp_path, "bf16").read_results()["x-bfloat16"]
    assert result.source.kind == "run_case_remote" and result.source.host == "local"
    comp = result.comparisons[0]
    assert comp.actual_dtype == "bfloat16" and comp.expected_dtype == "float32" and comp.mismatch_ratio == 1.0


def test_wrong_for_non_contiguous_strides_only(loop, tmp_path: Path) -> None:
    cases = [{"id": "contiguous", "inputs": [inp()]},
             {"id": "transposed", "inputs": [inp(strides=[1, 4])]},
             {"id": "offset", "inputs": [inp(storage_offset=5)]}]
    plan(tmp_path, "strided", "contiguous_only.py", cases)
    resp = run(loop, tmp_path, "strided")
    assert states(resp) == {"contiguous": "passed", "transposed": "numerical_mismatch", "offset": "passed"}


def test_int8_rejection_is_unsupported_with_the_rule(loop, tmp_path: Path) -> None:
    cases = [{"id": "i32", "inputs": [inp(dtype="int32", values={"kind": "randint", "low": -50, "high": 50})]},
             {"id": "i8", "inputs": [inp(dtype="int8", values={"kind": "randint", "low": -50, "high": 50})]}]
    plan(tmp_path, "int8", "int8_reject.py", cases)
    resp = run(loop, tmp_path, "int8")
    assert states(resp) == {"i32": "passed", "i8": "unsupported"}
    out = next(o for o in resp.outcomes if o.case_id == "i8")
    assert out.matched_rule == "not implemented for"
    assert out.signature == "RuntimeError: \"abs_kernel_npu\" not implemented for '<DTYPE>'"  # one group whatever dtype
    err = RunStore(tmp_path, "int8").read_results()["i8"].error
    assert err.type == "RuntimeError" and "not implemented for 'Char'" in err.message
    assert "int8_reject.py" in err.traceback_tail and "RuntimeError" in err.traceback_tail


def test_nan_handled_wrongly_shows_nan_pattern_mismatch(loop, tmp_path: Path) -> None:
    nan5 = {"kind": "normal", "specials": [{"value": "nan", "count": 5}]}
    cases = [{"id": "clean", "inputs": [inp()]}, {"id": "with-nan", "inputs": [inp(values=nan5)]}]
    plan(tmp_path, "nan", "nan_wrong.py", cases)
    resp = run(loop, tmp_path, "nan")
    assert states(resp) == {"clean": "passed", "with-nan": "numerical_mismatch"}
    comp = RunStore(tmp_path, "nan").read_results()["with-nan"].comparisons[0]
    assert comp.nan_mismatch == 5 and comp.mismatch_count == 5 and comp.inf_mismatch == 0
    assert comp.max_abs == 0.0  # every finite element is right: only the NaN pattern differs
    assert comp.first_candidate == 0.0 and comp.first_reference == "nan"
    assert "NaN pattern mismatches=5" in next(o for o in resp.outcomes if o.case_id == "with-nan").summary


def test_a_captured_model_input_replays_exactly(loop, tmp_path: Path) -> None:
    import torch

    # What the model really fed the operator: mostly ordinary values, one NaN, saved with torch.save.
    activation = torch.linspace(-3, 3, 32, dtype=torch.float16).reshape(4, 8)
    activation[2, 5] = float("nan")
    capture = tmp_path / "captures" / "layer7_input.pt"
    capture.parent.mkdir()
    torch.save(activation, capture)
    cases = [{"id": "generated", "inputs": [inp(dtype="float16")]},
             {"id": "captured", "inputs": [inp(dtype="float16", values={"kind": "captured",
                                                                        "captured": "layer7_input"})]}]
    config = {"run_id": "capt", "operator": {"name": "nan_wrong", "candidate": "nan_wrong.cand",
                                             "reference": "nan_wrong.ref", "modules": ["nan_wrong.py"]},
              "tolerance": {"atol": 1e-3, "rtol": 1e-3}}
    plan_cases({"config": config, "cases": cases, "captured_files": {"layer7_input": str(capture)},
                "module_sources": {"nan_wrong.py": (OPERATORS / "nan_wrong.py").read_text()}}, root=tmp_path)
    stored = tmp_path / "capt" / "artifacts" / "captured" / "layer7_input"
    assert stored.read_bytes() == capture.read_bytes()
    resp = run(loop, tmp_path, "capt")
    assert states(resp) == {"generated": "passed", "captured": "numerical_mismatch"}
    comp = RunStore(tmp_path, "capt").read_results()["captured"].comparisons[0]
    assert comp.nan_mismatch == 1 and comp.first_mismatch_index == [2, 5]
    # A changed capture under the same name is refused; a case naming an unknown capture too.
    capture.write_bytes(b"other bytes")
    with pytest.raises(ToolError) as info:
        plan_cases({"run_id": "capt", "append": True, "captured_files": {"layer7_input": str(capture)},
                    "cases": [dict(cases[1], id="again")]}, root=tmp_path)
    assert info.value.code == "captured_changed"
    with pytest.raises(ToolError) as info:
        plan_cases({"run_id": "capt", "append": True, "cases": [
            {"id": "ghost", "inputs": [inp(values={"kind": "captured", "captured": "nowhere"})]}]}, root=tmp_path)
    assert "'nowhere'" in info.value.message and RunStore(tmp_path, "capt").pending_case_ids() == []


def test_keepdim_attribute_handled_wrongly(loop, tmp_path: Path) -> None:
    cases = [{"id": "keepdim-false", "inputs": [inp()], "attributes": {"keepdim": False}},
             {"id": "keepdim-true", "inputs": [inp()], "attributes": {"keepdim": True}}]
    plan(tmp_path, "keepdim", "keepdim_wrong.py", cases)
    resp = run(loop, tmp_path, "keepdim")
    assert states(resp) == {"keepdim-false": "passed", "keepdim-true": "numerical_mismatch"}
    comp = RunStore(tmp_path, "keepdim").read_results()["keepdim-true"].comparisons[0]
    assert "shape" in comp.contract_mismatch and comp.expected_shape == [4, 1] and comp.actual_shape == [4]


def test_reference_that_raises_leaves_the_case_pending(loop, tmp_path: Path) -> None:
    plan(tmp_path, "refbad", "reference_raises.py", [{"id": "c1", "inputs": [inp()]}])
    resp = run(loop, tmp_path, "refbad")
    (out,) = resp.outcomes
    assert out.state == "pending" and out.recorded is False
    assert "reference" in out.error and "reference exploded" in out.error
    assert resp.pending == ["c1"] and resp.recorded == [] and "run_case_remote again" in resp.rerun_hint
    store = RunStore(tmp_path, "refbad")
    assert store.read_results() == {}
    assert not (tmp_path / "refbad" / "raw-results" / "c1").exists()


def test_candidate_and_reference_get_bit_identical_inputs(loop, tmp_path: Path) -> None:
    out_dir = tmp_path / "seen"
    out_dir.mkdir()
    values = {"kind": "normal", "specials": [
        {"value": "nan", "positions": [[0, 1]]}, {"value": "-0", "positions": [[1, 2]]},
        {"value": "inf", "positions": [[2, 0]]}, {"value": "denormal", "positions": [[3, 3]]},
        {"value": "-large", "count": 2}]}
    spec = inp(shape=(4, 5), dtype="bfloat16", strides=[1, 6], storage_offset=3, values=values)
    plan(tmp_path, "bits", "recorder.py", [{"id": "c1", "inputs": [spec], "attributes": {"out_dir": str(out_dir)}}],
         tolerance={"atol": 1e-2, "rtol": 1e-2})
    resp = run(loop, tmp_path, "bits")
    assert states(resp) == {"c1": "passed"}, resp.outcomes
    import torch

    cand = torch.load(out_dir / "candidate.pt", weights_only=True)
    ref = torch.load(out_dir / "reference.pt", weights_only=True)
    for seen in (cand, ref):
        assert seen["shape"] == [4, 5] and seen["stride"] == [1, 6] and seen["offset"] == 3
    assert cand["dtype"] == "torch.bfloat16" and ref["dtype"] == "torch.float32"
    # the reference saw the candidate's values upcast, bit for bit (NaN, -0, inf and the denormal included)
    upcast = cand["x"].to(torch.float32)
    assert torch.equal(upcast.contiguous().view(torch.int32), ref["x"].contiguous().view(torch.int32))
    x = cand["x"].float()
    assert torch.isnan(x[0, 1]) and torch.isinf(x[2, 0]) and torch.signbit(x[1, 2]) and x[1, 2] == 0
    assert x[3, 3].item() == torch.finfo(torch.bfloat16).tiny * torch.finfo(torch.bfloat16).eps
    meta = json.loads((tmp_path / "bits" / "input-metadata" / "c1.json").read_text())["inputs"][0]
    assert meta["strides"] == [1, 6] and meta["storage_offset"] == 3 and meta["contiguous"] is False
    assert meta["storage_numel"] == 3 + 3 * 1 + 4 * 6 + 1
    assert meta["stats"]["nan"] == 1 and meta["stats"]["inf"] == 1


def test_compile_runs_on_cpu_and_graph_is_unsupported(loop, tmp_path: Path) -> None:
    case = {"inputs": [inp("input", (8, 8)), inp("other", (8, 8))]}
    plan_cases({"config": {"run_id": "modes", "operator": {"name": "add", "candidate": "torch.add",
                                                            "reference": "torch.add"}},
                "cases": [dict(case, id="eager"), dict(case, id="compile", mode="compile"),
                          dict(case, id="graph", mode="graph")]}, root=tmp_path)
    t0 = time.monotonic()
    resp = run(loop, tmp_path, "modes")
    assert states(resp) == {"eager": "passed", "compile": "passed", "graph": "unsupported"}
    assert time.monotonic() - t0 < 120
    graph = RunStore(tmp_path, "modes").read_results()["graph"].error
    assert "graph capture needs a cuda or npu device" in graph.message and "cpu" in graph.message
    assert graph.matched_rule == "runner: graph mode needs a cuda or npu device"


def test_candidate_prints_do_not_corrupt_the_protocol(loop, tmp_path: Path) -> None:
    plan(tmp_path, "chatty", "chatty.py", [{"id": "c1", "inputs": [inp()]}, {"id": "c2", "inputs": [inp()]}])
    resp = run(loop, tmp_path, "chatty")
    assert states(resp) == {"c1": "passed", "c2": "passed"}
    raw = tmp_path / "chatty" / "raw-results" / "c1"
    stdout = (raw / "stdout.txt").read_text()
    assert "raw fd-1 write" in stdout and "forged" in stdout
    assert "candidate warning on stderr" in (raw / "stderr.txt").read_text()


def test_recorded_cases_are_refused_and_unknown_ids_rejected(loop, tmp_path: Path) -> None:
    plan(tmp_path, "again", "bf16_only.py", [{"id": "a", "inputs": [inp()]}, {"id": "b", "inputs": [inp()]}])
    first = run(loop, tmp_path, "again", case_ids=["a"])
    assert states(first) == {"a": "passed"} and first.pending == ["b"]
    second = run(loop, tmp_path, "again", case_ids=["a", "b"])
    assert second.refused == ["a"] and states(second) == {"b": "passed"}
    third = run(loop, tmp_path, "again")
    assert third.outcomes == [] and third.pending == []
    with pytest.raises(ToolError, match="not planned"):
        run(loop, tmp_path, "again", case_ids=["nope"])
    with pytest.raises(ToolError, match="unknown host"):
        run(loop, tmp_path, "again", hosts=["no-such-host"])


def test_two_calls_on_one_run_at_once_run_each_case_once(loop, tmp_path: Path) -> None:
    # An agent retries run_case_remote while its first call still runs: each case runs once;
    # the call that finds a case recorded by the other reports it refused, not pending.
    calls = tmp_path / "calls.log"  # one line per candidate execution
    plan(tmp_path, "twice", "counts_calls.py",
         [{"id": f"c{i}", "inputs": [inp()], "attributes": {"log_file": str(calls), "tag": f"c{i}"}}
          for i in range(3)])

    async def both():
        return await asyncio.gather(run_case_remote("twice", root=tmp_path), run_case_remote("twice", root=tmp_path))

    one, two = loop.run_until_complete(both())
    assert sorted(one.recorded + two.recorded) == ["c0", "c1", "c2"]
    assert sorted(one.skipped + two.skipped) == ["c0", "c1", "c2"]  # skipped at their turn, not run
    assert one.refused == two.refused == []
    for resp in (one, two):
        assert resp.pending == [] and all(o.recorded for o in resp.outcomes), resp
        assert "stayed pending" not in (resp.rerun_hint or "")
    # executed once each, not once per call (a second execution would only show here: its record is refused)
    assert sorted(calls.read_text().splitlines()) == ["c0", "c1", "c2"]


TWO_PROCESSES = """
import asyncio, json, sys
from tools.run_case_remote import run_case_remote
r = asyncio.run(run_case_remote("twice", root=sys.argv[1], device_wait_s=120))
print(json.dumps({"recorded": r.recorded, "skipped": r.skipped, "refused": r.refused, "hint": r.rerun_hint}))
"""


def test_two_processes_on_one_run_the_one_that_waited_skips_what_the_other_recorded(tmp_path: Path) -> None:
    # Two agents (two servers, two CLIs) run one run at once on one device: the second waits for the
    # device, then re-reads what was recorded meanwhile and skips it, saying how many - no case is
    # executed by both (an NPU would pay every case twice).
    import os
    import subprocess
    import sys

    from conftest import REPO_ROOT, private_stage

    calls = tmp_path / "calls.log"
    ids = [f"c{i}" for i in range(10)]
    plan(tmp_path, "twice", "counts_calls.py",
         [{"id": c, "inputs": [inp()], "attributes": {"log_file": str(calls), "tag": c, "delay": 0.2}} for c in ids])
    stage = private_stage()  # the two share a device of their own (not this process's warm slots)
    logs = [(tmp_path / f"out-{i}.txt", tmp_path / f"err-{i}.txt") for i in range(2)]  # files: no pipe fills up
    procs = []
    for out, err in logs:
        with open(out, "w") as o, open(err, "w") as e:
            procs.append(subprocess.Popen([sys.executable, "-c", TWO_PROCESSES, str(tmp_path)], cwd=REPO_ROOT,
                                          stdout=o, stderr=e, env={**os.environ, "OPDEBUG_RUNNER_STAGE": stage}))
    answers = []
    for proc, (out, err) in zip(procs, logs, strict=True):
        assert proc.wait(timeout=240) == 0, err.read_text()[-2000:]
        answers.append(json.loads(out.read_text().splitlines()[-1]))
    executed = calls.read_text().split()
    assert sorted(executed) == ids, f"executed by both: {sorted(c for c in set(executed) if executed.count(c) > 1)}"
    assert sorted(answers[0]["recorded"] + answers[1]["recorded"]) == ids
    waited = min(answers, key=lambda a: len(a["recorded"]))
    assert sorted(waited["skipped"]) == sorted(set(ids) - set(waited["recorded"])) and waited["skipped"], answers
    assert waited["refused"] == [] and f"{len(waited['skipped'])} case(s) recorded by another call" in waited["hint"]


def test_a_run_locked_by_another_process_is_recorded_once_the_lock_frees(loop, tmp_path: Path) -> None:
    # Another writer (a CLI, a second server) holds the run's lock while cases finish: they wait
    # for it and are recorded, not left pending as a failed write; meanwhile the slot goes on
    # with the next case (a slot never waits for the client's recording).
    import subprocess
    import sys

    calls = tmp_path / "calls.log"
    plan(tmp_path, "held", "counts_calls.py",
         [{"id": f"c{i}", "inputs": [inp()], "attributes": {"log_file": str(calls), "tag": f"c{i}"}}
          for i in range(3)])
    holder = subprocess.Popen(  # holds the run's lock until all three cases ran (at most 30 s)
        [sys.executable, "-c", "import os, sys, time; from filelock import FileLock\n"
         "with FileLock(sys.argv[1]):\n    print('held', flush=True); end = time.monotonic() + 30\n"
         "    while time.monotonic() < end and (not os.path.exists(sys.argv[2]) or "
         "len(open(sys.argv[2]).read().split()) < 3):\n        time.sleep(0.05)\n"
         "    print(len(open(sys.argv[2]).read().split()) if os.path.exists(sys.argv[2]) else 0, flush=True)",
         str(tmp_path / ".held.lock"), str(calls)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        resp = run(loop, tmp_path, "held")
        ran_while_locked = int(holder.stdout.readline())
    finally:
        holder.wait(timeout=60)
    assert ran_while_locked == 3
    assert resp.recorded == ["c0", "c1", "c2"] and resp.pending == [], resp
    assert RunStore(tmp_path, "held").read_manifest()["recorded_count"] == 3


def test_a_slow_user_module_import_is_not_counted_in_the_case_timeout(loop, tmp_path: Path) -> None:
    plan(tmp_path, "slowimp", "slow_import.py",
         [{"id": f"c{i}", "inputs": [inp()], "timeout_s": 2} for i in range(2)])
    resp = run(loop, tmp_path, "slowimp")
    assert states(resp) == {"c0": "passed", "c1": "passed"}, [o.summary for o in resp.outcomes]


def test_a_reference_past_the_timeout_leaves_the_case_pending_not_crashed(loop, tmp_path: Path) -> None:
    plan(tmp_path, "slowref", "slow_reference.py",
         [{"id": "slow", "inputs": [inp()], "attributes": {"ref_s": 30}, "timeout_s": 2},
          {"id": "quick", "inputs": [inp()], "attributes": {"ref_s": 0}, "timeout_s": 2}])
    t0 = time.monotonic()
    resp = run(loop, tmp_path, "slowref")
    assert time.monotonic() - t0 < 20
    assert states(resp) == {"slow": "pending", "quick": "passed"}, [o.summary for o in resp.outcomes]
    slow = next(o for o in resp.outcomes if o.case_id == "slow")
    assert "reference" in slow.error and "timeout" in slow.error and slow.recorded is False
    assert RunStore(tmp_path, "slowref").pending_case_ids() == ["slow"]


def test_a_failed_health_check_replaces_the_worker(loop, tmp_path: Path) -> None:
    cases = [{"id": "poison", "inputs": [inp()], "attributes": {"poison": True}},
             {"id": "after", "inputs": [inp()], "attributes": {"poison": False}}]
    plan(tmp_path, "health", "poisons_device.py", cases)
    resp = run(loop, tmp_path, "health")
    assert states(resp) == {"poison": "crash", "after": "passed"}
    assert next(o for o in resp.outcomes if o.case_id == "poison").signature == \
        "RuntimeError: aicore exception: kernel execution timed out"
    poisoned, after = (worker_answer(tmp_path, "health", c) for c in ("poison", "after"))
    assert poisoned["worker_lost"] is False  # the worker survived the exception...
    assert after["worker_restarted"] is True and after["worker_pid"] != poisoned["worker_pid"]  # ...not its check


def test_segfault_on_large_shapes_then_a_fresh_worker(loop, tmp_path: Path) -> None:
    cases = [{"id": "small", "inputs": [inp(shape=(8, 8))]},
             {"id": "large", "inputs": [inp(shape=(64, 64))]},
             {"id": "small-after", "inputs": [inp(shape=(8, 8))]},
             {"id": "exits", "inputs": [inp(shape=(8, 8))], "attributes": {"exit_code": 7}},
             {"id": "last", "inputs": [inp(shape=(8, 8))]}]
    plan(tmp_path, "segv", "segfault_large.py", cases)
    resp = run(loop, tmp_path, "segv")
    assert states(resp) == {"small": "passed", "large": "crash", "small-after": "passed", "exits": "crash",
                            "last": "passed"}
    exits = RunStore(tmp_path, "segv").read_results()["exits"].error
    assert exits.signature == "exit 7" and exits.exit_code == 7 and exits.signal is None
    large = next(o for o in resp.outcomes if o.case_id == "large")
    assert large.signature == "SIGSEGV" and large.recorded is True
    err = RunStore(tmp_path, "segv").read_results()["large"].error
    assert err.signal == "SIGSEGV" and "Segmentation fault" in err.traceback_tail  # faulthandler's report
    assert "segfault_large.py" in err.traceback_tail  # ...with the Python stack of the crash
    # what the crashing case was given is on record, although the worker never answered
    meta = json.loads((tmp_path / "segv" / "input-metadata" / "large.json").read_text())
    assert meta["inputs"][0]["shape"] == [64, 64]
    before, crashed, after = (worker_answer(tmp_path, "segv", c) for c in ("small", "large", "small-after"))
    assert before["worker_pid"] == crashed["worker_pid"] != after["worker_pid"]
    assert crashed["worker_lost"] is True and after["worker_restarted"] is True
    assert not alive(crashed["worker_pid"])


def test_a_worker_that_forked_then_died_is_its_signal_not_a_timeout(loop, tmp_path: Path) -> None:
    plan(tmp_path, "forked", "fork_then_segv.py", [{"id": "c1", "inputs": [inp()], "timeout_s": 30}])
    t0 = time.monotonic()
    resp = run(loop, tmp_path, "forked")
    assert states(resp) == {"c1": "crash"}
    assert resp.outcomes[0].signature == "SIGSEGV" and time.monotonic() - t0 < 15


def test_a_worker_that_dies_in_the_reference_leaves_the_case_pending(loop, tmp_path: Path) -> None:
    plan(tmp_path, "refdies", "reference_dies.py", [{"id": "c1", "inputs": [inp()]}])
    resp = run(loop, tmp_path, "refdies")
    (out,) = resp.outcomes
    assert out.state == "pending" and out.recorded is False, out
    assert "reference" in out.error and "SIGSEGV" in out.error
    assert RunStore(tmp_path, "refdies").pending_case_ids() == ["c1"]


def test_endless_loop_times_out_and_the_worker_is_replaced(loop, tmp_path: Path) -> None:
    cases = [{"id": "spin", "inputs": [inp()], "attributes": {"spin": True}, "timeout_s": 2},
             {"id": "after", "inputs": [inp()], "attributes": {"spin": False}}]
    plan(tmp_path, "spin", "endless.py", cases)
    t0 = time.monotonic()
    resp = run(loop, tmp_path, "spin", case_ids=["spin"])
    elapsed = time.monotonic() - t0
    assert states(resp) == {"spin": "crash"}
    # the spin never ends by itself: the call returning at all is the timeout's doing; the bound only tells it
    # from the pytest timeout (a worker's start - torch's import - took 6-9 s on a loaded 2-core machine)
    assert elapsed < 2 + 30, elapsed
    err = RunStore(tmp_path, "spin").read_results()["spin"].error
    assert err.signature == "timeout" and "timeout of 2 s" in err.message
    spun = worker_answer(tmp_path, "spin", "spin")
    assert not alive(spun["worker_pid"])
    resp = run(loop, tmp_path, "spin")
    assert states(resp) == {"after": "passed"}
    assert worker_answer(tmp_path, "spin", "after")["worker_pid"] != spun["worker_pid"]


def test_cancelling_a_run_kills_supervisor_and_worker(loop, tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    plan(tmp_path, "cancel", "pid_then_spin.py",
         [{"id": "c1", "inputs": [inp()], "attributes": {"pid_file": str(pid_file)}, "timeout_s": 120}])

    async def scenario():
        task = asyncio.ensure_future(run_case_remote("cancel", root=tmp_path))
        deadline = time.monotonic() + 60
        while not pid_file.exists():  # the candidate is spinning once it wrote its pid
            assert time.monotonic() < deadline and not task.done(), "the candidate never started"
            await asyncio.sleep(0.05)
        worker_pid = int(pid_file.read_text())
        slots = [e.slot for e in REGISTRY._entries.values()]
        supervisor_pids = [s.pid for s in slots if getattr(s, "pid", None)]
        # every process of the slot: its supervisor, the worker and the watchdog (own session)
        slot_pids = supervisor_pids + [kid for pid in supervisor_pids for kid in live_children(pid)]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return worker_pid, supervisor_pids, slot_pids

    worker_pid, supervisor_pids, slot_pids = loop.run_until_complete(scenario())
    assert len(supervisor_pids) == 1  # the one warm local slot
    assert len(slot_pids) >= 3 and worker_pid in slot_pids  # supervisor, worker, watchdog
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(map(alive, slot_pids)):
        time.sleep(0.1)
    assert not [p for p in slot_pids if alive(p)]
    assert RunStore(tmp_path, "cancel").pending_case_ids() == ["c1"]
