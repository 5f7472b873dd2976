"""What every ``opdebug`` command prints with and reads its arguments by: the
rich console, markup escaping, JSON output, tables, state colours, the run's
location from the command line, the inventory, JSON input files."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..errors import ToolError

INVENTORY_ENV = "OPDEBUG_INVENTORY"

STATE_STYLE = {
    "passed": "green",
    "numerical_mismatch": "red",
    "crash": "bold red",
    "unsupported": "yellow",
    "pending": "dim",
    "inconclusive": "yellow",
    "planned": "cyan",
    "running": "cyan",
    "failed": "red",
    "diagnosed": "red",
}


def console(stderr: bool = False):
    """A rich console; text lines never wrap (soft wrap), and tables get a
    sane width when the output is a pipe or a file rather than a terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 140
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def error(message: str) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")


def styled(state: str) -> str:
    style = STATE_STYLE.get(state)
    return f"[{style}]{state}[/{style}]" if style else state


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, list):
        return [to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    return obj


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2, default=str) + "\n")


def make_table(*columns: str, title: str | None = None):
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def varying_axes(axes_list: list[dict[str, str]]) -> set[str]:
    """Axis names whose value differs between the cases (the ones worth showing)."""
    keys = {k for axes in axes_list for k in axes}
    return {k for k in keys if len({axes.get(k) for axes in axes_list}) > 1}


def axes_text(axes: dict[str, str], shown: set[str]) -> str:
    """``k=v`` for the shown axes; an input's dtype is left out when the
    case-wide ``dtype`` axis already says it."""

    def redundant(key: str, value: str) -> bool:
        return key.endswith(".dtype") and "dtype" in shown and axes.get("dtype") == value

    return ", ".join(f"{k}={v}" for k, v in axes.items() if k in shown and not redundant(k, v))


def read_json_file(path: str, what: str) -> Any:
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
        raise ToolError(
            f"{what} {str(p)!r} is nested too deeply to read (JSON nested beyond ~1000 levels)", code="bad_file"
        ) from None
    except json.JSONDecodeError as exc:
        raise ToolError(
            f"{what} {str(p)!r} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", code="bad_file"
        ) from None


def run_location(args: argparse.Namespace) -> tuple[Path | None, str]:
    """(evidence root, run id) from ``--output-dir D``, ``--root R --run-id ID``,
    or a positional RUN: a run directory (a path) or a run id under ``--root``."""
    from ..evidence import safe_component

    if getattr(args, "output_dir", None):
        run_dir = Path(args.output_dir).expanduser().resolve()
        return run_dir.parent, safe_component(run_dir.name, "run directory name (run_id)")
    root = Path(args.root).expanduser() if getattr(args, "root", None) else None
    if getattr(args, "run_id", None):
        return root, safe_component(args.run_id, "run_id")
    run = getattr(args, "run", None)
    if not run:
        raise ToolError("name the run: --output-dir RUN_DIR, or --root ROOT --run-id RUN_ID", code="missing_run")
    if os.sep in run or run in (".", "..") or (Path(run).is_dir() and (Path(run) / "manifest.json").is_file()):
        run_dir = Path(run).expanduser().resolve()
        return run_dir.parent, safe_component(run_dir.name, "run directory name (run_id)")
    return root, safe_component(run, "run_id")


def inventory(args: argparse.Namespace) -> str | None:
    return getattr(args, "inventory", None) or os.environ.get(INVENTORY_ENV) or None


def escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
