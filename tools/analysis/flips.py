"""Moves that set a derived axis, a relation or a values class of a case to a
target with one star variation: the ways a next case can flip one term of a
hypothesis (moves.py covers the labelled axes, dimensions, counts,
offsets, alignments and contiguity; this module the rest).

Each move is ``(variation without its values, value)``, ready for
``StarVariation``; a move that does not fit the base is simply not made.
"""

from __future__ import annotations

import math
from typing import Any

from ..cases.derived import CHANNELS_LAST, DTYPE_BITS, alignment, contiguity, dim_axis, memory_format, parse_dim_axis
from ..cases.relations import PITCH, UNIT_STRIDE, product_sides, relation_sides
from ..schemas import FLOAT_DTYPES, Case, contiguous_strides
from .measured import VALUES, stat_moves

MAX_ZERO_ROW = 4096  # a zero row is planned as explicit +0 positions: at most this many


def dim_moves(ties: dict[str, list[str]], base: Case, name: str, index: int) -> list[dict]:
    """The variation that moves one dimension, with every dimension tied to it."""
    spec = next((i for i in base.inputs if i.name == name), None)
    if spec is None or not spec.shape or spec.none or spec.tensors is not None:
        return []
    ref = dim_axis(name, index % len(spec.shape), len(spec.shape))
    return [{"axis": "dim", "dims": [ref] + ties.get(ref, [])}]


def _spec(base: Case, name: str):
    spec = next((i for i in base.inputs if i.name == name), None)
    if spec is None or spec.shape is None or spec.none or spec.tensors is not None:
        return None
    return spec


def _size_of(base: Case, ref: str) -> int | None:
    dim = parse_dim_axis(ref)
    if dim is None:
        return None
    spec = _spec(base, dim[0])
    if spec is None or not spec.shape or not -len(spec.shape) <= dim[1] < len(spec.shape):
        return None
    return spec.shape[dim[1]]


def relation_moves(ties: dict[str, list[str]], base: Case, axis: str, target: str) -> list[tuple[dict, Any]]:
    """Set a relation: two dimensions compared (move either side next to the
    other), two inputs' dtypes equal or not."""
    out: list[tuple[dict, Any]] = []
    sides = relation_sides(axis)
    if sides is None:
        return out
    left, right = sides
    if left.endswith(".dtype"):
        a, b = left[: -len(".dtype")], right[: -len(".dtype")]
        sa, sb = _spec(base, a), _spec(base, b)
        if sa is None or sb is None:
            return out
        if target == "=":
            out += [({"axis": "dtype", "input": a}, sb.dtype), ({"axis": "dtype", "input": b}, sa.dtype)]
        elif target == "!=":
            for name, other in ((a, sb.dtype), (b, sa.dtype)):
                own = _spec(base, name).dtype
                if own in FLOAT_DTYPES and other in FLOAT_DTYPES:
                    alt = next((d for d in ("bfloat16", "float16", "float32") if d not in (other, own)), None)
                    if alt:
                        out.append(({"axis": "dtype", "input": name}, alt))
        return out
    if ".shape[" not in left or ".shape[" not in right:
        return out
    da, db = parse_dim_axis(left), parse_dim_axis(right)
    va, vb = _size_of(base, left), _size_of(base, right)
    if da is None or db is None or va is None or vb is None:
        return out
    want = {
        "<": [(va, vb + 1), (va, 2 * vb + 1), (max(vb - 1, 0), vb), (vb // 2, vb)],
        "=": [(vb, vb), (va, va)],
        ">": [(vb + 1, vb), (2 * vb + 1, vb), (va, max(va - 1, 0)), (va, va // 2)],
    }.get(target, [])
    for new_a, new_b in want:
        if (new_a, new_b) == (va, vb) or new_a < 0 or new_b < 0:
            continue
        if new_b == vb:
            out += [(v, new_a) for v in dim_moves(ties, base, *da)]
        elif new_a == va:
            out += [(v, new_b) for v in dim_moves(ties, base, *db)]
    return out


def _values(spec) -> dict:
    return spec.values.model_dump(mode="json", exclude_none=True, exclude_defaults=True) or {"kind": "normal"}


def _plain(spec) -> dict:
    """The input's values without zeros or special values (normal if it had none to keep)."""
    v = spec.values.for_dtype(spec.dtype)
    if v.kind in ("zeros", "ones", "full", "arange", "captured") or (v.kind == "normal" and v.std == 0):
        return {"kind": "normal"}
    doc = v.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    doc.pop("specials", None)
    doc.pop("by_dtype", None)
    return doc or {"kind": "normal"}


def _with_specials(spec, specials: list[dict]) -> dict:
    doc = _plain(spec)
    return doc | {"specials": specials}


def value_moves(base: Case, axis: str, target: Any) -> list[tuple[dict, Any]]:
    """Set one input's values class: all zero, a zero element, a zero row,
    constant, a sign, special values."""
    name, _, fld = axis.partition(".")
    spec = _spec(base, name)
    if spec is None:
        return []
    var = {"axis": "values", "input": name}
    numel = math.prod(spec.shape)
    specs: list[dict] = []
    if fld == "all_zero":
        specs = [{"kind": "zeros"}] if target else [_plain(spec)]
    elif fld == "has_zero":
        specs = (
            [_with_specials(spec, [{"value": "+0", "count": 1}])]
            if target and numel > 0
            else ([_plain(spec)] if not target else [])
        )
    elif fld == "zero_rows":
        if target and spec.shape and 0 < spec.shape[-1] <= MAX_ZERO_ROW and numel > 0:
            lead = [0] * (len(spec.shape) - 1)
            specs = [_with_specials(spec, [{"value": "+0", "positions": [lead + [j] for j in range(spec.shape[-1])]}])]
        elif not target:
            specs = [_plain(spec), _with_specials(spec, [{"value": "+0", "count": 1}])] if numel > 1 else [_plain(spec)]
    elif fld == "constant":
        specs = [{"kind": "full", "fill": 2.0}, {"kind": "ones"}] if target else [_plain(spec)]
    elif fld == "sign":
        specs = {
            "nonnegative": [{"kind": "uniform", "low": 0.5, "high": 1.5}],
            "nonpositive": [{"kind": "uniform", "low": -1.5, "high": -0.5}],
            "mixed": [_plain(spec)],
        }.get(target, [])
    elif fld in ("has_nan", "has_inf", "has_large", "has_denormal"):
        kind = {"has_nan": "nan", "has_inf": "inf", "has_large": "large", "has_denormal": "denormal"}[fld]
        if target and numel > 0:
            specs = [_with_specials(spec, [{"value": kind, "count": min(2, numel)}])]
        elif not target:
            v = spec.values.for_dtype(spec.dtype)
            keep = [
                s.model_dump(mode="json", exclude_none=True)
                for s in v.specials
                if not (
                    s.value == kind
                    or (kind == "inf" and s.value == "-inf")
                    or (kind == "large" and s.value == "-large")
                )
            ]
            specs = [_plain(spec) | ({"specials": keep} if keep else {})]
    out = []
    current = _values(spec)
    for s in specs:
        if s != current:
            out.append((var, s))
    return out


def rank_moves(base: Case, name: str, target: int) -> list[tuple[dict, Any]]:
    """Give one input another rank: leading dimensions of 2 added, or the
    leading dimensions merged."""
    spec = _spec(base, name)
    if spec is None or target < 0 or target == len(spec.shape):
        return []
    shape = list(spec.shape)
    new: list[int] | None
    if target > len(shape):
        new = [2] * (target - len(shape)) + shape
    elif target == 0:
        new = [] if math.prod(shape) == 1 else None
    else:
        cut = len(shape) - target + 1
        new = [math.prod(shape[:cut])] + shape[cut:]
    return [] if new is None else [({"axis": "shape", "input": name}, new)]


def exact_count_moves(ties: dict[str, list[str]], base: Case, name: str, count: int) -> list[tuple[dict, Any]]:
    """Set one input's element count to exactly ``count`` by moving two of
    its dimensions at once (with the dimensions tied to them): the divisor of
    the count nearest the first dimension's size, and the quotient."""
    spec = _spec(base, name)
    if spec is None or len(spec.shape) < 2 or count <= 0:
        return []
    i, j = 0, len(spec.shape) - 1
    rest = math.prod(s for k, s in enumerate(spec.shape) if k not in (i, j))
    if rest <= 0 or count % rest:
        return []
    pair = count // rest
    divisors = [d for d in range(1, int(math.isqrt(pair)) + 1) if pair % d == 0]
    divisors += [pair // d for d in divisors]
    a = min(divisors, key=lambda d: (abs(d - spec.shape[i]), d))
    b = pair // a
    if (a, b) == (spec.shape[i], spec.shape[j]):
        return []
    mi, mj = dim_moves(ties, base, name, i), dim_moves(ties, base, name, j)
    if not mi or not mj:
        return []
    if a == spec.shape[i]:
        return [(mj[0], b)]
    if b == spec.shape[j]:
        return [(mi[0], a)]
    return [(dict(mi[0], also=[dict(mj[0], values=[b])]), a)]


def byte_moves(ties: dict[str, list[str]], base: Case, name: str, target: float) -> list[tuple[dict, Any]]:
    """Set one input's size in bytes: through one dimension, or through its
    dtype (another floating dtype whose element size makes it)."""
    spec = _spec(base, name)
    if spec is None or spec.dtype not in DTYPE_BITS or not spec.shape:
        return []
    size = DTYPE_BITS[spec.dtype] / 8
    out: list[tuple[dict, Any]] = []
    numel = math.prod(spec.shape)
    for i, dim in enumerate(spec.shape):
        rest = (numel // dim if dim else math.prod(s for j, s in enumerate(spec.shape) if j != i)) * size
        if rest <= 0:
            continue
        new = max(1, round(target / rest)) if target > 0 else 0
        if new != dim:
            out += [(v, int(new)) for v in dim_moves(ties, base, name, i)]
        tied = any(dim_axis(name, j, len(spec.shape)) in ties for j in range(len(spec.shape)))
        if not tied and len(spec.shape) > 1 and target > 0 and new * rest != target and (target / size).is_integer():
            flat = [1] * len(spec.shape)  # the element count in one dimension: any size a dtype step allows
            flat[i] = int(target / size)
            out.append(({"axis": "shape", "input": name}, flat))
    if (target / size).is_integer():
        out += exact_count_moves(ties, base, name, int(target / size))
    if numel and spec.dtype in FLOAT_DTYPES:
        for d in FLOAT_DTYPES:
            if d != spec.dtype and numel * DTYPE_BITS[d] / 8 == target:
                out.append(
                    (
                        {"axis": "dtype", "input": name}
                        if len([i for i in base.inputs if not i.none]) > 1
                        else {"axis": "dtype"},
                        d,
                    )
                )
    return out


def align_moves(ties: dict[str, list[str]], base: Case, name: str, index: int, target: int) -> list[tuple[dict, Any]]:
    """Set one dimension to the nearest size above its own aligned exactly to ``target``."""
    spec = _spec(base, name)
    if spec is None or not spec.shape or target < 1 or target & (target - 1):
        return []
    cur = spec.shape[index]
    sizes = [
        v for v in range((cur // target + 1) * target, (cur // target + 9) * target, target) if alignment(v) == target
    ][:1]
    return [(v, s) for s in sizes for v in dim_moves(ties, base, name, index)]


def dtype_bits_moves(base: Case, name: str, target: int, tried: set[str]) -> list[tuple[dict, Any]]:
    spec = _spec(base, name)
    if spec is None or spec.dtype not in FLOAT_DTYPES:
        return []
    options = [d for d in FLOAT_DTYPES if DTYPE_BITS[d] == target and d != spec.dtype]
    options.sort(key=lambda d: (d in tried, d))
    single = len([i for i in base.inputs if not i.none]) == 1
    return [({"axis": "dtype"} if single else {"axis": "dtype", "input": name}, d) for d in options[:1]]


def stride_moves(base: Case, name: str, pitch: bool, target: Any) -> list[tuple[dict, Any]]:
    """Give one input, its shape kept, a stride pattern (relations.stride_patterns): the last dimension
    unit-stride or not (``target`` a bool), or the row pitch ``x.stride[-2]`` above, equal to or below the
    row length (``target`` ``>``, ``=``, ``<``).  Each a view torch can make of a larger storage: the
    others' strides kept where that stays a view without overlap, else the dense strides scaled."""
    spec = _spec(base, name)
    if spec is None or not spec.shape or 0 in spec.shape:
        return []
    shape, rank = spec.shape, len(spec.shape)
    now = list(spec.strides if spec.strides is not None else contiguous_strides(shape))
    dense = contiguous_strides(shape)
    options: list[list[int]] = []
    if not pitch and target is True:
        options = [[*now[:-1], 1], dense]
    elif not pitch and target is False:
        options = [[2 * s for s in dense], [*now[:-1], 2 * now[-1] if now[-1] else 2]]
        if rank >= 2:
            options.append(format_strides(shape, "none") or dense)
    elif pitch and rank >= 2 and target in ("<", "=", ">"):
        row = shape[-1]
        if target == ">":  # padded rows: each row starts further on than it is long
            pad = [s * (row + 1) // row if i < rank - 1 else 1 for i, s in enumerate(dense)]
            options = [[s * 2 if i < rank - 1 else 1 for i, s in enumerate(dense)], pad]
        elif target == "=":
            options = [dense]
        else:
            options = [format_strides(shape, "none") or dense]
    out: list[tuple[dict, Any]] = []
    for strides in options:
        if strides == now or contiguity(shape, strides) == "overlapping":
            continue
        value = None if strides == dense else strides
        if (not pitch and (strides[-1] == 1) != target) or (
            pitch and ((strides[-2] > shape[-1]) - (strides[-2] < shape[-1])) != {">": 1, "=": 0, "<": -1}[target]
        ):
            continue
        move = ({"axis": "strides", "input": name}, value)
        if move not in out:
            out.append(move)
    return out


def format_strides(shape: list[int], target: str) -> list[int] | None:
    """Strides that lay ``shape`` out in torch's memory format ``target`` (None when none does):
    ``channels_last`` (rank 4) / ``channels_last_3d`` (rank 5) the channels innermost; ``none`` a layout that
    is neither, the same element order as the channels-last one with H and W swapped (another member of the
    non-contiguous class)."""
    rank = len(shape)
    if target == "contiguous_format":
        out: list[int] | None = contiguous_strides(shape)
    elif target in CHANNELS_LAST.values() and CHANNELS_LAST.get(rank) == target:
        out, acc = [0] * rank, 1
        for d in [1, *range(rank - 1, 1, -1), 0]:  # innermost first: C, W, H, (D), N
            out[d] = acc
            acc *= max(shape[d], 1)
    elif target == "none" and rank >= 2:
        order = list(range(rank))
        order[-1], order[-2] = order[-2], order[-1]  # the last two dimensions swapped in memory
        out, acc = [0] * rank, 1
        for d in reversed(order):
            out[d] = acc
            acc *= max(shape[d], 1)
    else:
        return None
    return out if out is not None and memory_format(shape, out) == target else None


def format_moves(base: Case, name: str, target: Any) -> list[tuple[dict, Any]]:
    """Lay one input out in another memory format, its shape kept (None strides: the contiguous one)."""
    spec = _spec(base, name)
    if spec is None or not isinstance(target, str) or memory_format(spec.shape, spec.strides) == target:
        return []
    laid = format_strides(spec.shape, target)
    if laid is None:
        return []
    value = None if contiguity(spec.shape, laid) == "contiguous" else laid
    return [({"axis": "strides", "input": name}, value)]


def flip_moves(
    ties: dict[str, list[str]], base: Case, axis: str, target: Any, tried_dtypes: set[str] | None = None
) -> list[tuple[dict, Any]]:
    """The moves of this module for one axis and target (empty when none applies)."""
    name, _, fld = axis.partition(".")
    if VALUES in axis:
        return stat_moves(base, axis, target)
    if axis in (f"{name}{UNIT_STRIDE}", f"{name}{PITCH.format(name)}"):
        return stride_moves(base, name, axis.endswith("~" + name + ".shape[-1]"), target)
    if "~" in axis:
        return relation_moves(ties, base, axis, target)
    numeric = isinstance(target, (int, float)) and not isinstance(target, bool)
    if fld in (
        "all_zero",
        "has_zero",
        "zero_rows",
        "constant",
        "sign",
        "has_nan",
        "has_inf",
        "has_large",
        "has_denormal",
    ):
        return value_moves(base, axis, target)
    if fld == "zero_size" and isinstance(target, bool):
        spec = _spec(base, name)
        if spec is None:
            return []
        out = []
        for i, size in enumerate(spec.shape):
            if (target and size > 0) or (not target and size == 0):
                out += [(v, 0 if target else 1) for v in dim_moves(ties, base, name, i)]
        return out
    if fld == "rank" and numeric:
        return rank_moves(base, name, int(target))
    if fld == "memory_format":
        return format_moves(base, name, target)
    if fld == "bytes" and numeric:
        return byte_moves(ties, base, name, float(target))
    if fld.startswith("align[") and numeric:
        try:
            index = int(fld[len("align[") : -1])
        except ValueError:
            return []
        return align_moves(ties, base, name, index, int(target))
    if fld == "dtype_bits" and numeric:
        return dtype_bits_moves(base, name, int(target), tried_dtypes or set())
    if fld == "none" and isinstance(target, bool):
        return [({"axis": "none", "input": name}, target)]
    return []


def product_moves(ties: dict[str, list[str]], base: Case, axis: str, target: Any) -> list[tuple[dict, Any]]:
    """Set ``x.shape[i] * x.shape[j]`` of ``base`` to ``target`` by one factor (the other kept), else the
    one factor to it and the other to 1; ``x.shape[i] // attr.k`` by the dimension set to ``target`` times
    the attribute (kept, so the size stays a multiple of it).  Only exact landings; none for another axis."""
    sides = product_sides(axis)
    numeric = isinstance(target, (int, float)) and not isinstance(target, bool)
    if sides is None or not numeric or target < 1 or not float(target).is_integer():
        return []
    a, op, b = sides
    da = parse_dim_axis(a)
    spec = _spec(base, da[0]) if da is not None else None
    if da is None or spec is None or not spec.shape or not -len(spec.shape) <= da[1] < len(spec.shape):
        return []
    t, rank = int(target), len(spec.shape)
    if op == "//":
        k = base.attributes.get(b[len("attr.") :])
        if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
            return []
        return [(v, t * k) for v in dim_moves(ties, base, spec.name, da[1] % rank)]
    db = parse_dim_axis(b)
    if db is None or db[0] != da[0] or not -rank <= db[1] < rank or da[1] % rank == db[1] % rank:
        return []
    i, j = da[1] % rank, db[1] % rank
    out: list[tuple[dict, Any]] = []
    for mover, keeper in ((i, j), (j, i)):
        other = spec.shape[keeper]
        if other > 0 and t % other == 0:
            out += [(v, t // other) for v in dim_moves(ties, base, spec.name, mover)]
    if out:
        return out
    for vi in dim_moves(ties, base, spec.name, i):  # both at once: the factor to the target, the other to 1
        for vj in dim_moves(ties, base, spec.name, j):
            if not set(vi["dims"]) & set(vj["dims"]):
                out.append((dict(vi, also=[dict(vj, values=[1])]), t))
    return out
