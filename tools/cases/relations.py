"""Derived quantities, values classes and relations of a case: the axes a
hypothesis may name beyond one labelled axis.

Per tensor input ``x`` (also a list member ``x[1]``):

- ``x.bytes``: element count x element size in bytes;
- ``x.align[i]`` for each dimension but the last (the last is ``x.last_align``):
  the largest power of two dividing its size, uncapped (up to the size); a
  size of 0 has none (0 is divisible by every power of two);
- values classes from the value spec that applies to the dtype: ``x.all_zero``,
  ``x.has_zero`` (some element is exactly 0), ``x.zero_rows`` (some row - a
  slice along the last dimension - is all zero), ``x.constant`` (every element
  equal), ``x.sign`` (``nonnegative`` / ``nonpositive`` / ``mixed``; absent for an
  all-zero tensor). A captured input has none of them (its values are data).

Relations (each a small set of values, so a predicate over it is a named class):

- two dimensions of one input: ``x.shape[0]~x.shape[-1]`` = ``<``, ``=`` or ``>``;
- the same dimension (aligned from the right) of two inputs:
  ``x.shape[-1]~y.shape[-1]``;
- two inputs' dtypes: ``x.dtype~y.dtype`` = ``=`` or ``!=``;
- two inputs' shapes: ``x.shape~y.shape`` = ``equal``, ``broadcast`` (they
  broadcast to a larger shape) or ``other``.

Relations are made for the first :data:`MAX_RELATION_INPUTS` tensor inputs and
dimensions of inputs up to rank :data:`MAX_RELATION_RANK`, which bounds the
hypothesis space (references/behavior.md).
"""

from __future__ import annotations

import math
from typing import Any

from ..schemas import Case, TensorSpec
from .derived import DTYPE_BITS, alignment, dim_axis, memory_format
from .memo import by_content, once

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
    """``all_zero``, ``has_zero``, ``zero_rows``, ``constant``, ``sign`` of one tensor's values."""
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


def tensor_quantities(spec: TensorSpec, n: str) -> dict[str, Any]:
    """Bytes, per-dimension alignments (all but the last) and values classes of one tensor; once per distinct
    spec (memo.by_content)."""
    return by_content("tensor_quantities", n, spec, lambda: _tensor_quantities(spec, n))


def _tensor_quantities(spec: TensorSpec, n: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    size = element_bytes(spec.dtype)
    if size is not None:
        b = math.prod(spec.shape) * size
        out[f"{n}.bytes"] = int(b) if float(b).is_integer() else b
    for i, dim in enumerate(spec.shape[:-1]):
        a = alignment(dim)
        if a is not None:
            out[f"{n}.align[{i}]"] = a
    out.update(value_classes(spec, n))
    return out


def _broadcast(a: list[int], b: list[int]) -> str:
    if a == b:
        return "equal"
    for x, y in zip(
        reversed(a), reversed(b), strict=False
    ):  # the trailing dimensions; a longer shape's extra ones broadcast
        if x != y and x != 1 and y != 1:
            return "other"
    return "broadcast"


def relation_axes(case: Case) -> dict[str, Any]:
    """Every derived quantity and relation of a case (see the module docstring); once per sealed case (memo.py)."""
    return once(case, "relation_axes", lambda: _relation_axes(case))


def _relation_axes(case: Case) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tensors: list[tuple[str, TensorSpec]] = []
    for spec in case.inputs:
        if spec.none:
            continue
        if spec.tensors is not None:
            for j, member in enumerate(spec.tensors):
                out.update(tensor_quantities(member, f"{spec.name}[{j}]"))
            continue
        out.update(tensor_quantities(spec, spec.name))
        tensors.append((spec.name, spec))
    for name, tensor in tensors:
        rank = len(tensor.shape)
        if rank > MAX_RELATION_RANK:
            continue
        for i in range(rank):
            for j in range(i + 1, rank):
                out[f"{dim_axis(name, i, rank)}~{dim_axis(name, j, rank)}"] = _cmp(tensor.shape[i], tensor.shape[j])
    plain = tensors[:MAX_RELATION_INPUTS]
    for ia, (na, sa) in enumerate(plain):
        for nb, sb in plain[ia + 1 :]:
            out[f"{na}.dtype~{nb}.dtype"] = "=" if sa.dtype == sb.dtype else "!="
            out[f"{na}.shape~{nb}.shape"] = _broadcast(sa.shape, sb.shape)
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


# Open-space quantities (references/behavior.md, "An open space"): what an engineer reaches for when the
# planned axes fail.  Enumerated only when no atom of the first space separates the cases alone (they
# restate a planned axis in most runs, and would otherwise tie with it); the probes of a finding of the first
# space (re-pin under each dtype, another shape) are what show a first-space finding they explain better.
OPEN_SUFFIXES = (".last_align_bytes", ".rows", ".stride[", ".value", ".memory_format")


def open_quantities(case: Case) -> dict[str, Any]:
    """:func:`_open_quantities`, once per sealed case (memo.py)."""
    return once(case, "open_quantities", lambda: _open_quantities(case))


def _open_quantities(case: Case) -> dict[str, Any]:
    """Per plain tensor input ``x``: ``x.stride[i]`` (each dimension's stride in
    elements, the last ``[-1]``; contiguous strides when none are given),
    ``x.last_align_bytes`` (the largest power of two dividing one row's bytes:
    an alignment that moves with the element size) and ``x.rows`` (elements
    over the last dimension: how many rows a row-wise kernel walks); per integer
    attribute, ``attr.NAME.value`` (its value as a category, so a failure at
    every value but one is a set, not a threshold); ``x.memory_format`` of an input of rank 4 or 5 (torch's
    name of its layout: ``channels_last`` is one member of the class its contiguity names)."""
    from ..schemas import contiguous_strides

    out: dict[str, Any] = {}
    for spec in case.inputs:
        if spec.none or spec.tensors is not None or not spec.shape:
            continue
        n, rank = spec.name, len(spec.shape)
        strides = spec.strides if spec.strides is not None else contiguous_strides(spec.shape)
        for i, st in enumerate(strides):
            out[f"{n}.stride[{-1 if i == rank - 1 else i}]"] = st
        out.update(stride_patterns(n, spec.shape, strides))
        size = element_bytes(spec.dtype)
        if size and size >= 1 and spec.shape[-1] > 0:
            out[f"{n}.last_align_bytes"] = alignment(int(spec.shape[-1] * size))
        if spec.shape[-1] > 0:
            out[f"{n}.rows"] = math.prod(spec.shape) // spec.shape[-1]
        if rank in (4, 5):
            out[f"{n}.memory_format"] = memory_format(spec.shape, spec.strides)
    for name, value in case.attributes.items():  # a numeric attribute as a category: "any value but one"
        if isinstance(value, int) and not isinstance(value, bool):
            out[f"attr.{name}.value"] = str(value)
    return out


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


# Products and ratios (references/behavior.md, "An open space"): the product of two dimensions of one input and
# a dimension over a positive integer attribute, each named as the condition language writes it
# (``x.shape[0] * x.shape[1]``, ``x.shape[1] // attr.groups``) so that a finding over one reads as a condition.
# Bounded: the first MAX_PRODUCT_INPUTS plain inputs, their last MAX_PRODUCT_DIMS dimensions, at most
# MAX_RATIO_ATTRS integer attributes.  Enumerated after the open space's quantities, before a conjunction.
MAX_PRODUCT_INPUTS = 2
MAX_PRODUCT_DIMS = 4
MAX_RATIO_ATTRS = 4
PRODUCT_OP, RATIO_OP = " * ", " // "


def product_quantities(case: Case) -> dict[str, Any]:
    """``x.shape[i] * x.shape[j]`` for two of an input's last dimensions (not both of a rank-2 input's: that
    is its element count) and ``x.shape[i] // attr.k`` for each integer attribute positive in this case; once
    per sealed case (memo.py)."""
    return once(case, "product_quantities", lambda: _product_quantities(case))


def _product_quantities(case: Case) -> dict[str, Any]:
    out: dict[str, Any] = {}
    attrs = sorted(
        (k, v) for k, v in case.attributes.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0
    )[:MAX_RATIO_ATTRS]
    plain = [s for s in case.inputs if not s.none and s.tensors is None and s.shape][:MAX_PRODUCT_INPUTS]
    for spec in plain:
        shape = spec.shape or []
        rank = len(shape)
        dims = list(range(max(0, rank - MAX_PRODUCT_DIMS), rank))
        for a, i in enumerate(dims):
            for j in dims[a + 1 :]:
                if rank > 2:
                    name = f"{dim_axis(spec.name, i, rank)}{PRODUCT_OP}{dim_axis(spec.name, j, rank)}"
                    out[name] = shape[i] * shape[j]
            for k, v in attrs:
                out[f"{dim_axis(spec.name, i, rank)}{RATIO_OP}attr.{k}"] = shape[i] // v
    return out


def product_value(case: Case, axis: str) -> int | None:
    """One product or ratio axis read on any case, whatever its rank (``x.shape[0] * x.shape[1]`` of a rank-5
    input too, which :func:`product_quantities` leaves out): None where a dimension or the attribute is missing."""
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
