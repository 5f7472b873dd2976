"""Falsify before exact: a finding is exact only when the cases built to break
it (far sides, re-pinned under every other value, another source, other seeds,
fresh cases) were run and every prediction held.

- pure (no runner): a pinned threshold waits for its probes; a dimension index
  is read at another rank; a seed that flips the outcome makes a condition
  necessary only; a refuted lead's counterexample is kept and "no exact
  finding" said when nothing survives;
- a seeded property test whose hidden predicates come from a generator of its
  own (moduli, bands, sets of values, bytes of a row, an OR of two causes -
  none written in the analysis' terms): a finding claimed exact is never
  contradicted by a fresh case drawn afterwards;
- through the real MCP client on host ``local``: planted operators whose truth
  lies outside the first space (benchmarks/falsify_kinds.py) end on the
  planted condition or on no exact finding with counterexamples, never on a
  wrong exact finding; report.md and ``opdebug show`` say the same.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from pathlib import Path

from tools.analysis.build import diagnose_run
from tools.analysis.hypotheses import hypothesis_axes
from tools.analysis.probes import read_case
from tools.cases.axes import case_axes
from tools.cases.ids import case_content
from tools.cases.stars import expand_star
from tools.narrow import NARROWING
from tools.schemas import Case, CaseResult, StarSpec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from falsify_kinds import FALSIFY_KINDS, falsify_plan_request, wrong_exact  # noqa: E402


def _case(cid: str, *inputs: dict, **kw) -> Case:
    return Case.model_validate({"id": cid, "inputs": list(inputs), **kw})


def _result(cid: str, fails: bool | None) -> CaseResult:
    if fails is None:  # the operator refuses the call (a group count of 0): unsupported, no result about it
        return CaseResult.model_validate({"case_id": cid, "status": "unsupported", "error": {
            "type": "RuntimeError", "message": "groups must be positive: not supported",
            "signature": "RuntimeError: groups"}})
    if not fails:
        return CaseResult.model_validate({"case_id": cid, "status": "passed"})
    return CaseResult.model_validate({"case_id": cid, "status": "numerical_mismatch",
                                      "comparisons": [{"output": "out", "passed": False, "max_abs": 1.0}]})


def _narrow(cases: list[Case], truth, max_new: int = 40, rounds: int = 12):
    """The autopilot without a runner: record each case's truth, append the narrowing next cases
    (those narrow_failure runs), until the lead is exact or nothing is left; 40 new cases at most."""
    results: dict[str, CaseResult] = {}
    new = 0
    d = None
    for _ in range(rounds):
        for c in cases:
            if c.id not in results:
                results[c.id] = _result(c.id, truth(c))
        d = diagnose_run(cases, results, [])
        if d.findings and d.findings[0].exact or new >= max_new:
            break
        planned = {c.id: case_content(c.model_dump(mode="json")) for c in cases}
        added: list[Case] = []
        for nxt in d.next_cases:
            if nxt.kind in NARROWING and nxt.star and new + len(added) < max_new:
                fresh = [c for c in expand_star(StarSpec.model_validate(nxt.star), planned) if c.id not in planned]
                fresh = fresh[: max_new - new - len(added)]
                planned.update({c.id: case_content(c.model_dump(mode="json")) for c in fresh})
                added += fresh
        if not added:
            break
        new += len(added)
        cases = cases + added
    return d, cases, results


# --------------------------------------------------------------------------
# Pure
# --------------------------------------------------------------------------


def test_a_pinned_threshold_is_exact_only_once_the_cases_built_to_break_it_held():
    runs = [("float32", 16, False), ("float32", 64, False), ("float32", 65, True), ("float32", 256, True),
            ("float16", 16, False), ("float16", 128, True)]
    cases = [_case(f"c{dt}-{n}", {"name": "x", "shape": [n], "dtype": dt}) for dt, n, _ in runs]
    results = {c.id: _result(c.id, fails) for c, (_, _, fails) in zip(cases, runs)}
    d = diagnose_run(cases, results, [])
    lead = d.findings[0]
    # pinned and unrivalled (the closed-world rule would stop here), but not falsified yet
    assert (lead.predicate, lead.passes_at, lead.fails_at, d.competing) == ("x.shape[-1] > 64", 64, 65, [])
    assert not lead.exact and lead.why_not_exact[0].startswith("not falsified yet")
    assert lead.validation.open and lead.validation.probes_run == 0
    probes = [n for n in d.next_cases if n.kind == "falsify"]
    assert probes and all(n.star["base"]["description"].startswith("falsify [") for n in probes)
    texts = " ".join(lead.validation.open)
    assert "again under dtype = float16" in texts and "other seed" in texts and "fresh" in texts
    d, cases, _ = _narrow(cases, lambda c: c.inputs[0].shape[-1] > 64)
    lead = d.findings[0]
    assert lead.exact and lead.predicate == "x.shape[-1] > 64" and not lead.validation.open
    assert lead.validation.probes_run >= 6 and lead.validation.text.startswith(
        f"predicted {lead.validation.probes_run}/{lead.validation.probes_run} probes")
    seeds = [c for c in cases if c.seed is not None]
    assert len(seeds) >= 3  # the minimal pair again with other seeds
    assert any(c.inputs[0].shape[-1] >= 4 * 65 for c in cases)  # the far failing side
    assert any(c.inputs[0].dtype == "float16" and c.inputs[0].shape[-1] == 64 for c in cases)  # re-pinned


def test_a_dimension_index_is_read_at_every_rank_never_dropped():
    """x.shape[1] > 7 fits the rank-3 cases; a rank-2 [32, 64] (its dimension 1 is its last, 64) passes:
    it refutes the threshold instead of being left out of its evidence."""
    shapes = [([2, 4, 64], False), ([2, 8, 64], True), ([2, 16, 64], True), ([32, 64], False), ([4, 64], False)]
    cases = [_case(f"c{i}", {"name": "x", "shape": s}) for i, (s, _) in enumerate(shapes)]
    results = {c.id: _result(c.id, f) for c, (_, f) in zip(cases, shapes)}
    d = diagnose_run(cases, results, [])
    assert "x.shape[1] > 7" not in [f.predicate for f in d.findings + d.competing]
    # with rank-3 cases only it would lead; with rank-1 cases (no dimension 1) it reads as not holding, and says so
    shapes = [([2, 4, 64], False), ([2, 8, 64], True), ([64], False)]
    cases = [_case(f"d{i}", {"name": "x", "shape": s}) for i, (s, _) in enumerate(shapes)]
    results = {c.id: _result(c.id, f) for c, (_, f) in zip(cases, shapes)}
    lead = diagnose_run(cases, results, []).findings[0]
    assert lead.predicate == "x.shape[1] > 4"
    assert any("does not exist in 1 case(s)" in n and "predicted pass" in n for n in lead.validation.not_applicable)


def test_a_threshold_is_probed_between_and_beyond_its_recorded_failing_values():
    """The truth is a set, ``x.shape[-1] in {16, 48}``; read from failing 16 and 48 and passing 49.. 128 it is
    also ``x.shape[-1] < 49``, whose far failing side the recorded 16 seemed to meet.  A threshold claims every
    value on its failing side fails: a probe between 16 and 48, and one beyond 16 that no recorded case has,
    refute it (the seed-11 draw of the property test below, as one narrow)."""
    base = {"id": "b", "inputs": [{"name": "x", "shape": [4, 16], "dtype": "float16"}], "seed": 1}
    star = {"base": base, "vary": [{"axis": "shape", "input": "x", "values": [[4, 128], [4, 48], [4, 72]]},
                                   {"axis": "shape", "input": "x", "values": [[1, 16]]},
                                   {"axis": "dtype", "values": ["float32"]}]}
    d, cases, _ = _narrow(expand_star(StarSpec.model_validate(star)), lambda c: c.inputs[0].shape[-1] in (16, 48))
    assert not any(f.exact and f.predicate == "x.shape[-1] < 49" for f in d.findings), d.findings[0]
    assert any(c.refutes == "x.shape[-1] < 49" and c.observed == "pass" for c in d.counterexamples)
    tried = {c.inputs[0].shape[-1] for c in cases if c.description and "x.shape[-1] < 49 predicts fail" in c.description}
    assert any(16 < v < 48 for v in tried) and any(v < 16 for v in tried), sorted(tried)


def test_a_band_is_in_the_space_with_both_ends_pinned_and_probed_inside_and_on_both_sides():
    """Failing 32 and 40 between passing 16 and 72: no one-sided threshold separates, a band does (before two
    quantities together); both ends are pinned, the inside and both far passing sides probed."""
    base = {"id": "b", "inputs": [{"name": "x", "shape": [4, 32], "dtype": "float32"}], "seed": 1}
    star = {"base": base, "vary": [{"axis": "shape", "input": "x", "values": [[4, 16], [4, 40], [4, 72], [4, 96]]},
                                   {"axis": "shape", "input": "x", "values": [[1, 32]]},
                                   {"axis": "dtype", "values": ["float16"]}]}
    d, cases, _ = _narrow(expand_star(StarSpec.model_validate(star)), lambda c: 24 < c.inputs[0].shape[-1] < 48)
    lead = d.findings[0]
    assert (lead.predicate, lead.exact) == ("x.shape[-1] > 24 and x.shape[-1] < 48", True), lead.why_not_exact
    probed = {(c.inputs[0].shape[-1], c.description.rpartition(" predicts ")[2]) for c in cases
              if c.description and c.description.endswith(("predicts fail", "predicts pass"))
              and lead.predicate in c.description}
    assert any(24 < v < 48 and v not in (25, 32, 40, 47) and p == "fail" for v, p in probed), probed  # inside
    assert any(v < 16 and p == "pass" for v, p in probed) and any(v > 96 and p == "pass" for v, p in probed)


def test_a_ratio_is_probed_with_the_size_and_the_attribute_scaled_together():
    """``x.shape[1] // attr.groups > 4``: the size and the group count doubled (and halved where both are even)
    keep the ratio and must keep the outcome, from both sides of the boundary."""
    base = {"id": "b", "inputs": [{"name": "x", "shape": [2, 16, 8]}], "attributes": {"groups": 2}, "seed": 1}
    star = {"base": base, "vary": [{"axis": "shape", "input": "x", "values": [[2, 8, 8], [2, 32, 8], [2, 4, 8]]},
                                   {"axis": "attribute", "name": "groups", "values": [1, 4]}]}
    d, cases, _ = _narrow(expand_star(StarSpec.model_validate(star)),
                          lambda c: c.inputs[0].shape[1] // c.attributes["groups"] > 4)
    lead = d.findings[0]
    assert (lead.predicate, lead.exact) == ("x.shape[1] // attr.groups > 4", True), lead.why_not_exact
    scaled = {(c.inputs[0].shape[1], c.attributes["groups"], c.description.rpartition(" predicts ")[2])
              for c in cases if c.description and "class-" in c.description}
    assert (8, 1, "fail") in scaled and (32, 8, "pass") in scaled, scaled  # 16/2 halved; 16/4 doubled
    assert any("scaled up together" in h for h in lead.validation.held), lead.validation.held


def test_a_verdict_that_flips_with_the_seed_makes_a_necessary_condition_never_exact():
    base = {"name": "x", "shape": [4, 32]}
    cases = [_case("short", base, seed=1), _case("long", dict(base, shape=[4, 256]), seed=1),
             _case("long.seed-2", dict(base, shape=[4, 256]), seed=2),
             _case("mid", dict(base, shape=[4, 128]), seed=1)]
    outcome = {"short": False, "long": True, "long.seed-2": False, "mid": True}
    d = diagnose_run(cases, {c.id: _result(c.id, outcome[c.id]) for c in cases}, [])
    lead = d.findings[0]
    assert lead.necessary_only and not lead.exact and lead.predicate.startswith("x.shape[-1] >")
    assert lead.validation.value_dependent and "long.seed-2 passes where long fails" in \
        lead.validation.value_dependent[0]
    assert "necessary condition only" in lead.why_not_exact[0]


def test_a_refuted_lead_keeps_its_counterexample_and_nothing_nearest_is_called_exact():
    """Groups fail at every value but 1: the star reads "groups > 1"; the far passing side (0) fails."""
    base = {"id": "b", "inputs": [{"name": "x", "shape": [4, 32]}], "attributes": {"groups": 1}, "seed": 3}
    star = {"base": base, "vary": [{"axis": "attribute", "name": "groups", "values": [2, 4, 8]},
                                   {"axis": "dtype", "values": ["float16"]}]}
    d, cases, results = _narrow(expand_star(StarSpec.model_validate(star)),
                                lambda c: c.attributes["groups"] != 1)
    lead = d.findings[0]
    assert (lead.predicate, lead.exact) == ("attr.groups != 1", True), lead
    refuted = {c.refutes: c for c in d.counterexamples}
    assert "attr.groups > 1" in refuted and refuted["attr.groups > 1"].observed == "fail"
    assert lead.counterexamples and lead.counterexamples[0].refutes == "attr.groups > 1"
    # a property no axis holds (the sum of the two dimensions odd): no exact finding, the counterexamples kept
    star = {"base": dict(base, attributes={}), "vary": [
        {"axis": "shape", "input": "x", "values": [[4, 33], [4, 64], [5, 64], [8, 17], [2, 30]]}]}
    d, _, _ = _narrow(expand_star(StarSpec.model_validate(star)), lambda c: sum(c.inputs[0].shape) % 2 == 1)
    assert not any(f.exact for f in d.findings), [f.predicate for f in d.findings]
    from tools.analysis.probes import falsified_note

    note = falsified_note(d.findings, d.counterexamples)
    assert not d.counterexamples or note.startswith(" No exact finding: cases built to break the leads refuted")


# --------------------------------------------------------------------------
# Property: hidden predicates from a generator of their own
# --------------------------------------------------------------------------

_DTYPES = ("float32", "float16", "bfloat16")
_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def _hidden(rng: random.Random):
    """A hidden predicate over the raw case, written without the analysis' axes (its own arithmetic)."""
    kind = rng.choice(["modulus", "band", "values", "row_bytes", "either", "threshold", "product_parity",
                       "product", "aligned_bytes", "dtype_and_length"])
    x = lambda c: c.inputs[0]  # noqa: E731
    if kind == "product":  # a product of two sizes (the condition language's x.shape[0] * x.shape[-1] > t)
        t = rng.choice([200, 400, 1000])
        return kind, lambda c: x(c).shape[0] * x(c).shape[-1] > t
    if kind == "aligned_bytes":  # pow2(x.shape[-1] * x.itemsize) < 32: a row not 32-byte aligned
        return kind, lambda c: ((n := x(c).shape[-1] * _BYTES[x(c).dtype]) & -n) < 32
    if kind == "dtype_and_length":  # the README demo's shape: a dtype, and a length too
        t = rng.choice([20, 60])
        return kind, lambda c: x(c).dtype == "bfloat16" and x(c).shape[-1] > t
    if kind == "modulus":
        m = rng.choice([3, 5, 6, 12])
        return kind, lambda c: x(c).shape[-1] % m != 0
    if kind == "band":
        lo = rng.choice([24, 40, 56])
        return kind, lambda c: lo < x(c).shape[-1] < 2 * lo
    if kind == "values":
        bad = set(rng.sample([16, 24, 40, 48, 72], 2))
        return kind, lambda c: x(c).shape[-1] in bad
    if kind == "row_bytes":
        return kind, lambda c: (x(c).shape[-1] * _BYTES[x(c).dtype]) % 64 != 0
    if kind == "either":
        return kind, lambda c: x(c).dtype == "bfloat16" or x(c).shape[0] > 8
    if kind == "threshold":  # inside the space: a control
        t = rng.choice([30, 50, 100])
        return kind, lambda c: x(c).shape[-1] > t
    return kind, lambda c: (x(c).shape[0] * x(c).shape[-1]) % 2 == 1


def _star(rng: random.Random) -> list[Case]:
    rows, cols = rng.choice([2, 4]), rng.choice([16, 32, 64])
    dtype = rng.choice(_DTYPES)
    base = {"id": "b", "inputs": [{"name": "x", "shape": [rows, cols], "dtype": dtype}], "seed": 1}
    cols_seen = rng.sample([8, 24, 40, 48, 72, 96, 128], 3)
    vary = [{"axis": "shape", "input": "x", "values": [[rows, v] for v in cols_seen]},
            {"axis": "shape", "input": "x", "values": [[v, cols] for v in rng.sample([1, 12, 16], 1)]},
            {"axis": "dtype", "values": [d for d in _DTYPES if d != dtype][:rng.randint(1, 2)]}]
    return expand_star(StarSpec.model_validate({"base": base, "vary": vary}))


def _fresh(rng: random.Random, recorded: list[Case], n: int) -> list[Case]:
    """Fresh cases across the run's space: the sizes it has, and between and beyond them; its dtypes."""
    cols = sorted({c.inputs[0].shape[-1] for c in recorded})
    rows = sorted({c.inputs[0].shape[0] for c in recorded})
    cols += [v * 2 for v in cols] + [max(1, v // 2) for v in cols] + [v + 1 for v in cols]
    cols += [v - 1 for v in cols if v > 1]
    rows += [v * 2 for v in rows] + [v + 1 for v in rows]
    dtypes = sorted({c.inputs[0].dtype for c in recorded})
    return [_case(f"fresh{i}", {"name": "x", "shape": [rng.choice(rows), rng.choice(cols)],
                                "dtype": rng.choice(dtypes)}) for i in range(n)]


def contradicted_exact_findings(trials: int = 28, seed: int = 2026, rich: bool = False) -> tuple[int, list[str]]:
    """(exact findings claimed, the ones a fresh case drawn afterwards contradicts); ``rich``: the richer
    grammar's predicates and cases (rank 3/4, attributes)."""
    rng = random.Random(seed)
    hidden, star, fresh = (_hidden_rich, _star_rich, _fresh_rich) if rich else (_hidden, _star, _fresh)
    claimed, wrong = 0, []
    for trial in range(trials):
        kind, truth = hidden(rng)
        d, cases, _ = _narrow(star(rng), truth)
        exact = [f for f in d.findings if f.exact]
        if not exact:
            continue
        claimed += 1
        from tools.analysis.hypotheses import enumerate_hypotheses  # each finding's hypothesis, to predict with

        results = {c.id: truth(c) for c in cases if truth(c) is not None}
        passing = sorted(c for c in results if not results[c])
        hyps = []
        for lead in exact:
            named = set(lead.axis.split(" & "))
            hax = {c.id: read_case(hypothesis_axes(c, case_axes(c)), c, named) for c in cases}
            # one of several causes covers its own failing cases; a sole finding covers them all
            failing = sorted(lead.cases) if lead.cause is not None else sorted(c for c in results if results[c])
            space = enumerate_hypotheses(hax, failing, passing)
            hyp = next((h for h in space.hypotheses if h.text == lead.predicate or
                        ({a.axis for a in h.atoms} == named and lead.kind == "set")), None)
            assert hyp is not None, (kind, lead.predicate)
            hyps.append((lead, named, hyp))
        complete = len(exact) == len(d.findings) and not d.unexplained  # the findings claim every failure
        for probe in fresh(random.Random(trial), cases, 40):
            if truth(probe) is None:  # a call the operator refuses says nothing
                continue
            preds = [h.predict(read_case(hypothesis_axes(probe, case_axes(probe)), probe, named))
                     for _, named, h in hyps]
            said = [f.predicate for (f, _, _), p in zip(hyps, preds) if p == "fail"]
            if (said and not truth(probe)) or (complete and not said and all(p == "pass" for p in preds)
                                               and truth(probe)):
                wrong.append(f"{kind}: {' | '.join(f.predicate for f in exact)} (contradicted by "
                             f"{probe.inputs[0].shape} {probe.inputs[0].dtype} {probe.attributes or ''})")
                break
    return claimed, wrong


def test_an_exact_finding_is_never_contradicted_by_a_fresh_case_drawn_afterwards():
    claimed, wrong = contradicted_exact_findings()
    assert not wrong, wrong
    assert claimed >= 5  # exact findings were claimed (the controls inside the space at least)


def test_an_exact_finding_of_the_richer_grammar_is_never_contradicted_by_a_fresh_case_drawn_afterwards():
    """Hidden products, ratios, bytes, rows, alignments and rank-dependent indices on rank-3/4 inputs with
    attributes.  CI draws 40; ``OPDEBUG_FALSIFY_DRAWS=300`` (and ``OPDEBUG_FALSIFY_SEED``) draw more."""
    draws = int(os.environ.get("OPDEBUG_FALSIFY_DRAWS", "40"))
    claimed, wrong = contradicted_exact_findings(draws, seed=int(os.environ.get("OPDEBUG_FALSIFY_SEED", "2026")),
                                                 rich=True)
    assert not wrong, wrong
    assert claimed >= min(3, draws // 10)  # exact findings were claimed (the controls inside the space at least)


# The richer grammar: rank-3/4 inputs with integer attributes; products of two sizes, a size over an attribute,
# bytes, the rows, an alignment, an index whose meaning depends on the rank (each written in its own arithmetic).

def _pow2(n: int) -> int:
    return n & -n if n else 0


def _hidden_rich(rng: random.Random):
    kind, truth = _hidden_rich_kind(rng)
    return kind, lambda c: None if len(c.inputs[0].shape) < 2 else truth(c)  # the operator wants rank 2 or more


def _hidden_rich_kind(rng: random.Random):
    kind = rng.choice(["product", "product_last", "ratio", "bytes", "rows", "rank_index", "align", "threshold",
                       "ratio_and_dtype", "product_band"])
    x = lambda c: c.inputs[0]  # noqa: E731
    s = lambda c: x(c).shape  # noqa: E731
    g = lambda c: c.attributes["groups"]  # noqa: E731
    if kind == "product":  # x.shape[0] * x.shape[1] > t
        t = rng.choice([16, 32, 64])
        return kind, lambda c: s(c)[0] * s(c)[1] > t
    if kind == "product_last":  # x.shape[-2] * x.shape[-1] > t
        t = rng.choice([64, 256])
        return kind, lambda c: s(c)[-2] * s(c)[-1] > t
    if kind == "ratio":  # x.shape[1] // attr.groups > t
        t = rng.choice([2, 4, 8])
        return kind, lambda c: None if g(c) < 1 else s(c)[1] // g(c) > t
    if kind == "ratio_and_dtype":
        return kind, lambda c: None if g(c) < 1 else s(c)[1] // g(c) > 4 and x(c).dtype != "float32"
    if kind == "bytes":  # x.numel * x.itemsize > t
        t = rng.choice([2048, 8192])
        return kind, lambda c: math.prod(s(c)) * _BYTES[x(c).dtype] > t
    if kind == "rows":  # x.numel // x.shape[-1] > t
        t = rng.choice([16, 64])
        return kind, lambda c: math.prod(s(c)[:-1]) > t
    if kind == "rank_index":  # attr.dim % x.rank == 1
        return kind, lambda c: c.attributes["dim"] % len(s(c)) == 1 if -len(s(c)) <= c.attributes["dim"] < len(
            s(c)) else None  # a dimension the input lacks: the operator refuses the call
    if kind == "align":  # pow2(x.shape[-1]) < 8
        return kind, lambda c: _pow2(s(c)[-1]) < 8
    if kind == "product_band":  # 32 < x.shape[0] * x.shape[1] <= 128
        return kind, lambda c: 32 < s(c)[0] * s(c)[1] <= 128
    t = rng.choice([12, 24])  # inside the space: a control
    return kind, lambda c: s(c)[-1] > t


_POOL = {0: [1, 2, 4, 8, 16], 1: [2, 4, 8, 12, 16, 32], 2: [8, 16, 24, 32, 64], 3: [8, 16, 24, 32, 64]}


def _star_rich(rng: random.Random) -> list[Case]:
    rank = rng.choice([3, 4])
    shape = [rng.choice(_POOL[min(i, 3)][1:4]) for i in range(rank)]
    dtype = rng.choice(_DTYPES)
    attrs = {"groups": rng.choice([1, 2]), "dim": rng.choice([0, 1, -1])}
    base = {"id": "b", "inputs": [{"name": "x", "shape": shape, "dtype": dtype}], "attributes": attrs, "seed": 1}
    traded = [[rng.choice(_POOL[min(i, 3)]) for i in range(rank)] for _ in range(4)]  # factors traded
    other = [shape[0] * shape[1]] + shape[2:] if rng.random() < 0.5 else [2] + shape  # another rank
    vary = [{"axis": "shape", "input": "x", "values": traded + [other]},
            {"axis": "attribute", "name": "groups", "values": [g for g in (1, 2, 4) if g != attrs["groups"]]},
            {"axis": "attribute", "name": "dim", "values": [d for d in (0, 1, -1, -2) if d != attrs["dim"]][:2]},
            {"axis": "dtype", "values": [d for d in _DTYPES if d != dtype][:1]}]
    return expand_star(StarSpec.model_validate({"base": base, "vary": vary}))


def _fresh_rich(rng: random.Random, recorded: list[Case], n: int) -> list[Case]:
    """Fresh cases across the run's space: its ranks, each dimension's sizes (doubled, halved, one more), its
    attributes and dtypes."""
    ranks = sorted({len(c.inputs[0].shape) for c in recorded})
    pools: dict[tuple[int, int], set[int]] = {}
    for c in recorded:
        sh = c.inputs[0].shape
        for i, v in enumerate(sh):
            pools.setdefault((len(sh), i), set()).update({v, v * 2, max(1, v // 2), v + 1})
    attrs = {k: sorted({c.attributes[k] for c in recorded}) for k in ("groups", "dim")}
    dtypes = sorted({c.inputs[0].dtype for c in recorded})
    out = []
    for i in range(n):
        r = rng.choice(ranks)
        shape = [rng.choice(sorted(pools[(r, k)])) for k in range(r)]
        if math.prod(shape) > 2**26:  # a far probe's size in every dimension at once: not a call to plan
            continue
        picked = {k: rng.choice(v) for k, v in attrs.items()}
        picked["dim"] = rng.randrange(-r, r)  # any index of the rank, either way it is written
        out.append(_case(f"fresh{i}", {"name": "x", "shape": shape, "dtype": rng.choice(dtypes)},
                         attributes=picked))
    return out


# --------------------------------------------------------------------------
# Planted kinds outside the first space, through the real MCP client on host "local"
# --------------------------------------------------------------------------


def test_planted_kinds_outside_the_space_never_end_on_a_wrong_exact_finding_over_stdio(tmp_path, subprocess_env):
    from test_mcp_stdio import error_text, with_server

    env = {k: os.environ[k] for k in ("OPDEBUG_RUNNER_STAGE",) if k in os.environ}

    async def scenario(client):
        out = {}
        for kind in FALSIFY_KINDS:
            run = "f-" + kind.replace("_", "-")
            calls = [await client.call_tool("plan_cases", falsify_plan_request(run, kind)),
                     await client.call_tool("narrow_failure", {"run_id": run, "max_cases": 40}),
                     await client.call_tool("analyze_failures", {"run_id": run})]
            for c in calls:
                assert not c.is_error, error_text(c)
            out[kind] = [c.structured_content for c in calls[1:]]
        return out

    root = tmp_path / "evidence"
    out = with_server(root, scenario, env=env)
    for kind, (narrow, final) in out.items():
        spec = FALSIFY_KINDS[kind]
        assert narrow["new_cases"] <= 40, kind
        assert not wrong_exact(kind, final["findings"]), (kind, final["findings"][0]["predicate"])
        lead = final["findings"][0] if final["findings"] else None
        if spec.get("reach"):  # the planted condition, exact, its probes predicted
            assert lead is not None and lead["exact"] and narrow["exact"], (kind, lead)
            v = lead["validation"]
            assert v["probes_run"] == v["probes_held"] > 0 and not v["open"], (kind, v)
        elif spec.get("necessary"):  # value-dependent: a necessary condition, never exact
            assert lead is not None and lead["necessary_only"] and not lead["exact"], (kind, lead)
            assert lead["predicate"].startswith("x.shape[-1] >"), lead
        elif spec["exact"]:  # in the space as a conjunction: exact, or still among the survivors
            survivors = {f["predicate"] for f in final["findings"] + final["competing"]}
            assert narrow["exact"] or set(spec["exact"]) & survivors, (kind, survivors)
        else:  # outside the space: no exact finding (the probes' counterexamples say why, where a lead fell)
            assert not narrow["exact"] and not any(f["exact"] for f in final["findings"]), (kind, final["findings"])
    assert any(c["refutes"] == "attr.groups > 1" for c in out["all_but_one"][1]["counterexamples"])
    assert any(c["refutes"] == "x.last_align < 16" for c in out["row_bytes"][1]["counterexamples"])
    assert any(c["refutes"].startswith("x.sign == nonnegative") for c in out["values_min"][1]["counterexamples"])

    report = (root / "f-row-bytes" / "report.md").read_text()
    assert "validation: predicted" in report and "counterexample: " in report
    show = subprocess.run([sys.executable, "-m", "tools.cli", "show", "--root", str(root), "--run-id",
                           "f-values-min"], env=subprocess_env | {"COLUMNS": "240"}, capture_output=True, text=True,
                          timeout=120)
    assert show.returncode == 0, show.stderr
    assert "no exact finding" in show.stdout and "counterexample: " in show.stdout
    assert "No exact finding: cases built to break the leads refuted" in out["values_min"][1]["summary"]
