"""How big analyze_failures' structured answer is at 1,000 failing cases.  Run by hand:

    .venv/bin/python benchmarks/bench_answer_size.py [--failing 1000 --passing 333]

One run of failing + passing cases that differ in an input shape and an attribute
(the failures follow the attribute), recorded with record_result, analyzed once.
Printed: the characters of the whole analysis (analysis.json, what the MCP answer
was before its lists were capped) and of the answer the MCP server sends
(tools/answers.py: every list cut to its first 20, with counts), and what was cut.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.analyze_failures import analyze_failures  # noqa: E402
from tools.answers import capped_answer  # noqa: E402
from tools.plan_cases import plan_cases  # noqa: E402
from tools.record_result import record_result  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failing", type=int, default=1000)
    parser.add_argument("--passing", type=int, default=333)
    args = parser.parse_args()
    n = args.failing + args.passing
    root = Path(tempfile.mkdtemp(prefix="opdebug-answer-size-"))
    cases = [{"id": f"c{i}", "inputs": [{"name": "x", "shape": [i % 97 + 1, 8]}], "attributes": {"alpha": i}}
             for i in range(n)]
    plan_cases({"config": {"run_id": "r", "operator": {"name": "a", "candidate": "m.cand", "reference": "m.ref"}},
                "cases": cases}, root=root)
    for i in range(n):
        bad = i >= args.passing
        record_result("r", {"case_id": f"c{i}", "status": "numerical_mismatch" if bad else "passed",
                            "comparisons": [{"output": "out", "passed": not bad, "numel": 64,
                                             "max_abs": 0.5 if bad else 0.0, "mismatch_count": 3 if bad else 0,
                                             "mismatch_ratio": 3 / 64 if bad else 0.0}]}, root=root)
    t0 = time.perf_counter()
    analysis = analyze_failures("r", root=root)
    seconds = time.perf_counter() - t0
    capped = capped_answer(analysis, tool="analyze_failures", root=root)
    whole = len(json.dumps(analysis.model_dump(mode="json", by_alias=True)))
    sent = len(json.dumps(capped.model_dump(mode="json", by_alias=True)))
    print(f"{args.failing} failing of {n} cases, analyzed in {seconds:.2f} s")
    print(f"  whole analysis: {whole:,} characters; the MCP answer: {sent:,} characters")
    print(f"  cut: {capped.truncated}; the rest: {capped.full_answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
