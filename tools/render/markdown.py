"""Markdown pieces every rendered page uses: table cells, one-line text, fenced
blocks, tables."""

from __future__ import annotations

import re
from collections.abc import Sequence


def cell(text: object) -> str:
    """Text safe inside a markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def one_line(text: object) -> str:
    """Text folded onto one line (a heading or paragraph it cannot break)."""
    return " ".join(str(text).split())


def fenced(text: str) -> list[str]:
    """Text in a fenced block whose fence is longer than any backtick run in it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, text, fence]


def table(header: list[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
