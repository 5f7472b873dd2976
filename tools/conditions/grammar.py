"""The grammar of the tool's own hypotheses: the derived quantities as productions, each with a cost and the
space that enumerates it, all written in the condition language (references/behavior.md, "Hypotheses";
references/conditions.md).  One job: the productions - adding a row to :data:`PRODUCTIONS` adds its
quantities to the space the analysis enumerates AND to the names the language reads (properties.py takes the
plain names of every production), in one place.

A production derives, from a case, quantities named as the language writes them.  Its **cost** is how many
properties it combines (1: one property read another way - an alignment, a relation of two sizes, a stride,
a category; 2: two combined - bytes, a product, a ratio, a row's bytes' alignment; 3: a statistic of the
values actually built against a dtype's limit).  Its **space** says when the analysis enumerates it
(space.widen, simplest first): ``first`` with the planned axes; ``open`` when no atom of the first separates
the cases alone; ``products`` when none of those does either, before a conjunction; ``measured`` (read from
the recorded results, measured.py) with the products, only where the planned space says nothing.  Within a
space the atoms are ranked by kind and by this derivation cost (hypotheses.rank_key), then conjunctions of
two; :data:`hypotheses.CAP_TEXT` and :func:`cuts` say what the bounds leave out.

The base properties (rank, sizes, strides, offset, dtype, contiguity, values' generator, attributes, mode:
tools/cases/derived.py) are the terminals.

- :func:`space_axes`: the quantities of one space of a case, once per sealed case (memo.py);
- :func:`named`: every production's quantities a condition can name by itself (no relation ``~``, no
  expression with an operator), for the language's properties;
- :func:`expression`, :func:`literal`: an axis -> the expression it names, and a value of it -> a constant
  of the language, so that a finding reads back through the language's evaluator (tools/conditions/) with
  the truth the space gave it (tests/test_hypotheses_language.py):

  - :func:`expression` is the axis name itself, with one exception: an integer attribute read as a category
    (``attr.groups.value``, a separate axis so that "every value but one" is a set, not a threshold) is the
    attribute itself, ``attr.groups``.  A relation ``a~b`` names its two sides, each an expression
    (hypotheses.atom_text writes ``a < b``; ``x.shape~y.shape`` is ``x.shape == y.shape``);
  - :func:`literal`: a number as :func:`wording.num` writes it, a known symbol bare (``float16``,
    ``channels_last``, ``nonnegative``), another string quoted; an attribute's value as the attribute reads
    in the language (a dtype attribute as its dtype name, a string quoted, a bool ``True``/``False``, a list as
    its JSON text quoted).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..cases import relations as rel
from ..cases.derived import attr_from_axis
from ..cases.memo import once
from ..schemas import Case
from ..wording import num
from .language import Const

FIRST, OPEN, PRODUCTS, MEASURED = "first", "open", "products", "measured"
SPACES = (FIRST, OPEN, PRODUCTS, MEASURED)  # in the order space.widen enumerates them


@dataclass(frozen=True)
class Production:
    form: str  # what it derives, as the language writes it
    cost: int  # properties combined (see the module docstring)
    space: str  # when the analysis enumerates it: one of SPACES
    make: Callable[[Case], dict[str, Any]] | None  # None: read from a recorded result (measured.py)


# simplest first within each space (a test keeps the order)
PRODUCTIONS: tuple[Production, ...] = (
    Production("x.align[i]  (pow2(x.shape[i]), each dimension but the last)", 1, FIRST, rel.dim_alignments),
    Production(
        "x.all_zero, x.has_zero, x.zero_rows, x.constant, x.sign  (the value spec)", 1, FIRST, rel.values_classes
    ),
    Production("x.shape[i] < x.shape[j]  (two sizes of one input)", 1, FIRST, rel.dim_relations),
    Production(
        "x.shape[-k] < y.shape[-k], x.dtype == y.dtype, x.shape == y.shape  (two inputs)", 1, FIRST, rel.input_relations
    ),
    Production("x.bytes  (x.numel * x.itemsize)", 2, FIRST, rel.tensor_bytes),
    Production("attr.NAME in {...}  (an integer attribute as a category)", 1, OPEN, rel.attr_categories),
    Production("x.stride[i], x.stride[-1] == 1, x.stride[-2] > x.shape[-1]", 1, OPEN, rel.strides),
    Production("x.memory_format", 1, OPEN, rel.memory_formats),
    Production("x.rows  (x.numel // x.shape[-1])", 2, OPEN, rel.rows),
    Production("x.last_align_bytes  (pow2(x.shape[-1] * x.itemsize))", 2, OPEN, rel.row_bytes_alignment),
    Production("x.shape[i] * x.shape[j]  (two sizes of one input, rank 3 up)", 2, PRODUCTS, rel.dim_products),
    Production("x.shape[i] // attr.NAME  (a size over a positive integer attribute)", 2, PRODUCTS, rel.dim_ratios),
    Production(
        "x.values.STAT, x.values.STAT > float16.max  (the values built, against a dtype's limit)", 3, MEASURED, None
    ),
)


def _derive(case: Case, space: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in PRODUCTIONS:
        if p.space == space and p.make is not None:
            out.update(p.make(case))
    return out


def space_axes(case: Case, space: str) -> dict[str, Any]:
    """Every quantity the productions of ``space`` derive from a case; once per sealed case (memo.py)."""
    return once(case, f"grammar.{space}", lambda: _derive(case, space))


def named(case: Case) -> dict[str, Any]:
    """Every production's quantity a condition names by itself (``x.bytes``, ``x.rows``, ``x.sign``; not a
    relation ``a~b`` nor a pattern or product written with an operator)."""
    return {
        k: v
        for space in (FIRST, OPEN)
        for k, v in space_axes(case, space).items()
        if "~" not in k and " " not in k and not k.startswith("attr.")
    }


def cuts(cases: Iterable[Case]) -> list[str]:
    """What the productions' bounds left out of these cases, in words (empty: nothing)."""
    out: set[str] = set()
    for case in cases:
        out.update(once(case, "grammar.cuts", partial(_cuts, case), copy=False))
    return sorted(out)


def _cuts(case: Case) -> set[str]:
    out: set[str] = set()
    plain = [s for _, s in rel.plain_tensors(case) if s.shape]
    if any(len(s.shape) > rel.MAX_RELATION_RANK for s in plain):
        out.add(f"relations of sizes only up to rank {rel.MAX_RELATION_RANK}")
    if len(rel.plain_tensors(case)) > rel.MAX_RELATION_INPUTS:
        out.add(f"relations of the first {rel.MAX_RELATION_INPUTS} tensor inputs only")
    if len(plain) > rel.MAX_PRODUCT_INPUTS:
        out.add(f"products and ratios of the first {rel.MAX_PRODUCT_INPUTS} inputs only")
    if any(len(s.shape) > rel.MAX_PRODUCT_DIMS for s in plain[: rel.MAX_PRODUCT_INPUTS]):
        out.add(f"products and ratios of the last {rel.MAX_PRODUCT_DIMS} dimensions only")
    ints = [v for v in case.attributes.values() if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if len(ints) > rel.MAX_RATIO_ATTRS:
        out.add(f"ratios over the first {rel.MAX_RATIO_ATTRS} integer attributes only")
    return out


CATEGORY = ".value"  # attr.NAME.value: an integer attribute as a category (rel.attr_categories)


def is_category(axis: str) -> bool:
    return axis.startswith("attr.") and axis.endswith(CATEGORY)


def expression(axis: str) -> str:
    """The condition-language expression an axis names (see the module docstring)."""
    return axis[: -len(CATEGORY)] if is_category(axis) else axis


def literal(axis: str, value: Any) -> str:
    """One value of ``axis`` as a constant of the language (see the module docstring)."""
    if is_category(axis) and isinstance(value, str) and value.lstrip("-").isdigit():
        return str(int(value))
    if axis.startswith("attr.") and isinstance(value, str):
        value = attr_from_axis(value)
        if isinstance(value, dict) and value.get("kind") == "dtype":
            value = value.get("value")
        elif isinstance(value, (list, dict)):
            value = json.dumps(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return num(value)
    if isinstance(value, (bool, str)):
        return str(Const(value))
    return repr(value)
