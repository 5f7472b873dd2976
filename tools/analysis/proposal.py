"""A proposal: what every strategy (narrowing, splitting, crossing, exploring, the probes) returns.

A :class:`ProposedCase` is one variation of a recorded case (a star of one base; a variation may set a second
axis with ``also``, which builds the missing cell of a 2x2), built only when it is a valid call
(cases/constraints.py, the tied sizes, the refused values) and not planned yet, with each surviving
hypothesis' prediction: ``fail``, ``pass`` or unknown.  A :class:`Proposal` is the cases of one base with
why, what each outcome tells and the requirement they meet; :meth:`Proposal.next_case` turns it into the
next case the agent appends as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..cases.axes import case_axes, distance_axes
from ..cases.constraints import valid_call as constraint_violation
from ..cases.derived import structured_axes
from ..cases.ids import case_content
from ..cases.stars import apply_variation
from ..schemas import Case, Finding, NextCase, StarVariation
from .context import Context, case_dims, refused_values
from .hypotheses import hypothesis_axes
from .space import read_case
from .tags import untagged


@dataclass
class ProposedCase:
    """One proposed case: a variation of a recorded case, validated, with each surviving hypothesis'
    prediction of it."""

    base: Case
    var: dict  # a star variation without its values (``also``: a second axis set with it)
    value: Any
    doc: dict
    axes: dict
    finding: str  # the axis it was made for
    preds: dict = field(default_factory=dict)  # hypothesis text -> 'fail' | 'pass' | None
    hax: dict = field(default_factory=dict)
    content: str = ""  # the validated case's content (what planned cases are compared by)

    @property
    def group(self) -> tuple:
        return (self.base.id, json.dumps({k: v for k, v in self.var.items()}, sort_keys=True, default=str))


def build_case(ctx: Context, base: Case, var: dict, value: Any, finding: str) -> ProposedCase | None:
    """``base`` with one variation set to ``value``, or None when that is no valid call, is planned or
    proposed already, or runs where no host can (every strategy builds its cases here)."""
    try:
        sv = StarVariation.model_validate(var | {"values": [value]})
        doc = apply_variation(base, sv, value)
        case = Case.model_validate(doc)
    except (ValueError, ValidationError):
        return None
    content = case_content(case.model_dump(mode="json"))  # as planned cases are compared: validated, defaults in
    if content in ctx.seen_contents or ctx.planned.has(case, content):
        return None
    if case.mode in ctx.no_modes:
        return None
    if ctx.cpu_only and any(i.layout != "ND" for i in case.inputs):
        return None
    if not valid_call(ctx, case):
        return None
    axes = structured_axes(case, case_axes(case))
    named = {a.axis for h in ctx.hyps for a in h.atoms}
    cand = ProposedCase(
        base=base,
        var=var,
        value=value,
        doc=doc,
        axes=axes,
        finding=finding,
        hax=read_case(hypothesis_axes(case, {}, axes), case, named),
        content=content,
    )
    cand.preds = {h.text: h.predict(cand.hax) for h in ctx.hyps}
    return cand


def valid_call(ctx: Context, case: Case) -> bool:
    """A next case is a valid call of the operator: it keeps what the reference's refusals taught
    (cases/constraints.py), the sizes the run's cases share across inputs stay equal (a matmul's inner
    dimension), and no planned value that only ever made a case unsupported comes back."""
    if constraint_violation(case, ctx.constraints) is not None:
        return False
    dims = case_dims(case)
    for dim, others in ctx.ties.items():
        if dim in dims and any(o in dims and dims[o][1] != dims[dim][1] for o in others):
            return False
    if ctx.refused is None:
        ctx.refused = refused_values(ctx)
    if ctx.refused:
        axes = distance_axes(case)
        return not any(axes.get(k) == v for k, v in ctx.refused)
    return True


def decisive(c: ProposedCase) -> bool:
    known = {p for p in c.preds.values() if p is not None}
    return known == {"pass", "fail"}


def informative(c: ProposedCase, f: Finding, hyp: str | None = None) -> bool:
    return c.preds.get(hyp or f.predicate) is None or decisive(c)


def _star(cands: list[ProposedCase]) -> tuple[Case, list[dict]]:
    base = cands[0].base
    vary: dict[str, dict] = {}
    for c in cands:
        key = json.dumps(c.var, sort_keys=True, default=str)
        vary.setdefault(key, dict(c.var, values=[]))["values"].append(c.value)
    return base, list(vary.values())


def refuted_by(cands: list[ProposedCase], outcome: str) -> list[str]:
    other = "pass" if outcome == "fail" else "fail"
    return sorted({h for c in cands for h, p in c.preds.items() if p == other})


@dataclass
class Proposal:
    """What a strategy returns: proposed cases of one base, why they are proposed, what each outcome would
    tell and the requirement they meet (a probe's; None for a plain next case).  :meth:`next_case` is the one
    way a proposal becomes a next case."""

    kind: str  # bisect | probe | discriminate | crossing | explore | falsify
    axis: str | None
    cases: list[ProposedCase]
    why: str
    if_fails: str
    if_passes: str
    meets: str | None = None

    def next_case(self) -> NextCase:
        base, vary = _star(self.cases)
        doc = base.model_dump(mode="json", exclude_none=True)
        star = {"base": doc if self.kind == "falsify" else untagged(doc), "vary": vary, "include_base": False}
        return NextCase(
            reason=self.why,
            base_case=base.id,
            change=vary[0],
            kind=self.kind,
            axis=self.axis,
            star=star,
            if_fails=self.if_fails,
            if_passes=self.if_passes,
            refutes_if_fails=refuted_by(self.cases, "fail"),
            refutes_if_passes=refuted_by(self.cases, "pass"),
        )


def by_base(cands: list[ProposedCase]) -> list[list[ProposedCase]]:
    groups: dict[str, list[ProposedCase]] = {}
    for c in cands:
        groups.setdefault(c.base.id, []).append(c)
    return list(groups.values())


def change_text(c: ProposedCase) -> str:
    parts = [f"{c.var['axis']}={json.dumps(c.value, default=str)}"]
    parts += [f"{a['axis']}={json.dumps(a['values'][0], default=str)}" for a in c.var.get("also") or []]
    return " and ".join(parts)
