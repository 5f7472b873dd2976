"""The derived quantities of a case, one function per production of the hypothesis grammar
(tools/analysis/grammar.py declares them, with their cost and the space that enumerates them; each is
named as the condition language writes it, or maps to such an expression by grammar.expression).

Per tensor input ``x`` (also a list member ``x[1]`` where said):

- ``x.bytes`` (list members too): element count x element size in bytes;
- ``x.align[i]`` (list members too) for each dimension but the last (the last is ``x.last_align``):
  the largest power of two dividing its size, uncapped (up to the size); a
  size of 0 has none (0 is divisible by every power of two);
- values classes (list members too) from the value spec that applies to the dtype: ``x.all_zero``,
  ``x.has_zero`` (some element is exactly 0), ``x.zero_rows`` (some row - a
  slice along the last dimension - is all zero), ``x.constant`` (every element
  equal), ``x.sign`` (``nonnegative`` / ``nonpositive`` / ``mixed``; absent for an
  all-zero tensor). A captured input has none of them (its values are data);
- strides and stride patterns, the row bytes' alignment, rows, the memory format; products of two
  dimensions and a dimension over an integer attribute (each function's docstring).

Relations (each a small set of values, so a predicate over it is a named class):

- two dimensions of one input: ``x.shape[0]~x.shape[-1]`` = ``<``, ``=`` or ``>``;
- the same dimension (aligned from the right) of two inputs:
  ``x.shape[-1]~y.shape[-1]``;
- two inputs' dtypes: ``x.dtype~y.dtype`` = ``=`` or ``!=``;
- two inputs' shapes: ``x.shape~y.shape`` = ``=`` or ``!=`` (the language's ``x.shape == y.shape``: the
  shapes as text).

Bounds (grammar.cuts says when one cuts a run): relations for the first :data:`MAX_RELATION_INPUTS` tensor
inputs and dimensions of inputs up to rank :data:`MAX_RELATION_RANK`; products and ratios for the first
:data:`MAX_PRODUCT_INPUTS` inputs, their last :data:`MAX_PRODUCT_DIMS` dimensions and the first
:data:`MAX_RATIO_ATTRS` positive integer attributes.
"""

from __future__ import annotations

import math
from typing import Any

from ..schemas import Case, TensorSpec
from .derived import DTYPE_BITS, alignment, dim_axis, memory_format
from .memo import by_content

MAX_RELATION_INPUTS = 4
MAX_RELATION_RANK = 6
REL_VALUES = ("<", "=", ">")


def _cmp(a: int, b: int) -> str:
    return "<" if a < b else ">" if a > b else "="


def element_bytes(dtype: str) -> float | None:
    bits = DTYPE_BITS.get(dtype)
    return None if bits is None else bits / 8


def _zero_row(spec: TensorSpec, positions: list[list[int]]) -> bool:
    """Do the zero positions cover one whole row (every index of the last dimension)?"""
    shape = spec.shape
    if not shape or shape[-1] == 0:
        return False
    rows: dict[tuple, set] = {}
    for pos in positions:
        if len(pos) == len(shape):
            rows.setdefault(tuple(pos[:-1]), set()).add(pos[-1])
    return any(len(cols) >= shape[-1] and set(range(shape[-1])) <= cols for cols in rows.values())


def value_classes(spec: TensorSpec, n: str) -> dict[str, Any]:
    """``all_zero``, ``has_zero``, ``zero_rows``, ``constant``, ``sign`` of one tensor's values; once per
    distinct spec (memo.by_content)."""
    return by_content("value_classes", n, spec, lambda: _value_classes(spec, n))


def _value_classes(spec: TensorSpec, n: str) -> dict[str, Any]:
    v = spec.values.for_dtype(spec.dtype)
    if v.kind == "captured":
        return {}
    numel = math.prod(spec.shape)
    specials = {s.value for s in v.specials}
    zero_specials = [p for s in v.specials if s.value in ("+0", "-0") for p in (s.positions or [])]
    counted_zero = any(s.value in ("+0", "-0") for s in v.specials)
    nonzero_specials = specials - {"+0", "-0"}
    if (
        v.kind == "zeros"
        or (v.kind == "full" and v.fill == 0)
        or (v.kind == "normal" and v.std == 0 and v.mean == 0)
        or (v.kind == "randint" and v.low == 0 and v.high == 1)
    ):
        base_zero, base_const = True, True
    else:
        base_zero = False
        base_const = (
            v.kind in ("ones", "full")
            or (v.kind == "normal" and v.std == 0)
            or (v.kind == "randint" and v.high is not None and v.low is not None and v.high - v.low <= 1)
        )
    if v.exclude_zero and base_zero:
        base_zero = False  # zeros become the smallest non-zero step
    all_zero = numel > 0 and base_zero and not nonzero_specials
    base_has_zero = (
        base_zero
        or v.kind == "arange"
        or (v.kind == "randint" and v.low is not None and v.high is not None and v.low <= 0 < v.high)
    )
    if v.exclude_zero:
        base_has_zero = False
    has_zero = numel > 0 and (base_has_zero or counted_zero)
    rows = numel // spec.shape[-1] if spec.shape and spec.shape[-1] else 0
    placed = sum(
        s.count if s.count is not None else len(s.positions or []) for s in v.specials if s.value not in ("+0", "-0")
    )
    # zeros with fewer special elements than rows leave a row untouched
    zero_rows = all_zero or (numel > 0 and (_zero_row(spec, zero_specials) or (base_zero and placed < rows)))
    out: dict[str, Any] = {
        f"{n}.all_zero": all_zero,
        f"{n}.has_zero": has_zero,
        f"{n}.zero_rows": zero_rows,
        f"{n}.constant": numel > 0 and base_const and not specials,
    }
    # sign of the non-zero elements
    if v.kind in ("zeros",) or base_zero:
        signs: set[str] = set()
    elif v.kind == "normal":
        signs = {"+", "-"} if v.std > 0 else ({"+"} if v.mean > 0 else {"-"})
    elif v.kind in ("uniform", "randint"):
        signs = ({"+"} if v.high is not None and v.high > 0 else set()) | (
            {"-"} if v.low is not None and v.low < 0 else set()
        )
    elif v.kind == "full":
        signs = {"+"} if v.fill is not None and v.fill > 0 else {"-"}
    else:  # ones, arange
        signs = {"+"}
    signs |= {"+" for s in specials if s in ("inf", "large", "denormal")}
    signs |= {"-" for s in specials if s in ("-inf", "-large")}
    if signs:
        out[f"{n}.sign"] = "mixed" if signs == {"+", "-"} else "nonnegative" if signs == {"+"} else "nonpositive"
    return out


def plain_tensors(case: Case) -> list[tuple[str, TensorSpec]]:
    """The tensor inputs that are one tensor (not None, not a list), by name, in the case's order."""
    return [(s.name, s) for s in case.inputs if not s.none and s.tensors is None]


def _every_tensor(case: Case) -> list[tuple[str, TensorSpec]]:
    """Each tensor the call passes by its name in conditions: ``x``, or ``x[1]`` for a list member."""
    out: list[tuple[str, TensorSpec]] = []
    for spec in case.inputs:
        if spec.none:
            continue
        if spec.tensors is not None:
            out.extend((f"{spec.name}[{j}]", m) for j, m in enumerate(spec.tensors))
        else:
            out.append((spec.name, spec))
    return out


def tensor_bytes(case: Case) -> dict[str, Any]:
    """``x.bytes``: element count x element size in bytes, per tensor (list members too)."""
    out: dict[str, Any] = {}
    for n, spec in _every_tensor(case):
        size = element_bytes(spec.dtype)
        if size is not None:
            b = math.prod(spec.shape) * size
            out[f"{n}.bytes"] = int(b) if float(b).is_integer() else b
    return out


def dim_alignments(case: Case) -> dict[str, Any]:
    """``x.align[i]``: the largest power of two dividing each dimension but the last (``x.last_align``)."""
    out: dict[str, Any] = {}
    for n, spec in _every_tensor(case):
        for i, dim in enumerate(spec.shape[:-1]):
            a = alignment(dim)
            if a is not None:
                out[f"{n}.align[{i}]"] = a
    return out


def values_classes(case: Case) -> dict[str, Any]:
    """:func:`value_classes` of every tensor (list members too)."""
    out: dict[str, Any] = {}
    for n, spec in _every_tensor(case):
        out.update(value_classes(spec, n))
    return out


def dim_relations(case: Case) -> dict[str, Any]:
    """``x.shape[i]~x.shape[j]``: two dimensions of one input compared, up to rank :data:`MAX_RELATION_RANK`."""
    out: dict[str, Any] = {}
    for name, tensor in plain_tensors(case):
        rank = len(tensor.shape)
        if rank > MAX_RELATION_RANK:
            continue
        for i in range(rank):
            for j in range(i + 1, rank):
                out[f"{dim_axis(name, i, rank)}~{dim_axis(name, j, rank)}"] = _cmp(tensor.shape[i], tensor.shape[j])
    return out


def input_relations(case: Case) -> dict[str, Any]:
    """Two inputs' dtypes and shapes compared, and their dimensions aligned from the right, for the first
    :data:`MAX_RELATION_INPUTS` tensor inputs."""
    out: dict[str, Any] = {}
    plain = plain_tensors(case)[:MAX_RELATION_INPUTS]
    for ia, (na, sa) in enumerate(plain):
        for nb, sb in plain[ia + 1 :]:
            out[f"{na}.dtype~{nb}.dtype"] = "=" if sa.dtype == sb.dtype else "!="
            out[f"{na}.shape~{nb}.shape"] = "=" if sa.shape == sb.shape else "!="
            ra, rb = len(sa.shape), len(sb.shape)
            if max(ra, rb) > MAX_RELATION_RANK:
                continue
            for k in range(1, min(ra, rb) + 1):
                out[f"{dim_axis(na, ra - k, ra)}~{dim_axis(nb, rb - k, rb)}"] = _cmp(sa.shape[ra - k], sb.shape[rb - k])
    return out


def relation_sides(axis: str) -> tuple[str, str] | None:
    """``x.shape[0]~x.shape[-1]`` -> ("x.shape[0]", "x.shape[-1]"); None for another axis."""
    if "~" not in axis:
        return None
    a, _, b = axis.partition("~")
    return a, b


def strides(case: Case) -> dict[str, Any]:
    """``x.stride[i]`` (each dimension's stride in elements, the last ``[-1]``; contiguous strides when none
    are given) and :func:`stride_patterns`, per plain tensor input."""
    from ..schemas import contiguous_strides

    out: dict[str, Any] = {}
    for n, spec in plain_tensors(case):
        if not spec.shape:
            continue
        rank = len(spec.shape)
        given = spec.strides if spec.strides is not None else contiguous_strides(spec.shape)
        for i, st in enumerate(given):
            out[f"{n}.stride[{-1 if i == rank - 1 else i}]"] = st
        out.update(stride_patterns(n, spec.shape, given))
    return out


def row_bytes_alignment(case: Case) -> dict[str, Any]:
    """``x.last_align_bytes``: the largest power of two dividing one row's bytes (an alignment that moves
    with the element size)."""
    out: dict[str, Any] = {}
    for n, spec in plain_tensors(case):
        size = element_bytes(spec.dtype)
        if spec.shape and size and size >= 1 and spec.shape[-1] > 0:
            out[f"{n}.last_align_bytes"] = alignment(int(spec.shape[-1] * size))
    return out


def rows(case: Case) -> dict[str, Any]:
    """``x.rows``: elements over the last dimension (how many rows a row-wise kernel walks)."""
    return {
        f"{n}.rows": math.prod(s.shape) // s.shape[-1] for n, s in plain_tensors(case) if s.shape and s.shape[-1] > 0
    }


def memory_formats(case: Case) -> dict[str, Any]:
    """``x.memory_format`` of an input of rank 4 or 5 (torch's name of its layout: ``channels_last`` is one
    member of the class its contiguity names)."""
    return {
        f"{n}.memory_format": memory_format(s.shape, s.strides)
        for n, s in plain_tensors(case)
        if s.shape and len(s.shape) in (4, 5)
    }


def attr_categories(case: Case) -> dict[str, Any]:
    """``attr.NAME.value``: an integer attribute's value as a category, so a failure at every value but one
    is a set, not a threshold (the language writes it ``attr.NAME``: grammar.expression)."""
    return {
        f"attr.{name}.value": str(value)
        for name, value in case.attributes.items()
        if isinstance(value, int) and not isinstance(value, bool)
    }


UNIT_STRIDE = ".stride[-1] == 1"
PITCH = ".stride[-2]~{}.shape[-1]"


def stride_patterns(n: str, shape: list[int], strides: list[int]) -> dict[str, Any]:
    """The stride patterns a kernel reads, named as the condition language writes them: ``x.stride[-1] == 1``
    (a class: the last dimension is unit-stride, whatever the others) and, from rank 2, the row pitch against
    the row length ``x.stride[-2]~x.shape[-1]`` (``>``: padded rows, ``=``: dense rows, ``<``: another order)."""
    out: dict[str, Any] = {f"{n}{UNIT_STRIDE}": strides[-1] == 1}
    if len(shape) >= 2:
        out[f"{n}{PITCH.format(n)}"] = _cmp(strides[-2], shape[-1])
    return out


MAX_PRODUCT_INPUTS = 2
MAX_PRODUCT_DIMS = 4
MAX_RATIO_ATTRS = 4
PRODUCT_OP, RATIO_OP = " * ", " // "


def _positive_int_attrs(case: Case) -> list[tuple[str, int]]:
    return sorted(
        (k, v) for k, v in case.attributes.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0
    )[:MAX_RATIO_ATTRS]


def _product_dims(spec: TensorSpec) -> list[int]:
    rank = len(spec.shape)
    return list(range(max(0, rank - MAX_PRODUCT_DIMS), rank))


def dim_products(case: Case) -> dict[str, Any]:
    """``x.shape[i] * x.shape[j]`` for two of an input's last :data:`MAX_PRODUCT_DIMS` dimensions (not both of
    a rank-2 input's: that is its element count), for the first :data:`MAX_PRODUCT_INPUTS` plain inputs."""
    out: dict[str, Any] = {}
    for n, spec in [t for t in plain_tensors(case) if t[1].shape][:MAX_PRODUCT_INPUTS]:
        shape, rank = spec.shape, len(spec.shape)
        if rank <= 2:
            continue
        dims = _product_dims(spec)
        for a, i in enumerate(dims):
            for j in dims[a + 1 :]:
                out[f"{dim_axis(n, i, rank)}{PRODUCT_OP}{dim_axis(n, j, rank)}"] = shape[i] * shape[j]
    return out


def dim_ratios(case: Case) -> dict[str, Any]:
    """``x.shape[i] // attr.k`` for each of the first :data:`MAX_RATIO_ATTRS` integer attributes positive in
    this case, over the same dimensions as :func:`dim_products`."""
    out: dict[str, Any] = {}
    attrs = _positive_int_attrs(case)
    if not attrs:
        return out
    for n, spec in [t for t in plain_tensors(case) if t[1].shape][:MAX_PRODUCT_INPUTS]:
        shape, rank = spec.shape, len(spec.shape)
        for i in _product_dims(spec):
            for k, v in attrs:
                out[f"{dim_axis(n, i, rank)}{RATIO_OP}attr.{k}"] = shape[i] // v
    return out


def product_value(case: Case, axis: str) -> int | None:
    """One product or ratio axis read on any case, whatever its rank (``x.shape[0] * x.shape[1]`` of a rank-5
    input too, which :func:`dim_products` leaves out): None where a dimension or the attribute is missing."""
    sides = product_sides(axis)
    if sides is None:
        return None
    sizes = []
    for side in (sides[0], sides[2]):
        if side.startswith("attr."):
            v = case.attributes.get(side[len("attr.") :])
            sizes.append(v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None)
            continue
        name, _, idx = side[:-1].partition(".shape[")
        spec = next((s for s in case.inputs if s.name == name and not s.none and s.tensors is None), None)
        shape = spec.shape if spec is not None and spec.shape else []
        k = int(idx) if idx.lstrip("-").isdigit() else None
        sizes.append(shape[k] if k is not None and -len(shape) <= k < len(shape) else None)
    a, b = sizes
    if a is None or b is None:
        return None
    return a * b if sides[1] == "*" else a // b


def fill_products(cases: dict[str, Case], prods: dict[str, dict[str, Any]]) -> None:
    """Every product or ratio some case has, read on every case where it is defined (in place): a name is one
    quantity at every rank, never absent where its dimensions exist."""
    names = sorted({k for p in prods.values() for k in p})
    for cid, p in prods.items():
        for k in names:
            if k not in p and (v := product_value(cases[cid], k)) is not None:
                p[k] = v


def product_sides(axis: str) -> tuple[str, str, str] | None:
    """``x.shape[0] * x.shape[1]`` -> ("x.shape[0]", "*", "x.shape[1]"); ``x.shape[1] // attr.g`` -> (..., "//",
    "attr.g"); None for another axis."""
    for op in (PRODUCT_OP, RATIO_OP):
        if op in axis:
            a, _, b = axis.partition(op)
            return a, op.strip(), b
    return None
