"""Minimal pairs in the planned space: for a hypothesis (or one term of a
conjunction), the passing and failing cases that differ in the fewest
planned axes - one of the hypothesis' sources (a shape and its strides count
as one) - and, among those, by the smallest change of the planned value
(``[16,192]`` / ``[16,200]`` before ``[16,512]`` / ``[16,3040]``; offset 8 / 4
before 1032 / 4).

Linear in the cases per planned axis: cases that differ in exactly one axis
are found by hashing the values of all the other axes; a group of many cases
is scanned in the order of the differing value.  Ties are broken by case id,
so nothing depends on the order cases arrived.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from itertools import pairwise
from operator import itemgetter
from typing import Any

from ..schemas import MinimalPair

MAX_PAIRS_PER_AXIS = 64
MAX_GROUP_PAIRS = 400


def _shape(text: str) -> list[int] | None:
    if text == "scalar":
        return []
    try:
        return [int(p) for p in text.split("x")]
    except ValueError:
        return None


_VALUE_DEFAULTS = {"mean": 0.0, "std": 1.0, "low": 0.0, "high": 0.0, "fill": 0.0}


def _value_params(text: str) -> tuple[str, dict[str, float]] | None:
    """``normal(std=256.0)+nan`` -> ("normal+nan", {"std": 256.0}); None when not a values text."""
    head, _, rest = text.partition("(")
    params: dict[str, float] = {}
    tail = head
    if rest:
        inner, _, tail_specials = rest.partition(")")
        for part in inner.split(","):
            key, _, val = part.partition("=")
            try:
                params[key] = float(val)
            except ValueError:
                return None
        tail = head + tail_specials
    if not head.isalpha():
        return None
    return tail, params


def change(a: str | None, b: str | None) -> float:
    """How far apart two planned values of one axis are: a number's
    difference, a shape's summed dimension differences (a rank change counts
    more than any of those), a value spec's parameters by their log ratio (a
    change of kind or special values counts more), 1 for two other values."""
    if a is None or b is None:
        return 1.0
    try:
        return abs(float(a) - float(b))
    except ValueError:
        pass
    sa, sb = _shape(a), _shape(b)
    if sa is not None and sb is not None:
        if len(sa) != len(sb):
            return 1e12 + abs(len(sa) - len(sb))
        return float(sum(abs(x - y) for x, y in zip(sa, sb, strict=True)))  # equal lengths: checked above
    va, vb = _value_params(a), _value_params(b)
    if va is not None and vb is not None:
        if va[0] != vb[0]:
            return 100.0
        total = 0.0
        for key in sorted(set(va[1]) | set(vb[1])):
            default = _VALUE_DEFAULTS.get(key, 0.0)
            x, y = abs(va[1].get(key, default)), abs(vb[1].get(key, default))
            total += abs(math.log2(x / y)) if x > 0 and y > 0 else (0.0 if x == y else 50.0)
        return total
    return 1.0


def _order_key(value: str | None):
    if value is None:
        return (2, ())
    try:
        return (0, (float(value),))
    except ValueError:
        shape = _shape(value)
        return (0, tuple(shape)) if shape is not None else (1, (value,))


class PairIndex(dict):
    """Per planned axis, the (change, passing, failing) pairs of cases that
    differ only there, closest first (at most MAX_PAIRS_PER_AXIS each); an
    axis is indexed the first time a hypothesis asks for it."""

    def __init__(
        self,
        dist: dict[str, dict[str, str]],
        axes: dict[str, dict[str, Any]],
        status: dict[str, str],
        tied: dict[str, set[str]] | None = None,
    ):
        super().__init__()
        self.tied = tied or {}  # input -> the inputs whose dimensions are tied to its (their shapes move with it)
        self.ids = sorted(c for c, s in status.items() if s in ("pass", "fail"))
        self.axis_keys = sorted({k for c in self.ids for k in dist[c]})
        self.rows = {c: tuple(dist[c].get(k) for k in self.axis_keys) for c in self.ids}
        self.dist, self.axes, self.status = dist, axes, status

    def get(self, k: str, default=None):
        if k not in self:
            self[k] = _pairs_of(self, k)
        return dict.get(self, k) or default


def pair_index(
    dist: dict[str, dict[str, str]],
    axes: dict[str, dict[str, Any]],
    status: dict[str, str],
    tied: dict[str, set[str]] | None = None,
) -> PairIndex:
    """The lazy pair index of a run (see PairIndex); a shape change of an
    input with tied dimensions moves the tied inputs' shapes too (one change)."""
    return PairIndex(dist, axes, status, tied)


def _pairs_of(index: PairIndex, k: str) -> list[tuple[float, str, str]]:
    """The pairs of cases differing only in planned axis ``k`` (a shape with its strides' layout class kept)."""
    ids, keys, rows, dist, axes, status = index.ids, index.axis_keys, index.rows, index.dist, index.axes, index.status
    if k not in keys:
        return []
    i = keys.index(k)
    name = k[: -len(".shape")] if k.endswith(".shape") else None
    skip = {name + ".strides"} if name else set()
    if name:
        skip |= {f"{t}.shape" for t in index.tied.get(name, ())}
    groups: dict[Any, list[str]] = defaultdict(list)
    others = [j for j in range(len(keys)) if j != i and keys[j] not in skip]
    pick = itemgetter(*others) if others else (lambda row: ())
    for c in ids:
        rest = pick(rows[c])
        if name is not None:  # a shape change keeps the layout class, not the stride numbers
            rest = (rest, str(axes[c].get(name + ".contiguity")))
        groups[rest].append(c)
    pairs: list[tuple[float, str, str]] = []
    for members in groups.values():
        fs = [c for c in members if status[c] == "fail"]
        ps = [c for c in members if status[c] == "pass"]
        if not fs or not ps:
            continue
        if len(fs) * len(ps) <= MAX_GROUP_PAIRS:
            cand = [(p, q) for p in ps for q in fs]
        else:
            ordered = sorted(members, key=lambda c: (_order_key(dist[c].get(k)), c))
            cand = [(a, b) if status[a] == "pass" else (b, a) for a, b in pairwise(ordered) if status[a] != status[b]]
        pairs.extend((change(dist[p].get(k), dist[q].get(k)), p, q) for p, q in cand)
    return sorted(pairs)[:MAX_PAIRS_PER_AXIS]


def best_pair(
    index: dict[str, list[tuple[float, str, str]]], sources: list[str], accept: Callable[[str, str], bool] | None = None
) -> tuple[str, str, str] | None:
    """The closest accepted pair over the hypothesis' sources: (passing, failing, axis)."""
    best = None
    for rank, k in enumerate(sources):
        for score, p, q in index.get(k, []):
            if accept is not None and not accept(p, q):
                continue
            cand = (score, rank, p, q, k)
            if best is None or cand < best:
                best = cand
            break  # the list is sorted: the first accepted pair is this axis' closest
    return None if best is None else (best[2], best[3], best[4])


def make_pair(
    p: str,
    q: str,
    axis: str,
    axes: dict[str, dict[str, Any]],
    dist: dict[str, dict[str, str]],
    differ: Callable[[dict, dict], list[str]],
    unset: Any,
) -> MinimalPair:
    diff = differ(dist[p], dist[q])
    return MinimalPair(
        passing=p,
        failing=q,
        passing_value=axes[p].get(axis, unset),
        failing_value=axes[q].get(axis, unset),
        differs_in=diff,
        passing_planned={k: str(dist[p].get(k)) for k in diff},
        failing_planned={k: str(dist[q].get(k)) for k in diff},
    )
