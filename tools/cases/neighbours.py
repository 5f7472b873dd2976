"""Cases without a one-axis neighbour: a failure there cannot be pinned to one
axis.  Plan-time warnings that name the closest case and the axes between."""

from __future__ import annotations

from ..schemas import Case
from .axes import axes_difference, distance_axes, owner

MAX_WARNINGS = 10


def _one_axis_keys(axes: dict[str, str], keys: list[str]) -> list[tuple]:
    """One key per way of leaving one variation axis out: two cases that share
    a key differ at most in that axis and the ones :func:`axes_difference`
    hides with it (an input's strides with its shape, a list's members with its
    length, every other axis of an input with its None-or-not)."""
    full = tuple(axes.get(k) for k in keys)
    out = []
    for i, key in enumerate(keys):
        name = owner(key)
        if key.endswith(".shape"):
            drop = {i} | {j for j, k in enumerate(keys) if k == key[: -len(".shape")] + ".strides"}
        elif key.endswith(".len"):
            drop = {i} | {j for j, k in enumerate(keys) if owner(k) == name and "[" in k}
        elif key.endswith(".none"):
            drop = {j for j, k in enumerate(keys) if owner(k) == name}
        else:
            drop = {i}
        out.append((i, tuple(None if j in drop else v for j, v in enumerate(full))))
    shapes = {j for j, k in enumerate(keys) if k.endswith((".shape", ".strides"))}
    if len([k for k in keys if k.endswith(".shape")]) > 1:  # every shape left out: a size moved in several inputs
        out.append((-1, tuple(None if j in shapes else v for j, v in enumerate(full))))
    return out


def one_dim_move(a: Case, b: Case) -> bool:
    """The inputs' shapes differ by one size moved wherever it stands (a ``dim`` variation: x [4, 64] and
    w [64] -> x [4, 128] and w [128]) - one axis, however many inputs it changes."""
    moved: set[tuple[int, int]] = set()
    shapes = {i.name: i.shape for i in b.inputs if not i.none}
    for spec in a.inputs:
        other = shapes.get(spec.name)
        if spec.none or spec.shape is None or other is None:
            continue
        if len(spec.shape) != len(other):
            return False
        moved |= {(u, v) for u, v in zip(spec.shape, other, strict=True) if u != v}
    return len(moved) == 1


def difference(a: Case, b: Case, da: dict[str, str], db: dict[str, str]) -> list[str]:
    """The axes two cases differ in, a size moved across inputs (:func:`one_dim_move`) read as one
    (``x.shape+w.shape``)."""
    diff = axes_difference(da, db)
    if len(diff) > 1 and all(k.endswith(".shape") for k in diff) and one_dim_move(a, b):
        return ["+".join(diff)]
    return diff


def multi_axis_warnings(
    cases: list[Case],
    *,
    limit: int = MAX_WARNINGS,
    star_bases: dict[str, Case] | None = None,
    only: set[str] | None = None,
) -> list[str]:
    """One warning per case that differs from every other case in more than
    one axis, naming its closest neighbour and the differing axes (the first
    ``limit`` such cases; one more line counts the rest); ``only``: warn about
    these cases alone (those a call added: a case is warned about once, when it
    is planned).  A size moved in several inputs at once is one axis
    (:func:`one_dim_move`).  A case a star made
    from a planned base (``star_bases``: case id -> base) differs from it in
    what the star asked - a ``dim`` moving several inputs' shapes, a crossing's
    ``also`` - and is not warned about.

    Near-linear in the number of cases: cases are grouped by their axes with
    one axis left out at a time; a case is checked with :func:`axes_difference`
    against a few members of each group it shares, instead of against every case."""
    warnings: list[str] = []
    if len(cases) < 2:
        return warnings
    axes = [distance_axes(c) for c in cases]
    keys = sorted({k for a in axes for k in a})
    groups: dict[tuple, list[int]] = {}
    per_case = [_one_axis_keys(a, keys) for a in axes]
    for i, ks in enumerate(per_case):
        for k in ks:
            groups.setdefault(k, []).append(i)

    def has_neighbour(i: int) -> bool:
        for k in per_case[i]:
            others = [j for j in groups[k][:4] if j != i][:3]
            if any(len(difference(cases[i], cases[j], axes[i], axes[j])) <= 1 for j in others):
                return True
        return False

    ids = {c.id for c in cases}
    asked = {cid for cid, base in (star_bases or {}).items() if base.id in ids}
    lonely = [
        i
        for i in range(len(cases))
        if cases[i].id not in asked and (only is None or cases[i].id in only) and not has_neighbour(i)
    ]
    for i in lonely[:limit]:
        best: tuple[int, str, list[str]] | None = None
        for j, other in enumerate(cases):
            if i == j:
                continue
            diff = difference(cases[i], cases[j], axes[i], axes[j])
            if best is None or len(diff) < best[0]:
                best = (len(diff), other.id, diff)
                if len(diff) <= 2:
                    break
        assert best is not None
        warnings.append(
            f"case {cases[i].id!r} differs from every other case in more than one axis; closest is "
            f"{best[1]!r}, differing in {best[0]} axes: {', '.join(best[2])}. A failure there cannot be "
            "pinned to one axis - add a case between them that changes one axis at a time."
        )
    if len(lonely) > limit:
        warnings.append(
            f"... and {len(lonely) - limit} more case(s) that differ from every other case in more "
            "than one axis (the first ones are named above)."
        )
    return warnings
