"""Hypotheses: every predicate in the enumerated space that separates the
failing cases from the passing ones, ranked by simplicity.

The space (references/behavior.md, "Hypotheses"):

- an **atom** is a predicate over one axis of :func:`hypothesis_axes` - a class
  (``x.zero_size``, ``not x.has_zero``), a value or a small set of a categorical
  axis (``dtype == float16``, ``x.contiguity in {sliced, transposed}``, at most
  :data:`MAX_SET_VALUES` values; never over a composite axis such as a whole shape,
  strides list or value spec), a relation (``x.shape[0] > x.shape[-1]``,
  ``x.dtype != y.dtype``) or a threshold on an ordered axis (``x.bytes > 16384``);
- a **hypothesis** is one atom that separates, or - only when no atom does - a
  conjunction of two atoms over different axes (``dtype == float16 and
  x.shape[-1] > 1024``).

Caps: conjunctions are formed from the :data:`MAX_COVERING_ATOMS` simplest atoms
that hold on every failing case, and at most :data:`MAX_HYPOTHESES` hypotheses
are kept; when a cap cuts the space the analysis says so and no finding is exact.

Everything is computed from the cases handed in (the caller decides which
cases count), as sets and bit masks: nothing depends on the order cases
arrived (ties are broken by names and case ids).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..cases.axes import own_labels
from ..cases.derived import source_of, structured_axes
from ..cases.memo import once, sealed
from ..cases.relations import product_sides, relation_sides
from ..conditions.grammar import FIRST, expression, literal, space_axes
from ..wording import num
from .measured import is_measured, limit_sides

MAX_SET_VALUES = 4
MAX_COVERING_ATOMS = 160
MAX_HYPOTHESES = 64
# a magnitude threshold whose failing side is 0 and whose passing side reaches this is the zero class
MAGNITUDE_RESOLUTION = 2.0**-20
# alignments are told apart up to this many elements: an alignment threshold that still fails there, with
# no aligned passing value (only sizes or offsets of 0), is the size or offset being non-zero
ALIGN_RESOLUTION = 1024

CAP_TEXT = (
    f"conjunctions of two from the {MAX_COVERING_ATOMS} simplest atoms that hold on every failing case; "
    f"at most {MAX_HYPOTHESES} hypotheses; sets of at most {MAX_SET_VALUES} values"
)

# composite or restated axes: never the axis of a hypothesis
_EXCLUDED_SUFFIXES = (".shape", ".strides", ".values", ".offset_nonzero", ".none")
_SET_SUFFIXES = (".dtype", ".layout", ".contiguity", ".dtype_family", ".sign", ".memory_format")
_DTYPE_AXES_SUFFIXES = (".dtype", ".dtype_bits", ".dtype_family")
KIND_RANK = {"class": 0, "value": 1, "relation": 1, "threshold": 2, "set": 3}


def is_align(axis: str) -> bool:
    return axis.endswith(("_align", "_align_bytes")) or (axis.endswith("]") and ".align[" in axis)


def hypothesis_axes(case, labels: dict[str, str], structured: dict[str, Any] | None = None) -> dict[str, Any]:
    """The axes a hypothesis may name: the structured axes (without composite
    labels) plus the quantities of the grammar's first space (grammar.py).  With one
    tensor input, its ``x.dtype`` is the run's ``dtype`` and is left out.  Once per sealed case
    (tools/cases/memo.py) when ``labels`` and ``structured`` are its own."""
    if sealed(case) and labels == own_labels(case) and (structured is None or structured == structured_axes(case)):
        return once(case, "hypothesis_axes", lambda: _hypothesis_axes(case, structured_axes(case)))
    return _hypothesis_axes(case, structured if structured is not None else structured_axes(case, labels))


def _hypothesis_axes(case, base: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in base.items() if not k.endswith(_EXCLUDED_SUFFIXES) or k.startswith("attr.")}
    for spec in case.inputs:
        out[f"{spec.name}.none"] = bool(spec.none)
    if out.get("dtype") in ("mixed", "none"):
        out.pop("dtype")  # not one dtype: the per-input dtypes and their relations say it
    tensors = [i for i in case.inputs if not i.none]
    if len(tensors) == 1 and tensors[0].tensors is None:
        out.pop(f"{tensors[0].name}.dtype", None)
    out.update(space_axes(case, FIRST))
    return out


@dataclass(frozen=True)
class Atom:
    axis: str
    kind: str  # class | value | set | relation | threshold
    failing: tuple = ()  # class: (True,) or (False,); categorical: the failing values (sorted)
    direction: str | None = None
    fails_at: float | None = None  # threshold: the failing value nearest the boundary
    passes_at: float | None = None  # threshold: the passing value nearest the boundary (None: none recorded)
    passing: tuple = ()  # categorical: the passing values seen (where the other term holds)

    def holds(self, value: Any) -> bool:
        """Does a recorded case with this axis value satisfy the atom?"""
        if value is None:
            if is_align(self.axis):
                return self.kind == "threshold" and self.direction == "above"  # 0 is aligned to everything
            return self.kind == "class" and self.failing == (False,)
        if self.kind == "class":
            return bool(value) == self.failing[0]
        if self.kind == "threshold":
            if not _num(value):
                return False
            return value >= self.fails_at if self.direction == "above" else value <= self.fails_at
        return value in self.failing

    def predict(self, value: Any) -> str | None:
        """fail / pass for a new case, None when the recorded cases do not say
        (inside a threshold's bracket)."""
        if value is None and is_measured(self.axis):
            return None  # a statistic of values not built yet: known once the case ran
        if self.kind == "class":
            return "fail" if self.holds(value) else "pass"
        if self.kind == "threshold":
            if value is None:
                return "fail" if self.holds(None) else "pass"
            if not _num(value):
                return None
            if self.holds(value):
                return "fail"
            if self.passes_at is None:
                # an alignment with only 0 (aligned to everything) passing: told apart up to the resolution
                return (
                    "pass" if is_align(self.axis) and self.direction == "below" and value >= ALIGN_RESOLUTION else None
                )
            inside = value > self.passes_at if self.direction == "above" else value < self.passes_at
            return None if inside else "pass"
        # a value or set says what it says: an untried value passes (probing it is part of pinning, settlement.py)
        return "fail" if value is not None and value in self.failing else "pass"

    @property
    def text(self) -> str:
        return atom_text(self)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_REL_OPS = {
    frozenset("<"): "<",
    frozenset("="): "==",
    frozenset(">"): ">",
    frozenset("<="): "<=",
    frozenset(">="): ">=",
    frozenset("<>"): "!=",
    frozenset(["!="]): "!=",
}


_NEGATED = ((" == ", " != "), (" != ", " == "))


def atom_text(a: Atom) -> str:
    """An atom as a condition of the language (grammar.expression names its axis, grammar.literal its
    values): the language's evaluator gives it the truth :meth:`Atom.holds` gives it on every case."""
    axis = expression(a.axis)
    if a.kind == "class":
        if a.failing == (True,):
            return a.axis
        for op, neg in _NEGATED:  # a class named as a comparison (x.stride[-1] == 1) negates its operator
            if op in a.axis:
                return a.axis.replace(op, neg, 1)
        return f"not {a.axis}"
    if a.kind == "threshold":
        bound = a.passes_at if a.passes_at is not None else a.fails_at
        op = (
            (">" if a.passes_at is not None else ">=")
            if a.direction == "above"
            else ("<" if a.passes_at is not None else "<=")
        )
        return f"{axis} {op} {num(bound)}"
    sides = relation_sides(a.axis)  # a relation atom's axis always names its two sides
    if a.kind == "relation" and sides is not None:
        rel = _REL_OPS.get(frozenset(a.failing))
        if rel is not None:
            return f"{sides[0]} {rel} {sides[1]}"
    if len(a.failing) == 1:
        return f"{axis} == {literal(a.axis, a.failing[0])}"
    return f"{axis} in {{{', '.join(literal(a.axis, v) for v in a.failing)}}}"


@dataclass
class Hypothesis:
    atoms: tuple[Atom, ...]
    equivalent: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " and ".join(a.text for a in self.atoms)

    @property
    def key(self) -> tuple:
        return tuple((a.axis, a.kind, a.failing, a.direction) for a in self.atoms)

    def predict(self, axes: dict[str, Any]) -> str | None:
        preds = [a.predict(axes.get(a.axis)) for a in self.atoms]
        if "pass" in preds:
            return "pass"
        return "fail" if all(p == "fail" for p in preds) else None

    def holds(self, axes: dict[str, Any]) -> bool:
        return all(a.holds(axes.get(a.axis)) for a in self.atoms)

    def sources(self) -> list[str]:
        out: list[str] = []
        for a in self.atoms:
            for s in axis_sources(a.axis):
                if s not in out:
                    out.append(s)
        return out


def axis_sources(axis: str) -> list[str]:
    """The variation axes (axes.distance_axes keys) that move an axis: one,
    or two for a relation of two inputs, for bytes (the shape and the dtype) and for a dimension over an
    attribute (``x.shape[1] // attr.groups``: the shape and the attribute)."""
    prod = product_sides(axis)
    if prod is not None:
        return list(dict.fromkeys(source_of(side) for side in (prod[0], prod[2])))
    sides = relation_sides(axis)
    if sides:
        out = []
        for side in sides:
            src = "dtype" if side.endswith(".dtype") else source_of(side)
            if src not in out:
                out.append(src)
        return out
    src = source_of(axis)
    return [src, "dtype"] if axis.endswith(".bytes") else [src]


def derivation_rank(axis: str) -> int:
    """0: a planned axis; 1: derived from one; 2: a product of two (bytes, two sizes, a size over an
    attribute)."""
    if axis.endswith(".bytes") or product_sides(axis) is not None or is_measured(axis):
        return 2
    if "~" in axis:
        return 1
    if axis in ("mode", "dtype") or axis.startswith("attr."):
        return 0
    field_ = axis.split(".", 1)[1] if "." in axis else axis
    if field_ in (
        "dtype",
        "layout",
        "offset",
        "contiguity",
        "has_nan",
        "has_inf",
        "has_large",
        "has_denormal",
        "zero_size",
    ) or field_.startswith("shape["):
        return 0
    return 1


def rank_key(h: Hypothesis) -> tuple:
    """Simplest first: one atom, then a band (two ends of one quantity), then two quantities together."""
    return (
        len(h.atoms) - (0.5 if is_band(h) else 0),
        sum(KIND_RANK[a.kind] for a in h.atoms),
        sum(derivation_rank(a.axis) for a in h.atoms),
        h.text,
    )


@dataclass
class Space:
    hypotheses: list[Hypothesis]
    axes: int
    consistent: int
    conjunctions: bool
    capped: bool


def _kind_of(values: list[Any]) -> str | None:
    types = {type(v) for v in values} - {type(None)}
    if not types:
        return None
    if types == {bool}:
        return "bool"
    if types <= {int, float}:
        return "ordered"
    if types == {str}:
        return "str"
    return None


def _set_axis(axis: str) -> bool:
    return axis in ("mode", "dtype") or axis.startswith("attr.") or "~" in axis or axis.endswith(_SET_SUFFIXES)


def _atoms(axis: str, fvals: list[Any], pvals: list[Any]) -> list[tuple[Atom, int]]:
    """The atoms over one axis that hold on every failing case, each with the
    bit mask of the passing cases it holds on."""
    kind = _kind_of(fvals + pvals)
    out: list[tuple[Atom, int]] = []
    if kind == "bool":
        fs = {bool(v) for v in fvals}
        if len(fs) == 1:
            pol = fs.pop()
            a = Atom(axis, "class", (pol,))
            out.append((a, _mask(pvals, a)))
        return out
    if kind == "str":
        if not _set_axis(axis) or any(v is None for v in fvals):
            return out
        fstr = sorted(set(fvals))
        ps = sorted({v for v in pvals if v is not None})
        # many failing values against one passing value: "every value but one" (settlement names it so)
        if (len(fstr) > MAX_SET_VALUES and len(ps) > 1) or not ps:
            return out
        k = "relation" if "~" in axis else ("value" if len(fstr) == 1 else "set")
        a = Atom(axis, k, tuple(fstr), passing=tuple(v for v in ps if v not in fstr))
        out.append((a, _mask(pvals, a)))
        return out
    if kind == "ordered":
        align = is_align(axis)
        if any(v is None for v in fvals) and not align:
            return out
        fnum = [v for v in fvals if v is not None]
        pnum = [v for v in pvals if v is not None]
        if not fnum or not (pnum or (align and any(v is None for v in pvals))):
            return out  # no passing value to contrast (an alignment of 0 is one: aligned to everything)
        if None not in fvals or align:  # above: fails from min(F) up (an alignment of None is the largest)
            b = min(fnum)
            a = Atom(axis, "threshold", direction="above", fails_at=b)
            mask = _mask(pvals, a)
            below = [v for v in pnum if v < b]
            out.append(
                (Atom(axis, "threshold", direction="above", fails_at=b, passes_at=max(below) if below else None), mask)
            )
        b = max(fnum)
        if None not in fvals:
            a = Atom(axis, "threshold", direction="below", fails_at=b)
            mask = _mask(pvals, a)
            above = [v for v in pnum if v > b]
            out.append(
                (Atom(axis, "threshold", direction="below", fails_at=b, passes_at=min(above) if above else None), mask)
            )
    return out


def columns(rows: list[dict[str, Any]]) -> dict[str, list]:
    """Axis -> its value in each of ``rows`` (None where one lacks it), the axes in the order they first
    appear.  Rows with the same axes in the same order (the cases of one run mostly are) are transposed
    at once."""
    if rows:
        first = list(rows[0])
        if all(list(r) == first for r in rows):
            return {k: list(col) for k, col in zip(first, zip(*(r.values() for r in rows), strict=True), strict=True)}
    cols: dict[str, list] = {}
    n = len(rows)
    for i, row in enumerate(rows):  # one pass over the rows: a column per axis
        for k, v in row.items():
            col = cols.get(k)
            if col is None:
                col = cols[k] = [None] * n
            col[i] = v
    return cols


MAX_KEPT_VALUES = 4_000_000  # values the kept columns of column_atoms hold in all (8 bytes each)
_COLUMN_ATOMS: dict[tuple, list[tuple[Atom, int]]] = {}
_kept_values = [0]


def column_atoms(axis: str, fvals: list[Any], pvals: list[Any]) -> list[tuple[Atom, int]]:
    """``_atoms`` of one axis' columns, kept by the columns' values: the widening of a space enumerates the
    first space's columns again, and each analysis of a run the same ones.  Equal columns are equal values
    of equal types, so the atoms are the same; a column with a float zero is computed every time (-0.0
    equals 0.0 but may read otherwise)."""
    ft, pt = tuple(fvals), tuple(pvals)
    types = frozenset(map(type, ft)) | frozenset(map(type, pt))
    if float in types and (0.0 in ft or 0.0 in pt):
        return _atoms(axis, fvals, pvals)
    # the values' types: the one type of every value, else each value's (1 == True == 1.0 must not share)
    kinds = next(iter(types)) if len(types) == 1 else (tuple(map(type, ft)), tuple(map(type, pt)))
    key = (axis, ft, pt, kinds)
    try:
        hit = _COLUMN_ATOMS.get(key)
    except TypeError:  # a value that is no hashable: computed every time
        return _atoms(axis, fvals, pvals)
    if hit is None:
        hit = _COLUMN_ATOMS[key] = _atoms(axis, fvals, pvals)
        _kept_values[0] += _held(key)
        while _kept_values[0] > MAX_KEPT_VALUES and len(_COLUMN_ATOMS) > 1:  # the oldest go first
            old = next(iter(_COLUMN_ATOMS))
            _kept_values[0] -= _held(old)
            del _COLUMN_ATOMS[old]
    return list(hit)


def _held(key: tuple) -> int:
    """The values one kept key holds (its two columns, and their types when they are of several)."""
    return (len(key[1]) + len(key[2])) * (1 if isinstance(key[3], type) else 2)


def band(axis: str, fvals: list[Any], pvals: list[Any]) -> Hypothesis | None:
    """An interval with both ends (``x.shape[-1] > 24 and x.shape[-1] < 48``) over one ordered axis: two
    failing values or more, every one inside, a passing value on each side and none inside; its two ends are
    thresholds of their own (pinned, probed far on their passing sides), the failing side between them (probed
    between its failing values, requirements.inside_requirements)."""
    if _kind_of(fvals + pvals) != "ordered" or is_align(axis) or is_measured(axis) or any(v is None for v in fvals):
        return None
    lo, hi = min(fvals), max(fvals)
    if lo == hi:  # one failing value is a list of failing values, never a finding: an interval has an inside
        return None
    nums = [v for v in pvals if _num(v)]
    below, above = [v for v in nums if v < lo], [v for v in nums if v > hi]
    if not below or not above or len(below) + len(above) != len(nums):
        return None
    return Hypothesis(
        (
            Atom(axis, "threshold", direction="above", fails_at=lo, passes_at=max(below)),
            Atom(axis, "threshold", direction="below", fails_at=hi, passes_at=min(above)),
        )
    )


def is_band(h: Hypothesis) -> bool:
    return len(h.atoms) == 2 and h.atoms[0].axis == h.atoms[1].axis


def covering_atoms(axis: str, fvals: list[Any], pvals: list[Any]) -> list[tuple[Atom, int]]:
    """The atoms over one axis that hold on every failing value, each with the
    bit mask of the passing values it holds on (bit i: ``pvals[i]``)."""
    return column_atoms(axis, fvals, pvals)


def _mask(pvals: list[Any], atom: Atom) -> int:
    """The bit mask of the passing values the atom holds on (one pass, as a binary string; the common
    kinds inline, the rest through Atom.holds)."""
    rev = pvals[::-1]
    if atom.kind == "threshold" and not is_align(atom.axis):
        b = atom.fails_at
        if atom.direction == "above":
            bits = ["1" if v is not None and v is not True and v is not False and v >= b else "0" for v in rev]
        else:
            bits = ["1" if v is not None and v is not True and v is not False and v <= b else "0" for v in rev]
    elif atom.kind in ("value", "set", "relation"):
        fs = set(atom.failing)
        bits = ["1" if v in fs else "0" for v in rev]
    elif atom.kind == "class":
        pol = atom.failing[0]
        bits = ["1" if bool(v) == pol else "0" for v in rev]
    else:
        holds = atom.holds
        bits = ["1" if holds(v) else "0" for v in rev]
    return int("".join(bits) or "0", 2)


def _ordered_pvals(pvals: list[Any], mask: int) -> list[Any]:
    return [v for i, v in enumerate(pvals) if mask >> i & 1]


def _in_context(atom: Atom, pvals: list[Any], ctx_mask: int) -> Atom:
    """A conjunction's term with its passing side measured where the other term holds."""
    vals = [v for v in _ordered_pvals(pvals, ctx_mask)]
    if atom.kind == "threshold":
        nums = [v for v in vals if _num(v)]
        if atom.direction == "above":
            side = [v for v in nums if v < atom.fails_at]
            return Atom(
                atom.axis, "threshold", direction="above", fails_at=atom.fails_at, passes_at=max(side) if side else None
            )
        side = [v for v in nums if v > atom.fails_at]
        return Atom(
            atom.axis, "threshold", direction="below", fails_at=atom.fails_at, passes_at=min(side) if side else None
        )
    if atom.kind in ("value", "set", "relation"):
        return Atom(
            atom.axis,
            atom.kind,
            atom.failing,
            passing=tuple(sorted({v for v in vals if v is not None and v not in atom.failing})),
        )
    return atom


def enumerate_hypotheses(
    axes: dict[str, dict[str, Any]], failing: list[str], passing: list[str], aliases: dict[str, str] | None = None
) -> Space:
    """Every hypothesis of the space consistent with the recorded cases (each
    failing case satisfies it, no passing case does), simplest first.
    ``aliases`` maps an axis to the axis it always equals (tied dimensions)."""
    failing, passing = sorted(failing), sorted(passing)
    if not failing or not passing:
        return Space([], 0, 0, False, False)
    fcols, pcols = columns([axes[c] for c in failing]), columns([axes[c] for c in passing])
    keys = sorted(fcols.keys() | pcols.keys())
    aliases = {k: v for k, v in (aliases or {}).items() if v in keys and v != k}
    full = (1 << len(passing)) - 1
    singles: list[Hypothesis] = []
    covering: list[tuple[Atom, int, list[Any]]] = []
    for key in keys:  # an axis one side lacks is None there
        fvals = fcols[key] = fcols.get(key) or [None] * len(failing)
        pvals = pcols[key] = pcols.get(key) or [None] * len(passing)
        for atom, mask in column_atoms(key, fvals, pvals):
            if mask == 0:
                singles.append(Hypothesis((atom,)))
            elif mask != full and key not in aliases:
                covering.append((atom, mask, pvals))
    if aliases and singles:  # an axis that always equals another (tied dimensions) says nothing more
        reps = {h.atoms[0].axis: h for h in singles if h.atoms[0].axis not in aliases}
        kept_singles = []
        for h in singles:
            twin = reps.get(aliases.get(h.atoms[0].axis, ""))
            if twin is not None and (twin.atoms[0].kind, twin.atoms[0].failing, twin.atoms[0].direction) == (
                h.atoms[0].kind,
                h.atoms[0].failing,
                h.atoms[0].direction,
            ):
                twin.equivalent.append(h.text)
                continue
            kept_singles.append(h)
        singles = kept_singles
    if singles:
        kept = _drop_restatements(singles)
        kept.sort(key=rank_key)
        capped = len(kept) > MAX_HYPOTHESES
        return Space(kept[:MAX_HYPOTHESES], len(keys), len(kept), False, capped)
    covering.sort(key=lambda t: (KIND_RANK[t[0].kind], derivation_rank(t[0].axis), t[0].text))
    capped = len(covering) > MAX_COVERING_ATOMS
    covering = covering[:MAX_COVERING_ATOMS]
    bands = [band(key, fcols[key], pcols[key]) for key in keys if key not in aliases]
    conj: list[Hypothesis] = [x for x in bands if x is not None]
    for i, (a, ma, pa) in enumerate(covering):
        for b, mb, pb in covering[i + 1 :]:
            if a.axis == b.axis or ma & mb:
                continue
            ta, tb = _in_context(a, pa, mb), _in_context(b, pb, ma)
            conj.append(
                Hypothesis(tuple(sorted((ta, tb), key=lambda t: (KIND_RANK[t.kind], derivation_rank(t.axis), t.axis))))
            )
    conj = _drop_restatements(conj)
    conj.sort(key=rank_key)
    capped = capped or len(conj) > MAX_HYPOTHESES
    return Space(conj[:MAX_HYPOTHESES], len(keys), len(conj), True, capped)


def _float_truth(atom: Atom) -> tuple | None:
    """What a dtype or dtype-width atom says of each floating dtype (None for another atom)."""
    from ..cases.derived import DTYPE_BITS
    from ..schemas import FLOAT_DTYPES

    if atom.axis == "dtype" or atom.axis.endswith(".dtype"):
        return tuple(atom.holds(d) for d in FLOAT_DTYPES)
    if atom.axis.endswith(".dtype_bits"):
        return tuple(atom.holds(DTYPE_BITS[d]) for d in FLOAT_DTYPES)
    return None


def _limit_classes(hyps: list[Hypothesis]) -> dict[tuple, Hypothesis]:
    """(statistic, limit, the other terms' texts) -> each hypothesis with a term ``S > D.max``."""
    out: dict[tuple, Hypothesis] = {}
    for h in hyps:
        for i, a in enumerate(h.atoms):
            lim = limit_sides(a.axis)
            if lim is not None and a.kind == "class" and a.failing == (True,):
                rest = tuple(sorted(b.text for j, b in enumerate(h.atoms) if j != i))
                out.setdefault((*lim, rest), h)
    return out


def _limit_twin(h: Hypothesis, limits: dict[tuple, Hypothesis]) -> Hypothesis | None:
    """The hypothesis ``h`` restates: one of its terms a statistic's threshold whose bracket holds a dtype's
    limit, the same with that term the limit's class (every other term alike)."""
    for i, a in enumerate(h.atoms):
        if a.kind != "threshold" or a.passes_at is None or a.direction != "above" or not is_measured(a.axis):
            continue
        rest = tuple(sorted(b.text for j, b in enumerate(h.atoms) if j != i))
        for (stat, bound, other), g in sorted(limits.items(), key=lambda kv: kv[0][:2]):
            if stat == a.axis and other == rest and a.passes_at <= bound < a.fails_at:
                return g
    return None


def _drop_restatements(hyps: list[Hypothesis]) -> list[Hypothesis]:
    """Hypotheses that restate a simpler one of the space on every case the
    run can build (each is listed in the kept one's ``equivalent``):

    - a count or size below 1 beside the zero-size class;
    - a magnitude threshold whose failing side is 0 and whose passing side is
      within :data:`MAGNITUDE_RESOLUTION` of it, beside a zero class;
    - an alignment still failing at :data:`ALIGN_RESOLUTION` with only 0 on its
      passing side, beside the offset (or size) being non-zero;
    - a dtype width that picks the same floating dtypes as a dtype set;
    - the bytes of a tensor beside its element count when the other term fixes the dtype."""
    by_text = {h.text: h for h in hyps}
    dropped: set[int] = set()

    def fold(h: Hypothesis, twin: Hypothesis | None) -> bool:
        if twin is None or twin is h or id(twin) in dropped:
            return False
        twin.equivalent.append(h.text)
        twin.equivalent.extend(h.equivalent)
        dropped.add(id(h))
        return True

    limits = _limit_classes(hyps)
    for h in hyps:
        a = h.atoms[0]
        if limits and fold(h, _limit_twin(h, limits)):
            continue
        name = a.axis.rsplit(".", 1)[0]
        if len(h.atoms) == 1 and a.kind == "threshold" and a.direction == "below" and a.fails_at == 0:
            if a.axis.endswith((".numel", ".bytes")) and fold(h, by_text.get(f"{name}.zero_size")):
                continue
            if a.axis.endswith(".magnitude") and a.passes_at is not None and a.passes_at <= MAGNITUDE_RESOLUTION:
                if any(fold(h, by_text.get(f"{name}.{c}")) for c in ("all_zero", "zero_rows", "has_zero")):
                    continue
        if (
            len(h.atoms) == 1
            and a.kind == "threshold"
            and a.direction == "below"
            and is_align(a.axis)
            and a.passes_at is None
            and a.fails_at is not None
            and a.fails_at >= ALIGN_RESOLUTION
        ):
            twin = (
                next(
                    (
                        g
                        for g in hyps
                        if len(g.atoms) == 1 and g.atoms[0].axis == f"{name}.offset" and g.atoms[0].direction == "above"
                    ),
                    None,
                )
                if a.axis.endswith("offset_align")
                else None
            )
            if not fold(h, twin):
                dropped.add(id(h))  # misaligned up to the resolution, nothing aligned passed: says "non-zero"
            continue
        for i, t in enumerate(h.atoms):  # a dtype width that is a dtype set in other words
            if not t.axis.endswith(".dtype_bits"):
                continue
            truth = _float_truth(t)
            for g in hyps:
                if g is h or len(g.atoms) != len(h.atoms) or id(g) in dropped:
                    continue
                rest_h = [x for j, x in enumerate(h.atoms) if j != i]
                swap = [x for x in g.atoms if x not in rest_h]
                if (
                    len(swap) == 1
                    and _float_truth(swap[0]) == truth
                    and swap[0].axis != t.axis
                    and (swap[0].axis == "dtype" or swap[0].axis == t.axis[: -len("_bits")])
                    and fold(h, g)
                ):
                    break
        if id(h) in dropped:
            continue
        if len(h.atoms) == 2:
            byte = next((t for t in h.atoms if t.axis.endswith(".bytes")), None)
            other = next((t for t in h.atoms if t is not byte), None)
            if (
                byte is not None
                and other is not None
                and _float_truth(other) is not None
                and other.kind != "threshold"
                and len(other.failing) == 1
            ):
                numel = byte.axis[: -len(".bytes")] + ".numel"
                twin = next((g for g in hyps if other in g.atoms and any(x.axis == numel for x in g.atoms)), None)
                fold(h, twin)
    return [h for h in hyps if id(h) not in dropped]
