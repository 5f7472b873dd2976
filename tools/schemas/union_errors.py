"""One error line per actual mistake where a value may take several forms.

When a value of a union (a star's ``base``: a case or a planned id; an
attribute: a number, a string, a dtype argument, a list...) is wrong, pydantic
reports every branch that refused it, each under a location that carries the
branch's label (``stars.0.base.function-after[check_slug(), str]``).  A branch
that refused the value only for being of another kind (a dict where a string
goes) is not the caller's mistake when another branch took the value's kind
and found what is wrong inside it: those lines go, and so do the branch labels
in the locations of the lines kept.  When every branch refused the value's
kind, they become one line that lists the kinds it may take.

Branch labels are recognised by form: a model's class name, a builtin type
name, or a core-schema label (``function-after[...]``, ``list[...]``,
``literal[...]``).  A group counts as a union only when every label at that
place has such a form, at least one branch refused the value's kind, and those
branches all saw the same input: field names and map keys never match all three.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_PRIMITIVE_LABELS = {
    "str",
    "int",
    "float",
    "bool",
    "bytes",
    "list",
    "dict",
    "tuple",
    "set",
    "frozenset",
    "decimal",
    "date",
    "datetime",
    "time",
    "timedelta",
    "uuid",
    "any",
    "json",
}
_CLASS_LABEL = re.compile(r"^[A-Z][A-Za-z0-9]*$")
# The errors a branch gives a value of a kind it does not take at all.
_KIND_ERRORS = {
    "string_type",
    "int_type",
    "float_type",
    "bool_type",
    "bytes_type",
    "list_type",
    "dict_type",
    "tuple_type",
    "set_type",
    "model_type",
    "model_attributes_type",
    "dataclass_type",
    "none_required",
    "is_instance_of",
    "int_from_float",
    "decimal_type",
    "date_type",
    "datetime_type",
}


def is_branch_label(part: Any) -> bool:
    if not isinstance(part, str):
        return False
    return part in _PRIMITIVE_LABELS or bool(_CLASS_LABEL.match(part)) or "[" in part


def prune_union_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``errors`` (pydantic's ``exc.errors()``) with the branches of a union that
    only refused the value's kind dropped, or merged into one line, and the
    branch labels taken out of every location."""
    pruned = [dict(e, loc=tuple(e.get("loc", ()))) for e in errors]
    changed = True
    while changed:
        changed, pruned = _prune_once(pruned)
    return [dict(e, loc=tuple(p for p in e["loc"] if not isinstance(p, _Label))) for e in pruned]


class _Label(str):
    """A location part recognised as a union branch label (taken out at the end)."""


def _prune_once(errors: list[dict[str, Any]]) -> tuple[bool, list[dict[str, Any]]]:
    """Settle the deepest union first (a union inside a union's branch), one at a time."""
    groups: dict[tuple, list[int]] = {}
    for i, e in enumerate(errors):
        loc = e["loc"]
        for depth in range(len(loc)):
            if is_branch_label(loc[depth]) and not isinstance(loc[depth], _Label):
                groups.setdefault(loc[:depth], []).append(i)
    for prefix in sorted(groups, key=len, reverse=True):
        members = groups[prefix]
        depth = len(prefix)
        labels = {errors[i]["loc"][depth] for i in members}
        siblings = [i for i, e in enumerate(errors) if e["loc"][:depth] == prefix and len(e["loc"]) > depth]
        if len(labels) < 2 or set(siblings) != set(members):
            continue  # not every part at this place is a label (fields, map keys): not a union
        kind_only = {lab for lab in labels if _kind_only(errors, members, depth, lab)}
        inputs = [errors[i].get("input") for i in members if errors[i]["loc"][depth] in kind_only]
        if not kind_only or any(x != inputs[0] for x in inputs):
            continue
        if kind_only == labels:  # the value is of no kind the union takes: one line, every kind listed
            wants = [errors[i]["msg"].removeprefix("Input should be ") for i in members]
            merged = dict(
                errors[members[0]],
                loc=prefix,
                type="union_kind",
                msg="Input should be one of: " + "; ".join(dict.fromkeys(wants)),
            )
            return True, [
                merged if i == members[0] else e for i, e in enumerate(errors) if i == members[0] or i not in members
            ]
        out = []
        for i, e in enumerate(errors):
            if i in members:
                if e["loc"][depth] in kind_only:
                    continue
                loc = e["loc"]
                e = dict(e, loc=loc[:depth] + (_Label(loc[depth]),) + loc[depth + 1 :])
            out.append(e)
        return True, out
    return False, errors


def _kind_only(errors: list[dict[str, Any]], members: list[int], depth: int, label: str) -> bool:
    """The branch ``label`` gave one error, at the union's place, for the value's kind."""
    mine = [errors[i] for i in members if errors[i]["loc"][depth] == label]
    return len(mine) == 1 and len(mine[0]["loc"]) == depth + 1 and mine[0].get("type") in _KIND_ERRORS
