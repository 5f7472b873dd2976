"""The tag a probe case carries: ``falsify [KIND]: PREDICATE predicts OUTCOME`` in its description, so
a later analysis (which keeps no state) knows what each recorded case was built to break.
"""

from __future__ import annotations

from ..cases.ids import case_content
from ..schemas import Case

TAG = "falsify"


def tag(kind: str, predicate: str, predicted: str) -> str:
    return f"{TAG} [{kind}]: {predicate} predicts {predicted}"


def read_tag(case: Case) -> tuple[str, str, str] | None:
    """(kind, predicate, predicted) of a probe case, None for another case."""
    d = case.description or ""
    if not d.startswith(TAG + " [") or " predicts " not in d:
        return None
    head, _, predicted = d.rpartition(" predicts ")
    kind, _, predicate = head[len(TAG) + 2 :].partition("]: ")
    return (kind, predicate, predicted) if predicted in ("fail", "pass") else None


def untagged(doc: dict) -> dict:
    """A case document without a probe's tag (a next case built from a probe is not a probe)."""
    if (doc.get("description") or "").startswith(TAG + " ["):
        doc = dict(doc, description=None)
    return doc


def case_body(case: Case) -> str:
    doc = case.model_dump(mode="json")
    doc.pop("seed", None)
    return case_content(doc)
