"""One settlement (tools/analysis/settlement.py): its principles, pure (no runner).

- a boundary is pinned only by two cases that differ in that quantity alone: a pair across ranks pins
  nothing, and the probes then build the pair;
- a gap that another term of the condition already excludes is settled;
- a requirement no buildable case meets stays open ("untestable with these variations") and is never
  listed as held;
- the run-level answer is one: an exact lead beside a trend is not an exact run, and narrow_failure's
  stop reason and its ``exact`` read the same function;
- a stated condition is settled by the same rule: a product of two sizes stated by the agent ends exact,
  a plausible wrong one is refuted, within 40 new cases.
"""

from __future__ import annotations

from types import SimpleNamespace

from tools.analysis.build import diagnose_run
from tools.analysis.hypotheses import Atom, hypothesis_axes
from tools.analysis.probes import Req, untestable, validate
from tools.analysis.settlement import differ_alone, pinned, run_exact
from tools.cases.axes import case_axes
from tools.cases.derived import case_distance_axes, structured_axes
from tools.cases.stars import expand_star
from tools.narrow import _done
from tools.schemas import Case, CaseResult, Finding, StarSpec


def _case(cid: str, shape: list[int], **kw) -> Case:
    return Case.model_validate({"id": cid, "inputs": [{"name": "x", "shape": shape}], **kw})


def _ctx(cases: list[Case], status: dict[str, str]) -> SimpleNamespace:
    labels = {c.id: case_axes(c) for c in cases}
    axes = {c.id: structured_axes(c, labels[c.id]) for c in cases}
    return SimpleNamespace(
        ties={},
        status=status,
        cases={c.id: c for c in cases},
        dist={c.id: case_distance_axes(c, labels[c.id]) for c in cases},
        hax={c.id: hypothesis_axes(c, labels[c.id], axes[c.id]) for c in cases},
    )


def test_a_pair_across_ranks_pins_nothing_and_one_within_a_rank_does():
    # x.shape[2] is 16 in a passing rank-4 case and 17 in a failing rank-3 case: adjacent, but across ranks
    cases = [_case("r4", [2, 3, 16, 5]), _case("r3", [2, 3, 17]), _case("r3b", [2, 3, 16]), _case("t", [2, 4, 16])]
    ctx = _ctx(cases, {"r4": "pass", "r3": "fail", "r3b": "pass", "t": "pass"})
    assert not differ_alone(ctx, "r4", "r3", "x.shape[2]", ["x.shape"])
    assert differ_alone(ctx, "r3b", "r3", "x.shape[2]", ["x.shape"])  # the same rank, that dimension alone
    assert not differ_alone(ctx, "t", "r3", "x.shape[2]", ["x.shape"])  # two dimensions moved: not that one alone
    # the same rank and that dimension alone, but another layout: a transposed view pins nothing either
    views = [
        Case.model_validate({"id": "c", "inputs": [{"name": "x", "shape": [4, 8]}]}),
        Case.model_validate({"id": "t", "inputs": [{"name": "x", "shape": [4, 9], "strides": [1, 4]}]}),
        Case.model_validate({"id": "n", "inputs": [{"name": "x", "shape": [4, 9]}]}),
    ]
    ctx = _ctx(views, {"c": "pass", "t": "fail", "n": "fail"})
    assert not differ_alone(ctx, "c", "t", "x.shape[-1]", ["x.shape"])
    assert differ_alone(ctx, "c", "n", "x.shape[-1]", ["x.shape"])


def test_a_gap_another_term_excludes_is_settled():
    t = Finding(
        axis="q",
        kind="threshold",
        predicate="q > 7",
        source="q",
        failing_values=[9, 12],
        passing_values=[7],
        exact=False,
        failing=2,
        passing=1,
        direction="above",
        passes_at=7,
        fails_at=9,
    )
    assert not pinned(t, {})  # 8 lies between: not pinned on its own
    not_multiple_of_8 = Atom("x.last_align", "threshold", direction="below", fails_at=4, passes_at=8)
    same_q = Atom("q", "set", (9, 12))  # the other term holds only at 9 and 12: it excludes 8
    assert pinned(t, {}, (same_q,))
    assert not pinned(t, {}, (not_multiple_of_8,))  # another quantity says nothing about q's gap


def test_an_untestable_requirement_stays_open_and_is_never_held():
    case = _case("a", [4, 8])
    ctx = SimpleNamespace(status={"a": "fail"}, cases={"a": case}, hax={"a": {}})
    lead = Finding(
        axis="x.shape[-1]",
        kind="threshold",
        predicate="x.shape[-1] > 4",
        source="x.shape",
        failing_values=[8],
        passing_values=[4],
        exact=True,
        failing=1,
        passing=1,
    )
    req = Req("repin-fail", "x.shape[-1] = 8 (fail) again under mode = compile", done=["a"])
    req.untestable = "no case the variations can build reaches it"
    req.done = []
    assert untestable(req)
    hyp = SimpleNamespace(atoms=())
    validate(ctx, lead, hyp, [req], [], {})
    assert not lead.exact
    assert not lead.validation.held  # never listed as held
    assert any(o.startswith("untestable with these variations") for o in lead.validation.open)
    assert any("untestable with these variations" in w for w in lead.why_not_exact)


def _analysis(findings, **kw):
    base = dict(
        verdict="diagnosed",
        findings=findings,
        competing=[],
        unexplained=[],
        next_cases=[],
        consistency=SimpleNamespace(excluded_from_findings=[]),
        failures=[],
        conditions=[],
    )
    return SimpleNamespace(**(base | kw))


def test_the_run_level_answer_is_read_from_the_settlement_alone():
    lead = Finding(
        axis="dtype",
        kind="value",
        predicate="dtype == bfloat16",
        source="dtype",
        failing_values=["bfloat16"],
        passing_values=["float32"],
        exact=True,
        failing=2,
        passing=2,
    )
    trend = Finding(
        axis="x.shape[-1]",
        kind="trend",
        predicate="max_rel grows with x.shape[-1]",
        source="x.shape",
        failing_values=[],
        passing_values=[],
        exact=False,
        failing=2,
        passing=2,
    )
    alone = _analysis([lead])
    beside = _analysis([lead, trend])
    assert run_exact(alone) and _done(alone) == "exact"
    # an exact lead beside a trend: not an exact run, and narrow does not stop "exact" on it
    assert not run_exact(beside) and _done(beside) != "exact"


def _result(cid: str, fails: bool) -> CaseResult:
    if not fails:
        return CaseResult.model_validate({"case_id": cid, "status": "passed"})
    return CaseResult.model_validate(
        {
            "case_id": cid,
            "status": "numerical_mismatch",
            "comparisons": [{"output": "out", "passed": False, "max_abs": 1.0}],
        }
    )


def test_a_stated_product_of_two_sizes_ends_exact_and_a_wrong_threshold_is_refuted():
    from tools.analysis.build import build_analysis

    base = {"id": "b", "inputs": [{"name": "x", "shape": [4, 32], "dtype": "float32"}], "seed": 1}
    vary = [
        {"axis": "shape", "input": "x", "values": [[4, 64], [4, 128], [16, 32], [2, 16]]},
        {"axis": "dtype", "values": ["float16"]},
    ]
    cases = expand_star(StarSpec.model_validate({"base": base, "vary": vary}))

    def truth(c: Case) -> bool:
        return c.inputs[0].shape[0] * c.inputs[0].shape[-1] > 300

    stated = ["x.shape[0] * x.shape[-1] > 300", "x.shape[-1] > 40"]
    results: dict[str, CaseResult] = {}
    new = 0
    config = SimpleNamespace(source_model_failure=None)
    for _ in range(12):
        results |= {c.id: _result(c.id, truth(c)) for c in cases if c.id not in results}
        a = build_analysis("r", config, cases, results, conditions=stated)
        if all(x.fate != "surviving" for x in a.conditions) or new >= 40:
            break
        added = _proposed(cases, a.next_cases, min(8, 40 - new))
        assert added
        new += len(added)
        cases = cases + added
    right, wrong = a.conditions
    assert (right.fate, wrong.fate) == ("exact", "refuted") and new <= 40, (right.why_not_exact, new)
    assert wrong.counterexamples and right.contradict_count == 0
    held = " ".join(right.validation.held)
    assert "flips" in held and "does not name" in held  # its boundary pinned, the unnamed moved far
    # the boundary is pinned by two recorded cases 1 apart that differ in that dimension alone
    assert any(h.startswith(("x.shape[-1] at", "x.shape[0] at", "x.shape[1] at")) for h in right.validation.held)
    d = diagnose_run(cases, results, [])
    assert not any(f.exact and f.predicate not in ("x.numel > 300",) for f in d.findings)


def _tool_alone(cases: list[Case], truth, rounds: int = 10):
    """narrow_failure's loop without conditions, offline: the analysis' narrowing cases run by ``truth``."""
    from tools.analysis.build import build_analysis

    results: dict[str, CaseResult] = {}
    new, seen = 0, []
    config = SimpleNamespace(source_model_failure=None)
    for _ in range(rounds):
        results |= {c.id: _result(c.id, truth(c)) for c in cases if c.id not in results}
        a = build_analysis("r", config, cases, results)
        seen += [(f.predicate, f.exact) for f in a.findings]
        added = _proposed(cases, a.next_cases, min(8, 40 - new))
        if not added:
            break
        new += len(added)
        cases = cases + added
    return a, seen, new


def test_the_tool_alone_states_a_product_of_two_sizes_where_cases_trade_one_factor_against_another():
    # batch x heads > 64 of a rank-3 input; [4, 8, 64] passes with the element count of a failing case
    shapes = ([4, 8, 16], [4, 32, 16], [16, 8, 16], [2, 16, 16], [8, 4, 32], [4, 8, 64])
    cases = [_case(f"c{i}", s, seed=3) for i, s in enumerate(shapes)]
    a, seen, new = _tool_alone(cases, lambda c: c.inputs[0].shape[0] * c.inputs[0].shape[1] > 64)
    assert seen[0][0] == "x.shape[0] * x.shape[1] > 32"  # the product before a conjunction of two thresholds
    assert all(p.startswith("x.shape[0] * x.shape[1] ") for p, _ in seen), seen
    assert not [p for p, e in seen if e and p != "x.shape[0] * x.shape[1] > 64"]  # never a wrong exact
    assert a.findings[0].predicate == "x.shape[0] * x.shape[1] > 64" and new <= 40


def test_a_ratio_of_a_size_and_an_attribute_is_in_the_space_and_a_wrong_exact_is_never_stated():
    from tools.conditions.grammar import PRODUCTS, space_axes

    case = _case("g", [2, 36, 4], attributes={"groups": 3, "flag": True, "eps": 0.5})
    assert space_axes(case, PRODUCTS) == {
        "x.shape[0] * x.shape[1]": 72,
        "x.shape[0] * x.shape[-1]": 8,
        "x.shape[1] * x.shape[-1]": 144,
        "x.shape[0] // attr.groups": 0,
        "x.shape[1] // attr.groups": 12,
        "x.shape[-1] // attr.groups": 1,
    }
    assert "x.shape[0] * x.shape[-1]" not in space_axes(_case("m", [3, 5]), PRODUCTS)  # that is its element count

    # wrong when the channels per group are above 8 and not a multiple of 8: no threshold says it
    def truth(c: Case) -> bool:
        per = c.inputs[0].shape[1] // c.attributes["groups"]
        return per > 8 and per % 8 != 0

    pairs = ((16, 2), (36, 3), (48, 3), (24, 3), (20, 2), (18, 3), (72, 4))
    cases = [_case(f"c{i}", [2, ch, 4], attributes={"groups": g}, seed=3) for i, (ch, g) in enumerate(pairs)]
    a, seen, _ = _tool_alone(cases, truth, rounds=4)
    assert not [p for p, e in seen if e]  # the ratio alone is not the rule: no exact finding
    # a plain ratio threshold is stated where it separates
    cases = [_case(f"r{i}", [2, ch, 4], attributes={"groups": g}, seed=3) for i, (ch, g) in enumerate(pairs)]
    a, seen, _ = _tool_alone(cases, lambda c: c.inputs[0].shape[1] // c.attributes["groups"] > 9, rounds=6)
    assert seen and seen[0][0] == "x.shape[1] // attr.groups > 8", seen
    assert not [p for p, e in seen if e and p != "x.shape[1] // attr.groups > 9"]


def test_a_product_is_pinned_only_by_cases_that_differ_in_its_own_dimensions():
    from tools.analysis.flips import product_moves

    cases = [_case("p", [8, 8, 16]), _case("q", [5, 13, 16]), _case("r", [5, 13, 32])]
    ctx = _ctx(cases, {"p": "pass", "q": "fail", "r": "fail"})
    axis = "x.shape[0] * x.shape[1]"
    assert differ_alone(ctx, "p", "q", axis, ["x.shape"])  # 64 -> 65: only its two dimensions moved
    assert not differ_alone(ctx, "p", "r", axis, ["x.shape"])  # the last dimension moved too
    moved = product_moves({}, cases[0], axis, 72)  # one factor moved, the other kept: exact landings only
    assert [v for _, v in moved] == [9, 9] and all(m["axis"] == "dim" for m, _ in moved)
    (both, value), *_ = product_moves({}, cases[0], axis, 67)  # a prime: one factor to it, the other to 1
    assert value == 67 and both["also"][0]["values"] == [1]
    ratio = product_moves({}, _case("g", [2, 36, 4], attributes={"groups": 3}), "x.shape[1] // attr.groups", 5)
    assert [v for _, v in ratio] == [15]  # a multiple of the attribute: a valid call


def test_an_element_count_is_not_exact_until_its_factors_moved_into_each_dimension_agree():
    # the offline product kind (batch x heads > 64, rank 3): x.numel > 1024 separated the first cases and ended
    # exact, although no probe kept 1280 elements with the factors moved into the last dimension
    shapes = ([4, 8, 16], [4, 32, 16], [16, 8, 16], [2, 16, 16], [8, 4, 32])
    cases = [_case(f"c{i}", s, seed=3) for i, s in enumerate(shapes)]
    a, seen, new = _tool_alone(cases, lambda c: c.inputs[0].shape[0] * c.inputs[0].shape[1] > 64)
    assert ("x.numel > 1024", False) in seen  # it led, and was never called exact
    assert not [p for p, e in seen if e and p != "x.shape[0] * x.shape[1] > 64"], seen
    assert new <= 40


def test_the_factors_of_a_composite_quantity_are_moved_into_each_of_its_dimensions():
    from tools.analysis.factor_probes import concentrate_moves, concentrated, factor_dims

    assert factor_dims("x.numel", [5, 16, 16]) == ("x", [0, 1, 2])
    assert factor_dims("x.bytes", [5, 16]) == ("x", [0, 1])
    assert factor_dims("x.rows", [5, 16, 16]) == ("x", [0, 1])
    assert factor_dims("x.rows", [5, 16]) is None  # one factor: nothing to move
    assert factor_dims("x.shape[0] * x.shape[-1]", [2, 3, 4]) == ("x", [0, 2])
    assert factor_dims("x.shape[1] // attr.groups", [2, 3, 4]) is None
    assert [concentrated([5, 16, 16], [0, 1, 2], d) for d in range(3)] == [[1280, 1, 1], [1, 1280, 1], [1, 1, 1280]]
    base = _case("b", [5, 16, 16])
    ((var, value),) = concentrate_moves({}, base, "x", [1, 1, 1280])
    assert value == 1 and [a["values"] for a in var["also"]] == [[1], [1280]]
    # two dimensions the call ties together (a square input) cannot take different sizes: no move
    ties = {"x.shape[0]": ["x.shape[1]"], "x.shape[1]": ["x.shape[0]"]}
    assert concentrate_moves(ties, _case("s", [8, 8, 4]), "x", [64, 1, 4]) == []


def test_a_composite_requirement_no_buildable_case_meets_stays_open_and_blocks_exact():
    from tools.analysis.factor_probes import composite_needs
    from tools.analysis.hypotheses import Hypothesis
    from tools.schemas import MinimalPair

    cases = [_case("p", [8, 8, 16]), _case("f", [9, 9, 16])]
    ctx = _ctx(cases, {"p": "pass", "f": "fail"})
    ctx.ties = {"x.shape[0]": ["x.shape[1]"], "x.shape[1]": ["x.shape[0]"]}  # a square: only both move together
    atom = Atom("x.numel", "threshold", direction="above", fails_at=1296, passes_at=1024)
    lead = Finding(
        axis="x.numel",
        kind="threshold",
        predicate="x.numel > 1024",
        source="x.shape",
        failing_values=[1296],
        passing_values=[1024],
        exact=True,
        failing=1,
        passing=1,
        minimal_pair=MinimalPair(
            failing="f", passing="p", passing_value=1024, failing_value=1296, differs_in=["x.shape"]
        ),
    )
    needs = composite_needs(ctx, Hypothesis((atom,)), lead, [lead])
    blocked = [n for n in needs if n.untestable]
    assert blocked and all(not n.builds and not n.done for n in blocked)
    assert any("x.shape[2]" in n.text for n in blocked)  # all of it in the last dimension: the square forbids it


def test_a_size_standing_for_a_product_is_refuted_by_the_dimension_it_does_not_name_moved_far():
    # batch x heads > 16; only the batch was varied: x.shape[0] > 4 separates, and names no other dimension -
    # x.shape[1] moved down from a failing case (and up from a passing one) must keep the outcome, and does not
    shapes = ([2, 4, 8], [4, 4, 8], [8, 4, 8], [16, 4, 8], [1, 4, 8])
    cases = [_case(f"c{i}", s, seed=3) for i, s in enumerate(shapes)]
    a, seen, new = _tool_alone(cases, lambda c: c.inputs[0].shape[0] * c.inputs[0].shape[1] > 16)
    assert ("x.shape[0] > 4", False) in seen
    assert not [p for p, e in seen if e and p != "x.shape[0] * x.shape[1] > 16"], seen
    assert new <= 40


def test_a_rank_threshold_is_refuted_where_a_dimension_of_1_inserted_changes_the_outcome():
    # the leading dimension reversed on inputs of rank above 2: no error where it is 1 - "x.rank > 2" is not the
    # rule, and a dimension of 1 inserted in front of a failing rank-3 case shows it
    shapes = ([4, 32], [2, 4, 32], [8, 32], [3, 4, 32])
    cases = [_case(f"c{i}", s, seed=3) for i, s in enumerate(shapes)]
    a, seen, new = _tool_alone(cases, lambda c: len(c.inputs[0].shape) > 2 and c.inputs[0].shape[0] > 1)
    assert ("x.rank > 2", True) not in seen, seen
    assert new <= 40


def _proposed(cases: list[Case], next_cases, room: int) -> list[Case]:
    """The new cases the narrowing next cases build, at most ``room`` of them (as one autopilot round)."""
    from tools.cases.ids import case_content
    from tools.narrow import NARROWING

    planned = {c.id: case_content(c.model_dump(mode="json")) for c in cases}
    added: list[Case] = []
    for nxt in next_cases:
        if nxt.kind in NARROWING and nxt.star and len(added) < room:
            fresh = [c for c in expand_star(StarSpec.model_validate(nxt.star), planned) if c.id not in planned]
            fresh = fresh[: room - len(added)]
            planned |= {c.id: case_content(c.model_dump(mode="json")) for c in fresh}
            added += fresh
    return added


def test_a_stated_composite_is_probed_with_its_factors_moved_as_the_tools_own_are():
    """A stated ``x.shape[0] * x.shape[1] > 16`` gets the factor probes of the tool's own findings: the product
    kept with both factors in one dimension, from a failing and a passing case (stated.py, class moves)."""
    from tools.analysis.build import build_analysis

    base = {"id": "b", "inputs": [{"name": "x", "shape": [4, 4, 8], "dtype": "float32"}], "seed": 1}
    vary = [{"axis": "shape", "input": "x", "values": [[8, 8, 8], [2, 4, 8], [4, 16, 16]]}]
    cases = expand_star(StarSpec.model_validate({"base": base, "vary": vary}))
    stated = ["x.shape[0] * x.shape[1] > 16"]
    results: dict[str, CaseResult] = {}
    new = 0
    for _ in range(12):
        results |= {c.id: _result(c.id, c.inputs[0].shape[0] * c.inputs[0].shape[1] > 16) for c in cases
                    if c.id not in results}
        a = build_analysis("r", SimpleNamespace(source_model_failure=None), cases, results, conditions=stated)
        if a.conditions[0].fate != "surviving" or new >= 40:
            break
        added = _proposed(cases, a.next_cases, min(8, 40 - new))
        assert added
        new += len(added)
        cases = cases + added
    right = a.conditions[0]
    assert right.fate == "exact", right.why_not_exact
    kept = [c for c in cases if (c.description or "").startswith("stated [class-x.factors:")]
    assert {c.description.split(":")[1][:4] for c in kept} == {"fail", "pass"}, [c.description for c in kept]
    assert all(sum(s > 1 for s in c.inputs[0].shape[:2]) == 1 for c in kept)  # both factors in one dimension
    assert any("factors moved" in h for h in right.validation.held), right.validation.held
