"""Cost per case of planning, recording and analyzing as a run grows.  Run by
hand (not part of the tests):

    OPDEBUG_FSYNC=1 .venv/bin/python benchmarks/bench_scale.py [--sizes 10 1000 10000]

The analysis is timed three times: alone, with two stated conditions (:data:`STATED`: the agent's
conditions answered, settled and probed - tools/analysis/stated.py), and with them again (as a
narrowing round analyzes a run again: what was derived from each case is kept, tools/cases/memo.py).
``--values``: each result also carries the statistics of the values actually built (``CaseResult.values``,
as the runner measures them), so the tool's own space reads them too (tools/analysis/measured.py).

For each size N, one run of N cases that differ pairwise in two axes (an input
shape and an attribute: the worst case for the multi-axis check) is planned
with one plan_cases call, then every case is recorded with record_result (the
path run_case_remote records through), then analyze_failures runs once.
Printed side by side: plan, record and analyze cost per case, the record cost
of the last 10% of the cases (flat if recording does not grow with the run),
and the size of the answers (plan, one record, an [unknown_case] error).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.analyze_failures import analyze_failures  # noqa: E402
from tools.errors import ToolError  # noqa: E402
from tools.plan_cases import plan_cases  # noqa: E402
from tools.record_result import record_result  # noqa: E402


def request(run_id: str, n: int) -> dict:
    cases = [{"id": f"c{i}", "inputs": [{"name": "x", "shape": [i % 97 + 1, 8]}, {"name": "y", "shape": [8]}],
              "attributes": {"alpha": i}} for i in range(n)]
    return {"config": {"run_id": run_id, "operator": {"name": "scaled_add", "candidate": "m.cand",
                                                      "reference": "m.ref"}},
            "cases": cases}


def result(i: int, values: bool = False) -> dict:
    bad = i % 7 == 0
    stats = {"x": {"numel": 8, "min": -1.0 - i % 5, "max": 1.0 + i % 11, "max_abs": 1.0 + i % 11,
                   "sumsq": [None, 4.0 + i % 13], "sum_abs": [None, 3.0 + i % 3]},
             "y": {"numel": 8, "min": -0.5, "max": 0.5 + i % 3, "max_abs": 0.5 + i % 3, "sumsq": [2.0], "sum_abs": [1.0]}}
    return ({"values": stats} if values else {}) | {"case_id": f"c{i}", "status": "numerical_mismatch" if bad else "passed",
            "comparisons": [{"output": "out", "passed": not bad, "numel": 64, "max_abs": 0.5 if bad else 0.0,
                             "mismatch_count": 3 if bad else 0, "mismatch_ratio": 3 / 64 if bad else 0.0}]}


STATED = ["x.shape[0] * x.shape[-1] > 400", "attr.alpha % 7 == 0"]


def measure(root: Path, n: int, values: bool = False) -> dict:
    run_id = f"scale-{n}"
    cpu: dict[str, float] = {}  # process time of each analysis (the machine's load moves the wall clock)
    t0 = time.perf_counter()
    plan = plan_cases(request(run_id, n), root=root)
    plan_s = time.perf_counter() - t0
    plan_chars = len(plan.model_dump_json())
    per = []
    rec_chars = 0
    for i in range(n):
        t = time.perf_counter()
        resp = record_result(run_id, result(i, values), root=root)
        per.append(time.perf_counter() - t)
        rec_chars = max(rec_chars, len(resp.model_dump_json()))
    try:
        record_result(run_id, result(n + 1), root=root)
    except ToolError as exc:
        err_chars = len(str(exc))
    t0, c0 = time.perf_counter(), time.process_time()
    analysis = analyze_failures(run_id, root=root)
    analyze_s = time.perf_counter() - t0
    cpu['analyze_cpu_s'] = time.process_time() - c0
    assert analysis.recorded == n and not analysis.missing
    t0, c0 = time.perf_counter(), time.process_time()
    stated = analyze_failures(run_id, root=root, conditions=STATED)
    stated_s = time.perf_counter() - t0
    cpu['stated_cpu_s'] = time.process_time() - c0
    assert [a.fate for a in stated.conditions][1] in ("surviving", "exact")
    t0, c0 = time.perf_counter(), time.process_time()
    analyze_failures(run_id, root=root, conditions=STATED)  # again, as each narrowing round does
    again_s = time.perf_counter() - t0
    cpu['again_cpu_s'] = time.process_time() - c0
    tail = per[-max(1, n // 10):]
    return {"n": n, "plan_ms": plan_s * 1e3 / n, "record_ms": statistics.fmean(per) * 1e3,
            "record_tail_ms": statistics.fmean(tail) * 1e3, "analyze_ms": analyze_s * 1e3 / n,
            "analyze_total_s": analyze_s, "stated_total_s": stated_s, "again_total_s": again_s,
            "plan_chars": plan_chars, "record_chars": rec_chars,
            "error_chars": err_chars, **cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1000, 10000])
    parser.add_argument("--values", action="store_true", help="results carry the measured values statistics")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            rows.append(measure(Path(tmp), n, args.values))
            print(json.dumps(rows[-1]), file=sys.stderr)
    cols = [("cases", "n", "{:d}"), ("plan ms/case", "plan_ms", "{:.3f}"), ("record ms/case", "record_ms", "{:.2f}"),
            ("record ms (last 10%)", "record_tail_ms", "{:.2f}"), ("analyze ms/case", "analyze_ms", "{:.3f}"),
            ("analyze s", "analyze_total_s", "{:.2f}"), ("analyze s, 2 stated", "stated_total_s", "{:.2f}"),
            ("again s", "again_total_s", "{:.2f}"), ("plan answer chars", "plan_chars", "{:d}"),
            ("record answer chars", "record_chars", "{:d}"), ("unknown_case error chars", "error_chars", "{:d}")]
    print("| " + " | ".join(c[0] for c in cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(fmt.format(row[key]) for _, key, fmt in cols) + " |")


if __name__ == "__main__":
    main()
