"""The tool's hypothesis space as the condition language writes it (references/behavior.md, "Hypotheses";
references/conditions.md): every axis a hypothesis may name is a condition-language expression, and every value
of it a constant of the language, so a finding reads back through the language's own evaluator
(tools/conditions/language.py) with the truth the space gave it.

- :func:`expression`: an axis -> the expression it names.  The axis name itself, with one exception: an integer
  attribute read as a category (``attr.groups.value``, a separate axis so that "every value but one" is a set,
  not a threshold) is the attribute itself, ``attr.groups``.  A relation ``a~b`` names its two sides, each an
  expression (hypotheses.atom_text writes ``a < b``).
- :func:`literal`: a value of an axis as a constant of the language: a number as :func:`wording.num` writes it,
  a known symbol bare (``float16``, ``channels_last``, ``nonnegative``), another string quoted; an attribute's
  value as the attribute reads in the language (a dtype attribute as its dtype name, a string quoted, a bool
  ``True``/``False``, a list as its JSON text quoted).
"""

from __future__ import annotations

import json
from typing import Any

from ..cases.derived import attr_from_axis
from ..conditions.language import Const
from ..wording import num

CATEGORY = ".value"  # attr.NAME.value: an integer attribute as a category


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
