"""A few human lines for a tool's answer: the text content of an MCP result.

The structured content carries the data; the text is what a person (or an
agent skimming) reads: what happened and what to do next, in a few hundred
characters at most, whatever the size of the run.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from ..evidence import few_ids

MAX_SUMMARY_CHARS = 800


def summarize(tool: str, response: Any) -> str:
    """The summary of one tool answer (a response model, or anything JSON-able)."""
    fn = _SUMMARIES.get(type(response).__name__)
    text = fn(response) if fn is not None else _generic(tool, response)
    return text if len(text) <= MAX_SUMMARY_CHARS else text[: MAX_SUMMARY_CHARS - 3] + "..."


def _generic(tool: str, response: Any) -> str:
    data = response.model_dump(mode="json") if isinstance(response, BaseModel) else response
    text = json.dumps(data, separators=(",", ":"), default=str)
    if len(text) <= 300:
        return f"{tool}: {text}"
    keys = list(data) if isinstance(data, dict) else []
    return f"{tool} done; the structured content has {', '.join(keys[:12]) or 'the answer'}."


def _plan(r: Any) -> str:
    verb = "created" if r.created else "appended to"
    lines = [f"{verb} run {r.run_id}: {len(r.added)} case(s) added, {r.case_count} planned, "
             f"{r.recorded_count} recorded ({r.run_dir})"]
    if r.warnings:
        lines.append(f"{len(r.warnings)} warning(s): {r.warnings[0][:240]}")
    lines.append(f"next: run_case_remote run_id={r.run_id} (or record_result per case)")
    return "\n".join(lines)


def _record(r: Any) -> str:
    nxt = "analyze_failures" if r.pending_count == 0 else f"{r.pending_count} pending, e.g. {few_ids(r.pending, 3)}"
    return f"recorded {r.case_id}: {r.status} (run {r.run_id}, evidence {r.raw_path}); {nxt}"


def _run(r: Any) -> str:
    counts: dict[str, int] = {}
    for o in r.outcomes:
        counts[o.state] = counts.get(o.state, 0) + 1
    lines = [f"run {r.run_id} on {', '.join(r.hosts)}: {len(r.outcomes)} outcome(s) "
             f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items())) or 'none'}); "
             f"{len(r.recorded)} recorded, {r.pending_count} pending in the run"]
    for o in [o for o in r.outcomes if o.state != "passed" or o.flags][:3]:  # flags: consistency checks
        lines.append(f"- {o.case_id}: {o.summary[:200]}")
    if r.rerun_hint:
        lines.append(r.rerun_hint[:300])
    elif r.pending_count == 0:
        lines.append(f"next: analyze_failures run_id={r.run_id}")
    return "\n".join(lines)


def _analysis(a: Any) -> str:
    data = a.model_dump(mode="json")
    lines = [f"run {data.get('run_id')}: verdict {data.get('verdict')}"
             + (f" - {data['summary'][:400]}" if isinstance(data.get("summary"), str) else "")]
    if data.get("missing"):
        lines.append(f"{len(data['missing'])} case(s) missing a result, e.g. {few_ids(data['missing'], 3)}")
    if data.get("next_cases"):
        lines.append(f"{len(data['next_cases'])} next case(s) proposed (plan them with plan_cases append=true)")
    lines.append(f"report: opdebug://runs/{data.get('run_id')}/report")
    return "\n".join(lines)


_SUMMARIES = {"PlanResponse": _plan, "RecordResponse": _record, "RunResponse": _run, "Analysis": _analysis}
