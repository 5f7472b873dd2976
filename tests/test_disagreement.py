"""Probes are ranked by what they can refute among all the surviving conditions (analysis/disagreement.py).

Each surviving condition - the agent's stated ones and the tool's own findings - predicts a probe case
fail or pass; whatever the case shows, it refutes the conditions that predicted the other outcome, so a
case's disagreement is the smaller side.  The falsify next cases come most disagreement first, whoever built
them (not the competitors' probes first by kind).  Pure: no runner, the recorded outcomes come from a rule.
"""

from __future__ import annotations

from types import SimpleNamespace

from tools.analysis.build import build_analysis
from tools.analysis.disagreement import by_disagreement, hypothesis_predictors
from tools.analysis.hypotheses import Atom, Hypothesis
from tools.analysis.proposal import Proposal, ProposedCase
from tools.cases.stars import expand_star
from tools.conditions.language import ConditionError, parse
from tools.conditions.properties import case_properties
from tools.schemas import Case, CaseResult, NextCase, StarSpec


def _result(cid: str, fails: bool) -> CaseResult:
    if not fails:
        return CaseResult.model_validate({"case_id": cid, "status": "passed"})
    return CaseResult.model_validate(
        {"case_id": cid, "status": "numerical_mismatch", "comparisons": [{"output": "out", "passed": False}]}
    )


def _disagreement(nxt: NextCase, conditions: list) -> int:
    """Recomputed from the next case alone: its cases expanded, each surviving condition evaluated on them."""
    assert nxt.star is not None
    best = 0
    for case in expand_star(StarSpec.model_validate(nxt.star)):
        props = case_properties(case)
        said = [c.evaluate(props) for c in conditions]
        best = max(best, min(said.count(True), said.count(False)))
    return best


def test_the_probes_come_most_disagreement_first_among_every_surviving_condition():
    base = {"id": "b", "inputs": [{"name": "x", "shape": [4, 32], "dtype": "float32"}], "seed": 1}
    vary = [
        {"axis": "shape", "input": "x", "values": [[4, 64], [4, 128], [16, 32], [2, 16]]},
        {"axis": "dtype", "values": ["float16"]},
    ]
    cases = expand_star(StarSpec.model_validate({"base": base, "vary": vary}))
    results = {c.id: _result(c.id, c.inputs[0].shape[0] * c.inputs[0].shape[-1] > 300) for c in cases}
    stated = ["x.shape[0] * x.shape[-1] > 300", "x.shape[-1] > 40"]
    a = build_analysis("r", SimpleNamespace(source_model_failure=None), cases, results, conditions=stated)
    assert [x.fate for x in a.conditions] == ["surviving", "refuted"]
    texts = [t for t, x in zip(stated, a.conditions, strict=True) if x.fate != "refuted"]
    conditions = []
    for t in texts + [f.predicate for f in a.findings + a.competing]:
        try:
            conditions.append(parse(t))
        except ConditionError:
            pass
    assert len(conditions) >= 2  # the stated survivor and the tool's own findings: they can disagree
    scores = [_disagreement(n, conditions) for n in a.next_cases if n.kind == "falsify"]
    assert len(set(scores)) > 1, scores  # some probes split the conditions, others do not: the order matters
    assert scores == sorted(scores, reverse=True), scores
    # a probe of a property the condition does not name can split the survivors as well as a competitor's:
    # kinds do not decide the order, what a case can refute does
    first_zero = scores.index(0)
    kinds = [n.reason for n in a.next_cases if n.kind == "falsify"]
    assert any("does not name" in r for r in kinds[:first_zero]), kinds[:first_zero]


def _proposed(cid: str, preds: dict[str, str | None]) -> ProposedCase:
    base = Case.model_validate({"id": cid, "inputs": [{"name": "x", "shape": [4]}]})
    return ProposedCase(base=base, var={"axis": "seed"}, value=1, doc={}, axes={}, finding="", preds=preds)


def test_by_disagreement_puts_the_most_even_split_first_and_keeps_ties_in_order():
    hyps = [
        Hypothesis((Atom("x.shape[-1]", "threshold", direction="above", passes_at=i, fails_at=i + 1),))
        for i in (1, 2, 3, 4)
    ]
    h = [x.text for x in hyps]
    none = _proposed("a", dict.fromkeys(h, "fail"))  # all agree: refutes nothing whatever it shows
    one = _proposed("b", {h[0]: "pass", h[1]: "fail", h[2]: "fail", h[3]: "fail"})
    even = _proposed("c", {h[0]: "pass", h[1]: "pass", h[2]: "fail", h[3]: "fail"})
    tie = _proposed("d", {h[0]: "fail", h[1]: "fail", h[2]: "fail", h[3]: "pass"})
    props = [Proposal("falsify", None, [c], "why", "f", "p") for c in (none, one, even, tie)]
    ranked = by_disagreement(props, hypothesis_predictors(hyps))
    assert [p.cases[0].base.id for p in ranked] == ["c", "b", "d", "a"]
    # a proposal counts its best case
    both = Proposal("falsify", None, [none, even], "why", "f", "p")
    assert by_disagreement([props[1], both], hypothesis_predictors(hyps))[0] is both
