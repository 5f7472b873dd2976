"""The core ``opdebug`` commands over the same tool functions the MCP server
calls: plan, record, analyze, run, narrow, list, show, hosts check, demo,
capture-module.  Each prints tables (console.py) or, with ``--json``, the
tool's JSON response."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import ToolError
from .console import (
    axes_text,
    console,
    escape,
    inventory,
    make_table,
    print_json,
    read_json_file,
    run_location,
    styled,
    to_jsonable,
    varying_axes,
)

_MODULE_FILE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\.py$")


def _load_plan_request(args: argparse.Namespace) -> dict[str, Any]:
    """The PlanRequest JSON of ``--config`` (module sources read from the
    config's directory when omitted), with ``--cases`` and ``--append`` applied."""
    request: dict[str, Any] = {}
    if args.config:
        request = read_json_file(args.config, "config file")
        if not isinstance(request, dict):
            raise ToolError(f"config file {args.config!r} must hold a JSON object (a plan request)", code="bad_file")
    elif not args.append:
        raise ToolError("plan needs --config FILE (a plan request: config + cases/stars)", code="missing_config")
    if args.cases:
        extra = read_json_file(args.cases, "cases file")
        if isinstance(extra, list):
            extra = {"cases": extra}
        if not isinstance(extra, dict) or not set(extra) <= {"cases", "stars"}:
            raise ToolError(
                f"cases file {args.cases!r} must hold a list of cases or an object with 'cases' and/or 'stars'",
                code="bad_file",
            )
        request["cases"] = extra.get("cases", [])
        request["stars"] = extra.get("stars", [])
    if args.append:
        request["append"] = True
    if args.config and isinstance(request.get("captured_files"), dict):
        # Relative capture paths are relative to the config file, like its modules.
        base = Path(args.config).expanduser().parent
        request["captured_files"] = {
            k: str(base / v) if isinstance(v, str) else v for k, v in request["captured_files"].items()
        }
    if args.config and "module_sources" not in request and not request.get("append"):
        request["module_sources"] = _module_sources_beside(request, Path(args.config).expanduser().parent)
    return request


def _module_sources_beside(request: dict[str, Any], directory: Path) -> dict[str, str]:
    config = request.get("config")
    modules = config.get("operator", {}).get("modules", []) if isinstance(config, dict) else []
    sources = {}
    for name in modules if isinstance(modules, list) else []:
        if not isinstance(name, str) or not _MODULE_FILE_RE.fullmatch(name):
            continue  # the schema names the bad entry
        path = directory / name
        try:
            sources[name] = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ToolError(
                f"config.operator.modules names {name!r} but {str(path)!r} cannot be read "
                f"({exc.strerror or exc}); put the module next to the config file or give "
                "'module_sources' in it",
                code="bad_file",
            ) from None
    return sources


# ---------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------


def cmd_plan(args: argparse.Namespace) -> int:
    from ..plan_cases import plan_cases

    request = _load_plan_request(args)
    given = request.get("config")
    config: dict = given if isinstance(given, dict) else {}
    if args.output_dir:
        root, run_id = run_location(args)
        named = request.get("run_id") or config.get("run_id")
        if named is None and request.get("append"):
            request["run_id"] = named = run_id
        if named != run_id:
            raise ToolError(
                f"--output-dir {args.output_dir!r} ends in {run_id!r} but the plan's run_id is {named!r}; "
                f"the run directory is <root>/<run_id> - use --output-dir {Path(args.output_dir).parent / str(named)} "
                "or --root instead",
                code="run_dir_mismatch",
            )
    else:
        root = Path(args.root).expanduser() if args.root else None
        if request.get("append") and not (request.get("run_id") or config.get("run_id")):
            raise ToolError(
                "--append needs to know which run to grow: use --output-dir RUN_DIR "
                "(<root>/<run_id>), or a --config whose run_id names the run",
                code="missing_run",
            )
    response = plan_cases(request, root=root)
    if args.json:
        print_json(response)
        return 0
    out = console()
    verb = "created" if response.created else "appended to"
    out.print(
        f"{verb} run [bold]{response.run_id}[/bold] at {escape(response.run_dir)} "
        f"({len(response.added)} new case(s), {response.case_count} in all)"
    )
    # each case with what differs from its base (the base itself: every axis is in case-matrix.json)
    _print_cases(
        out,
        [
            (
                c.id,
                c.mode,
                c.axes if c.differs_from else {},
                c.state,
                f"vs {c.differs_from}" if c.differs_from else "base",
            )
            for c in response.cases
        ],
    )
    for warning in response.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    return 0


def _print_cases(out: Any, rows: Sequence[tuple[str, str, dict[str, str], str, str]]) -> None:
    shown = varying_axes([axes for _, _, axes, _, _ in rows])
    table = make_table("case", "mode", "axes (varying)", "state", "detail")
    for case_id, mode, axes, state, detail in rows:
        table.add_row(case_id, mode, escape(axes_text(axes, shown - {"mode"})), styled(state), escape(detail))
    out.print(table)


def cmd_record(args: argparse.Namespace) -> int:
    from ..record_result import record_result

    root, run_id = run_location(args)
    result = read_json_file(args.result, "result file")
    response = record_result(run_id, result, root=root)
    if args.json:
        print_json(response)
        return 0
    out = console()
    out.print(
        f"recorded [bold]{response.case_id}[/bold] as {styled(response.status)} at "
        f"{response.recorded_at.isoformat()} (raw evidence: {response.raw_path})"
    )
    out.print(f"pending: {len(response.pending)}" + (f" ({', '.join(response.pending)})" if response.pending else ""))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from ..analyze_failures import analyze_failures
    from ..evidence import REPORT, RunStore

    root, run_id = run_location(args)
    analysis = analyze_failures(run_id, root=root, conditions=args.condition)
    if args.json:
        print_json(analysis)
        return 0
    out = console()
    _print_analysis(out, analysis)
    for answer in analysis.conditions:
        out.print(escape(f"condition {answer.condition}: {answer.fate} - {answer.text}"))
    out.print(f"report: {escape(str(RunStore(root, run_id).path(REPORT)))}")
    return 0


def _print_analysis(out: Any, analysis: Any) -> None:
    out.print(f"verdict: {styled(analysis.verdict)} - {escape(analysis.summary)}")
    counts = ", ".join(f"{k}={v}" for k, v in analysis.status_counts.items())
    out.print(f"recorded {analysis.recorded}/{analysis.planned}" + (f" ({counts})" if counts else ""))
    if analysis.failure_axes:
        table = make_table("axis", "value", "failing", "cases with value", "explains all", title="failure axes")
        for ax in analysis.failure_axes:
            table.add_row(
                escape(ax.axis),
                escape(ax.value),
                str(ax.failing),
                str(ax.total_with_value),
                "[bold]yes[/bold]" if ax.explains_all else "no",
            )
        out.print(table)
    for signature, cases in analysis.crash_groups.items():
        out.print(escape(f"crash group {signature!r}: {', '.join(cases)}"))
    if analysis.unsupported:
        out.print("unsupported (not failures): " + ", ".join(u.case_id for u in analysis.unsupported))
    if analysis.missing:
        out.print("[yellow]missing evidence:[/yellow] " + ", ".join(analysis.missing))
    if analysis.integration_hint:
        out.print(f"[yellow]integration hint:[/yellow] {escape(analysis.integration_hint)}")
    from ..render.findings import accounting_lines, finding_lines

    for line in finding_lines(analysis.findings, analysis.competing, analysis.counterexamples) + accounting_lines(
        analysis, ""
    ):
        out.print(escape(line))
    for flagged in analysis.consistency.flagged:  # evidence of its own kind, not of an axis
        out.print(f"[yellow]{escape(flagged.flag)}:[/yellow] {escape(flagged.case_id)} - {escape(flagged.detail)}")
    for warning in analysis.consistency.bias:
        out.print(f"[yellow]bias:[/yellow] {escape(warning.message)}")
    for nxt in analysis.next_cases:
        out.print(escape(f"next: {nxt.reason} (from {nxt.base_case}: {json.dumps(nxt.change)})"))


def cmd_run(args: argparse.Namespace) -> int:
    from ..run_case_remote import run_case_remote
    from .progress import RunProgress

    root, run_id = run_location(args)
    progress_out = console(stderr=args.json)
    # a bar (cases done, cases in flight) where stderr is a terminal; the lines either way
    bar = RunProgress(
        f"run {run_id}",
        len(args.case) if args.case else None,
        enabled=not args.json and sys.stderr.isatty(),
        console=console(stderr=True),
        lines=progress_out,
    )

    async def progress(done: int, total: int, outcome: Any) -> None:
        where = f" on {outcome.host}/{outcome.device}" if outcome.host else ""
        await bar.finished(
            done,
            total,
            outcome.case_id,
            f"\\[{done}/{total}] {outcome.case_id}: {styled(outcome.state)}{escape(where)} - {escape(outcome.summary)}",
        )

    async def news(text: str) -> None:  # a job waiting in a scheduler's queue, a lost slot started again
        await bar.note(escape(text))

    with bar:
        response = asyncio.run(
            run_case_remote(
                run_id,
                case_ids=args.case or None,
                hosts=args.host or None,
                root=root,
                inventory=inventory(args),
                progress=progress,
                on_start=bar.started,
                keep_outputs=args.keep_outputs,
                on_news=news,
            )
        )
    if args.json:
        print_json(response)
        return 0
    _print_run(console(), response)
    return 0


def cmd_narrow(args: argparse.Namespace) -> int:
    from ..narrow import narrow_failure

    root, run_id = run_location(args)
    progress_out = console(stderr=args.json)

    async def progress(done: int, total: int | None, message: str) -> None:
        progress_out.print(escape(message))

    request = {
        "run_id": run_id,
        "hosts": args.host or None,
        "max_cases": args.max_cases,
        "max_seconds": args.max_seconds,
        "max_steps": args.max_steps,
    }
    response = asyncio.run(narrow_failure(request, root=root, inventory=inventory(args), progress=progress))
    if args.json:
        print_json(response)
        return 0
    out = console()
    out.print(
        f"stopped: {response.stopped} after {len(response.steps)} round(s), {response.cases_run} case(s) run "
        f"({response.pending_run} pending first, {response.new_cases} new), {response.seconds:g} s"
    )
    for step in response.steps:
        out.print(
            escape(
                f"round {step.index} ({', '.join(step.kinds)} on {', '.join(step.axes) or '-'}): "
                + ", ".join(f"{c}={s}" for c, s in step.cases.items())
            )
        )
    from ..render.findings import finding_lines

    for line in finding_lines(response.findings, response.competing, response.counterexamples):
        out.print(escape(line))
    out.print(escape(response.summary))
    return 0


def _print_run(out: Any, response: Any) -> None:
    table = make_table("case", "state", "recorded", "where", "summary")
    for o in response.outcomes:
        where = f"{o.host}/{o.device}" if o.host else ""
        summary = escape(o.summary) + (f" [dim]({escape(o.error)})[/dim]" if o.error else "")
        table.add_row(o.case_id, styled(o.state), "yes" if o.recorded else "no", escape(where), summary)
    out.print(table)
    out.print(
        f"recorded {len(response.recorded)}, pending {len(response.pending)}"
        + (f", refused {', '.join(response.refused)}" if response.refused else "")
    )
    if response.rerun_hint:
        out.print(f"[yellow]{escape(response.rerun_hint)}[/yellow]")


def cmd_list(args: argparse.Namespace) -> int:
    from ..evidence import list_runs, resolve_root

    root = resolve_root(args.root)
    runs = list_runs(root)
    if args.json:
        print_json(runs)
        return 0
    out = console()
    if not runs:
        out.print(f"no runs under {escape(str(root))}")
        return 0
    table = make_table("run_id", "operator", "status", "cases", "recorded", "updated", title=f"runs under {root}")
    for run in runs:
        table.add_row(
            str(run.get("run_id", "")),
            escape(str(run.get("operator", ""))),
            styled(str(run.get("status", ""))),
            str(run.get("case_count", "")),
            str(run.get("recorded_count", "")),
            str(run.get("updated_at", ""))[:19].replace("T", " "),
        )
    out.print(table)
    return 0


def result_detail(result: Any) -> str:
    if result is None:
        return ""
    if result.error is not None:
        rule = f" (rule {result.error.matched_rule!r})" if result.error.matched_rule else ""
        return result.error.signature + rule
    failed = [c for c in result.comparisons if not c.passed]
    if failed:
        from ..render.describe import describe_comparison

        return describe_comparison(failed[0], brief=True)
    worst = max((c.max_abs for c in result.comparisons if c.max_abs is not None), default=None)
    return f"max_abs={worst:.3g}" if worst is not None else ""


def cmd_show(args: argparse.Namespace) -> int:
    from ..artifacts.records import picture_paths
    from ..cases.axes import case_axes
    from ..evidence import ANALYSIS, RunStore, read_json
    from ..schemas import Analysis
    from .artifacts import picture_lines

    root, run_id = run_location(args)
    store = RunStore(root, run_id)
    manifest = store.read_manifest()
    cases = store.read_cases()
    results = store.read_results()
    analysis_path = store.path(ANALYSIS)
    analysis = Analysis.model_validate(read_json(analysis_path)) if analysis_path.is_file() else None
    rows = [
        (
            c.id,
            c.mode,
            case_axes(c),
            results[c.id].status if c.id in results else "pending",
            result_detail(results.get(c.id)),
        )
        for c in cases
    ]
    # Cases and results only grow: other counts than the analysis saw mean it is out of date.
    stale = analysis is not None and (analysis.planned, analysis.recorded) != (len(cases), len(results))
    if args.json:
        print_json(
            {
                "run": manifest,
                "run_dir": str(store.dir),
                "cases": [{"id": r[0], "mode": r[1], "axes": r[2], "state": r[3], "detail": r[4]} for r in rows],
                "analysis": analysis,
                "analysis_stale": stale,
                "pictures": [str(p) for p in picture_paths(store)],
            }
        )
        return 0
    out = console()
    out.print(
        f"run [bold]{run_id}[/bold] ({escape(str(manifest.get('operator')))}) at {escape(str(store.dir))}: "
        f"{styled(str(manifest.get('status')))}, {len(results)}/{len(cases)} recorded"
    )
    _print_cases(out, rows)
    if analysis is not None:
        if stale:
            out.print(
                f"[yellow]the analysis below is out of date: it saw {analysis.recorded}/{analysis.planned} "
                f"recorded, the run now has {len(results)}/{len(cases)} - run opdebug analyze[/yellow]"
            )
        _print_analysis(out, analysis)
    else:
        out.print("not analyzed yet (opdebug analyze)")
    for line in picture_lines(store):
        out.print(escape(line))
    return 0


def cmd_hosts_check(args: argparse.Namespace) -> int:
    from ..check_host import check_host

    report = asyncio.run(check_host(args.name, inventory=inventory(args)))
    if args.json:
        print_json(report)
        return 0
    out = console()
    data = to_jsonable(report)
    table = make_table("field", "value", title=f"host {escape(args.name)}")
    for key, value in data.items() if isinstance(data, dict) else []:
        if key == "scheduler" and isinstance(value, dict):  # a Slurm host: what its partition offers, row by row
            for sub, item in value.items():
                if sub == "nodes":
                    item = [
                        f"{n['name']} {n['state']} gres {n['gres']} (used {n['gres_used']}) cpus {n['cpus']}"
                        for n in item
                    ]
                table.add_row(f"scheduler.{sub}", _field_text(sub, item))
            continue
        table.add_row(key, _field_text(key, value))
    out.print(table)
    return 0


def _field_text(key: str, value: Any) -> str:
    if value is None or value == [] or value == {}:
        return "[dim]-[/dim]"
    if key == "ok":
        return "[green]yes[/green]" if value else "[bold red]no[/bold red]"
    if isinstance(value, list):
        text = "; ".join(v if isinstance(v, str) else json.dumps(v) for v in value)
        return f"[red]{escape(text)}[/red]" if key in ("missing", "errors") else escape(text)
    if isinstance(value, dict):
        return escape(", ".join(f"{k}={v}" for k, v in value.items()))
    return escape(str(value))


def cmd_demo(args: argparse.Namespace) -> int:
    from ..analyze_failures import analyze_failures
    from ..evidence import REPORT, RunStore, resolve_root
    from ..examples import demo_request
    from ..plan_cases import plan_cases
    from ..run_case_remote import run_case_remote

    root = resolve_root(args.root)
    run_id = "demo-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    plan = plan_cases(demo_request(run_id), root=root)
    log = console(stderr=args.json)
    log.print(f"planned {plan.case_count} case(s) in {escape(plan.run_dir)}")

    async def progress(done: int, total: int, outcome: Any) -> None:
        log.print(f"\\[{done}/{total}] {outcome.case_id}: {styled(outcome.state)} - {escape(outcome.summary)}")

    # the mismatching outputs are kept (raw-results/<case>/outputs.pt): the pictures need no rerun
    run = asyncio.run(run_case_remote(run_id, root=root, progress=progress, keep_outputs=True))
    pictures = _demo_pictures(run_id, root, log)
    analysis = analyze_failures(run_id, root=root)  # report.md embeds the pictures drawn
    report = RunStore(root, run_id).path(REPORT)
    if args.json:
        print_json(
            {
                "run_id": run_id,
                "run_dir": plan.run_dir,
                "report": str(report),
                "run": run,
                "analysis": analysis,
                "pictures": pictures,
            }
        )
        return 0
    out = console()
    _print_analysis(out, analysis)
    out.print(f"report: {escape(str(report))}")
    return 0


def _demo_pictures(run_id: str, root: Path, log: Any) -> list[str]:
    """The demo's pictures when matplotlib is there (else how to get them): paths in the run."""
    from ..artifacts.pictures import render_pictures
    from ..artifacts.records import available, install_hint

    if not available():
        log.print(f"no pictures: matplotlib is not installed - {escape(install_hint().replace('RUN_ID', run_id))}")
        return []
    drawn = render_pictures(run_id, root=root)
    for why in drawn.skipped:
        log.print(f"[yellow]picture skipped:[/yellow] {escape(why)}")
    log.print(f"drew {len(drawn.pictures)} picture(s): " + ", ".join(escape(p) for p in drawn.pictures))
    return drawn.pictures


def cmd_capture_module(args: argparse.Namespace) -> int:
    """Print the standalone capture module, or write it as DIR/opdebug_capture.py."""
    from ..capture import module_source

    source = module_source()
    if not args.out:
        sys.stdout.write(source)
        return 0
    target = Path(args.out).expanduser() / "opdebug_capture.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source, encoding="utf-8")
    print(str(target))
    return 0
