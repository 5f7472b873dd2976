"""Eight processes recording different cases of one run at once lose nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tools.analyze_failures import analyze_failures
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.schemas import CaseResult

WRITERS = 8

# Each writer waits for a shared start file so the eight records overlap.
WRITER = textwrap.dedent("""
    import json, os, sys, time
    from tools.record_result import record_result
    root, run_id, case_id, go = sys.argv[1:5]
    deadline = time.monotonic() + 30
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.002)
    status = "passed" if case_id.endswith(("0", "2", "4", "6")) else "numerical_mismatch"
    result = {"case_id": case_id, "status": status, "comparisons": [
        {"output": "out", "passed": status == "passed", "numel": 32,
         "max_abs": 0.0 if status == "passed" else 0.5,
         "mismatch_count": 0 if status == "passed" else 4,
         "mismatch_ratio": 0.0 if status == "passed" else 0.125}]}
    resp = record_result(run_id, result, root=root, input_metadata={"writer_pid": os.getpid()})
    print(json.dumps({"case": resp.case_id, "pending": len(resp.pending)}))
""")


def test_eight_processes_record_one_run_at_once(evidence_root, plan_request_dict, subprocess_env, tmp_path):
    case_ids = tuple(f"case-{i}" for i in range(WRITERS))
    plan_cases(plan_request_dict("run-c", case_ids, modes=("eager",) * WRITERS), root=evidence_root)
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(evidence_root), "run-c", cid, str(go)],
                         env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for cid in case_ids
    ]
    go.write_text("go")
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
    assert sorted(json.loads(out)["case"] for out, _ in outputs) == sorted(case_ids)

    run = evidence_root / "run-c"
    lines = (run / "results.jsonl").read_text().splitlines()
    doc = {"results": {d["case_id"]: d for d in map(json.loads, lines)}}
    assert len(lines) == WRITERS and sorted(doc["results"]) == sorted(case_ids)
    for cid, raw in doc["results"].items():
        assert CaseResult.model_validate(raw).case_id == cid
        assert (run / "raw-results" / cid / "submitted.json").is_file()
        assert (run / "input-metadata" / f"{cid}.json").is_file()
    manifest = RunStore(evidence_root, "run-c").read_manifest()
    assert manifest["recorded_count"] == WRITERS and manifest["case_count"] == WRITERS
    assert "raw-results/" in manifest["artifacts"]
    assert not list(run.glob(".*.tmp")) and not list((run / "raw-results").glob(".new-*"))

    analysis = analyze_failures("run-c", root=evidence_root)
    assert analysis.recorded == WRITERS and analysis.missing == []
    assert analysis.status_counts["passed"] == 4 and analysis.status_counts["numerical_mismatch"] == 4
    # the analysis writes results.json, the derived view of the index
    assert json.loads((run / "results.json").read_text())["results"] == doc["results"]
