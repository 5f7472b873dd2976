"""Moves: the ways to set one axis of a recorded case to a target with one star variation, ``(variation
without its values, value)`` (flips.py covers the derived axes, relations and values classes; this module the
labelled axes, dimensions, counts, offsets, alignments, contiguity, and the shapes that move together),
and the star variation that sets a planned axis to a recorded case's value (crossing and exploring).
"""

from __future__ import annotations

import math
from typing import Any

from ..cases.derived import NONE_ATTR, UNSET, alignment, attr_from_axis, attr_json, contiguity, dim_axis, parse_dim_axis
from ..cases.relations import element_bytes, product_sides
from ..cases.stars import restride
from ..conditions.grammar import expression, is_category
from ..schemas import Case, contiguous_strides
from .context import Context, tied_dim
from .flips import dim_moves, exact_count_moves, flip_moves, product_moves


def _int_text(v: Any) -> bool:
    return isinstance(v, str) and v.lstrip("-").isdigit()


def _dim_moves(ctx: Context, base: Case, name: str, index: int) -> list[dict]:
    return dim_moves(ctx.ties, base, name, index)


def moves(ctx: Context, base: Case, axis: str, target: Any) -> list[tuple[dict, Any]]:
    """Ways to set ``axis`` of ``base`` to ``target`` with one star variation:
    (variation without values, value)."""
    if target == UNSET or target is None:
        return []  # an axis a case does not have (an attribute left out, a captured input's magnitude)
    if product_sides(axis) is not None:  # x.shape[0] * x.shape[1], x.shape[1] // attr.groups
        return product_moves(ctx.ties, base, axis, target)
    numeric = isinstance(target, (int, float)) and not isinstance(target, bool)
    dim = parse_dim_axis(axis)
    if (
        dim is not None or axis.endswith((".numel", ".offset", ".magnitude", ".last_align", ".offset_align"))
    ) and not numeric:
        return []
    if dim is not None:
        return [(v, int(target)) for v in _dim_moves(ctx, base, *dim)]
    if axis.startswith("attr."):  # every proposal's attribute: typed again from its axis text
        if is_category(axis):  # attr.groups.value: the attribute's value as a category
            return [({"axis": "attribute", "name": expression(axis)[5:]}, int(target))] if _int_text(target) else []
        if axis.endswith(NONE_ATTR):  # attr.bias.none: passed as None (the other side has no one value)
            return [({"axis": "attribute", "name": axis[5 : -len(NONE_ATTR)]}, None)] if target is True else []
        return [({"axis": "attribute", "name": axis[5:]}, attr_from_axis(target))]
    if axis == "mode":
        return [({"axis": "mode"}, target)]
    if axis == "dtype":
        return [({"axis": "dtype"}, target)]
    if "~" in axis:
        return flip_moves(ctx.ties, base, axis, target)
    name, _, fld = axis.partition(".")
    spec = next((i for i in base.inputs if i.name == name), None)
    if spec is None or spec.shape is None or spec.none:  # a tensor list or a None input: not moved here
        return flip_moves(ctx.ties, base, axis, target) if fld == "none" else []
    if fld == "dtype":
        return [({"axis": "dtype", "input": name}, target)]
    if fld == "offset":
        return [({"axis": "storage_offset", "input": name}, int(target))]
    if fld == "rank" and spec.shape and int(target) >= 1:  # the leading dimensions merged, or 1s put inside
        t, shape = int(target), list(spec.shape)
        reshaped = [math.prod(shape[: len(shape) - t + 1]), *shape[len(shape) - t + 1 :]] if t < len(shape) else shape
        reshaped = reshaped[:1] + [1] * (t - len(shape)) + reshaped[1:]  # the first and the last dimension kept
        return [({"axis": "shape", "input": name}, reshaped)] if reshaped != shape and spec.strides is None else []
    if fld == "numel":
        out = []
        numel = math.prod(spec.shape)
        tied = any(dim_axis(name, i, len(spec.shape)) in ctx.ties for i in range(len(spec.shape)))
        for i, size in enumerate(spec.shape):
            rest = numel // size if size else math.prod(s for j, s in enumerate(spec.shape) if j != i)
            if rest <= 0:
                continue
            new = max(1, round(target / rest)) if target > 0 else 0
            for v in _dim_moves(ctx, base, name, i):
                out.append((v, new))
            if not tied and len(spec.shape) > 1 and target > 0 and new * rest != target:
                flat = [1] * len(spec.shape)
                flat[i] = int(target)
                out.append(({"axis": "shape", "input": name}, flat))
        if target > 0 and float(target).is_integer():
            out += exact_count_moves(ctx.ties, base, name, int(target))  # two dimensions at once: exactly it
        return out
    if fld == "last_align" and spec.shape:
        # the nearest last-dimension sizes above the current one aligned exactly to the target
        a, cur = int(target), spec.shape[-1]
        if a < 1:
            return []
        sizes = [v for v in range((cur // a + 1) * a, (cur // a + 9) * a, a) if alignment(v) == a][:1]
        return [(var, v) for v in sizes for var in _dim_moves(ctx, base, name, len(spec.shape) - 1)]
    if fld == "last_align_bytes" and spec.shape:  # a row's alignment in bytes: in elements of the base's dtype
        width = element_bytes(spec.dtype) or 1
        return moves(ctx, base, f"{name}.last_align", int(target // width)) if target >= width else []
    if fld.startswith("stride[") and numeric:  # one dimension's stride, the others kept
        strides = list(spec.strides if spec.strides is not None else contiguous_strides(spec.shape))
        i = int(fld[len("stride[") : -1])
        strides[i] = int(target)
        return [({"axis": "strides", "input": name}, strides)]
    if fld == "offset_align":
        return [({"axis": "storage_offset", "input": name}, int(target))]  # the smallest offset aligned exactly so
    if fld == "contiguity":
        laid = strides_for(spec.shape, target)
        return [({"axis": "strides", "input": name}, laid)] if laid is not None or target == "contiguous" else []
    if fld == "magnitude":
        values = spec.values.model_dump(mode="json", exclude_none=True)
        if spec.values.kind == "normal" and target > abs(spec.values.mean):
            return [({"axis": "values", "input": name}, values | {"std": target - abs(spec.values.mean)})]
        if spec.values.kind == "uniform" and spec.values.low is not None and spec.values.high is not None:
            scale = target / max(abs(spec.values.low), abs(spec.values.high), 1e-30)
            return [
                (
                    {"axis": "values", "input": name},
                    values | {"low": spec.values.low * scale, "high": spec.values.high * scale},
                )
            ]
        if spec.values.kind in ("zeros", "ones", "full") and target > 0:
            return [({"axis": "values", "input": name}, {"kind": "normal", "std": target})]
        return []
    if ctx.tried_dtypes is None:  # once per analysis
        ctx.tried_dtypes = {
            v for a in ctx.axes.values() for k, v in a.items() if k.endswith(".dtype") and isinstance(v, str)
        }
    return flip_moves(ctx.ties, base, axis, target, ctx.tried_dtypes)


def strides_for(shape: list[int], kind: str) -> list[int] | None:
    """Strides of one non-contiguous pattern of ``shape`` (None when the shape
    cannot have it, e.g. no transposition of a vector)."""
    if kind == "contiguous" or not shape:
        return None
    big = [i for i, s in enumerate(shape) if s > 1]
    dense = contiguous_strides(shape)
    if kind == "transposed" and len(big) >= 2:
        a, b = big[-2], big[-1]
        order = list(range(len(shape)))
        order[a], order[b] = order[b], order[a]
        acc, strides = 1, [0] * len(shape)
        for i in reversed(order):
            strides[i] = acc
            acc *= shape[i]
        out = strides
    elif kind == "sliced" and big:
        out = [2 * s for s in dense]
    elif kind == "broadcast" and big:
        out = list(dense)
        out[big[0]] = 0
    elif kind == "overlapping" and len(big) >= 2:
        out = list(dense)
        out[big[0]] = 1
    else:
        return None
    return out if contiguity(shape, out) == kind else None


def tied_shape_moves(ctx: Context, base: Case, name: str, shape: list[int]) -> list[tuple[dict, Any]]:
    """The shape changes of the other inputs that keep their dimensions tied to ``name``'s equal when its
    shape becomes ``shape`` (a matmul's inner size, a shared batch): each named, as a crossing names every
    change it makes."""
    out = []
    for spec in base.inputs:
        if spec.name == name or spec.none or spec.shape is None or spec.tensors is not None:
            continue
        new = list(spec.shape)
        for i in range(len(spec.shape)):
            for tied in ctx.ties.get(dim_axis(spec.name, i, len(spec.shape)), []):
                owner, index = tied_dim(tied)
                if owner == name and -len(shape) <= index < len(shape):
                    new[i] = shape[index]
        if new != spec.shape:
            strides = restride(spec.shape, spec.strides, new)
            out.append(({"axis": "shape", "input": spec.name}, new))
            if strides:
                out.append(({"axis": "strides", "input": spec.name}, strides))
    return out


def reshapes(ctx: Context, base: Case, name: str, axis: str) -> list[tuple[dict, Any]]:
    """Two dimensions changed at once (a factor 2 moved from one to another), or
    the last dimension grown by twice its alignment (the same alignment)."""

    spec = next(i for i in base.inputs if i.name == name)
    shape: list[int] = spec.shape or []  # a None or tuple input has no dimension to move
    out: list[tuple[dict, Any]] = []
    if axis.endswith("last_align") and shape and shape[-1] > 0:
        a = shape[-1] & -shape[-1]
        out += [(v, shape[-1] + 2 * a) for v in dim_moves(ctx.ties, base, name, len(shape) - 1)]
        return out
    keep_last = axis.endswith((".rows",)) or ".stride[" in axis
    for i in range(len(shape)):
        for j in range(len(shape)):
            if i == j or shape[i] % 2 or (keep_last and len(shape) - 1 in (i, j)):
                continue
            for vi in dim_moves(ctx.ties, base, name, i):
                for vj in dim_moves(ctx.ties, base, name, j):
                    if set(vi["dims"]) & set(vj["dims"]):
                        continue
                    out.append((dict(vi, also=[dict(vj, values=[shape[j] * 2])]), shape[i] // 2))
    if not keep_last:  # no factor 2 to move: two dimensions swapped (the same count, another shape)
        for i in range(len(shape)):
            for j in range(i + 1, len(shape)):
                if shape[i] == shape[j]:
                    continue
                for vi in dim_moves(ctx.ties, base, name, i):
                    for vj in dim_moves(ctx.ties, base, name, j):
                        if not set(vi["dims"]) & set(vj["dims"]):
                            out.append((dict(vi, also=[dict(vj, values=[shape[i]])]), shape[j]))
    return out[:4]


def variation_for(axis_key: str) -> dict[str, Any] | None:
    """The star variation (without values) that sets a planned axis, None where none does."""
    if axis_key in ("mode", "dtype", "layout"):
        return {"axis": axis_key}
    if axis_key.startswith("attr."):
        return {"axis": "attribute", "name": axis_key[len("attr.") :]}
    name, _, fld = axis_key.partition(".")
    mapping = {"shape": "shape", "strides": "strides", "offset": "storage_offset", "values": "values"}
    return {"axis": mapping[fld], "input": name} if fld in mapping else None


def raw_value(case: Case, axis_key: str) -> Any:
    """A case's value of a planned axis as a star variation takes it (None: no one value)."""
    if axis_key == "mode":
        return case.mode
    if axis_key.startswith("attr."):
        return attr_json(case.attributes.get(axis_key[len("attr.") :]))
    if axis_key in ("dtype", "layout"):
        return None  # per-input lists: not one star value
    name, _, fld = axis_key.partition(".")
    spec = next((i for i in case.inputs if i.name == name), None)
    if spec is None:
        return None
    if fld == "values":
        return spec.values.model_dump(mode="json")
    return {"offset": spec.storage_offset}.get(fld, getattr(spec, fld, None))
