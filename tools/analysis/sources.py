"""The "another source" requirement: the same derived feature produced another way - a values class from
another value generator, a count, size or alignment from another shape (for each term, the others holding).
"""

from __future__ import annotations

import json

from ..schemas import Case, Finding
from ..wording import num
from .context import Context
from .hypotheses import Atom, Hypothesis
from .moves import reshapes
from .requirements import Req, is_number

_ALT_VALUES = (
    {"kind": "uniform", "low": 0.25, "high": 2.0},
    {"kind": "uniform", "low": -2.0, "high": -0.25},
    {"kind": "uniform", "low": -2.0, "high": 2.0},
    {"kind": "normal", "mean": 3.0, "std": 0.5},
    {"kind": "arange"},
    {"kind": "ones"},
    {"kind": "full", "fill": -1.5},
    {"kind": "zeros"},
    {"kind": "randint", "low": 0, "high": 4},
)


def _scaled_values(m: float) -> tuple[dict, ...]:
    """Other generators at the same magnitude (a generator's parameter stands for the values it draws: other
    generators and other draws at that parameter must agree)."""
    return (
        {"kind": "uniform", "low": -m, "high": m},
        {"kind": "uniform", "low": m / 2, "high": m},
        {"kind": "full", "fill": -m},
        {"kind": "normal", "mean": m / 2, "std": m / 2},
    )


def _values_of(case: Case, name: str) -> str | None:
    spec = next((i for i in case.inputs if i.name == name), None)
    if spec is None or spec.none or spec.tensors is not None:
        return None
    return json.dumps(spec.values.model_dump(mode="json", exclude_none=True), sort_keys=True)


def source_requirements(ctx: Context, hyp: Hypothesis, terms: list[Finding]) -> list[Req]:
    """The same feature produced another way: a values class from another
    generator, a count, size or alignment from another shape (for each term,
    the others holding)."""
    out = []
    for atom, term in zip(hyp.atoms, terms, strict=True):  # terms: term_findings of this hypothesis, one per atom
        req = _source(ctx, hyp, atom, term)
        if req is not None:
            out.append(req)
    return out


def _source(ctx: Context, hyp: Hypothesis, atom: Atom, term: Finding) -> Req | None:
    axis = atom.axis
    name, _, fld = axis.partition(".")
    if term.minimal_pair is None or "~" in axis:
        return None
    fail_id = term.minimal_pair.failing
    base = ctx.cases[fail_id]
    spec = next((i for i in base.inputs if i.name == name), None)
    if spec is None or spec.none or spec.tensors is not None or spec.values.kind == "captured":
        return None
    want = ctx.hax[fail_id].get(axis)
    failing = [c for c, s in sorted(ctx.status.items()) if s == "fail" and ctx.hax[c].get(axis) == want]
    if fld in ("sign", "all_zero", "has_zero", "zero_rows", "constant", "magnitude"):
        mine = _values_of(base, name)
        req = Req("source", f"{axis} = {num(want)} from another value generator than {spec.values.kind}")
        req.done = [c for c in failing if _values_of(ctx.cases[c], name) != mine]
        specials = [s.model_dump(mode="json", exclude_none=True) for s in spec.values.specials]
        pool = _scaled_values(want) if fld == "magnitude" and is_number(want) and want > 0 else _ALT_VALUES
        alts = [dict(v, specials=specials) if specials else v for v in pool]
        req.builds = [
            (base, {"axis": "values", "input": name}, v, "fail") for v in alts if json.dumps(v, sort_keys=True) != mine
        ]
        return req
    if fld in ("numel", "bytes", "rows", "last_align") or fld.startswith("align[") or fld.startswith("stride["):
        req = Req("source", f"{axis} = {num(want)} from another shape than {spec.shape}")
        req.done = [c for c in failing if next(i for i in ctx.cases[c].inputs if i.name == name).shape != spec.shape]
        req.builds = [(base, var, value, "fail") for var, value in reshapes(ctx, base, name, axis)]
        if not req.builds and not req.done:
            req.untestable = f"no other shape of {name} keeps {axis} = {num(want)}"
        return req
    return None
