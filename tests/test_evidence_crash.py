"""A writer killed with SIGKILL at any point of a record leaves a run whose
next write finds it whole: the case is recorded once (with its own raw
evidence) or pending (with none), recorded_count agrees, nothing temporary is
left; and an analysis racing a record never ends with a recorded case listed
as missing.  Real processes, real signals."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from tools.analyze_failures import analyze_failures
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.record_result import record_result

# The writer records case "a" as passed with the raw files run_case_remote
# writes, and SIGKILLs itself just before its Nth file-system step (a rename,
# replace, unlink or fsync): every point between two steps of a record is hit
# by some N.  It prints "done" when the record finished before step N.
WRITER = textwrap.dedent("""
    import json, os, signal, sys
    from tools.record_result import record_result
    root, run_id, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    steps = [0]
    def trap(fn):
        def wrapped(*a, **k):
            steps[0] += 1
            if steps[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*a, **k)
        return wrapped
    for name in ("rename", "replace", "unlink", "fsync"):
        setattr(os, name, trap(getattr(os, name)))
    result = {"case_id": "a", "status": "passed", "comparisons": [
        {"output": "out", "passed": True, "numel": 4, "max_abs": 0.0, "mismatch_count": 0, "mismatch_ratio": 0.0}]}
    raw = {"worker-result.json": json.dumps({"outcome": "result", "result": result}),
           "stdout.txt": "out", "stderr.txt": "", "traceback.txt": ""}
    record_result(run_id, result, root=root, raw_files=raw, input_metadata={"writer": "first"},
                  source_kind="run_case_remote")
    print("done")
""")


def _crash_record(root: Path, run_id: str) -> dict:
    return {"case_id": "a", "status": "crash",
            "error": {"type": "Signal", "message": "killed by SIGSEGV", "signature": "signal SIGSEGV", "signal": "SIGSEGV"}}


def _index(run: Path) -> dict[str, dict]:
    return {d["case_id"]: d for d in map(json.loads, (run / "results.jsonl").read_text().splitlines())}


def _assert_whole(run: Path) -> None:
    leftovers = [p for p in run.rglob("*") if p.name.endswith(".tmp") or p.name.startswith((".new-", ".recording"))]
    assert leftovers == []
    index = _index(run)
    committed = sorted(p.name for p in (run / "raw-results").iterdir() if (p / "result.json").is_file())
    assert sorted(p.name for p in (run / "raw-results").iterdir()) == committed  # no directory without a record
    assert committed == sorted(index)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["recorded_count"] == len(index)
    for case_id, doc in index.items():
        raw = run / "raw-results" / case_id
        assert json.loads((raw / "result.json").read_text())["status"] == doc["status"]
        if (raw / "worker-result.json").exists():  # raw evidence belongs to the record beside it
            assert json.loads((raw / "worker-result.json").read_text())["result"]["status"] == doc["status"]


def test_a_writer_killed_at_any_step_of_a_record_leaves_the_case_whole_or_pending(
        evidence_root, plan_request_dict, subprocess_env):
    kill_at, finished, outcomes = 1, False, []
    while not finished:
        run_id = f"kill-{kill_at}"
        plan_cases(plan_request_dict(run_id, ("a", "b"), modes=("eager", "eager")), root=evidence_root)
        proc = subprocess.run([sys.executable, "-c", WRITER, str(evidence_root), run_id, str(kill_at)],
                              env=subprocess_env, capture_output=True, text=True, timeout=120)
        finished = proc.stdout.strip() == "done"
        assert finished or proc.returncode == -9, proc.stderr
        run = evidence_root / run_id
        # The next write (another process, here this one) repairs what the kill left.
        store = RunStore(evidence_root, run_id)
        was_recorded = "a" in store.recorded_ids()
        if was_recorded:
            resp = record_result(run_id, {
                "case_id": "b", "status": "passed", "comparisons": [
                    {"output": "out", "passed": True, "numel": 4, "max_abs": 0.0, "mismatch_count": 0,
                     "mismatch_ratio": 0.0}]}, root=evidence_root)
            assert resp.pending_count == 0
        else:
            record_result(run_id, _crash_record(evidence_root, run_id), root=evidence_root)
            assert not (run / "raw-results" / "a" / "worker-result.json").exists()
            assert _index(run)["a"]["status"] == "crash"
        _assert_whole(run)
        assert (run / "input-metadata" / "a.json").is_file() == was_recorded
        outcomes.append(was_recorded)
        kill_at += 1
        assert kill_at < 40
    # some kills came before the commit and some after it
    assert outcomes[0] is False and outcomes[-1] is True and len(outcomes) >= 4


def test_an_analysis_racing_a_record_never_lists_a_recorded_case_as_missing(
        evidence_root, plan_request_dict, result_dicts):
    bad = []
    for i in range(20):
        run_id = f"race-{i}"
        plan_cases(plan_request_dict(run_id, ("a", "b"), modes=("eager", "eager")), root=evidence_root)
        record_result(run_id, result_dicts["passed"]("a"), root=evidence_root)
        start = threading.Barrier(2)

        def record() -> None:
            start.wait()
            record_result(run_id, result_dicts["numerical_mismatch"]("b"), root=evidence_root)

        writer = threading.Thread(target=record)
        writer.start()
        start.wait()
        analyze_failures(run_id, root=evidence_root)
        writer.join()
        run = evidence_root / run_id
        manifest = json.loads((run / "manifest.json").read_text())
        analysis = json.loads((run / "analysis.json").read_text())
        # Either the analysis saw b (the run failed) or the record came after it (the run is open again).
        if manifest["status"] != "running":
            if "b" in analysis["missing"] or manifest["status"] != "diagnosed":
                bad.append((i, manifest["status"], analysis["missing"]))
    assert bad == []


RUN_THEN_DIE = """
import asyncio, sys
from tools.run_case_remote import run_case_remote
asyncio.run(run_case_remote("killed-run", root=sys.argv[1]))
"""


def test_the_manifest_counts_are_right_right_after_a_kill_mid_run(tmp_path: Path) -> None:
    # run_case_remote writes the manifest's recorded_count lazily (at most once per MANIFEST_LAG_S);
    # a kill -9 mid-run leaves the file behind its index: a reader (the store, the run list, the
    # MCP resource) reads the index's count at once, and the file is repaired by that read.
    import os
    import signal
    import time

    from conftest import REPO_ROOT, private_stage

    from tools.evidence import list_runs

    operators = Path(__file__).resolve().parent / "operators"
    calls = tmp_path / "calls.log"
    plan_cases({"config": {"run_id": "killed-run", "operator": {"name": "c", "candidate": "counts_calls.cand",
                                                                "reference": "counts_calls.ref",
                                                                "modules": ["counts_calls.py"]}},
                "module_sources": {"counts_calls.py": (operators / "counts_calls.py").read_text()},
                "cases": [{"id": f"c{i}", "inputs": [{"name": "x", "shape": [4]}],
                           "attributes": {"log_file": str(calls), "tag": f"c{i}", "delay": 0.05}}
                          for i in range(40)]}, root=tmp_path)
    run = tmp_path / "killed-run"
    with open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", RUN_THEN_DIE, str(tmp_path)], cwd=REPO_ROOT, stderr=err,
                                env={**os.environ, "OPDEBUG_RUNNER_STAGE": private_stage()})
    try:
        deadline = time.monotonic() + 120
        lagging = False
        while time.monotonic() < deadline and proc.poll() is None:
            indexed = len(_index(run))
            on_disk = json.loads((run / "manifest.json").read_text())["recorded_count"]
            if indexed >= 3 and on_disk < indexed:  # the file lags its index now: kill the writer
                os.kill(proc.pid, signal.SIGKILL)
                lagging = True
                break
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()
    assert lagging, (tmp_path / "err.txt").read_text()[-2000:]
    indexed = len(_index(run))
    assert json.loads((run / "manifest.json").read_text())["recorded_count"] < indexed  # what the kill left
    listed = {m["run_id"]: m for m in list_runs(tmp_path)}
    assert listed["killed-run"]["recorded_count"] == indexed
    assert RunStore(tmp_path, "killed-run").read_manifest()["recorded_count"] == indexed
    assert json.loads((run / "manifest.json").read_text())["recorded_count"] == indexed  # repaired by the read
