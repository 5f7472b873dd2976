"""Answers sized for an agent: long lists in a structured answer are cut, with counts,
and the whole answer is kept as a run file the agent reads when it needs the rest.

A list longer than LIST_CAP anywhere in the answer keeps its first LIST_CAP items; so
does a map whose keys are data (``crash_groups``: one key per crash signature).  The
answer then says which lists were cut (``truncated``: JSON path -> full length) and
where the whole answer is (``full_answer``: the resource
``opdebug://runs/{run_id}/answers/{tool}``, the file ``artifacts/answers/<tool>.json``
of the run, rewritten by each capped answer of that tool).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel

from .errors import ToolError
from .evidence import ARTIFACTS_DIR, RunStore, atomic_write_bytes, safe_component

LIST_CAP = 20
DATA_KEYED_MAPS = frozenset({"crash_groups"})  # maps whose keys are data, not field names
ANSWERS_DIR = "answers"

M = TypeVar("M", bound=BaseModel)


def cap_lists(
    node: Any, path: str = "", truncated: dict[str, int] | None = None, limit: int = LIST_CAP
) -> tuple[Any, dict[str, int]]:
    """``node`` with every list (and data-keyed map) cut to ``limit`` items, and the cut
    ones as JSON path -> full length."""
    truncated = {} if truncated is None else truncated
    if isinstance(node, list):
        if len(node) > limit:
            truncated[path or "$"] = len(node)
        return [cap_lists(v, f"{path}[{i}]", truncated, limit)[0] for i, v in enumerate(node[:limit])], truncated
    if isinstance(node, dict):
        items = list(node.items())
        if path.rsplit(".", 1)[-1] in DATA_KEYED_MAPS and len(items) > limit:
            truncated[path] = len(items)
            items = items[:limit]
        return {k: cap_lists(v, f"{path}.{k}" if path else k, truncated, limit)[0] for k, v in items}, truncated
    return node, truncated


def answers_uri(run_id: str, tool: str) -> str:
    return f"opdebug://runs/{run_id}/answers/{tool}"


def capped_answer(response: M, *, tool: str, root: Any = None) -> M:
    """``response`` with its long lists cut (its ``truncated`` and ``full_answer`` set) and
    the whole of it written for ``answers_uri``; ``response`` itself when nothing is long."""
    doc = response.model_dump(mode="json", by_alias=True)
    cut, truncated = cap_lists(doc)
    if not truncated:
        return response
    store = RunStore(root, doc["run_id"])
    atomic_write_bytes(
        store.path(ARTIFACTS_DIR, ANSWERS_DIR, f"{tool}.json"),
        json.dumps(doc, separators=(",", ":")).encode("utf-8"),
        fsync=False,
    )
    cut.update(truncated=truncated, full_answer=answers_uri(store.run_id, tool))
    return type(response).model_validate(cut)


def read_full_answer(root: Any, run_id: str, tool: str) -> str:
    """The whole answer a capped one points to (ToolError ``no_answer`` when there is none)."""
    store = RunStore(root, run_id)
    store.require()
    path = store.path(ARTIFACTS_DIR, ANSWERS_DIR, f"{safe_component(tool, 'tool')}.json")
    if not path.is_file():
        raise ToolError(
            f"run {run_id!r} has no whole answer of {tool!r}: one is kept when an answer of that tool had a list cut",
            code="no_answer",
        )
    return path.read_text(encoding="utf-8")
