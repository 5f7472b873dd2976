"""Splitting the surviving hypotheses: the cases that tell them apart, chosen greedily (most pairs of
hypotheses told apart first), two axes at once where no single change tells two apart - the ``discriminate``
proposals, each case with the hypotheses each outcome refutes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..schemas import Case, Finding
from .context import Context
from .hypotheses import ALIGN_RESOLUTION, Atom, Hypothesis, is_align
from .moves import moves
from .narrowing import bases, probe_values
from .proposal import Proposal, ProposedCase, build_case, by_base, change_text, refuted_by

MAX_SPLITS = 4  # discriminating cases per analysis

MAX_SPLIT_HYPOTHESES = 12  # the simplest survivors the splitting cases are searched for

MAX_SPLIT_BASES = 3


def _flip_targets(ctx: Context, atom: Atom, term: Finding, base: Case) -> list:
    """Values of one term's axis on each side of it (and untried ones)."""
    if atom.kind == "class":
        return [True, False]
    if atom.kind == "threshold":
        p, q = atom.passes_at, atom.fails_at
        if q is None:  # a threshold atom always has a failing value nearest its boundary
            return []
        integer = all(isinstance(v, int) for v in (p, q) if v is not None)
        out: list = [q]
        if p is not None:
            out.append(p)
        if atom.direction == "above":
            out.append(2 * q)
            if p is not None:
                out.append(p // 2 if integer else p / 2)
        else:
            out.append(q // 2 if integer else q / 2)
            if p is not None:
                out.append(2 * p)
            elif is_align(atom.axis):
                out.append(ALIGN_RESOLUTION)
        if is_align(atom.axis):
            out = [int(v) for v in out if v and v >= 1 and not int(v) & (int(v) - 1)]
        return list(dict.fromkeys(out))
    return list(dict.fromkeys(list(atom.failing[:2]) + list(atom.passing[:2]) + probe_values(ctx, term, base)))


def _split_pairs(c: ProposedCase, names: list[str]) -> set[tuple[int, int]]:
    preds = [c.preds.get(n) for n in names]
    return {
        (i, j)
        for i in range(len(names))
        for j in range(i + 1, len(names))
        if preds[i] is not None and preds[j] is not None and preds[i] != preds[j]
    }


def _term_moves(ctx: Context, hyp: Hypothesis) -> list[tuple[Case, str, dict, Any]]:
    out = []
    terms = ctx.terms.get(hyp.text, [])
    for atom, term in zip(hyp.atoms, terms, strict=False):  # no terms: the hypothesis has no finding built
        for base in bases(ctx, term)[:MAX_SPLIT_BASES]:
            for target in _flip_targets(ctx, atom, term, base):
                for var, value in moves(ctx, base, atom.axis, target):
                    out.append((base, atom.axis, var, value))
    return out


def splitting(ctx: Context) -> list[ProposedCase]:
    """The cases that tell the surviving hypotheses apart, chosen greedily:
    each next one tells apart the most pairs not yet told apart (then the more
    balanced split, the simpler move).  Where no single change tells two
    hypotheses apart, a change of each of their axes at once (a 2x2 cell)."""
    hyps = ctx.hyps[:MAX_SPLIT_HYPOTHESES]
    if len(hyps) < 2:
        return []
    names = [h.text for h in hyps]
    pool: list[tuple[ProposedCase, set]] = []
    contents: set[str] = set()
    per_hyp: dict[str, list] = {}
    for h in hyps:
        per_hyp[h.text] = _term_moves(ctx, h)
        for base, axis, var, value in per_hyp[h.text]:
            cand = build_case(ctx, base, var, value, axis)
            if cand is None:
                continue
            content = cand.content
            pairs = _split_pairs(cand, names)
            if pairs and content not in contents:
                contents.add(content)
                pool.append((cand, pairs))
    # the leading hypothesis against each competitor: pairs of competitors matter only once the leader falls
    # (the next analysis splits them then), so a round spends no case on them
    wanted = {(0, j) for j in range(1, len(names))}
    pool = [(c, p & wanted) for c, p in pool if p & wanted]
    uncovered = wanted - set().union(*(p for _, p in pool)) if pool else set(wanted)
    for i, j in sorted(uncovered)[:6]:  # two axes at once for the pairs no single change splits
        for base, axis, var, value in per_hyp[names[i]][:8]:
            for base2, axis2, var2, value2 in per_hyp[names[j]][:8]:
                if base2.id != base.id or axis2 == axis or var.get("also") or var2.get("also"):
                    continue
                also = dict(var2, values=[value2])
                cand = build_case(ctx, base, dict(var, also=[also]), value, axis)
                if cand is None:
                    continue
                content = cand.content
                pairs = _split_pairs(cand, names) & wanted
                if (i, j) in pairs and content not in contents:
                    contents.add(content)
                    pool.append((cand, pairs))
    chosen: list[ProposedCase] = []
    covered: set[tuple[int, int]] = set()

    def score(item):
        cand, pairs = item
        known = [p for p in cand.preds.values() if p is not None]
        balance = min(known.count("fail"), known.count("pass"))
        return (
            -len(pairs - covered),
            -balance,
            1 if cand.var.get("also") else 0,
            cand.var["axis"] == "shape",
            len(cand.var.get("dims") or []),
            cand.base.id,
            json.dumps(cand.var, sort_keys=True, default=str),
            json.dumps(cand.value, sort_keys=True, default=str),
        )

    while pool and len(chosen) < MAX_SPLITS:
        pool.sort(key=score)
        cand, pairs = pool.pop(0)
        if not pairs - covered:
            break
        covered |= pairs
        ctx.seen_contents.add(cand.content)
        chosen.append(cand)
    return chosen


def split_proposals(ctx: Context, splits: Sequence[ProposedCase]) -> list[Proposal]:
    """The splitting cases, one proposal per base: each of its cases says what each outcome refutes."""
    out = []
    for group in by_base(list(splits)):
        each = []
        for cand in group:
            fails, passes = refuted_by([cand], "fail"), refuted_by([cand], "pass")
            two = ", two axes at once: a missing cell of the 2x2" if cand.var.get("also") else ""
            each.append(
                f"{change_text(cand)}{two} - a failure refutes {', '.join(fails) or 'nothing'}; "
                f"a pass refutes {', '.join(passes) or 'nothing'}"
            )
        out.append(
            Proposal(
                "discriminate",
                group[0].finding,
                group,
                why=(
                    f"{len(ctx.hyps)} hypotheses separate the recorded cases equally well; these case(s) of "
                    f"{group[0].base.id!r} tell them apart: " + " | ".join(each)
                ),
                if_fails="each failing case refutes the hypotheses that predicted it passes (refutes_if_fails)",
                if_passes="each passing case refutes the hypotheses that predicted it fails (refutes_if_passes)",
            )
        )
    return out
