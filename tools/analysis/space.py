"""The space as the recorded cases read it: the open space when the first one separates nothing
(the grammar's open space, then its products and ratios: grammar.py), a new case's axes read as the recorded ones are, and
the tightest condition a value-dependent failure needs.
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any

from ..cases.relations import fill_products, product_sides, product_value
from ..conditions.grammar import OPEN, PRODUCTS, space_axes
from ..schemas import Case
from .hypotheses import (
    KIND_RANK,
    MAX_HYPOTHESES,
    Atom,
    Space,
    covering_atoms,
    derivation_rank,
    enumerate_hypotheses,
    rank_key,
)
from .measured import is_measured, limit_sides, predicted_quantities


def read_absent_dims(hax: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """Every recorded case predicts: ``x.shape[i]`` (counted from the front)
    is the last dimension of a case of rank i+1, where it is named
    ``x.shape[-1]``.  Filled in place where another
    case has the axis; returns (case, axis) filled.  (Alignments are left: a
    rank-i+1 case's last alignment moves with its last dimension.)"""
    keys = {k for k in set().union(*hax.values()) if dim_like(k) and not k.endswith("[-1]")}
    filled = []
    for k in sorted(keys):
        name, _, idx = k[:-1].partition(".shape[")
        last = f"{name}.shape[-1]"
        for cid, a in hax.items():
            if k not in a and a.get(f"{name}.rank") == int(idx) + 1 and last in a:
                a[k] = a[last]
                filled.append((cid, k))
    return filled


def read_case(hax: dict[str, Any], case: Case, axes: set[str]) -> dict[str, Any]:
    """One new case's axes as the recorded ones read: the open-space quantities
    and each ``x.shape[i]`` of ``axes`` that is its last dimension."""
    out = {**hax, **space_axes(case, OPEN)}
    if any(product_sides(k) is not None for k in axes):
        out.update(space_axes(case, PRODUCTS))
        out.update({k: v for k in axes if k not in out and (v := product_value(case, k)) is not None})
    if any(is_measured(k) for k in axes):  # the statistics its value specs decide (the rest: once it ran)
        out.update(predicted_quantities(case))
    for k in axes:
        if k not in out and dim_like(k) and not k.endswith("[-1]"):
            name, _, idx = k[:-1].partition(".shape[")
            if out.get(f"{name}.rank") == int(idx) + 1:
                out[k] = out.get(f"{name}.shape[-1]")
    return out


def widen(
    space,
    hax: dict,
    cases: dict[str, Case],
    failing: list[str],
    passing: list[str],
    aliases: dict,
    measured: dict[str, dict] | None = None,
):
    """The open space: when no atom of the first space separates the cases,
    its quantities (the grammar's open space) too; their atoms compete with
    the first space's conjunctions.  Then, when none of those separates either, the products and ratios
    (the grammar's products) and the statistics of the values actually built (``measured``, by case:
    measured.measured_quantities): tried before a conjunction.  ``x.rows`` that equals a product on every
    case is named as the product from the start.  Returns (space, the axes it was built on)."""

    if space.hypotheses and not space.conjunctions:
        return space, hax
    prods = {c: space_axes(cases[c], PRODUCTS) for c in hax}
    fill_products(cases, prods)  # a product named at one rank is read at every rank
    # the values actually built join only where the planned space says nothing (a random draw's statistic
    # separates few cases by chance: it never competes with a planned axis)
    drawn = (measured or {}) if not space.hypotheses else {}
    prods = {c: {**p, **drawn.get(c, {})} for c, p in prods.items()}
    wide = {c: {**a, **space_axes(cases[c], OPEN)} for c, a in hax.items()}
    renamed = restated_products(wide, prods)
    if renamed:  # only the products the rows restate join the open space
        wide = {c: {**a, **{p: prods[c][p] for p in renamed.values()}} for c, a in wide.items()}
    alt = enumerate_hypotheses(wide, failing, passing, {**aliases, **renamed})
    if not alt.hypotheses or alt.conjunctions:
        wide = {c: {**a, **prods[c]} for c, a in wide.items()}
        alt = enumerate_hypotheses(wide, failing, passing, {**aliases, **renamed})
        if not alt.hypotheses or alt.conjunctions:
            # nothing else separates: the conjunctions with a statistic of the values actually built against a
            # dtype's limit (``dtype == float16 and x.values.sumsq[-1] > float16.max``; a cut through random
            # draws separates few cases by chance, a limit does not), else the first space
            stats = [h for h in alt.hypotheses if any(limit_sides(a.axis) for a in h.atoms)]
            if space.hypotheses or not stats:
                return space, hax
            return Space(stats, alt.axes, len(stats), True, alt.capped), wide
    both = sorted(alt.hypotheses + space.hypotheses, key=rank_key)
    return Space(
        both[:MAX_HYPOTHESES],
        alt.axes,
        alt.consistent + space.consistent,
        space.conjunctions,
        alt.capped or space.capped or len(both) > MAX_HYPOTHESES,
    ), wide


def dim_like(k: str) -> bool:
    """One dimension of an input (``x.shape[1]``): no relation, product or ratio of it."""
    return ".shape[" in k and "~" not in k and product_sides(k) is None


def restated_products(wide: dict[str, dict[str, Any]], prods: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``x.rows`` -> the product it equals on every case (the leading two of a rank-3 input): named as
    the product, the rows kept among its equivalents.  Each case's axes are its ``wide`` ones with its
    ``prods`` over them (read through, not merged)."""
    out: dict[str, str] = {}
    cases = [ChainMap(prods[c], a) for c, a in wide.items()]
    keys = set().union(*wide.values(), *prods.values())
    products = sorted(k for k in keys if (product_sides(k) or ("", "", ""))[1] == "*")
    for p in products:
        rows = p.partition(".")[0] + ".rows"
        if rows not in out and all(a.get(p) is not None and a.get(p) == a.get(rows) for a in cases):
            out[rows] = p
    return out


OPEN_SKIP = (".shape", ".strides", ".values", ".none", ".offset_nonzero")


def necessary_atom(hax: dict[str, dict[str, Any]], failing: list[str], passing: list[str]) -> Atom | None:
    """The tightest condition every failing case has (the one fewest passing
    cases share), simplest first: what a value-dependent failure needs."""

    keys = sorted({k for c in failing for k in hax[c]})
    best = None
    for k in keys:
        if k.endswith(OPEN_SKIP):
            continue
        fvals = [hax[c].get(k) for c in failing]
        pvals = [hax[c].get(k) for c in passing]
        for atom, mask in covering_atoms(k, fvals, pvals):
            n = bin(mask).count("1")
            if n == len(passing):
                continue
            key = (n, KIND_RANK[atom.kind], derivation_rank(atom.axis), atom.text)
            if best is None or key < best[0]:
                best = (key, atom)
    return None if best is None else best[1]
