"""Findings you can trust (issue 20): the hypothesis space, what exact means,
and planted bugs beyond one clean axis.

- pure: the derived quantities and relations a hypothesis can name; the
  hypotheses do not depend on the order cases arrived;
- a property test (seeded, pure - no runner): for random planted predicates
  over random runs narrowed by the next cases, a finding claimed exact is
  consistent with every recorded case, no other hypothesis of the enumerated
  space (found again by a brute-force enumeration written here) is, and it
  predicts fresh cases the way the planted predicate does;
- end to end through the real MCP client on host ``local``: each planted kind
  of benchmarks/narrow_kinds.py HARD_KINDS (an interaction of a dtype and a
  dimension, bytes, two dimensions compared, mixed dtypes, rank, all-zero rows,
  an accumulation with no clean boundary) is planned as a star with
  distractors, run, analyzed and narrowed; the final finding, its boundary and
  its minimal pair are asserted - or "no exact finding" with a trend.  One
  server serves every kind; report.md and ``opdebug show`` say the same.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import subprocess
import sys
from pathlib import Path

from tools.analysis.build import diagnose_run
from tools.analysis.hypotheses import hypothesis_axes, is_align
from tools.cases.axes import case_axes
from tools.cases.ids import case_content
from tools.cases.stars import expand_star
from tools.schemas import Case, CaseResult, StarSpec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from narrow_kinds import HARD_KINDS, hard_plan_request  # noqa: E402


def _case(cid: str, *inputs: dict, **kw) -> Case:
    return Case.model_validate({"id": cid, "inputs": list(inputs), **kw})


def _failing(cid: str) -> CaseResult:
    return CaseResult.model_validate({"case_id": cid, "status": "numerical_mismatch",
                                      "comparisons": [{"output": "out", "passed": False, "max_abs": 1.0}]})


def _passing(cid: str) -> CaseResult:
    return CaseResult.model_validate({"case_id": cid, "status": "passed"})


# --------------------------------------------------------------------------
# Pure
# --------------------------------------------------------------------------


def test_a_case_has_bytes_uncapped_alignments_relations_and_values_classes():
    zero_row = [{"value": "+0", "positions": [[0, j] for j in range(8)]}]
    case = _case("c", {"name": "x", "shape": [16, 8], "dtype": "float16", "storage_offset": 0,
                       "values": {"kind": "normal", "specials": zero_row}},
                 {"name": "y", "shape": [8], "dtype": "float32"})
    ax = hypothesis_axes(case, case_axes(case))
    assert (ax["x.bytes"], ax["y.bytes"], ax["x.align[0]"], ax["x.last_align"]) == (256, 32, 16, 8)
    assert "x.offset_align" not in ax  # offset 0 is aligned to every power of two: no value, never "64"
    assert (ax["x.shape[0]~x.shape[-1]"], ax["x.shape[-1]~y.shape[-1]"], ax["x.dtype~y.dtype"],
            ax["x.shape~y.shape"]) == (">", "=", "!=", "!=")  # x.shape != y.shape
    assert (ax["x.zero_rows"], ax["x.all_zero"], ax["x.has_zero"], ax["x.constant"]) == (True, False, True, False)
    assert "x.shape" not in ax and "x.values" not in ax  # composite axes never carry a hypothesis
    long = _case("d", {"name": "x", "shape": [4, 4096]})
    assert hypothesis_axes(long, case_axes(long))["x.last_align"] == 4096  # uncapped: "a multiple of 128" is sayable


def test_hypotheses_do_not_depend_on_the_order_cases_arrived():
    rng = random.Random(7)
    cases = [_case(f"c{i}", {"name": "x", "shape": [rng.choice([2, 4, 8, 16]), rng.choice([16, 32, 64, 128])],
                             "dtype": rng.choice(["float32", "float16"])}) for i in range(24)]
    results = {c.id: (_failing if c.inputs[0].dtype == "float16" and c.inputs[0].shape[-1] > 32 else _passing)(c.id)
               for c in cases}
    one = diagnose_run(cases, results, [])
    two = diagnose_run(cases[::-1], dict(reversed(list(results.items()))), [])
    assert [f.model_dump() for f in one.findings + one.competing] == \
        [f.model_dump() for f in two.findings + two.competing]
    assert [n.model_dump() for n in one.next_cases] == [n.model_dump() for n in two.next_cases]
    assert one.findings[0].kind == "conjunction" and "dtype == float16" in one.findings[0].predicate


def test_a_threshold_is_exact_only_once_its_boundary_is_pinned():
    """No competitor left, crossed with the dtype: still not exact while a length lies between the
    passing 64 and the failing 128; pinned once 65 fails (adjacent values on each side)."""
    runs = [("float32", 16, False), ("float32", 64, False), ("float32", 192, True), ("float32", 256, True),
            ("float16", 16, False), ("float16", 128, True)]
    cases = [_case(f"c{dt}-{n}", {"name": "x", "shape": [n], "dtype": dt}) for dt, n, _ in runs]
    results = {c.id: (_failing if fails else _passing)(c.id) for c, (_, _, fails) in zip(cases, runs)}
    d = diagnose_run(cases, results, [])
    lead = d.findings[0]
    assert (lead.predicate, lead.passes_at, lead.fails_at, d.competing) == ("x.shape[-1] > 64", 64, 128, [])
    assert not lead.exact and lead.why_not_exact == ["the boundary of x.shape[-1] is not pinned: passes at 64, "
                                                     "fails at 128"]
    assert d.next_cases[0].kind == "bisect"
    cases.append(_case("c65", {"name": "x", "shape": [65]}))
    results["c65"] = _failing("c65")
    lead = diagnose_run(cases, results, []).findings[0]
    # pinned; exact only once the cases built to break it ran (tests/test_falsify.py)
    assert (lead.predicate, lead.passes_at, lead.fails_at) == ("x.shape[-1] > 64", 64, 65)
    assert not lead.exact and lead.why_not_exact[0].startswith("not falsified yet")


# --------------------------------------------------------------------------
# Property: exact means consistent and unrivalled in the enumerated space
# --------------------------------------------------------------------------

_DTYPES = ("float32", "float16", "bfloat16")
_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def _x(c: Case):
    return c.inputs[0]


# planted predicates: (name, predicate, in the enumerated space)
PLANTED = [
    ("last dim > 48", lambda c: _x(c).shape[-1] > 48, True),
    ("rows > 6", lambda c: _x(c).shape[0] > 6, True),
    ("numel > 300", lambda c: math.prod(_x(c).shape) > 300, True),
    ("bytes > 512", lambda c: math.prod(_x(c).shape) * _SIZE[_x(c).dtype] > 512, True),
    ("float16", lambda c: _x(c).dtype == "float16", True),
    ("half and cols > 40", lambda c: _x(c).dtype != "float32" and _x(c).shape[-1] > 40, True),
    ("offset > 0", lambda c: _x(c).storage_offset > 0, True),
    ("offset misaligned to 4", lambda c: _x(c).storage_offset % 4 != 0, True),
    ("rows > cols", lambda c: _x(c).shape[0] > _x(c).shape[-1], True),
    ("cols not a multiple of 8", lambda c: _x(c).shape[-1] % 8 != 0, True),
    ("x in bfloat16, w not", lambda c: c.inputs[0].dtype != c.inputs[1].dtype, True),
    ("noise", None, False),  # a hash of the case: no hypothesis of the space is right
]


def _random_star(rng: random.Random) -> StarSpec:
    rows, cols = rng.choice([2, 4, 8]), rng.choice([16, 32, 64])
    dtype = rng.choice(_DTYPES)
    base = {"id": "b", "inputs": [{"name": "x", "shape": [rows, cols], "dtype": dtype},
                                  {"name": "w", "shape": [cols], "dtype": dtype}], "seed": 1}
    others = [d for d in _DTYPES if d != dtype]
    vary = [{"axis": "dim", "dims": ["x.shape[-1]", "w.shape[0]"], "values": rng.sample([8, 40, 72, 128], 2)},
            {"axis": "dim", "dims": ["x.shape[0]"], "values": rng.sample([1, 7, 12, 32], 2)},
            {"axis": "dtype", "values": [rng.choice(others)]},
            {"axis": "dtype", "input": "x", "values": [rng.choice(others)]},
            {"axis": "storage_offset", "input": "x", "values": rng.sample([1, 2, 4, 8, 12], 2)}]
    return StarSpec.model_validate({"base": base, "vary": rng.sample(vary, rng.randint(3, len(vary)))})


def _consistent(atom_holds, hax, failing, passing) -> bool:
    return all(atom_holds(hax[c]) for c in failing) and not any(atom_holds(hax[c]) for c in passing)


def _brute_force(hax: dict, failing: list[str], passing: list[str]) -> set[frozenset]:
    """Every consistent predicate of the documented space, written independently: for each axis, the
    classes, values and sets (of at most 4 values), thresholds between recorded values; conjunctions
    of two only when no single one separates.  Returned as the axes they range over."""
    ids = failing + passing
    keys = sorted({k for c in ids for k in hax[c]})
    atoms = []  # (axes, holds)
    for k in keys:
        vals = [hax[c].get(k) for c in ids]
        present = [v for v in vals if v is not None]
        if not present:
            continue
        if all(isinstance(v, bool) for v in present):
            for pol in (True, False):
                atoms.append((k, lambda a, k=k, pol=pol: bool(a.get(k)) == pol))
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            inf = float("inf")
            pts = sorted({inf if v is None and is_align(k) else v for v in vals if v is not None or is_align(k)})
            for b in pts:
                atoms.append((k, lambda a, k=k, b=b: (a.get(k) if a.get(k) is not None else
                                                       (inf if is_align(k) else None)) is not None and
                              (a.get(k) if a.get(k) is not None else inf) >= b))
                atoms.append((k, lambda a, k=k, b=b: a.get(k) is not None and a.get(k) <= b))
        elif all(isinstance(v, str) for v in present):
            domain = sorted(set(present))
            for n in range(1, min(4, len(domain)) + 1):
                for sub in itertools.combinations(domain, n):
                    atoms.append((k, lambda a, k=k, sub=frozenset(sub): a.get(k) in sub))
    singles = {frozenset([k]) for k, h in atoms if _consistent(h, hax, failing, passing)}
    if singles:
        return singles
    cover = [(k, h) for k, h in atoms if all(h(hax[c]) for c in failing)]
    return {frozenset([k1, k2]) for i, (k1, h1) in enumerate(cover) for k2, h2 in cover[i + 1:]
            if k1 != k2 and not any(h1(hax[c]) and h2(hax[c]) for c in passing)}


def _restatement(axes: frozenset, lead) -> bool:
    """The documented restatements (references/behavior.md): an alias listed in ``equivalent``, a tied
    dimension, a size below one beside zero_size, a magnitude at the resolution, an alignment past it."""
    named = set(lead.axis.split(" & ")) | {e.split(" ")[0] for e in lead.equivalent}
    return bool(axes & named) or any(a.startswith("w.") for a in axes) or any(
        a.endswith((".magnitude", ".offset_align")) for a in axes)


def _probe_cases(rng: random.Random, n: int, recorded: list[Case]) -> list[Case]:
    """Fresh cases recombining the values the run has on each planned axis (x's shape, the two dtypes,
    x's offset): what "it held across the run's other axes" promises.  A value no case of the run has
    was never there to cross, and is not probed."""
    shapes = sorted({tuple(c.inputs[0].shape) for c in recorded})
    pairs = sorted({(c.inputs[0].dtype, c.inputs[1].dtype) for c in recorded})
    offsets = sorted({c.inputs[0].storage_offset for c in recorded})
    out = []
    for i in range(n):
        shape, (dt, wdt), offset = rng.choice(shapes), rng.choice(pairs), rng.choice(offsets)
        out.append(_case(f"p{i}", {"name": "x", "shape": list(shape), "dtype": dt, "storage_offset": offset},
                         {"name": "w", "shape": [shape[-1]], "dtype": wdt}))
    return out


def test_an_exact_finding_is_consistent_with_every_case_and_unrivalled_in_the_space():
    """Seeded random runs (no runner): a planted predicate decides each case; the next cases are
    appended as they are until the finding is exact or nothing is left (8 rounds at most)."""
    rng = random.Random(20)
    claimed = 0
    for trial in range(36):
        name, planted, in_space = PLANTED[trial % len(PLANTED)]
        salt = rng.random()
        if planted is None:
            planted = (lambda s: lambda c: (hash((c.id, s)) % 5) == 0)(salt)
        cases = expand_star(_random_star(rng))
        results: dict[str, CaseResult] = {}
        d = None
        for _ in range(8):
            for c in cases:
                if c.id not in results:
                    results[c.id] = (_failing if planted(c) else _passing)(c.id)
            d = diagnose_run(cases, results, [])
            if d.findings and d.findings[0].exact:
                break
            planned = {c.id: case_content(c.model_dump(mode="json")) for c in cases}
            added = []
            for nxt in d.next_cases:
                if nxt.kind in ("discriminate", "bisect", "probe", "crossing", "explore", "falsify") and nxt.star:
                    new = [c for c in expand_star(StarSpec.model_validate(nxt.star), planned) if c.id not in planned]
                    planned.update({c.id: case_content(c.model_dump(mode="json")) for c in new})
                    added += new
            if not added:
                break
            cases += added
        if not d.findings or not d.findings[0].exact:
            continue
        lead = d.findings[0]
        claimed += 1
        hax = {c.id: hypothesis_axes(c, case_axes(c)) for c in cases}
        failing = sorted(c for c, r in results.items() if r.status != "passed")
        passing = sorted(c for c, r in results.items() if r.status == "passed")
        # consistent with every recorded case
        from tools.analysis.hypotheses import enumerate_hypotheses
        space = enumerate_hypotheses(hax, failing, passing)
        hyp = next(h for h in space.hypotheses if h.text == lead.predicate or
                   (lead.kind == "set" and h.atoms[0].axis == lead.axis))
        assert all(hyp.holds(hax[c]) for c in failing) and not any(hyp.holds(hax[c]) for c in passing), (name, lead)
        # no other hypothesis of the space (found again by brute force) is consistent with all of them
        rivals = {a for a in _brute_force(hax, failing, passing) if not _restatement(a, lead)}
        assert not rivals, (name, lead.predicate, rivals)
        assert not d.competing
        # and, for a planted predicate of the space, it predicts the run's recombinations as the planted one
        if in_space:
            for probe in _probe_cases(random.Random(trial), 60, cases):
                p = hyp.predict(hypothesis_axes(probe, case_axes(probe)))
                if p is not None:
                    assert (p == "fail") == planted(probe), (name, lead.predicate, probe.inputs)
    assert claimed >= 16  # the property was exercised, not skipped


# --------------------------------------------------------------------------
# Planted bugs beyond one axis, through the real MCP client on host "local"
# --------------------------------------------------------------------------


def _check_kind(kind: str, narrow: dict, final: dict) -> None:
    lead = final["findings"][0] if final["findings"] else None
    first = narrow["steps"][0]  # the analysis after the star's pending cases: its lead and its competitors
    everything = final["findings"] + final["competing"]
    # never a set over a composite axis (a whole shape, strides, a value spec)
    assert not [f for f in everything if f["axis"].endswith((".shape", ".strides", ".values"))], kind
    # the pending cases narrow_failure ran first are counted, in cases_run and as its first step
    assert narrow["pending_run"] > 0 and narrow["steps"][0]["kinds"] == ["pending"], kind
    assert narrow["cases_run"] == narrow["pending_run"] + narrow["new_cases"] and narrow["new_cases"] <= 40
    assert [f["predicate"] for f in narrow["findings"]] == [f["predicate"] for f in final["findings"]]
    expected = HARD_KINDS[kind]["predicate"]
    if expected is None:  # no clean boundary: no exact finding, a trend
        assert not narrow["exact"] and narrow["stopped"] != "exact", narrow["findings"]
        assert (lead["kind"], lead["axis"], lead["exact"]) == ("trend", HARD_KINDS[kind]["trend"], False), lead
        assert "grows with x.shape[-1]" in lead["predicate"] and "baseline judge" in lead["statement"]
        return
    assert (lead["predicate"], lead["exact"], narrow["stopped"], final["competing"]) == \
        (expected, True, "exact", []), (kind, lead, final["competing"])
    pair = lead["minimal_pair"]
    assert pair is not None and pair["passing_planned"] and pair["failing_planned"], lead
    if kind == "interaction":
        dtype_term, dim_term = lead["terms"]
        assert (dim_term["passes_at"], dim_term["fails_at"], dim_term["direction"]) == (1024, 1025, "above")
        assert (dim_term["minimal_pair"]["passing_planned"], dim_term["minimal_pair"]["failing_planned"]) == \
            ({"x.shape": "4x1024"}, {"x.shape": "4x1025"})
        assert dtype_term["minimal_pair"]["differs_in"] == ["dtype"]
        assert " and " in first["findings"][0]  # the first analysis already names the interaction
    elif kind == "bytes":
        assert (lead["passes_at"], lead["direction"]) == (16384, "above") and 16384 < lead["fails_at"] <= 16388
        # in elements of every failing dtype (the probes may have added float16 failures)
        assert "fails above 16384 bytes (" in lead["statement"] and "4096 float32 elements" in lead["statement"]
        assert pair["differs_in"] in (["x.shape"], ["dtype"])  # bytes move with the shape and with the dtype
    elif kind == "dims_compared":
        assert lead["kind"] == "relation" and pair["failing_value"] == ">" and pair["passing_value"] in ("=", "<")
    elif kind == "mixed_dtype":
        assert first["findings"] == ["x.dtype == bfloat16"] and "x.dtype != y.dtype" in first["competing"]
        assert pair["differs_in"] == ["dtype"] and pair["failing_planned"] == {"dtype": "bfloat16,float32"}
    elif kind == "rank":
        assert (lead["passes_at"], lead["fails_at"]) == (2, 3) and "x.rank > 2" in first["competing"]
        assert pair["failing_planned"] == {"x.shape": "2x4x32"}
    elif kind == "zero_rows":
        assert lead["kind"] == "class" and "x.all_zero" in first["findings"] + first["competing"]


def test_planted_bugs_beyond_one_axis_end_on_their_condition_over_stdio(tmp_path, subprocess_env):
    """Every kind through one server: plan (a star with distractors), narrow_failure (it runs the pending
    cases first, then 40 new cases at most) on local, analyze; then report.md and `opdebug show` say what
    the tools said."""
    from test_mcp_stdio import error_text, with_server

    env = {k: os.environ[k] for k in ("OPDEBUG_RUNNER_STAGE",) if k in os.environ}

    async def scenario(client):
        out = {}
        for kind in HARD_KINDS:
            run = "h-" + kind.replace("_", "-")
            # as an agent would: plan the star, let narrow_failure run it and go on
            calls = [await client.call_tool("plan_cases", hard_plan_request(run, kind)),
                     await client.call_tool("narrow_failure", {"run_id": run, "max_cases": 40}),
                     await client.call_tool("analyze_failures", {"run_id": run})]
            for c in calls:
                assert not c.is_error, error_text(c)
            out[kind] = [c.structured_content for c in calls[1:]]
        return out

    root = tmp_path / "evidence"
    out = with_server(root, scenario, env=env)
    for kind, (narrow, final) in out.items():
        _check_kind(kind, narrow, final)

    # the same answer through the other doors: report.md and opdebug show
    report = (root / "h-interaction" / "report.md").read_text()
    assert "`dtype == float16 and x.shape[-1] > 1024` | yes | x.shape[-1]: passes at 1024, fails at 1025" in report
    show = subprocess.run([sys.executable, "-m", "tools.cli", "show", "--root", str(root), "--run-id", "h-bytes"],
                          env=subprocess_env | {"COLUMNS": "240"}, capture_output=True, text=True, timeout=120)
    assert show.returncode == 0, show.stderr
    assert "finding: x.bytes > 16384 (exact)" in show.stdout and "boundary: passes at 16384, fails at" in show.stdout
    acc = (root / "h-accumulation" / "report.md").read_text()
    assert "grows with x.shape[-1]" in acc and "| yes |" not in acc.split("## Findings", 1)[1].split("##", 1)[0]
