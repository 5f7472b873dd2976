"""``opdebug``: the command line for people, over the same tool functions the
MCP server calls.

    opdebug plan    --config F --output-dir D [--append] [--cases F]
    opdebug record  --output-dir D --result F
    opdebug analyze --output-dir D
    opdebug run     --output-dir D [--case ID ...] [--host NAME ...] [--inventory F]
    opdebug list    [--root R]
    opdebug show    --output-dir D
    opdebug hosts check NAME [--inventory F]
    opdebug demo    [--root R]
    opdebug shrink | repro | regression | pictures | verify RUN ...   (tools/artifacts/cli.py)

D is a run directory, ``<evidence root>/<run_id>``; ``--root R --run-id ID``
says the same thing in two parts.  ``--json`` (on every subcommand) prints
the tool's JSON response instead of tables.  A refusal or a bad input prints
one clear message on stderr and exits 2; nothing prints a traceback for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import ToolError
from .schemas import format_validation_error

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1
INVENTORY_ENV = "OPDEBUG_INVENTORY"
DEBUG_ENV = "OPDEBUG_DEBUG"
_MODULE_FILE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\.py$")

STATE_STYLE = {
    "passed": "green", "numerical_mismatch": "red", "crash": "bold red", "unsupported": "yellow",
    "pending": "dim", "diagnosed": "bold red", "inconclusive": "yellow", "planned": "cyan",
    "running": "cyan", "failed": "red",
}


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def _console(stderr: bool = False):
    """A rich console; text lines never wrap (soft wrap), and tables get a
    sane width when the output is a pipe or a file rather than a terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 140
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def _error(message: str) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")


def _styled(state: str) -> str:
    style = STATE_STYLE.get(state)
    return f"[{style}]{state}[/{style}]" if style else state


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, list):
        return [_to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _to_jsonable(v) for k, v in obj.items()}
    return obj


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(_to_jsonable(obj), indent=2, default=str) + "\n")


def _table(*columns: str, title: str | None = None):
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _varying_axes(axes_list: list[dict[str, str]]) -> set[str]:
    """Axis names whose value differs between the cases (the ones worth showing)."""
    keys = {k for axes in axes_list for k in axes}
    return {k for k in keys if len({axes.get(k) for axes in axes_list}) > 1}


def _axes_text(axes: dict[str, str], shown: set[str]) -> str:
    """``k=v`` for the shown axes; an input's dtype is left out when the
    case-wide ``dtype`` axis already says it."""
    def redundant(key: str, value: str) -> bool:
        return key.endswith(".dtype") and "dtype" in shown and axes.get("dtype") == value
    return ", ".join(f"{k}={v}" for k, v in axes.items() if k in shown and not redundant(k, v))


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


def _read_json_file(path: str, what: str) -> Any:
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}", code="bad_file") from None
    except UnicodeDecodeError as exc:
        raise ToolError(f"{what} {str(p)!r} is not UTF-8 text (byte {exc.start})", code="bad_file") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise ToolError(f"{what} {str(p)!r} is nested too deeply to read (JSON nested beyond ~1000 levels)",
                        code="bad_file") from None
    except json.JSONDecodeError as exc:
        raise ToolError(f"{what} {str(p)!r} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                        code="bad_file") from None


def _run_location(args: argparse.Namespace) -> tuple[Path | None, str]:
    """(evidence root, run id) from ``--output-dir D`` or ``--root R --run-id ID``."""
    from .evidence import safe_component

    if getattr(args, "output_dir", None):
        run_dir = Path(args.output_dir).expanduser().resolve()
        return run_dir.parent, safe_component(run_dir.name, "run directory name (run_id)")
    run_id = getattr(args, "run_id", None)
    if not run_id:
        raise ToolError("name the run: --output-dir RUN_DIR, or --root ROOT --run-id RUN_ID", code="missing_run")
    return (Path(args.root).expanduser() if args.root else None), safe_component(run_id, "run_id")


def _inventory(args: argparse.Namespace) -> str | None:
    return getattr(args, "inventory", None) or os.environ.get(INVENTORY_ENV) or None


def _load_plan_request(args: argparse.Namespace) -> dict[str, Any]:
    """The PlanRequest JSON of ``--config`` (module sources read from the
    config's directory when omitted), with ``--cases`` and ``--append`` applied."""
    request: dict[str, Any] = {}
    if args.config:
        request = _read_json_file(args.config, "config file")
        if not isinstance(request, dict):
            raise ToolError(f"config file {args.config!r} must hold a JSON object (a plan request)",
                            code="bad_file")
    elif not args.append:
        raise ToolError("plan needs --config FILE (a plan request: config + cases/stars)", code="missing_config")
    if args.cases:
        extra = _read_json_file(args.cases, "cases file")
        if isinstance(extra, list):
            extra = {"cases": extra}
        if not isinstance(extra, dict) or not set(extra) <= {"cases", "stars"}:
            raise ToolError(f"cases file {args.cases!r} must hold a list of cases or an object with "
                            "'cases' and/or 'stars'", code="bad_file")
        request["cases"] = extra.get("cases", [])
        request["stars"] = extra.get("stars", [])
    if args.append:
        request["append"] = True
    if args.config and isinstance(request.get("captured_files"), dict):
        # Relative capture paths are relative to the config file, like its modules.
        base = Path(args.config).expanduser().parent
        request["captured_files"] = {k: str(base / v) if isinstance(v, str) else v
                                     for k, v in request["captured_files"].items()}
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
            raise ToolError(f"config.operator.modules names {name!r} but {str(path)!r} cannot be read "
                            f"({exc.strerror or exc}); put the module next to the config file or give "
                            "'module_sources' in it", code="bad_file") from None
    return sources


# ---------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------


def cmd_plan(args: argparse.Namespace) -> int:
    from .plan_cases import plan_cases

    request = _load_plan_request(args)
    if args.output_dir:
        root, run_id = _run_location(args)
        config = request.get("config") if isinstance(request.get("config"), dict) else {}
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
        config = request.get("config") if isinstance(request.get("config"), dict) else {}
        if request.get("append") and not (request.get("run_id") or config.get("run_id")):
            raise ToolError("--append needs to know which run to grow: use --output-dir RUN_DIR "
                            "(<root>/<run_id>), or a --config whose run_id names the run", code="missing_run")
    response = plan_cases(request, root=root)
    if args.json:
        _print_json(response)
        return 0
    out = _console()
    verb = "created" if response.created else "appended to"
    out.print(f"{verb} run [bold]{response.run_id}[/bold] at {_escape(response.run_dir)} "
              f"({len(response.added)} new case(s), {len(response.cases)} in all)")
    _print_cases(out, [(c.id, c.mode, c.axes, c.state, "") for c in response.cases])
    for warning in response.warnings:
        out.print(f"[yellow]warning:[/yellow] {_escape(warning)}")
    return 0


def _print_cases(out: Any, rows: list[tuple[str, str, dict[str, str], str, str]]) -> None:
    shown = _varying_axes([axes for _, _, axes, _, _ in rows])
    table = _table("case", "mode", "axes (varying)", "state", "detail")
    for case_id, mode, axes, state, detail in rows:
        table.add_row(case_id, mode, _escape(_axes_text(axes, shown - {"mode"})), _styled(state), _escape(detail))
    out.print(table)


def cmd_record(args: argparse.Namespace) -> int:
    from .record_result import record_result

    root, run_id = _run_location(args)
    result = _read_json_file(args.result, "result file")
    response = record_result(run_id, result, root=root)
    if args.json:
        _print_json(response)
        return 0
    out = _console()
    out.print(f"recorded [bold]{response.case_id}[/bold] as {_styled(response.status)} at "
              f"{response.recorded_at.isoformat()} (raw evidence: {response.raw_path})")
    out.print(f"pending: {len(response.pending)}" + (f" ({', '.join(response.pending)})" if response.pending else ""))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from .analyze_failures import analyze_failures
    from .evidence import REPORT, RunStore

    root, run_id = _run_location(args)
    analysis = analyze_failures(run_id, root=root)
    if args.json:
        _print_json(analysis)
        return 0
    out = _console()
    _print_analysis(out, analysis)
    out.print(f"report: {_escape(str(RunStore(root, run_id).path(REPORT)))}")
    return 0


def _print_analysis(out: Any, analysis: Any) -> None:
    out.print(f"verdict: {_styled(analysis.verdict)} - {_escape(analysis.summary)}")
    counts = ", ".join(f"{k}={v}" for k, v in analysis.status_counts.items())
    out.print(f"recorded {analysis.recorded}/{analysis.planned}" + (f" ({counts})" if counts else ""))
    if analysis.failure_axes:
        table = _table("axis", "value", "failing", "cases with value", "explains all", title="failure axes")
        for ax in analysis.failure_axes:
            table.add_row(_escape(ax.axis), _escape(ax.value), str(ax.failing), str(ax.total_with_value),
                          "[bold]yes[/bold]" if ax.explains_all else "no")
        out.print(table)
    for signature, cases in analysis.crash_groups.items():
        out.print(_escape(f"crash group {signature!r}: {', '.join(cases)}"))
    if analysis.unsupported:
        out.print("unsupported (not failures): " + ", ".join(u.case_id for u in analysis.unsupported))
    if analysis.missing:
        out.print("[yellow]missing evidence:[/yellow] " + ", ".join(analysis.missing))
    if analysis.integration_hint:
        out.print(f"[yellow]integration hint:[/yellow] {_escape(analysis.integration_hint)}")
    for nxt in analysis.next_cases:
        out.print(_escape(f"next: {nxt.reason} (from {nxt.base_case}: {json.dumps(nxt.change)})"))


def cmd_run(args: argparse.Namespace) -> int:
    from .progress import RunProgress
    from .run_case_remote import run_case_remote

    root, run_id = _run_location(args)
    progress_out = _console(stderr=args.json)
    # a bar (cases done, cases in flight) where stderr is a terminal; the lines either way
    bar = RunProgress(f"run {run_id}", len(args.case) if args.case else None,
                      enabled=not args.json and sys.stderr.isatty(), console=_console(stderr=True),
                      lines=progress_out)

    async def progress(done: int, total: int, outcome: Any) -> None:
        where = f" on {outcome.host}/{outcome.device}" if outcome.host else ""
        await bar.finished(done, total, outcome.case_id,
                           f"\\[{done}/{total}] {outcome.case_id}: {_styled(outcome.state)}{_escape(where)} - "
                           f"{_escape(outcome.summary)}")

    with bar:
        response = asyncio.run(run_case_remote(run_id, case_ids=args.case or None, hosts=args.host or None,
                                               root=root, inventory=_inventory(args), progress=progress,
                                               on_start=bar.started, keep_outputs=args.keep_outputs))
    if args.json:
        _print_json(response)
        return 0
    _print_run(_console(), response)
    return 0


def _print_run(out: Any, response: Any) -> None:
    table = _table("case", "state", "recorded", "where", "summary")
    for o in response.outcomes:
        where = f"{o.host}/{o.device}" if o.host else ""
        summary = _escape(o.summary) + (f" [dim]({_escape(o.error)})[/dim]" if o.error else "")
        table.add_row(o.case_id, _styled(o.state), "yes" if o.recorded else "no", _escape(where), summary)
    out.print(table)
    out.print(f"recorded {len(response.recorded)}, pending {len(response.pending)}"
              + (f", refused {', '.join(response.refused)}" if response.refused else ""))
    if response.rerun_hint:
        out.print(f"[yellow]{_escape(response.rerun_hint)}[/yellow]")


def cmd_list(args: argparse.Namespace) -> int:
    from .evidence import list_runs, resolve_root

    root = resolve_root(args.root)
    runs = list_runs(root)
    if args.json:
        _print_json(runs)
        return 0
    out = _console()
    if not runs:
        out.print(f"no runs under {_escape(str(root))}")
        return 0
    table = _table("run_id", "operator", "status", "cases", "recorded", "updated", title=f"runs under {root}")
    for run in runs:
        table.add_row(str(run.get("run_id", "")), _escape(str(run.get("operator", ""))), _styled(str(run.get("status", ""))),
                      str(run.get("case_count", "")), str(run.get("recorded_count", "")),
                      str(run.get("updated_at", ""))[:19].replace("T", " "))
    out.print(table)
    return 0


def _result_detail(result: Any) -> str:
    if result is None:
        return ""
    if result.error is not None:
        rule = f" (rule {result.error.matched_rule!r})" if result.error.matched_rule else ""
        return result.error.signature + rule
    failed = [c for c in result.comparisons if not c.passed]
    if failed:
        from .describe import describe_comparison

        return describe_comparison(failed[0], brief=True)
    worst = max((c.max_abs for c in result.comparisons if c.max_abs is not None), default=None)
    return f"max_abs={worst:.3g}" if worst is not None else ""


def cmd_show(args: argparse.Namespace) -> int:
    from .artifacts.cli import picture_lines
    from .artifacts.pictures import picture_paths
    from .evidence import ANALYSIS, RunStore, read_json
    from .plan_cases import case_axes
    from .schemas import Analysis

    root, run_id = _run_location(args)
    store = RunStore(root, run_id)
    manifest = store.read_manifest()
    cases = store.read_cases()
    results = store.read_results()
    analysis_path = store.path(ANALYSIS)
    analysis = Analysis.model_validate(read_json(analysis_path)) if analysis_path.is_file() else None
    rows = [(c.id, c.mode, case_axes(c), results[c.id].status if c.id in results else "pending",
             _result_detail(results.get(c.id))) for c in cases]
    # Cases and results only grow: other counts than the analysis saw mean it is out of date.
    stale = analysis is not None and (analysis.planned, analysis.recorded) != (len(cases), len(results))
    if args.json:
        _print_json({
            "run": manifest,
            "run_dir": str(store.dir),
            "cases": [{"id": r[0], "mode": r[1], "axes": r[2], "state": r[3], "detail": r[4]} for r in rows],
            "analysis": analysis,
            "analysis_stale": stale,
            "pictures": [str(p) for p in picture_paths(store)],
        })
        return 0
    out = _console()
    out.print(f"run [bold]{run_id}[/bold] ({_escape(str(manifest.get('operator')))}) at {_escape(str(store.dir))}: "
              f"{_styled(str(manifest.get('status')))}, {len(results)}/{len(cases)} recorded")
    _print_cases(out, rows)
    if analysis is not None:
        if stale:
            out.print(f"[yellow]the analysis below is out of date: it saw {analysis.recorded}/{analysis.planned} "
                      f"recorded, the run now has {len(results)}/{len(cases)} - run opdebug analyze[/yellow]")
        _print_analysis(out, analysis)
    else:
        out.print("not analyzed yet (opdebug analyze)")
    for line in picture_lines(store):
        out.print(_escape(line))
    return 0


def cmd_hosts_check(args: argparse.Namespace) -> int:
    from .check_host import check_host

    report = asyncio.run(check_host(args.name, inventory=_inventory(args)))
    if args.json:
        _print_json(report)
        return 0
    out = _console()
    data = _to_jsonable(report)
    table = _table("field", "value", title=f"host {_escape(args.name)}")
    for key, value in (data.items() if isinstance(data, dict) else []):
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
        return f"[red]{_escape(text)}[/red]" if key in ("missing", "errors") else _escape(text)
    if isinstance(value, dict):
        return _escape(", ".join(f"{k}={v}" for k, v in value.items()))
    return _escape(str(value))


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def cmd_demo(args: argparse.Namespace) -> int:
    from .analyze_failures import analyze_failures
    from .evidence import REPORT, RunStore, resolve_root
    from .examples import demo_request
    from .plan_cases import plan_cases
    from .run_case_remote import run_case_remote

    root = resolve_root(args.root)
    run_id = "demo-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    plan = plan_cases(demo_request(run_id), root=root)
    log = _console(stderr=args.json)
    log.print(f"planned {len(plan.cases)} case(s) in {_escape(plan.run_dir)}")

    async def progress(done: int, total: int, outcome: Any) -> None:
        log.print(f"\\[{done}/{total}] {outcome.case_id}: {_styled(outcome.state)} - {_escape(outcome.summary)}")

    run = asyncio.run(run_case_remote(run_id, root=root, progress=progress))
    analysis = analyze_failures(run_id, root=root)
    report = RunStore(root, run_id).path(REPORT)
    if args.json:
        _print_json({"run_id": run_id, "run_dir": plan.run_dir, "report": str(report), "run": run,
                     "analysis": analysis})
        return 0
    out = _console()
    _print_analysis(out, analysis)
    out.print(f"report: {_escape(str(report))}")
    return 0


def cmd_capture_module(args: argparse.Namespace) -> int:
    """Print the standalone capture module, or write it as DIR/opdebug_capture.py."""
    from .capture import module_source

    source = module_source()
    if not args.out:
        sys.stdout.write(source)
        return 0
    target = Path(args.out).expanduser() / "opdebug_capture.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source, encoding="utf-8")
    print(str(target))
    return 0


# ---------------------------------------------------------------------------
# Parser and entry point
# ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the JSON response instead of tables")

    def run_dir_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--output-dir", metavar="RUN_DIR", help="the run directory, <evidence root>/<run_id>")
        p.add_argument("--root", help="evidence root (default $OPDEBUG_EVIDENCE_ROOT or .vaws-local/operator-debug)")
        p.add_argument("--run-id", help="the run id (with --root)")

    parser = argparse.ArgumentParser(
        prog="opdebug",
        description="Isolate an Ascend operator failure into an explicit case matrix, run it, record and "
        "analyze the evidence.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("plan", parents=[common], help="validate a plan request and create (or grow) a run")
    p.add_argument("--config", metavar="FILE",
                   help="plan request JSON (config + cases/stars; module_sources may be omitted: modules are read "
                   "from the config file's directory)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--output-dir", metavar="RUN_DIR", help="the run directory, <root>/<run_id>")
    where.add_argument("--root", help="evidence root; the run goes to <root>/<config.run_id>")
    p.add_argument("--append", action="store_true", help="add new cases to the existing run")
    p.add_argument("--cases", metavar="FILE",
                   help="take the cases from FILE (a JSON list of cases, or {cases, stars}) instead of the config")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("record", parents=[common], help="record one result (CaseResult JSON) for a pending case")
    run_dir_args(p)
    p.add_argument("--result", metavar="FILE", required=True, help="the result JSON file")
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("analyze", parents=[common], help="analyze a run; writes analysis.json and report.md")
    run_dir_args(p)
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("run", parents=[common], help="run pending (or named) cases on inventory hosts")
    run_dir_args(p)
    p.add_argument("--case", action="append", metavar="ID", help="a case to run (repeatable; default: all pending)")
    p.add_argument("--host", action="append", metavar="NAME", help="an inventory host (repeatable; default: local)")
    p.add_argument("--inventory", metavar="FILE", help=f"host inventory TOML (default ${INVENTORY_ENV})")
    p.add_argument("--keep-outputs", action="store_true",
                   help="keep both outputs of each mismatching case (raw-results/<case>/outputs.pt) for pictures")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("list", parents=[common], help="list the runs under the evidence root")
    p.add_argument("--root", help="evidence root")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", parents=[common], help="show a run's cases, states and verdict")
    run_dir_args(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("hosts", help="inventory hosts")
    hosts = p.add_subparsers(dest="hosts_command", metavar="ACTION", required=True)
    hp = hosts.add_parser("check", parents=[common], help="check a host: python, torch, torch_npu, CANN, devices")
    hp.add_argument("name", help="host name from the inventory")
    hp.add_argument("--inventory", metavar="FILE", help=f"host inventory TOML (default ${INVENTORY_ENV})")
    hp.set_defaults(func=cmd_hosts_check)

    p = sub.add_parser("demo", parents=[common],
                       help="plan, run (local), and analyze the built-in example with a planted bug")
    p.add_argument("--root", help="evidence root")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("capture-module", help="print (or write to --out DIR) opdebug_capture.py, the standalone "
                       "module (stdlib + torch) that records a model's real operator calls")
    p.add_argument("--out", metavar="DIR", help="write DIR/opdebug_capture.py instead of printing it")
    p.set_defaults(func=cmd_capture_module)

    from .artifacts.cli import add_parsers as add_artifact_parsers

    add_artifact_parsers(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ToolError as exc:
        _error(f"opdebug {args.command}: error: {exc.with_details()}")
        return EXIT_USER_ERROR
    except ValidationError as exc:
        _error(f"opdebug {args.command}: error: [validation_error] {format_validation_error(exc)}")
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        _error(f"opdebug {args.command}: interrupted")
        return 130
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        _error(f"opdebug {args.command}: internal error: {type(exc).__name__}: {exc} "
               f"(set {DEBUG_ENV}=1 for the traceback)")
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
