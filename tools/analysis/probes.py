"""Falsify before exact (references/behavior.md, "Exactness"): the cases a
finding predicts that are built to break it, and its validation.

A finding that passes the closed-world test of settlement.py (no competitor,
boundary pinned, crossed) is still only the nearest member of the enumerated
space.  Before it is called exact, each *requirement* below (built as data by
requirements.py and sources.py) must be met by a recorded case whose outcome
it predicted:

- **far sides** of each threshold: a value well beyond the last passing one
  and well beyond the last failing one (a factor :data:`FAR` away; "nothing
  lies beyond" where the axis ends, e.g. a size of 1);
- **re-pin under every other value**: for a one-term threshold, its passing
  and failing boundary values again under each value the run has of the mode,
  the dtypes and the inputs' contiguity (a boundary that moves refutes it);
- **another source**: the same derived feature produced another way (a values
  class from another generator; an element count, bytes or an alignment from
  another shape);
- **the seed**: the minimal pair's failing case with :data:`SEEDS` and its
  passing case with one of them (a verdict that flips with the seed makes the
  finding a *necessary* condition only: the values decide too);
- **fresh cases**: :data:`FRESH` cases drawn across the run's values (sizes
  between and beyond), each with a prediction.

Probes are chosen for what they can refute (each requirement names the way
the finding could be wrong), not enumerated: at most one case per requirement
and side, returned as :class:`~tools.analysis.proposal.Proposal` s ranked by
disagreement among the surviving conditions (disagreement.py).  Probe cases are ordinary planned cases whose description reads
``falsify [KIND]: PREDICATE predicts OUTCOME`` (tags.py), so a later analysis (which
keeps no state) knows what each one was built to break: a probe whose outcome
differs is a :class:`Counterexample`, kept even when the lead it refuted is
gone.  Every recorded case is predicted (an axis a case lacks reads as "the
condition does not hold" and is listed as such in ``not_applicable``).
"""

from __future__ import annotations

from ..cases.axes import axes_difference
from ..schemas import Case, Counterexample, Finding, Validation
from .context import Context
from .disagreement import by_disagreement, hypothesis_predictors
from .factor_probes import factor_needs
from .hypotheses import Hypothesis
from .limit_probes import measured_requirements
from .moves import moves
from .proposal import Proposal, ProposedCase, build_case
from .requirements import (
    SEEDS,
    Req,
    cause_requirements,
    cross_requirements,
    far_requirements,
    fresh_requirement,
    inside_requirements,
    is_open,
    mirror_requirements,
    needed,
    pin_requirements,
    repin_requirements,
    seed_requirements,
    unnamed_requirements,
    untestable,
)
from .settlement import UNTESTABLE, settle_probes
from .sources import source_requirements
from .space import read_case as read_case  # a recorded case's reading, re-exported where probes were read
from .tags import read_tag, tag


def requirements(
    ctx: Context, hyp: Hypothesis, lead: Finding, terms: list[Finding], others: list | None = None
) -> list[Req]:
    """Every requirement of the lead (requirements.py, sources.py), in the order they are tried."""
    return (
        pin_requirements(ctx, hyp)
        + unnamed_requirements(ctx, hyp, lead)
        + far_requirements(ctx, hyp, terms)
        + inside_requirements(ctx, hyp, terms)
        + repin_requirements(ctx, hyp, lead)
        + cross_requirements(ctx, hyp, terms)
        + mirror_requirements(ctx, hyp, lead)
        + source_requirements(ctx, hyp, terms)
        + factor_needs(ctx, hyp, lead, terms)  # a composite's factors moved (factor_probes.py)
        + cause_requirements(ctx, hyp, lead, others or [])
        + measured_requirements(ctx, hyp, lead)
        + seed_requirements(ctx, lead)
        + [fresh_requirement(ctx, hyp)]
    )


def falsifying(
    ctx, lead: Finding, hyp: Hypothesis, terms: list[Finding], propose: bool, others: list | None = None
) -> tuple[list[Req], list[Proposal]]:
    """The requirements a finding must meet before it is exact and, when ``propose``, the probes built to
    break it; ``others``: the other causes' conditions with their cases (several causes)."""
    reqs = requirements(ctx, hyp, lead, terms, others)
    return reqs, (probe_cases(ctx, lead, hyp, reqs) if propose else [])


def _fresh_candidate(ctx: Context, base: Case, spec: dict) -> ProposedCase | None:
    changes = []
    for k, target in spec["fresh"]:
        options = moves(ctx, base, k, target)
        if options:
            changes.append(options[0])
    changes.append(({"axis": "seed"}, spec["seed"]))
    (var0, val0), rest = changes[0], changes[1:]
    var = dict(var0, also=[dict(v, values=[x]) for v, x in rest]) if rest else var0
    return build_case(ctx, base, var, val0, "fresh")


def _chosen(ctx: Context, lead: Finding, hyp: Hypothesis, reqs: list[Req]) -> dict[tuple[str, str], list]:
    """The cases of every open requirement that land where the finding says what it says, by (base, predicted
    outcome); a requirement none reaches is marked untestable (or settled, for an inseparable size)."""
    groups: dict[tuple[str, str], list] = {}
    for r in reqs:
        if not is_open(r):
            continue
        chosen = 0
        for base, var, value, built in r.builds:
            if chosen >= needed(r) - len(r.done):
                break
            predicted: str | None = built
            if r.kind == "fresh":
                cand = _fresh_candidate(ctx, base, var)
                predicted = None if cand is None else cand.preds.get(hyp.text)
            else:
                cand = build_case(ctx, base, var, value, lead.axis)
            if cand is None or predicted is None or cand.preds.get(hyp.text) != predicted:
                continue  # a probe lands where the finding says what it says (a far side: beyond the bracket)
            ctx.seen_contents.add(cand.content)
            groups.setdefault((cand.base.id, predicted), []).append((r, cand))
            chosen += 1
        if not chosen and r.waived is None and r.kind.startswith("unnamed") and r.builds:
            r.waived = "every such case changes what the condition names (the size is not separable from it)"
        elif not chosen and r.waived is None:
            r.untestable = r.untestable or "no case the variations can build reaches it"
    return groups


def probe_cases(ctx: Context, lead: Finding, hyp: Hypothesis, reqs: list[Req]) -> list[Proposal]:
    """The probes of every open requirement, tagged with the prediction: one proposal (kind falsify) per base
    and predicted outcome, the ones the surviving hypotheses disagree on most first."""
    out = []
    for (base_id, predicted), items in sorted(_chosen(ctx, lead, hyp, reqs).items()):
        kinds = ",".join(dict.fromkeys(r.kind for r, _ in items))
        cands = [c for _, c in items]
        tagged = cands[0].base.model_copy(update={"description": tag(kinds, hyp.text, predicted)})
        for c in cands:
            c.base = tagged
        texts = "; ".join(dict.fromkeys(r.text for r, _ in items))
        out.append(
            Proposal(
                "falsify",
                lead.axis,
                cands,
                why=f"{lead.predicate} would be exact; these case(s) of {base_id!r} are built to break it "
                f"({texts}): it predicts {predicted}",
                if_fails="held" if predicted == "fail" else f"refutes {lead.predicate} (a counterexample)",
                if_passes="held" if predicted == "pass" else f"refutes {lead.predicate} (a counterexample)",
                meets=texts,
            )
        )
    return by_disagreement(out, hypothesis_predictors(ctx.hyps))


# --------------------------------------------------------------------------
# Value-dependent failures: the seed without a lead
# --------------------------------------------------------------------------

STRUCTURAL = "the outcome is structural"


def seed_pair_cases(ctx: Context) -> list[Proposal]:
    """No hypothesis separates the cases: before calling it a trend, re-run the
    closest failing and passing cases with other seeds (each predicts its own
    outcome if the outcome is a property of the call, not of the values drawn)."""

    ran = {c: s for c, s in sorted(ctx.status.items()) if s in ("fail", "pass")}
    failing = sorted(c for c, s in ran.items() if s == "fail")
    passing = sorted(c for c, s in ran.items() if s == "pass")
    if not failing or not passing or any((t := read_tag(ctx.cases[c])) is not None and t[0] == "seed" for c in ran):
        return []
    f, p = min(
        ((f, p) for f in failing[:50] for p in passing[:50]),
        key=lambda fp: (len(axes_difference(ctx.dist[fp[0]], ctx.dist[fp[1]])), fp),
    )
    out = []
    for cid in (f, p):
        base = ctx.cases[cid].model_copy(update={"description": tag("seed", STRUCTURAL, ran[cid])})
        cands = [c for s in SEEDS if (c := build_case(ctx, base, {"axis": "seed"}, s, "seed")) is not None]
        for c in cands:
            ctx.seen_contents.add(c.content)
        if cands:
            out.append(
                Proposal(
                    "falsify",
                    None,
                    cands,
                    why=f"no hypothesis separates the cases: is the outcome of {cid!r} a property of "
                    f"the call or of the values drawn? the same call with other seeds",
                    if_fails="held" if ran[cid] == "fail" else "the values decide (value-dependent)",
                    if_passes="held" if ran[cid] == "pass" else "the values decide (value-dependent)",
                )
            )
    return out


# --------------------------------------------------------------------------
# Validation and counterexamples
# --------------------------------------------------------------------------


def counterexamples(cases: dict[str, Case], status: dict[str, str]) -> list[Counterexample]:
    out = []
    for cid in sorted(status):
        t = read_tag(cases[cid])
        if t is None or status[cid] not in ("fail", "pass") or t[2] == status[cid]:
            continue
        out.append(Counterexample(case_id=cid, refutes=t[1], predicted=t[2], observed=status[cid], probe=t[0]))
    return out


def not_applicable(ctx: Context, hyp: Hypothesis, filled: list[tuple[str, str]]) -> list[str]:
    out = []
    ran = [c for c, s in sorted(ctx.status.items()) if s in ("fail", "pass")]
    for a in hyp.atoms:
        absent = sorted(c for c in ran if ctx.hax[c].get(a.axis) is None)
        if absent:
            out.append(
                f"{a.axis} does not exist in {len(absent)} case(s) (e.g. {absent[0]}): read as "
                f"{'holding' if a.holds(None) else 'not holding'}, predicted "
                f"{'fail' if a.holds(None) else 'pass'}, held"
            )
        read = sorted(c for c, k in filled if k == a.axis)
        if read:
            out.append(
                f"{a.axis} read as the last dimension in {len(read)} case(s) of rank "
                f"{a.axis.split('[')[-1][:-1]}+1 (e.g. {read[0]})"
            )
    return out


def validate(
    ctx: Context, lead: Finding, hyp: Hypothesis, reqs: list[Req], filled: list, conflicts: dict[str, str]
) -> None:
    """Set the lead's validation; exact only when every requirement held."""
    ran_ids = sorted(c for c, s in ctx.status.items() if s in ("fail", "pass"))
    probe_ids = [c for c in ran_ids if read_tag(ctx.cases[c])]  # every one predicted: the lead fits each case
    held = [
        f"{r.text}: {', '.join(r.done[:3])}" + (" ..." if len(r.done) > 3 else "")
        for r in reqs
        if r.done and not untestable(r)
    ]
    held += [f"{r.text}: {r.waived}" for r in reqs if r.waived and not r.done]
    blocked = [f"{r.text} ({r.untestable})" for r in reqs if untestable(r)]
    opened = [r.text for r in reqs if is_open(r)]
    ran = len(ran_ids)
    flips = [f"{p} passes where {f} fails with the same call but another seed" for p, f in sorted(conflicts.items())]
    met = sum(1 for r in reqs if not is_open(r) and not untestable(r))
    text = (
        f"predicted {len(probe_ids)}/{len(probe_ids)} probes built to break it and {ran}/{ran} recorded cases; "
        f"{met}/{len(reqs)} checks met"
    )
    if opened:
        text += f", {len(opened)} to run"
    if blocked:
        text += f", {len(blocked)} {UNTESTABLE}"
    if not reqs:
        text = (
            f"predicted {ran}/{ran} recorded cases (the cases built to break it come once it is pinned, "
            f"crossed and unrivalled)"
        )
    lead.validation = Validation(
        probes_run=len(probe_ids),
        probes_held=len(probe_ids),
        probe_ids=probe_ids,
        recorded=ran,
        held=held,
        open=opened + [f"{UNTESTABLE}: {b}" for b in blocked],
        not_applicable=not_applicable(ctx, hyp, filled),
        value_dependent=flips,
        text=text,
    )
    settle_probes(lead, opened, blocked, flips)


def falsified_note(findings: list[Finding], refuted: list[Counterexample]) -> str:
    """The verdict's sentence when probes refuted leads and nothing exact is left ('' otherwise)."""
    if not refuted or any(f.exact for f in findings):
        return ""
    leads = ", ".join(dict.fromkeys(c.refutes for c in refuted))
    hyps = [f for f in findings if f.kind != "trend"]
    edge = (
        "the closest survivor is not exact"
        if hyps
        else "nothing in the enumerated space survives them: the cause is a property it lacks"
    )
    return (
        f" No exact finding: cases built to break the leads refuted {leads} ({len(refuted)} counterexample(s)); {edge}."
    )
