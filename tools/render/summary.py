"""A few human lines for a tool's answer: the text content of an MCP result.

The structured content carries the data; the text is what a person, or an
agent whose client shows text only (tools/list publishes no output schema),
reads: what happened, the ids, paths, findings and figures one decides on,
and what to do next - in whole sentences, never cut inside a word, whatever
the size of the run.  Every tool has its own summary here; long lists are
capped and the rest counted, with the resource that holds them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel

from ..evidence import few_ids
from .findings import accounting_lines, boundary_text, pair_text

MAX_SUMMARY_CHARS = 4000  # a hard bound for any answer; each summary caps its own lists well below it
MAX_LISTED = 10  # failures, cases, steps... listed one per line; the rest are counted
LINE_CHARS = 360  # one listed item at most (cut at a word, never inside one)


def summarize(tool: str, response: Any) -> str:
    """The summary of one tool answer (a response model, or anything JSON-able)."""
    fn = _SUMMARIES.get(type(response).__name__)
    text = fn(response) if fn is not None else _generic(tool, response)
    return _fit(text, MAX_SUMMARY_CHARS)


# ---------------------------------------------------------------------------
# Text helpers
# ---------------------------------------------------------------------------


def clip(text: str, limit: int = LINE_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters, cut after a whole word."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def _fit(text: str, limit: int) -> str:
    """Whole lines up to ``limit`` characters, then how many lines were left out."""
    if len(text) <= limit:
        return text
    lines, kept, size = text.split("\n"), [], 0
    for i, line in enumerate(lines):
        if size + len(line) + 1 > limit - 60:
            kept.append(f"... {len(lines) - i} more line(s) left out (the structured answer is complete).")
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept)


def _listed(items: list[Any], show: Callable[[Any], str], more: str, limit: int = MAX_LISTED) -> list[str]:
    """One line per item (the first ``limit``), then a line counting the rest."""
    lines = [f"- {clip(show(item))}" for item in items[:limit]]
    if len(items) > limit:
        lines.append(f"- ... and {len(items) - limit} more {more}.")
    return lines


def _counts(states: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for s in states:
        counts[s] = counts.get(s, 0) + 1
    order = ("passed", "numerical_mismatch", "crash", "unsupported", "pending")
    keys = sorted(counts, key=lambda k: (order.index(k) if k in order else len(order), k))
    return ", ".join(f"{counts[k]} {k}" for k in keys) or "none"


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=str)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def finding_line(f: Any) -> str:
    """``x.shape[-1] > 2048 (exact; 3 failing, 5 passing): passes at 2048, fails at 2049 (failures above);
    minimal pair a passes, b fails (x.shape[-1] 2048 -> 2049)`` - and, when not exact, what is still open."""
    head = f"{f.predicate} ({'exact' if f.exact else 'not exact yet'}; {f.failing} failing, {f.passing} passing)"
    parts = [
        p
        for p in (
            boundary_text(f),
            f"minimal pair {pair_text(f.minimal_pair)}" if f.minimal_pair else "no minimal pair yet",
        )
        if p
    ]
    if not f.exact and getattr(f, "why_not_exact", None):
        parts.append("open: " + f.why_not_exact[0])
    return head + ": " + "; ".join(parts)


def competing_line(competing: list[Any]) -> str:
    """The other hypotheses the recorded cases cannot yet tell from the leading one."""
    return (
        f"Competing ({len(competing)}, none ruled out yet): "
        + "; ".join(c.predicate for c in competing[:5])
        + ("; ..." if len(competing) > 5 else "")
        + " - the next cases split them."
    )


def _generic(tool: str, response: Any) -> str:
    """A tool without a summary of its own: its top-level scalars as sentences."""
    data = response.model_dump(mode="json") if isinstance(response, BaseModel) else response
    if not isinstance(data, dict):
        return f"{tool}: {clip(json.dumps(data, default=str), 600)}"
    parts = [f"{k} {clip(_value(v), 120)}" for k, v in data.items() if not isinstance(v, (dict, list))]
    sized = [f"{len(v)} {k}" for k, v in data.items() if isinstance(v, (dict, list))]
    return f"{tool}: " + "; ".join(parts + sized) + "."


# ---------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------


def _plan(r: Any) -> str:
    verb = "created" if r.created else "appended to"
    lines = [
        f"{verb} run {r.run_id}: {len(r.added)} case(s) added, {r.case_count} planned, "
        f"{r.recorded_count} recorded ({r.run_dir})"
    ]

    def show(c: Any) -> str:
        if c.differs_from is None:
            return f"{c.id} ({c.mode}): the base of this call"
        changed = ", ".join(f"{k}={v}" for k, v in c.axes.items()) or "no axis"
        return f"{c.id}: {changed} (vs {c.differs_from})"

    lines.append("Added, with what differs per case:")
    lines += _listed(
        list(r.cases), show, f"case(s) (every case with every axis: opdebug://runs/{r.run_id}/case-matrix)"
    )
    if r.cases_omitted:
        lines.append(
            f"- {r.cases_omitted} more added case(s) are not in this answer: "
            f"opdebug://runs/{r.run_id}/case-matrix lists them."
        )
    if r.warnings:
        lines.append(f"{len(r.warnings)} warning(s); the first: {clip(r.warnings[0], 300)}")
    lines.append(f"next: run_case_remote run_id={r.run_id} (or record_result per case)")
    return "\n".join(lines)


def _record(r: Any) -> str:
    nxt = (
        f"next: analyze_failures run_id={r.run_id}"
        if r.pending_count == 0
        else f"{r.pending_count} pending, e.g. {few_ids(r.pending, 3)}"
    )
    return f"recorded {r.case_id}: {r.status} (run {r.run_id}, evidence {r.raw_path}); {nxt}"


def mismatch_place(fm: Any) -> str:
    """``first mismatch in output 'out' at [0, 17]: candidate 1.02 vs reference 1``."""
    if fm is None:
        return ""
    if fm.index is None:
        return f"output {fm.output!r} failed (no element located)"
    return (
        f"first mismatch in output {fm.output!r} at {fm.index}: candidate {_value(fm.candidate)} "
        f"vs reference {_value(fm.reference)}"
    )


def _outcome_line(o: Any) -> str:
    if o.state == "pending":
        return f"{o.case_id} stayed pending: {clip(o.error or o.summary, 260)}"
    text = f"{o.case_id} ({o.state}"
    text += f" on {o.host} {o.device})" if o.host else ")"
    detail = o.summary
    if o.state == "numerical_mismatch" and o.first_mismatch is not None:
        detail = f"{detail}; {mismatch_place(o.first_mismatch)}"
    return f"{text}: {detail}"


def _run(r: Any) -> str:
    n = len(r.outcomes)
    head = (
        f"Ran {n} case(s) of run {r.run_id} on {', '.join(r.hosts)}: {_counts(o.state for o in r.outcomes)}. "
        f"{len(r.recorded)} recorded now; {r.pending_count} case(s) of the run still pending."
    )
    lines = [
        head
        if n
        else f"Ran no case of run {r.run_id}: nothing was pending"
        + (f" among the cases named ({len(r.refused)} already recorded)." if r.refused else ".")
    ]
    skipped = list(getattr(r, "skipped", None) or [])
    if skipped:
        lines.append(f"Skipped {len(skipped)} case(s) another call recorded while this one waited (not run twice).")
    failures = [o for o in r.outcomes if o.state not in ("passed", "pending")]
    if failures:
        lines.append(f"{len(failures)} failed:")
        lines += _listed(failures, _outcome_line, f"failure(s) (opdebug://runs/{r.run_id}/results)")
    pending = [o for o in r.outcomes if o.state == "pending"]
    if pending:
        lines.append(f"{len(pending)} stayed pending (nothing recorded for them):")
        lines += _listed(pending, _outcome_line, "pending case(s)", limit=5)
    if r.refused and n:
        lines.append(f"Not re-run, already recorded: {few_ids(r.refused)}.")
    flagged = [o for o in r.outcomes if o.flags and o.state == "passed"]  # flagged by a consistency check
    if flagged:
        lines.append(f"{len(flagged)} passed with a consistency flag:")
        lines += _listed(
            flagged, lambda o: f"{o.case_id} ({', '.join(o.flags)}): {clip(o.summary, 260)}", "flagged case(s)", limit=5
        )
    if r.rerun_hint:
        lines.append(clip(r.rerun_hint, 700))
    elif r.pending_count == 0 and n:
        lines.append(f"next: analyze_failures run_id={r.run_id} (verdict, findings, next cases)")
    elif r.pending_count:
        lines.append(
            f"next: run_case_remote run_id={r.run_id} runs the {r.pending_count} pending case(s), "
            f"e.g. {few_ids(r.pending, 3)}"
        )
    return "\n".join(lines)


def _analysis(a: Any) -> str:
    lines = [
        f"run {a.run_id}: verdict {a.verdict} ({a.recorded}/{a.planned} recorded; "
        f"{_counts(s for s, k in a.status_counts.items() for _ in range(k))}) - {clip(a.summary, 400)}"
    ]
    if a.findings:
        lines.append(f"{_n(a, 'findings')} finding(s), the first leads:")
        lines += _listed(list(a.findings), finding_line, "finding(s)", limit=5)
        if a.competing:
            lines.append(competing_line(list(a.competing)))
    elif a.failures:
        lines.append(
            f"No one-axis finding separates the {_n(a, 'failures')} failing case(s) yet, e.g. "
            f"{_few([f.case_id for f in a.failures], _n(a, 'failures'))}."
        )
    lines += [clip(line, 400) for line in accounting_lines(a, "")]  # causes, groups without a finding, leads
    flagged = list(getattr(a.consistency, "flagged", []) or [])
    if flagged:
        lines.append(
            f"{len(flagged)} case(s) flagged by the consistency checks, kept out of the findings: "
            + "; ".join(f"{x.case_id} {x.flag}" for x in flagged[:4])
            + ("; ..." if len(flagged) > 4 else "")
            + "."
        )
    for warning in list(getattr(a.consistency, "bias", []) or [])[:2]:
        lines.append(f"Bias: {clip(warning.message, 240)}")
    if a.crash_groups:
        groups = sorted(a.crash_groups.items(), key=lambda kv: -len(kv[1]))
        lines.append(
            "Crashes by signature: " + "; ".join(f"{clip(sig, 80)}: {few_ids(ids, 3)}" for sig, ids in groups[:3]) + "."
        )
    if a.unsupported:
        lines.append(
            f"{_n(a, 'unsupported')} unsupported (not failures), e.g. "
            f"{_few([u.case_id for u in a.unsupported], _n(a, 'unsupported'))}."
        )
    if a.missing:
        lines.append(
            f"{_n(a, 'missing')} case(s) missing a result, e.g. {_few(a.missing, _n(a, 'missing'))}: "
            f"run_case_remote run_id={a.run_id}."
        )
    if a.integration_hint:
        lines.append(clip(a.integration_hint, 300))
    if a.valid_calls:  # learned from the reference's refusals: no next case breaks it
        lines.append(clip("Valid calls: " + "; ".join(a.valid_calls[:3]) + ".", 400))
    if a.next_cases:
        first = a.next_cases[0]
        lines.append(
            f"{_n(a, 'next_cases')} next case(s) proposed; the first ({first.kind or 'next'}"
            f"{', on ' + first.axis if first.axis else ''}): {clip(first.reason, 200)} - append it with "
            f"plan_cases {{\"run_id\": \"{a.run_id}\", \"append\": true, \"stars\": [next_cases[0].star]}}."
        )
    lines.append(f"report: opdebug://runs/{a.run_id}/report")
    return "\n".join(lines + _cut_line(a))


def _n(answer: Any, field: str) -> int:
    """How many items a list of the answer has in full (tools/answers.py may have cut it)."""
    return (getattr(answer, "truncated", None) or {}).get(field, len(getattr(answer, field)))


def _few(ids: list, total: int, k: int = 3) -> str:
    """At most ``k`` ids, and how many more of ``total`` there are."""
    more = total - min(k, len(ids))
    return "[" + ", ".join(repr(i) for i in ids[:k]) + (f", ... ({more} more)" if more > 0 else "") + "]"


def _cut_line(answer: Any) -> list[str]:
    cut = getattr(answer, "truncated", None) or {}
    if not cut:
        return []
    return [
        f"Lists cut to their first 20 here: {', '.join(f'{k} ({v})' for k, v in list(cut.items())[:6])}"
        f"{' ...' if len(cut) > 6 else ''}; the whole answer: {answer.full_answer}"
    ]


_NARROW_NEXT = {
    "exact": "every finding is exact: shrink_case on the minimal pair's failing case, then export_repro",
    "no_failure": "nothing fails in the run: no finding to narrow (capture the model's real call if the model "
    "still fails: SKILL.md)",
    "nothing_to_try": "no next case narrows the findings further: read the report, plan a case by hand "
    "(plan_cases append=true)",
    "no_progress": "the last round added or recorded nothing: read each pending case's error "
    "(run_case_remote names it), fix the cause and run narrow_failure again",
    "budget_cases": "the case budget ran out: call narrow_failure again (it goes on from the recorded cases) "
    "or raise max_cases",
    "budget_seconds": "the time budget ran out: call narrow_failure again or raise max_seconds",
    "budget_steps": "the round budget ran out: call narrow_failure again or raise max_steps",
    "undecided": "hypotheses survive and no case the variations can build tells them apart: read the competing "
    "ones in the report and plan a case by hand that separates them (plan_cases append=true)",
    "no_hypothesis": "every axis of the failing cases was varied once and nothing separates them: read the trend "
    "and the report; the judge (baseline) or a capture of the real call may be what is missing",
    "consistency": "every failure is nondeterministic or order-dependent: no axis to narrow; read "
    "analysis.consistency (the spread, the earlier case that poisons it)",
}


def _narrow(r: Any) -> str:
    steps = list(r.steps)
    lines = [
        f"narrow_failure on run {r.run_id} stopped: {r.stopped} after {len(steps)} round(s); "
        f"{r.cases_run} case(s) run in {r.seconds:.1f} s; "
        + ("every finding is exact." if r.exact else "not every finding is exact.")
    ]
    if r.findings:
        lines.append(f"{len(r.findings)} finding(s):")
        lines += _listed(list(r.findings), finding_line, "finding(s)", limit=5)
        if r.competing:
            lines.append(competing_line(list(r.competing)))
    else:
        lines.append(f"No finding: {clip(r.summary, 300)}")

    def show(s: Any) -> str:
        what = ", ".join(s.kinds) + (f" on {', '.join(s.axes)}" if s.axes else "")
        return (
            f"round {s.index} ({what}): {len(s.cases)} case(s), {_counts(s.cases.values())}: "
            f"{few_ids(list(s.cases), 4)}"
        )

    if steps:
        lines.append("Rounds:")
        lines += _listed(steps, show, "round(s)", limit=6)
    running = list(getattr(r, "still_running", None) or [])
    if running:
        lines.append(
            f"Still running at max_seconds, recorded when done: {few_ids(running, 4)} (read "
            f"opdebug://runs/{r.run_id}/results or call analyze_failures later)."
        )
    kept_out = list(getattr(r, "not_started", None) or [])
    if kept_out:
        lines.append(f"Not started before max_seconds, still pending: {few_ids(kept_out, 4)} (not counted as run).")
    lines.append("next: " + _NARROW_NEXT.get(r.stopped, f"read opdebug://runs/{r.run_id}/report"))
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# check_host and the artefacts
# ---------------------------------------------------------------------------


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.1f} GiB"


def _host(h: Any) -> str:
    where = f"{h.transport}{' ' + h.address if h.address else ''}"
    have = [f"python {h.python or '?'}", f"torch {h.torch or 'missing'}"]
    if h.device_kind == "npu" or h.torch_npu:
        have += [f"torch_npu {h.torch_npu or 'missing'}", f"CANN {h.cann or 'missing'}"]
    devices = f"{h.device_kind} devices {h.devices}" + (
        f" of {h.device_count} seen" if h.device_count is not None else ""
    )
    work = f"work dir {h.work_dir} " + (
        "writable" if h.work_dir_writable else "NOT writable" if h.work_dir_writable is False else "unchecked"
    )
    lines = [
        f"host {h.host} ({where}): {'ready to run cases' if h.ok else 'NOT ready'} - "
        f"{', '.join(have)}; {devices}; {work}, {_gib(h.free_disk_bytes)} free; probed in {h.elapsed_s:.1f} s."
    ]
    for s in h.env_scripts:
        lines.append(
            f"- environment script {s.path}: " + ("sourced" if s.sourced else f"FAILED (exit status {s.exit_status})")
        )
    if h.missing:
        lines.append("Missing: " + "; ".join(clip(m, 200) for m in h.missing[:8]) + ".")
    if h.errors:
        lines.append("Probe errors: " + "; ".join(clip(e, 200) for e in h.errors[:5]) + ".")
    lines.append(
        f"next: run_case_remote with hosts=['{h.host}']"
        if h.ok
        else "next: install or configure what is missing (references/command-recipes.md), then check_host again"
    )
    return "\n".join(lines)


def _shrink(r: Any) -> str:
    shapes = ", ".join(f"{k} {v}" for k, v in r.smallest_shapes.items())
    same = sum(1 for s in r.steps if s.same_failure)
    if r.smallest_case == r.start_case:
        head = (
            f"shrink_case on run {r.run_id}: nothing smaller fails like {r.start_case} ({r.signature}); "
            f"{r.cases_run} case(s) tried in {r.seconds:.1f} s, stopped: {r.stopped}."
        )
    else:
        head = (
            f"shrink_case on run {r.run_id}: the smallest case that fails like {r.start_case} is "
            f"{r.smallest_case} ({r.signature}): {r.start_numel} -> {r.smallest_numel} input elements, "
            f"shapes {shapes}; {r.cases_run} case(s) tried ({same} failed the same way) in {r.seconds:.1f} s, "
            f"stopped: {r.stopped}."
        )
    lines = [head]
    lines += _listed(
        [s for s in r.steps if s.same_failure],
        lambda s: f"{s.case_id}: {s.change} ({s.numel} elements)",
        "accepted step(s)",
        limit=5,
    )
    if r.skipped_invalid:
        lines.append(
            clip(f"{r.skipped_invalid} step(s) not run: not valid calls ({'; '.join(r.constraints[:2])}).", 400)
        )
    lines.append(f"next: export_repro run_id={r.run_id} case_id={r.smallest_case} (a standalone reproducer)")
    return "\n".join(lines)


def _repro(r: Any) -> str:
    return (
        f"wrote {r.script}: a standalone reproducer of case {r.case_id} of run {r.run_id} (recorded "
        f"{r.recorded_status}, candidate on {r.device}); it exits 1 while the failure is there and 0 once it "
        f"is fixed.\nrun it: {r.command}\nfiles: {', '.join(r.files[:6])}"
        + (f" and {len(r.files) - 6} more" if len(r.files) > 6 else "")
    )


def _regression(r: Any) -> str:
    lines = [
        f"wrote {r.test_file}: a pytest file over {_n(r, 'failing_cases')} failing case(s) of run {r.run_id}, "
        f"{_few(r.failing_cases, _n(r, 'failing_cases'), 5)}, expected to pass once fixed"
        + (
            f", and {_n(r, 'neighbour_cases')} passing neighbour(s) "
            f"{_few(r.neighbour_cases, _n(r, 'neighbour_cases'), 5)}"
            if r.neighbour_cases
            else ""
        )
        + ".",
        f"run it: {r.command}",
    ]
    return "\n".join(lines + _cut_line(r))


def _pictures(r: Any) -> str:
    if not r.available:
        return (
            f"render_pictures on run {r.run_id}: no picture drawn - matplotlib is missing "
            "(pip install '.[pictures]', then render_pictures again)."
        )
    lines = [
        f"render_pictures on run {r.run_id}: {len(r.pictures)} picture(s) drawn"
        + (f", {len(r.skipped)} output(s) skipped." if r.skipped else ".")
    ]
    lines += _listed(
        list(r.pictures),
        lambda p: f"{p} (opdebug://runs/{r.run_id}/pictures/{p.rsplit('/', 1)[-1]})",
        "picture(s)",
        limit=8,
    )
    if r.skipped:
        lines.append(
            "skipped: "
            + "; ".join(clip(s, 160) for s in r.skipped[:4])
            + (f"; and {len(r.skipped) - 4} more" if len(r.skipped) > 4 else "")
            + "."
        )
    lines.append(f"next: analyze_failures run_id={r.run_id} embeds them in report.md")
    return "\n".join(lines)


def _verify(r: Any) -> str:
    lines = [f"verify_fix on run {r.run_id}: {r.conclusion} (evidence {r.evidence})."]
    lines += _listed(
        list(r.rerun.items()), lambda kv: f"{kv[0]} -> {kv[1]}: {r.states.get(kv[1], 'pending')}", "rerun case(s)"
    )
    if r.still_failing:
        lines.append(f"still failing: {few_ids(r.still_failing)}.")
    cmd = r.model_command
    if cmd is not None:
        status = cmd.get("exit_status")
        lines.append(
            f"model command on {cmd.get('host')}: "
            + (f"exit status {status}" if status is not None else clip(str(cmd.get('error') or 'did not finish'), 200))
            + (
                f"; output ends: {clip(str(cmd.get('output_tail') or '')[-200:], 200)}"
                if cmd.get("output_tail")
                else ""
            )
        )
    lines.append(
        "next: "
        + (
            "nothing: the fix holds"
            if not r.still_failing and (cmd is None or cmd.get("exit_status") == 0)
            else "the fix is not complete: read the report (opdebug://runs/"
            f"{r.run_id}/report) and the rerun cases' outcomes"
        )
    )
    return "\n".join(lines)


_SUMMARIES: dict[str, Callable[[Any], str]] = {
    "PlanResponse": _plan,
    "RecordResponse": _record,
    "RunResponse": _run,
    "Analysis": _analysis,
    "NarrowResponse": _narrow,
    "HostCheck": _host,
    "ShrinkResponse": _shrink,
    "ReproExport": _repro,
    "RegressionExport": _regression,
    "PicturesResponse": _pictures,
    "VerifyResponse": _verify,
}
