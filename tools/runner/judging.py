"""Compare and judge, as one step that returns new comparisons.

compare.py measures each output against the reference; judge.py decides each
measured output with the run's judge (tolerance, baseline, a standard).  A case
judges its outputs, its gradients, its declared written inputs and every
further run of the consistency checks the same way: ``Judging`` holds what is
fixed for the case, ``compare_and_judge`` gives the decided comparisons (fresh
dicts: nothing the caller holds is changed).  Standard library and torch only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .compare import compare_outputs
from .judge import apply_judge


@dataclass(frozen=True)
class Judging:
    """How every output of one case is judged, fixed before any result."""

    judge: str
    config: dict
    strict_dtype: bool
    in_dtypes: list
    baseline_side: dict | None = None

    @property
    def tolerance(self) -> dict:
        return self.config.get("tolerance") or {}


def compare_and_judge(
    judging: Judging,
    candidate,
    reference,
    *,
    baseline=None,
    names: list[str] | None = None,
    measured: list[dict] | None = None,
) -> list[dict]:
    """The judged comparisons of ``candidate`` against ``reference`` (by output name).
    ``measured``: comparisons already measured (a gradient that has none to compare
    against), judged as they are."""
    comparisons = (
        measured
        if measured is not None
        else compare_outputs(
            candidate, reference, names=names, tolerance=judging.tolerance, strict_dtype=judging.strict_dtype
        )
    )
    return apply_judge(
        [dict(c) for c in comparisons],
        judging.judge,
        baseline=baseline,
        reference=reference,
        names=names,
        candidate=candidate,
        config=judging.config,
        in_dtypes=judging.in_dtypes,
        baseline_side=judging.baseline_side,
    )


def status_of(comparisons: list[dict]) -> str:
    return "passed" if all(c["passed"] for c in comparisons) else "numerical_mismatch"
