"""What every proposal of one analysis reads: the recorded cases and their axes, the sizes tied across
inputs, the modes no host can run, the values the reference only ever refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..cases.axes import distance_axes
from ..cases.constraints import Constraints
from ..cases.derived import dim_axis, parse_dim_axis
from ..schemas import Case, Finding
from .hypotheses import Hypothesis


class Planned(Protocol):
    def has(self, case: Case, content: str) -> bool:
        """Is a case of ``content`` (``case``'s, validated) planned already?"""
        ...


@dataclass
class Context:
    cases: dict[str, Case]
    axes: dict[str, dict]
    dist: dict[str, dict]
    status: dict[str, str]  # 'fail' | 'pass' | 'unsupported'
    planned: Planned  # the planned cases (build.py's _Planned computes their contents lazily)
    findings: list[Finding]  # the surviving hypotheses as findings, ranked
    ties: dict[str, list[str]]
    no_modes: set[str]
    cpu_only: bool
    seen_contents: set[str] = field(default_factory=set)
    hyps: list[Hypothesis] = field(default_factory=list)  # the surviving hypotheses, ranked
    hax: dict[str, dict] = field(default_factory=dict)  # hypothesis axes of the recorded cases
    terms: dict[str, list[Finding]] = field(default_factory=dict)  # hypothesis text -> its terms as findings
    tried_dtypes: set[str] | None = None
    refused: set[tuple[str, str]] | None = None  # (planned axis, value) that only made cases unsupported
    constraints: Constraints | None = None  # what the reference's refusals taught (cases/constraints.py)


def dim_ties(cases: list[Case]) -> dict[str, list[str]]:
    """Dimensions of different inputs that are equal in every case of the run
    (a hidden size shared by ``x.shape[-1]`` and ``weight.shape[-1]``): they
    move together, or the call would not be valid."""
    if not cases:
        return {}

    dims = case_dims
    ordered = sorted(cases, key=lambda c: c.id)
    first = dims(ordered[0])
    pairs = {
        (a, b) for a in first for b in first if a < b and first[a][0] != first[b][0] and first[a][1] == first[b][1]
    }
    for case in ordered[1:]:
        if not pairs:
            break
        d = dims(case)
        pairs = {(a, b) for a, b in pairs if a not in d or b not in d or d[a][1] == d[b][1]}
    ties: dict[str, list[str]] = {}
    for a, b in sorted(pairs):
        ties.setdefault(a, []).append(b)
        ties.setdefault(b, []).append(a)
    return ties


def tie_aliases(ties: dict[str, list[str]], inputs: list[str] | None = None) -> dict[str, str]:
    """Axis -> the axis it always equals: a tied dimension's size and
    alignment read as those of the dimension of the first input (in the
    call's order, ``inputs``) of its tie group."""
    order = {name: i for i, name in enumerate(inputs or [])}
    out: dict[str, str] = {}
    for dim, others in ties.items():
        rep = min([dim, *others], key=lambda d: (order.get(tied_dim(d)[0], len(order)), d))
        if rep == dim:
            continue
        out[dim] = rep
        out[_align_name(*tied_dim(dim))] = _align_name(*tied_dim(rep))
    return out


def tied_dim(axis: str) -> tuple[str, int]:
    """A tied axis as (input, dimension): dim_ties pairs dimension axes only."""
    parsed = parse_dim_axis(axis)
    if parsed is None:
        raise ValueError(f"a tie names a dimension axis, not {axis!r}")
    return parsed


def _align_name(name: str, index: int) -> str:
    return f"{name}.last_align" if index == -1 else f"{name}.align[{index}]"


def unusable_modes(cases: list[Case], results: dict, status: dict[str, str]) -> tuple[set[str], bool]:
    """Modes already known unsupported (some case in it unsupported, none ran
    it), and whether every recorded result ran on a CPU device (no graph mode)."""
    ran: set[str] = {c.mode for c in cases if status.get(c.id) in ("pass", "fail")}
    refused: set[str] = {c.mode for c in cases if status.get(c.id) == "unsupported"}
    kinds = {(r.environment or {}).get("device_kind") for r in results.values()}
    cpu_only = bool(kinds) and kinds <= {"cpu"}
    no_modes = refused - ran
    if cpu_only:
        no_modes.add("graph")
    return no_modes, cpu_only


def case_dims(case: Case) -> dict[str, tuple[str, int]]:
    """Each dimension of a case's tensor inputs: axis name -> (input, size)."""
    out: dict[str, tuple[str, int]] = {}
    for spec in case.inputs:
        shape = [] if spec.none or spec.shape is None else spec.shape
        for i, size in enumerate(shape):
            out[dim_axis(spec.name, i, len(shape))] = (spec.name, size)
    return out


def refused_values(ctx: Context) -> set[tuple[str, str]]:
    """(planned axis, value) pairs some unsupported case has and no case that ran has: a change that made a
    case unsupported, never proposed again."""
    ran: set[tuple[str, str]] = {
        (k, v) for c, s in ctx.status.items() if s in ("pass", "fail", "other") for k, v in ctx.dist[c].items()
    }
    out: set[tuple[str, str]] = set()
    for c, s in ctx.status.items():
        if s == "unsupported" and c in ctx.cases:
            out |= {(k, v) for k, v in distance_axes(ctx.cases[c]).items() if (k, v) not in ran}
    return out
