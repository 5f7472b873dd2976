"""The artefact commands of ``opdebug`` (registered by cli/__init__.py):

    opdebug shrink     RUN CASE [--max-cases N] [--max-seconds S] [--host NAME ...]
    opdebug repro      RUN CASE --out DIR
    opdebug regression RUN --out DIR [--case ID ...] [--neighbours]
    opdebug pictures   RUN [--case ID ...]
    opdebug verify     RUN [--host NAME ...] [--no-command] [--command-timeout S]

RUN is a run directory (a path) or a run id under ``--root``.  Long work
shows a progress bar on stderr where it is a terminal (progress.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from ..errors import ToolError
from .console import console, escape, inventory, print_json, run_location


def _bar(title: str, total: int | None, args: argparse.Namespace) -> Any:
    from .progress import RunProgress

    return RunProgress(title, total, enabled=not args.json and sys.stderr.isatty(), console=console(stderr=True))


def _print(args: argparse.Namespace, response: Any, lines: list[str]) -> int:
    if args.json:
        print_json(response)
        return 0
    out = console()
    for line in lines:
        out.print(escape(line))
    return 0


def cmd_shrink(args: argparse.Namespace) -> int:
    from ..artifacts.shrink import shrink_case

    root, run_id = run_location(args)
    with _bar(f"shrink {args.case}", args.max_cases, args) as bar:

        async def progress(done: int, total: int, text: str) -> None:
            bar.complete(done, total)
            await bar.started(text)

        response = asyncio.run(
            shrink_case(
                run_id,
                args.case,
                hosts=args.host or None,
                root=root,
                inventory=inventory(args),
                max_cases=args.max_cases,
                max_seconds=args.max_seconds,
                progress=progress,
            )
        )
        bar.complete(response.cases_run, args.max_cases)
    lines = [
        f"{s.case_id}: {s.change} -> {s.state}{' (same failure, kept)' if s.same_failure else ''}"
        for s in response.steps
    ]
    lines += [
        f"smallest case failing the same way ({response.signature}): {response.smallest_case}, shapes "
        f"{response.smallest_shapes}, {response.smallest_numel} elements (from {response.start_numel}); "
        f"{response.cases_run} case(s) in {response.seconds:.1f} s, stopped: {response.stopped}"
    ]
    return _print(args, response, lines)


def cmd_repro(args: argparse.Namespace) -> int:
    from ..artifacts.repro import export_repro

    root, run_id = run_location(args)
    response = export_repro(run_id, args.case, args.out, root=root)
    return _print(
        args,
        response,
        [
            f"wrote {response.script} (recorded {response.recorded_status} on "
            f"{response.device}); run: {response.command}"
        ],
    )


def cmd_regression(args: argparse.Namespace) -> int:
    from ..artifacts.regression import export_regression

    root, run_id = run_location(args)
    response = export_regression(run_id, args.out, root=root, case_ids=args.case or None, neighbours=args.neighbours)
    return _print(
        args,
        response,
        [
            f"wrote {response.test_file}: failing {response.failing_cases}"
            + (f", passing neighbours {response.neighbour_cases}" if response.neighbour_cases else ""),
            f"run: {response.command}",
        ],
    )


def cmd_pictures(args: argparse.Namespace) -> int:
    from ..artifacts.pictures import render_pictures
    from ..evidence import RunStore

    root, run_id = run_location(args)
    outputs = {}
    for item in args.outputs or []:
        case, sep, path = item.partition("=")
        if not sep or not case or not path:
            raise ToolError(f"--outputs {item!r}: give CASE=FILE", code="validation_error")
        outputs[case] = path
    response = render_pictures(run_id, root=root, case_ids=args.case or None, outputs=outputs)
    store = RunStore(root, run_id)
    lines = [str(store.dir / p) for p in response.pictures] + [f"skipped: {s}" for s in response.skipped]
    if response.pictures:
        lines.append("re-run opdebug analyze to embed them in report.md")
    return _print(args, response, lines)


def _module_sources(paths: list[str]) -> dict[str, str]:
    """NAME.py -> source of each --candidate-module file (read here, shipped with the rerun)."""
    from pathlib import Path

    sources = {}
    for path in paths:
        try:
            sources[Path(path).name] = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"--candidate-module {path}: cannot read it: {exc}", code="validation_error") from None
    return sources


def cmd_verify(args: argparse.Namespace) -> int:
    from ..artifacts.verify import verify_run

    root, run_id = run_location(args)
    with _bar(f"verify {run_id}", None, args) as bar:

        async def progress(done: int, total: int, outcome: Any) -> None:
            await bar.finished(done, total, outcome.case_id)

        response = asyncio.run(
            verify_run(
                run_id,
                hosts=args.host or None,
                root=root,
                inventory=inventory(args),
                run_command=not args.no_command,
                command_timeout_s=args.command_timeout,
                progress=progress,
                on_start=bar.started,
                candidate=args.candidate,
                candidate_sources=_module_sources(args.candidate_module),
            )
        )
    lines = [f"{orig} -> {new}: {response.states.get(new, 'pending')}" for orig, new in response.rerun.items()]
    if response.model_command:
        m = response.model_command
        said = m.get("error") or f"exit status {m.get('exit_status')}"
        lines.append(f"model command on {m['host']}: {said}")
    lines += [response.conclusion, f"evidence: {response.evidence}"]
    code = _print(args, response, lines)
    return code if not response.still_failing else 1


def picture_lines(store) -> list[str]:
    """For ``opdebug show``: the latest verify's conclusion, and the run's
    picture paths (or how to get them)."""
    from ..artifacts.records import available, install_hint, picture_paths, verify_records

    records = verify_records(store)
    lines = [f"after the fix (verify {records[-1]['index']}): {records[-1]['conclusion']}"] if records else []
    paths = picture_paths(store)
    if paths:
        return lines + ["pictures:"] + [f"  {p}" for p in paths]
    return lines + [f"pictures: none ({'opdebug pictures ' + store.run_id if available() else install_hint()})"]


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    def run_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("run", metavar="RUN", help="a run directory, or a run id under --root")
        p.add_argument("--root", help="evidence root (default $OPDEBUG_EVIDENCE_ROOT or .vaws-local/operator-debug)")

    def hosts(p: argparse.ArgumentParser) -> None:
        p.add_argument("--host", action="append", metavar="NAME", help="an inventory host (repeatable; default local)")
        p.add_argument("--inventory", metavar="FILE", help="host inventory TOML (default $OPDEBUG_INVENTORY)")

    p = sub.add_parser("shrink", parents=[common], help="find the smallest case that fails like CASE (runs cases)")
    run_arg(p)
    p.add_argument("case", metavar="CASE", help="a recorded failing case")
    p.add_argument("--max-cases", type=int, default=30, help="case budget (default 30)")
    p.add_argument("--max-seconds", type=float, default=600.0, help="time budget in seconds (default 600)")
    hosts(p)
    p.set_defaults(func=cmd_shrink)

    p = sub.add_parser("repro", parents=[common], help="write a standalone reproducer (stdlib + torch) of CASE")
    run_arg(p)
    p.add_argument("case", metavar="CASE")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for <case>.py and what it needs")
    p.set_defaults(func=cmd_repro)

    p = sub.add_parser("regression", parents=[common], help="write a pytest regression file over the failing cases")
    run_arg(p)
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--case", action="append", metavar="ID", help="cases to include (default: every failing case)")
    p.add_argument("--neighbours", action="store_true", help="include passing one-axis neighbours too")
    p.set_defaults(func=cmd_regression)

    p = sub.add_parser("pictures", parents=[common], help="draw error maps and histograms of the failing outputs")
    run_arg(p)
    p.add_argument("--case", action="append", metavar="ID", help="cases to draw (default: every mismatching case)")
    p.add_argument(
        "--outputs",
        action="append",
        metavar="CASE=FILE",
        help="a case's outputs saved by its reproducer (--save-outputs) on the device host",
    )
    p.set_defaults(func=cmd_pictures)

    p = sub.add_parser(
        "verify",
        parents=[common],
        help="after a fix: the failing cases again under new ids, and the config's model command",
    )
    run_arg(p)
    hosts(p)
    p.add_argument("--no-command", action="store_true", help="do not run the config's model command")
    p.add_argument("--command-timeout", type=float, default=600.0, help="seconds for the model command")
    p.add_argument(
        "--candidate", help="the fixed operator under another name (module.attr), in place of the config's candidate"
    )
    p.add_argument(
        "--candidate-module",
        action="append",
        default=[],
        metavar="FILE.py",
        help="a module file the candidate is imported from, shipped with the rerun (repeatable)",
    )
    p.set_defaults(func=cmd_verify)
