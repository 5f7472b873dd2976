"""Exploring before any hypothesis: vary each axis of a failing case once, and walk from the closest
passing case toward it - the ``explore`` proposals.
"""

from __future__ import annotations

import json
from typing import Any

from ..cases.axes import axes_difference
from ..cases.derived import attr_json
from ..schemas import FLOAT_DTYPES, MODES, Case
from .context import Context
from .flips import dim_moves
from .moves import raw_value, strides_for, variation_for
from .proposal import Proposal, ProposedCase, build_case, by_base


def _each_axis_once(ctx: Context, base: Case) -> list[tuple[dict, Any]]:
    """One other value for every axis of a case: another mode and dtype, each
    dimension halved, strides contiguous (or transposed), offset 0 (or 16),
    plain values (or zeros), each attribute's other value seen in the run."""
    out: list[tuple[dict, Any]] = []
    out.extend(({"axis": "mode"}, m) for m in MODES if m != base.mode and m not in ctx.no_modes)
    floats = [i for i in base.inputs if not i.none and i.tensors is None and i.dtype in FLOAT_DTYPES]
    if floats:
        have = {i.dtype for i in floats}
        alt = next((d for d in ("float32", "float16", "bfloat16") if d not in have), None)
        if alt:
            out.append(({"axis": "dtype"}, alt))
    for spec in base.inputs:
        if spec.shape is None or spec.none or spec.tensors is not None:
            continue
        out.append(
            (
                {"axis": "strides", "input": spec.name},
                None if not spec.is_contiguous() else strides_for(spec.shape, "transposed"),
            )
        )
        out.append(({"axis": "storage_offset", "input": spec.name}, 0 if spec.storage_offset else 16))
        v = spec.values.for_dtype(spec.dtype)
        out.append(
            (
                {"axis": "values", "input": spec.name},
                {"kind": "normal"}
                if (v.specials or v.kind != "normal")
                else {"kind": "uniform", "low": 0.5, "high": 1.5},
            )
        )
        for i, size in enumerate(spec.shape):
            if size > 1:
                out.extend((m, size // 2) for m in dim_moves(ctx.ties, base, spec.name, i))
    for name in sorted(base.attributes):
        seen = sorted(
            {
                json.dumps(attr_json(c.attributes.get(name)), sort_keys=True)
                for c in ctx.cases.values()
                if name in c.attributes
            }
            - {json.dumps(attr_json(base.attributes[name]), sort_keys=True)}
        )
        if seen:
            out.append(({"axis": "attribute", "name": name}, json.loads(seen[0])))
    return [
        (v, x)
        for v, x in out
        if not (
            v["axis"] == "strides"
            and x is None
            and next(i for i in base.inputs if i.name == v.get("input")).is_contiguous()
        )
    ]


def explore(ctx: Context) -> list[Proposal]:
    """No hypothesis yet: vary each axis of a failing case once (the first
    failing cases, by id), and, with passing cases, walk from the closest
    passing case toward the failing one one axis at a time."""
    failing = sorted(c for c, s in ctx.status.items() if s == "fail")
    passing = sorted(c for c, s in ctx.status.items() if s == "pass")
    # one failing case, the same from one analysis to the next: the first planned (shortest id: a derived id
    # extends its base's), ties by id; once each of its axes was varied, explore is done
    failing.sort(key=lambda f: (len(f), f))
    out: list[Proposal] = []
    for fid in failing[:1]:
        cands: list[ProposedCase] = []
        base = ctx.cases[fid]
        for var, value in _each_axis_once(ctx, base):
            cand = build_case(ctx, base, var, value, "explore")
            if cand is not None:
                ctx.seen_contents.add(cand.content)
                cands.append(cand)
        why = (
            f"no hypothesis separates the failing cases from the passing ones yet: vary each axis of the "
            f"failing case {fid!r} once"
            if passing
            else f"no case passes yet: vary each axis of the failing case {fid!r} once, toward a plain case"
        )
        if passing:
            near = min(passing, key=lambda p: (len(axes_difference(ctx.dist[p], ctx.dist[fid])), p))
            for key in axes_difference(ctx.dist[near], ctx.dist[fid]):
                step = variation_for(key)
                if step is None:
                    continue
                raw = raw_value(ctx.cases[fid], key)
                cand = build_case(ctx, ctx.cases[near], step, raw, key)
                if cand is not None:
                    ctx.seen_contents.add(cand.content)
                    cands.append(cand)
            why += f", and walk from the passing case {near!r} toward it one axis at a time"
        groups: dict[tuple, list[ProposedCase]] = {}
        for c in cands:
            groups.setdefault(c.group, []).append(c)
        for group in by_base(cands) if len(groups) > 1 else []:  # every axis at once first: one round covers them
            out.append(
                Proposal(
                    "explore",
                    None,
                    group,
                    why=why + " (every such change at once, one case each)",
                    if_fails="that axis is not what the failure needs",
                    if_passes="that axis change removes the failure: a hypothesis on it follows",
                )
            )
        for group in groups.values():
            out.append(
                Proposal(
                    "explore",
                    None,
                    group,
                    why=why,
                    if_fails="that axis is not what the failure needs",
                    if_passes="that axis change removes the failure: a hypothesis on it follows",
                )
            )
        if out:
            break
    return out
