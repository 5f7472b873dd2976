"""The page commands of ``opdebug`` (registered by cli/__init__.py):

    opdebug report RUN [--html]      report.md's path; --html writes run.html and prints its path
    opdebug open   RUN               run.html in the person's browser, or where it is when none is here

RUN is a run directory (a path) or a run id under ``--root``.  The page is written from
the run's last analysis (analyze_failures.write_page); a run never analyzed is refused.
"""

from __future__ import annotations

import argparse
import webbrowser
from typing import Any

from ..errors import ToolError
from .console import print_json, run_location


def cmd_report(args: argparse.Namespace) -> int:
    from ..analyze_failures import write_page
    from ..evidence import REPORT, RunStore

    root, run_id = run_location(args)
    if args.html:
        path = write_page(run_id, root=root)
    else:
        store = RunStore(root, run_id)
        store.require()
        path = store.path(REPORT)
        if not path.is_file():
            raise ToolError(
                f"run {run_id!r} has no report.md yet: analyze it first (opdebug analyze)", code="not_analyzed"
            )
    if args.json:
        print_json({"run_id": run_id, "path": str(path)})
    else:
        print(path)
    return 0


def cmd_open(args: argparse.Namespace) -> int:
    """Open run.html (written first where it is missing) with Python's webbrowser: $BROWSER, the desktop's
    browser, or a console one; where there is none, say where the page is."""
    from ..analyze_failures import write_page
    from ..evidence import PAGE, RunStore

    root, run_id = run_location(args)
    store = RunStore(root, run_id)
    store.require()
    path = store.path(PAGE)
    if not path.is_file():
        path = write_page(run_id, root=root)
    opened = _open(path.as_uri())
    if args.json:
        print_json({"run_id": run_id, "path": str(path), "opened": opened})
    elif opened:
        print(f"opened {path} in the browser")
    else:
        print(
            f"no browser here to open it: the page is {path} - open {path.as_uri()} in any browser (it needs no network)"
        )
    return 0


def _open(uri: str) -> bool:
    try:
        return webbrowser.open(uri)
    except webbrowser.Error:  # no runnable browser
        return False


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    def run_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("run", metavar="RUN", help="a run directory, or a run id under --root")
        p.add_argument("--root", help="evidence root (default $OPDEBUG_EVIDENCE_ROOT or .vaws-local/operator-debug)")

    p = sub.add_parser("report", parents=[common], help="print report.md's path; --html writes run.html, the page")
    run_arg(p)
    p.add_argument("--html", action="store_true", help="write run.html (the run as one page) and print its path")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("open", parents=[common], help="open run.html in the browser (or say where it is)")
    run_arg(p)
    p.set_defaults(func=cmd_open)
