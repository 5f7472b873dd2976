"""The order of probes: most disagreement among the surviving conditions first.

A probe is worth its case for what it can refute.  Each surviving condition - the tool's hypotheses and
findings, the agent's stated conditions - predicts a proposed case ``fail``, ``pass`` or unknown; whatever
the case shows, it refutes every condition that predicted the other outcome.  A case that splits the
conditions evenly refutes the most whatever it shows: its disagreement is the smaller side,
``min(#predict fail, #predict pass)``.  A proposal (several cases of one base) counts its best case.
Proposals are ordered by disagreement, most first; equal ones keep the order they were built in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .hypotheses import Hypothesis
from .proposal import Proposal, ProposedCase

Predictor = Callable[[ProposedCase], str | None]  # a condition's prediction of one case: fail | pass | None


def hypothesis_predictors(hyps: Sequence[Hypothesis]) -> list[Predictor]:
    """The tool's surviving hypotheses as predictors (each proposed case carries their predictions)."""
    return [_predicts(h.text) for h in hyps]


def _predicts(text: str) -> Predictor:
    def predict(case: ProposedCase) -> str | None:
        return case.preds.get(text)

    return predict


def case_disagreement(case: ProposedCase, predictors: Sequence[Predictor]) -> int:
    """How many conditions one case refutes whatever it shows: the smaller side of their predictions."""
    said = [p(case) for p in predictors]
    return min(said.count("fail"), said.count("pass"))


def disagreement(proposal: Proposal, predictors: Sequence[Predictor]) -> int:
    return max((case_disagreement(c, predictors) for c in proposal.cases), default=0)


def by_disagreement(proposals: list[Proposal], predictors: Sequence[Predictor]) -> list[Proposal]:
    """The proposals, most disagreement first (a stable sort: ties keep their order)."""
    if len(predictors) < 2:
        return list(proposals)  # one condition disagrees with nothing
    return sorted(proposals, key=lambda p: -disagreement(p, predictors))
