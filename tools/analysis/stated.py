"""The agent's conditions through the settlement: the cases built to break each stated condition.

A condition the agent states (references/conditions.md) is answered against the recorded cases by
tools/conditions/predict.py (agreeing, contradicting, refuted or surviving).  A surviving one gets the
cases built to break it, chosen by what they can refute:

- **unnamed**: a property the condition does not name is one it claims does not matter, so each is moved
  far both ways from a case where it holds (and from one where it does not): sizes down to the smallest
  call and up, other dtypes, another mode, another layout, other value generators at the same scale,
  another seed - the prediction must hold there;
- **boundary**: a property it names moved so that its prediction flips - two cases that differ in that
  quantity alone;
- **competitors**: a case where it and a surviving competitor (the tool's own findings, the other stated
  conditions) disagree.

Every probe - these and the tool's own (probes.py) - is ranked by what it can refute among all the surviving
conditions (disagreement.py): the cases they split most evenly first.

Each probe is an ordinary planned case whose description reads ``stated [GROUP]: CONDITION``, so a later
analysis (which keeps no state) knows which requirement a recorded case met; its outcome is judged like
any recorded case's (a value statistic is known once the case has run).  The fate - refuted, surviving or
exact - is settlement.py's (:func:`~tools.analysis.settlement.settle_stated`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..cases.derived import parse_dim_axis
from ..cases.stars import apply_variation
from ..conditions.language import Condition, ConditionError, parse
from ..conditions.predict import answer_conditions, parse_conditions, run_properties
from ..conditions.properties import case_properties
from ..schemas import FLOAT_DTYPES, MODES, Case, ConditionAnswer, Finding, StarVariation
from .context import Context
from .disagreement import Predictor, by_disagreement, case_disagreement
from .factor_probes import concentrate_moves, concentrated, scaled_together, with_attribute
from .flips import dim_moves
from .moves import strides_for
from .proposal import Proposal, ProposedCase, build_case
from .requirements import SEEDS
from .settlement import settle_stated

TAG = "stated"
MAX_BASES = 2  # cases each side a condition's probes start from
MAX_PROBES = 16  # per condition and analysis


@dataclass
class Need:
    """One way a stated condition could be wrong, and the cases that test it."""

    group: str  # unnamed:x.shape-down, boundary:x.shape[-1], apart:COMPETITOR ...
    text: str
    done: list[str] = field(default_factory=list)
    builds: list[tuple[ProposedCase, bool | None]] = field(default_factory=list)  # candidate, its prediction
    need: int = 1  # recorded cases it wants

    def met(self) -> bool:
        return len(self.done) >= self.need


def tag(group: str, condition: str) -> str:
    return f"{TAG} [{group}]: {condition}"


def read_tag(case: Case) -> tuple[str, str] | None:
    """(group, condition) of a stated probe, None for another case."""
    d = case.description or ""
    if not d.startswith(TAG + " [") or "]: " not in d:
        return None
    group, _, condition = d[len(TAG) + 2 :].partition("]: ")
    return group, condition


# --------------------------------------------------------------------------
# Candidates: one property moved far, each from a base case
# --------------------------------------------------------------------------


def _moves(ctx: Context, base: Case) -> list[tuple[str, str, dict, Any]]:
    """(group, words, variation, value) of every far move of one case."""

    out: list[tuple[str, str, dict, Any]] = []
    for spec in base.inputs:
        if spec.none or spec.shape is None or spec.tensors is not None:
            continue
        name, shape = spec.name, spec.shape
        for i, size in enumerate(shape):
            for var in dim_moves(ctx.ties, base, name, i)[:1]:
                if size > 1:
                    out.append((f"{name}.shape-down", f"{name}.shape[{i}] = 1", var, 1))
                out.append((f"{name}.shape-up", f"{name}.shape[{i}] = {size * 4 + 1}", var, size * 4 + 1))
        if len(shape) >= 2:
            laid = strides_for(shape, "transposed") if spec.strides is None else None
            if laid is not None:
                out.append((f"{name}.layout", f"{name} transposed", {"axis": "strides", "input": name}, laid))
        m = max(abs(spec.values.mean or 0.0) + (spec.values.std or 0.0), 1.0) if spec.values.kind == "normal" else 1.0
        if spec.values.kind in ("normal", "uniform"):
            alt = {"kind": "uniform", "low": -m, "high": m} if spec.values.kind == "normal" else {"kind": "normal"}
            out.append((f"{name}.values", f"{name} values {alt['kind']}", {"axis": "values", "input": name}, alt))
    dtype = next((i.dtype for i in base.inputs if not i.none and i.shape is not None), None)
    for d in FLOAT_DTYPES[:3]:
        if dtype in FLOAT_DTYPES and d != dtype:
            out.append(("dtype", f"dtype = {d}", {"axis": "dtype"}, d))
    for mode in MODES:
        if mode != base.mode and mode not in ctx.no_modes:
            out.append(("mode", f"mode = {mode}", {"axis": "mode"}, mode))
    out.append(("seed", f"seed = {SEEDS[0]}", {"axis": "seed"}, SEEDS[0]))
    return out


def _class_moves(ctx: Context, base: Case, names: frozenset[str]) -> list[tuple[str, str, dict, Any]]:
    """(group, words, variation, value) of the moves that keep a composite quantity the condition names while
    moving its factors (factor_probes.py, for the tool's own): an element count or bytes with every size in
    one dimension, the rows with every leading size in one, a product of two named sizes with both in one, a
    named size and integer attribute scaled together by 2 (and 1/2 where both are even)."""
    out: list[tuple[str, str, dict, Any]] = []
    for spec in base.inputs:
        if spec.none or not spec.shape or spec.tensors is not None or len(spec.shape) < 2:
            continue
        name, shape, rank = spec.name, list(spec.shape), len(spec.shape)
        dims = sorted(
            {p[1] % rank for n in names if (p := parse_dim_axis(n)) and p[0] == name and -rank <= p[1] < rank}
        )
        groups: list[list[int]] = []
        if names & {f"{name}.numel", f"{name}.bytes"}:
            groups.append(list(range(rank)))
        if f"{name}.rows" in names:
            groups.append(list(range(rank - 1)))
        if len(dims) == 2:
            groups.append(dims)
        for factors in [g for g in groups if len(g) >= 2]:
            for into in factors:
                target = concentrated(shape, factors, into)
                for var, value in concentrate_moves(ctx.ties, base, name, target)[:1] if target != shape else []:
                    out.append((f"class-{name}.factors", f"{name} as {target}", var, value))
        for key, k in sorted(base.attributes.items()):
            if f"attr.{key}" not in names or not isinstance(k, int) or isinstance(k, bool) or k < 1:
                continue
            for d in dims:
                for _, to, k_to in scaled_together(shape[d], k):
                    for var in dim_moves(ctx.ties, base, name, d)[:1]:
                        words = f"{name}.shape[{d}] = {to} with attr.{key} = {k_to}"
                        out.append((f"class-{name}.shape[{d}]~attr.{key}", words, with_attribute(var, key, k_to), to))
    return out


def _bases(cond: Condition, props: dict[str, dict], observed: dict[str, str]) -> list[str]:
    """The smallest failing cases where it holds and passing cases where it does not."""
    size = {c: sum(v for k, v in p.items() if k.endswith(".numel") and isinstance(v, int)) for c, p in props.items()}
    fail = sorted(
        (c for c, s in observed.items() if s == "fail" and cond.evaluate(props[c]) is True), key=lambda c: (size[c], c)
    )
    ok = sorted(
        (c for c, s in observed.items() if s == "pass" and cond.evaluate(props[c]) is False), key=lambda c: (size[c], c)
    )
    return fail[:MAX_BASES] + ok[:MAX_BASES]


def _candidates(
    ctx: Context, base: Case, names: frozenset[str] = frozenset()
) -> list[tuple[str, str, ProposedCase, dict]]:
    out = []
    for group, words, var, value in _moves(ctx, base) + _class_moves(ctx, base, names):
        cand = build_case(ctx, base, var, value, TAG)
        if cand is not None:
            out.append((group, words, cand, case_properties(Case.model_validate(cand.doc))))
    return out


# --------------------------------------------------------------------------
# Needs: what each surviving condition must still face
# --------------------------------------------------------------------------


def competitors(findings: list[Finding], competing: list[Finding], stated: list[Condition]) -> list[Condition]:
    """The surviving competitors in the language: the tool's findings that parse, and the stated conditions."""
    out: dict[str, Condition] = {str(c): c for c in stated}
    for f in [*findings, *competing]:
        if f.kind == "trend":
            continue
        try:
            c = parse(f.predicate)
        except ConditionError:
            continue
        out.setdefault(str(c), c)
    return list(out.values())


def needs(
    ctx: Context, cond: Condition, rivals: list[Condition], props: dict[str, dict], observed: dict[str, str]
) -> list[Need]:
    """The requirements of one surviving condition (see the module docstring), each with what met it."""
    text = str(cond)
    met: dict[str, list[str]] = {}
    for c in sorted(observed):
        t = read_tag(ctx.cases[c])
        if t is not None and t[1] == text:
            met.setdefault(t[0], []).append(c)
    out: dict[str, Need] = {}
    names = cond.names()
    for base_id in _bases(cond, props, observed):
        before = cond.evaluate(props[base_id])
        for group, words, cand, cprops in _candidates(ctx, ctx.cases[base_id], names):
            now = cond.evaluate(cprops)
            # a measured name (the values built, the wrong elements) is known once the case ran: not moved here
            moved = {n for n in names if n in cprops and cprops[n] != props[base_id].get(n)}
            if group.startswith("class-"):  # its factors moved, the quantity kept: another member of its class
                if now is None or now != before:
                    continue
                key = f"{group}:{'fail' if before else 'pass'}"
                need = out.setdefault(key, Need(key, f"{words}: a quantity {text} names kept, its factors moved"))
            elif not moved and group != "seed":
                key = f"unnamed:{group}"
                need = out.setdefault(key, Need(key, f"{group} moved far (a property {text} does not name)"))
            elif now is not None and now != before:
                key = f"boundary:{group}"
                need = out.setdefault(key, Need(key, f"{group} moved until {text} flips"))
                _pin(ctx, cond, ctx.cases[base_id], cand, before, out)
            elif group == "seed":
                need = out.setdefault("seed", Need("seed", f"{base_id} with another seed"))
            else:
                continue
            need.builds.append((cand, now))
            for r in rivals:
                other = r.evaluate(cprops)
                if str(r) != text and other is not None and now is not None and other != now:
                    key = f"apart:{r}"
                    n2 = out.setdefault(key, Need(key, f"a case where {text} and {r} disagree"))
                    n2.builds.append((cand, now))
    for key, need in out.items():
        need.done = met.get(key, [])
    return list(out.values())


MAX_PIN_STEPS = 14


def _pin(ctx: Context, cond: Condition, base: Case, far: ProposedCase, before: bool | None, out: dict) -> None:
    """A boundary is pinned by two cases that differ in that quantity alone: one dimension bisected between
    the base and the far move where the condition flips, down to two sizes 1 apart - both cases wanted."""
    if far.var.get("axis") != "dim" or not isinstance(far.value, int):
        return
    ref = far.var["dims"][0]
    name, _, idx = ref[:-1].partition(".shape[")
    spec = next(i for i in base.inputs if i.name == name)
    if not spec.shape:
        return
    start = spec.shape[int(idx)]
    lo, hi = start, far.value  # cond(lo) == before, cond(hi) != before
    near = {lo: None, hi: far}
    for _ in range(MAX_PIN_STEPS):
        if abs(hi - lo) <= 1:
            break
        mid = (lo + hi) // 2
        cand = build_case(ctx, base, far.var, mid, TAG)
        # a step already recorded (an earlier round's) is read as it is: the bisection goes on through it
        moved = Case.model_validate(cand.doc) if cand is not None else _moved(base, far.var, mid)
        now = cond.evaluate(case_properties(moved)) if moved is not None else None
        if now is None:
            return
        near[mid] = cand
        lo, hi = (mid, hi) if now == before else (lo, mid)
    if abs(hi - lo) != 1:
        return
    key = f"pin:{ref}"
    need = out.setdefault(key, Need(key, f"{ref} at {min(lo, hi)} and {max(lo, hi)}, where {cond} flips", need=2))
    for v, side in ((lo, before), (hi, not before)):
        cand = near.get(v) or build_case(ctx, base, far.var, v, TAG)
        if cand is None and v == start:
            continue  # the base itself is that side
        if cand is not None and all(c.content != cand.content for c, _ in need.builds):
            need.builds.append((cand, side))


def _moved(base: Case, var: dict, value: Any) -> Case | None:
    """``base`` with one variation set to ``value`` (planned or not), None when that is no valid case."""
    try:
        sv = StarVariation.model_validate(var | {"values": [value]})
        return Case.model_validate(apply_variation(base, sv, value))
    except (ValueError, ValidationError):
        return None


def condition_predictors(rivals: list[Condition]) -> list[Predictor]:
    """The surviving conditions as predictors of a proposed case (disagreement.py): a condition that holds
    predicts fail, one that does not predicts pass; each case's properties read once."""
    props: dict[str, dict] = {}

    def read(case: ProposedCase) -> dict:
        if case.content not in props:
            props[case.content] = case_properties(Case.model_validate(case.doc))
        return props[case.content]

    def predictor(cond: Condition) -> Predictor:
        return lambda case: _said(cond.evaluate(read(case)))

    return [predictor(r) for r in rivals]


def _said(holds: bool | None) -> str | None:
    return "fail" if holds else "pass" if holds is False else None


def stated_probes(ctx: Context, cond: Condition, reqs: list[Need], predictors: list[Predictor]) -> list[Proposal]:
    """One proposal (kind falsify) per case an open requirement still wants, the cases the surviving
    conditions disagree on most first (equal ones: the requirements by name); at most MAX_PROBES."""
    offers = [(r, cand, now) for r in sorted(reqs, key=lambda r: r.group) if not r.met() for cand, now in r.builds]
    offers.sort(key=lambda o: -case_disagreement(o[1], predictors))
    wanted = {r.group: r.need - len(r.done) for r in reqs}
    out: list[Proposal] = []
    for r, cand, now in offers:
        if len(out) >= MAX_PROBES:
            break
        if wanted[r.group] <= 0 or cand.content in ctx.seen_contents:
            continue
        ctx.seen_contents.add(cand.content)
        wanted[r.group] -= 1
        cand.base = cand.base.model_copy(update={"description": tag(r.group, str(cond))})
        said = "fail" if now else "pass" if now is False else "either (a value statistic: known once it ran)"
        out.append(
            Proposal(
                "falsify",
                None,
                [cand],
                why=f"stated {cond}: {r.text}; it predicts {said}",
                if_fails="held" if now else f"refutes {cond}" if now is False else "judged once recorded",
                if_passes="held" if now is False else f"refutes {cond}" if now else "judged once recorded",
                meets=r.text,
            )
        )
    return out


def told_apart(cond: Condition, rivals: list[Condition], props: dict[str, dict], observed: dict[str, str]):
    """(the rivals some recorded case tells apart from it, the rivals none does yet)."""
    apart: list[str] = []
    alike: list[str] = []
    for r in rivals:
        if str(r) == str(cond):
            continue
        differ = any(
            (a := cond.evaluate(props[c])) is not None and (b := r.evaluate(props[c])) is not None and a != b
            for c in observed
        )
        (apart if differ else alike).append(str(r))
    return apart, alike


def settle_answers(
    ctx: Context,
    answers: list[ConditionAnswer],
    conds: list[Condition],
    rivals: list[Condition],
    props: dict[str, dict],
    observed: dict[str, str],
    predictors: list[Predictor],
) -> list[Proposal]:
    """Each surviving answer's probes and fate (settlement.settle_stated); the probes as proposals."""

    out: list[Proposal] = []
    for answer, cond in zip(answers, conds, strict=True):
        if answer.fate == "refuted":
            continue
        reqs = needs(ctx, cond, rivals, props, observed)
        probes = stated_probes(ctx, cond, reqs, predictors)
        apart, alike = told_apart(cond, [r for r in rivals if str(r) != str(cond)], props, observed)
        untestable = [r.text for r in reqs if not r.met() and not r.builds]
        alike_open = [a for a in alike if f"apart:{a}" in {r.group for r in reqs}]
        settle_stated(
            answer,
            met=[f"{r.text}: {', '.join(r.done[:3])}" for r in reqs if r.met()],
            opened=[r.text for r in reqs if not r.met() and r.builds],
            untestable=untestable,
            apart=apart,
            alike=alike_open,
            restating=[a for a in alike if a not in alike_open],
            probe_ids=sorted({c for r in reqs for c in r.done}),
        )
        out += probes
    return out


def stated_conditions(
    texts: list[str],
    cases: list[Case],
    results: dict,
    labels: dict | None,
    ctx: Context,
    findings: list[Finding],
    competing: list[Finding],
    probes: Sequence[Proposal] = (),
) -> tuple[list[ConditionAnswer], list[Proposal]]:
    """The stated conditions answered (predict.py), each surviving one settled after the cases built to break
    it; those cases and the tool's own ``probes``, most disagreement among every surviving condition first."""

    run = run_properties(cases, results, labels)  # once: the answers and the probes read the same properties
    answers = answer_conditions(texts, cases, results, labels, run=run)
    conds = parse_conditions(texts)
    survivors = [c for c, a in zip(conds, answers, strict=True) if a.fate != "refuted"]
    rivals = competitors(findings, competing, survivors)
    predictors = condition_predictors(rivals)
    stated = settle_answers(ctx, answers, conds, rivals, run.props, run.observed, predictors)
    return answers, by_disagreement(stated + list(probes), predictors)
