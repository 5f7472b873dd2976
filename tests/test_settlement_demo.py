"""The README demo's flow (issue 33): ``narrow_failure`` on the demo run, then ``shrink_case`` on a failing
case, then ``verify_fix``, then ``analyze_failures``.  The finding narrow ends on is not refuted by the cases
the shrink and the verification record after it: it used to end exact on ``mode == eager and x.dtype ==
bfloat16``, and the shrink then recorded smaller bfloat16 cases that pass (the failure needs a length too).
The smallest cases a shrink would reach are tried before exact now (probes.unnamed_requirements).
Runs for real on host ``local``."""

from __future__ import annotations

from pathlib import Path

from tools.analyze_failures import analyze_failures
from tools.artifacts.shrink import shrink_case
from tools.artifacts.verify import verify_run
from tools.examples import demo_request
from tools.narrow import narrow_failure
from tools.plan_cases import plan_cases


def test_the_demo_narrow_ends_on_a_finding_the_shrink_and_verify_after_it_do_not_refute(loop, evidence_root: Path):
    plan_cases(demo_request("demo"), root=evidence_root)
    narrowed = loop.run_until_complete(narrow_failure({"run_id": "demo", "max_cases": 40}, root=evidence_root))
    assert narrowed.new_cases <= 40
    ended = {f.predicate for f in narrowed.findings if f.exact}
    assert "mode == eager and x.dtype == bfloat16" not in ended  # its sizes were moved first: it does not hold
    failing = "rms.dtype-bfloat16"  # the demo's failing case, as the README shrinks it
    shrunk = loop.run_until_complete(shrink_case("demo", failing, root=evidence_root, max_cases=12))
    assert shrunk.cases_run > 0
    loop.run_until_complete(verify_run("demo", root=evidence_root, run_command=False))
    after = analyze_failures("demo", root=evidence_root)
    refuted = {r.predicate: r for r in after.refuted}
    assert not ended & set(refuted), (ended, refuted)  # the end of narrow stands after the shrink and verify
    assert not any(r.was_exact for r in after.refuted), after.refuted
    assert narrowed.exact == (narrowed.stopped == "exact")  # one run-level answer
