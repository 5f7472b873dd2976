"""``opdebug``: the command line for people, over the same tool functions the
MCP server calls.

    opdebug plan    --config F --output-dir D [--append] [--cases F]
    opdebug record  --output-dir D --result F
    opdebug analyze --output-dir D
    opdebug run     --output-dir D [--case ID ...] [--host NAME ...] [--inventory F]
    opdebug narrow  RUN [--host NAME ...] [--max-cases N]
    opdebug list    [--root R]
    opdebug show    --output-dir D
    opdebug hosts check NAME [--inventory F]
    opdebug demo    [--root R]
    opdebug shrink | repro | regression | pictures | verify RUN ...   (artifacts.py)

D is a run directory, ``<evidence root>/<run_id>``; ``--root R --run-id ID``
says the same thing in two parts.  ``--json`` (on every subcommand) prints
the tool's JSON response instead of tables.  A refusal or a bad input prints
one clear message on stderr and exits 2; nothing prints a traceback for it.

The parser and the entry point are here; the core commands are commands.py,
the artefact commands artifacts.py, what they share console.py.
"""

from __future__ import annotations

import argparse
import os

from pydantic import ValidationError

from ..errors import ToolError
from ..schemas import format_validation_error
from . import artifacts, commands
from .console import INVENTORY_ENV, error

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1
DEBUG_ENV = "OPDEBUG_DEBUG"


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
    p.add_argument(
        "--config",
        metavar="FILE",
        help="plan request JSON (config + cases/stars; module_sources may be omitted: modules are read "
        "from the config file's directory)",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--output-dir", metavar="RUN_DIR", help="the run directory, <root>/<run_id>")
    where.add_argument("--root", help="evidence root; the run goes to <root>/<config.run_id>")
    p.add_argument("--append", action="store_true", help="add new cases to the existing run")
    p.add_argument(
        "--cases",
        metavar="FILE",
        help="take the cases from FILE (a JSON list of cases, or {cases, stars}) instead of the config",
    )
    p.set_defaults(func=commands.cmd_plan)

    p = sub.add_parser("record", parents=[common], help="record one result (CaseResult JSON) for a pending case")
    run_dir_args(p)
    p.add_argument("--result", metavar="FILE", required=True, help="the result JSON file")
    p.set_defaults(func=commands.cmd_record)

    p = sub.add_parser("analyze", parents=[common], help="analyze a run; writes analysis.json and report.md")
    run_dir_args(p)
    p.add_argument(
        "--condition",
        action="append",
        metavar="TEXT",
        help="a condition to test on the recorded cases, e.g. 'x.shape[-1] %% 8 != 0' (repeatable, at most 16; "
        "references/conditions.md)",
    )
    p.set_defaults(func=commands.cmd_analyze)

    p = sub.add_parser("run", parents=[common], help="run pending (or named) cases on inventory hosts")
    run_dir_args(p)
    p.add_argument("--case", action="append", metavar="ID", help="a case to run (repeatable; default: all pending)")
    p.add_argument("--host", action="append", metavar="NAME", help="an inventory host (repeatable; default: local)")
    p.add_argument("--inventory", metavar="FILE", help=f"host inventory TOML (default ${INVENTORY_ENV})")
    p.add_argument(
        "--keep-outputs",
        action="store_true",
        help="keep both outputs of each mismatching case (raw-results/<case>/outputs.pt) for pictures",
    )
    p.set_defaults(func=commands.cmd_run)

    p = sub.add_parser(
        "narrow",
        parents=[common],
        help="autopilot: plan, run and analyze next cases until every finding is exact or a budget ends",
    )
    p.add_argument(
        "run",
        nargs="?",
        help="the run: a run directory or a run id under --root (or give --output-dir / --root --run-id)",
    )
    run_dir_args(p)
    p.add_argument("--host", action="append", metavar="NAME", help="an inventory host (repeatable; default: local)")
    p.add_argument("--inventory", metavar="FILE", help=f"host inventory TOML (default ${INVENTORY_ENV})")
    p.add_argument("--max-cases", type=int, default=40, help="budget: new cases in all (default 40)")
    p.add_argument("--max-seconds", type=float, default=900.0, help="budget: wall seconds (default 900)")
    p.add_argument("--max-steps", type=int, default=12, help="budget: rounds (default 12)")
    p.set_defaults(func=commands.cmd_narrow)

    p = sub.add_parser("list", parents=[common], help="list the runs under the evidence root")
    p.add_argument("--root", help="evidence root")
    p.set_defaults(func=commands.cmd_list)

    p = sub.add_parser("show", parents=[common], help="show a run's cases, states and verdict")
    run_dir_args(p)
    p.set_defaults(func=commands.cmd_show)

    p = sub.add_parser("hosts", help="inventory hosts")
    hosts = p.add_subparsers(dest="hosts_command", metavar="ACTION", required=True)
    hp = hosts.add_parser("check", parents=[common], help="check a host: python, torch, torch_npu, CANN, devices")
    hp.add_argument("name", help="host name from the inventory")
    hp.add_argument("--inventory", metavar="FILE", help=f"host inventory TOML (default ${INVENTORY_ENV})")
    hp.set_defaults(func=commands.cmd_hosts_check)

    p = sub.add_parser(
        "demo", parents=[common], help="plan, run (local), and analyze the built-in example with a planted bug"
    )
    p.add_argument("--root", help="evidence root")
    p.set_defaults(func=commands.cmd_demo)

    p = sub.add_parser(
        "capture-module",
        help="print (or write to --out DIR) opdebug_capture.py, the standalone "
        "module (stdlib + torch) that records a model's real operator calls",
    )
    p.add_argument("--out", metavar="DIR", help="write DIR/opdebug_capture.py instead of printing it")
    p.set_defaults(func=commands.cmd_capture_module)

    artifacts.add_parsers(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ToolError as exc:
        error(f"opdebug {args.command}: error: {exc.with_details()}")
        return EXIT_USER_ERROR
    except ValidationError as exc:
        error(f"opdebug {args.command}: error: [validation_error] {format_validation_error(exc)}")
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        error(f"opdebug {args.command}: interrupted")
        return 130
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        error(
            f"opdebug {args.command}: internal error: {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)"
        )
        return EXIT_INTERNAL_ERROR
