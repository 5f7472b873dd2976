"""Next cases: the order in which the strategies' proposals are offered, each ready to append as it is.

Every strategy returns :class:`~tools.analysis.proposal.Proposal` s (the proposed cases of one base, why,
what each outcome tells); a proposal every hypothesis predicts the same way is implied by the recorded
cases and never built.  The order (references/behavior.md, "Next cases"):

1. ``discriminate`` (splitting.py) - the cases that split the surviving hypotheses best (greedily, most
   pairs of hypotheses told apart first; one case each, with the hypotheses each outcome refutes); two
   axes at once where no single change tells two hypotheses apart;
2. ``bisect`` / ``probe`` (narrowing.py) - the leading hypothesis' boundary and its untried categorical or
   relation values;
3. ``crossing`` (crossing.py) - the leading hypothesis' failing case with the values that pass elsewhere
   on every other axis of the run, all at once (one case);
4. ``explore`` (explore.py) - no hypothesis yet: vary each axis of a failing case once, and walk from the
   closest passing case toward it;
5. ``missing`` - planned cases without a result.

The probes built to break an exact lead (probes.py, kind ``falsify``) go before the missing ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..schemas import Finding, NextCase
from .context import Context
from .crossing import crossing_proposal
from .explore import explore
from .narrowing import narrowing_proposals
from .proposal import Proposal, ProposedCase
from .splitting import split_proposals

MAX_MISSING_SUGGESTIONS = 20


def proposals(
    ctx: Context,
    lead: Finding | None,
    narrow: dict[str, list[ProposedCase]],
    *,
    splits: Sequence[ProposedCase] = (),
    cross: Sequence[ProposedCase] = (),
    lead_hyp: str | None = None,
) -> list[Proposal]:
    """Every strategy's proposals, in the order above (the missing cases apart)."""
    out = split_proposals(ctx, splits)
    if lead is not None:
        out += narrowing_proposals(ctx, lead, narrow, lead_hyp) + crossing_proposal(lead, cross)
    elif any(s == "fail" for s in ctx.status.values()):
        out += explore(ctx)
    return out


def missing_cases(missing: list[str]) -> list[NextCase]:
    """The planned cases without a result (no proposal: the case is planned already)."""
    return [
        NextCase(
            reason=f"planned case {cid!r} has no result: run it (or record its result)",
            base_case=cid,
            change={},
            kind="missing",
        )
        for cid in missing[:MAX_MISSING_SUGGESTIONS]
    ]


def next_cases(
    ctx: Context,
    lead: Finding | None,
    narrow: dict[str, list[ProposedCase]],
    missing: list[str],
    *,
    splits: Sequence[ProposedCase] = (),
    cross: Sequence[ProposedCase] = (),
    lead_hyp: str | None = None,
) -> list[NextCase]:
    """The proposals as next cases, then the missing cases."""
    made = proposals(ctx, lead, narrow, splits=splits, cross=cross, lead_hyp=lead_hyp)
    return [p.next_case() for p in made] + missing_cases(missing)
