"""A stated condition against a run's recorded cases: what it predicts, where it is wrong.

A condition predicts that a case **fails** (numerical_mismatch or crash) where it is true and
passes where it is false.  On the recorded cases that passed or failed it is:

- *agreeing* where the prediction is what the case did;
- *contradicting* where it is not: a failing case where it is false, a passing case where it is
  true (the counterexamples);
- *undefined* where the case lacks a name it reads (language.py's three-valued evaluation).

Unsupported and pending cases are not counted.  The fate read from the recorded cases alone is
``refuted`` when one contradicts it, else ``surviving``.

The seam for the settlement: :func:`answer_condition` returns one condition's answer from the
recorded cases; the settlement (probes, ``exact``) extends that answer, it does not recompute it.
:func:`answer_conditions` parses the texts (errors name ``conditions[i]``), computes the run's
properties once and answers each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..schemas import Case, CaseResult, ConditionAnswer, Counterexample
from ..wording import num
from .language import Condition, ConditionError, check_names, parse
from .properties import case_properties

FAILING = ("numerical_mismatch", "crash")
COUNTED = (*FAILING, "passed")
MAX_IDS = 50  # case ids listed per kind of prediction (the counts are whole)
MAX_COUNTEREXAMPLES = 8
MAX_CONDITIONS = 16


@dataclass
class RunProperties:
    """The properties of every planned case (language names -> value) and the outcome of each
    recorded one that counts: ``fail`` or ``pass``."""

    props: dict[str, dict[str, Any]]
    observed: dict[str, str]
    order: list[str] = field(default_factory=list)

    def known(self) -> set[str]:
        """Every name some case of the run has."""
        return set().union(*self.props.values()) if self.props else set()


def run_properties(
    cases: Sequence[Case], results: Mapping[str, CaseResult], labels: Mapping[str, dict[str, str]] | None = None
) -> RunProperties:
    """The properties of each planned case (with its recorded result when there is one)."""
    props, observed = {}, {}
    for case in cases:
        result = results.get(case.id)
        props[case.id] = case_properties(case, result, labels.get(case.id) if labels else None)
        if result is not None and result.status in COUNTED:
            observed[case.id] = "fail" if result.status in FAILING else "pass"
    return RunProperties(props, observed, [c.id for c in cases])


def _cases_text(n: int) -> str:
    return "the 1 recorded case" if n == 1 else f"all {n} recorded cases"


def _counterexample(
    condition: Condition, case_id: str, observed: str, status: str, props: Mapping[str, Any]
) -> tuple[Counterexample, str]:
    predicted = "fail" if observed == "pass" else "pass"
    names = sorted(condition.names())
    values = ", ".join(f"{n} = {num(props[n])}" for n in names if n in props)
    truth = "true" if predicted == "fail" else "false"
    did = "passed" if observed == "pass" else f"failed ({status})"
    sentence = f"{case_id} {did} where it is {truth}" + (f" ({values})" if values else "")
    return Counterexample(case_id=case_id, refutes=str(condition), predicted=predicted, observed=observed), sentence


def answer_condition(
    condition: Condition, run: RunProperties, statuses: Mapping[str, str] | None = None
) -> ConditionAnswer:
    """One condition's answer from the recorded cases: its predictions and its fate (``refuted`` with
    counterexamples, else ``surviving``).  ``statuses``: case id -> recorded status, for the words."""
    agree, contradict, undefined = [], [], []
    for cid in run.order:
        seen = run.observed.get(cid)
        if seen is None:
            continue
        truth = condition.evaluate(run.props[cid])
        if truth is None:
            undefined.append(cid)
        elif truth == (seen == "fail"):
            agree.append(cid)
        else:
            contradict.append(cid)
    found = [
        _counterexample(condition, cid, run.observed[cid], (statuses or {}).get(cid, ""), run.props[cid])
        for cid in contradict[:MAX_COUNTEREXAMPLES]
    ]
    if contradict:
        text = (
            f"refuted by {len(contradict)} recorded case{'s' if len(contradict) != 1 else ''}: "
            + "; ".join(s for _, s in found)
            + (f"; and {len(contradict) - len(found)} more" if len(contradict) > len(found) else "")
        )
    elif agree:
        text = f"agrees with {_cases_text(len(agree))} it is defined on"
    else:
        text = "defined on no recorded case: it names nothing these cases have together"
    if undefined:
        text += (
            f"; undefined on {len(undefined)} (a name they lack: {undefined[0]}{', ...' if len(undefined) > 1 else ''})"
        )
    return ConditionAnswer(
        condition=str(condition),
        fate="refuted" if contradict else "surviving",
        agree=agree[:MAX_IDS],
        agree_count=len(agree),
        contradict=contradict[:MAX_IDS],
        contradict_count=len(contradict),
        undefined=undefined[:MAX_IDS],
        undefined_count=len(undefined),
        counterexamples=[c for c, _ in found],
        text=text,
    )


def parse_conditions(texts: Sequence[str], field_name: str = "conditions") -> list[Condition]:
    """Each text parsed; a ConditionError names the field and the index of the one that is not."""
    if len(texts) > MAX_CONDITIONS:
        raise ConditionError(f"{field_name}: at most {MAX_CONDITIONS} conditions per call, not {len(texts)}")
    out = []
    for i, text in enumerate(texts):
        try:
            out.append(parse(text))
        except ConditionError as exc:
            raise ConditionError(f"{field_name}[{i}]: {exc.message}") from None
    return out


def answer_conditions(
    texts: Sequence[str],
    cases: Sequence[Case],
    results: Mapping[str, CaseResult],
    labels: Mapping[str, dict[str, str]] | None = None,
    field_name: str = "conditions",
    run: RunProperties | None = None,
) -> list[ConditionAnswer]:
    """Each stated condition parsed, its names checked against the run's properties (an unknown one
    is a ConditionError naming ``field_name[i]`` and listing them), and answered.  ``run``: the run's
    properties when already at hand (:func:`run_properties`: computed once per analysis)."""
    conditions = parse_conditions(texts, field_name)
    if not conditions:
        return []
    run = run if run is not None else run_properties(cases, results, labels)
    known = run.known()
    for i, condition in enumerate(conditions):
        try:
            check_names(condition, known)
        except ConditionError as exc:
            raise ConditionError(f"{field_name}[{i}]: {exc.message}") from None
    statuses = {cid: r.status for cid, r in results.items()}
    return [answer_condition(c, run, statuses) for c in conditions]
