"""The rest of the protocol an IDE expects, beside the tools and resources: the
debugging-loop prompt, completions (run ids, case ids, raw file names, hosts,
tool names), a new run announced as it appears (``list_changed``), and a
``logging/setLevel`` handler for the log messages the tools send.  Wiring
only: what is read comes from tools/ (evidence, inventory) and resources.py.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, Completion, PromptReference, ResourceTemplateReference

from tools.errors import ToolError
from tools.evidence import RunStore

from .resources import add_run_resource, raw_files, run_ids
from .sdk_adapter import AdaptedServer, add_request_handler, advertise_resource_list_changes
from .tooling import ToolCatalog

MAX_COMPLETIONS = 100
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

DEBUG_LOOP_PROMPT = """\
Debug the operator {operator} on an Ascend NPU. Symptom: {symptom}
{host_line}
Follow the ascend-operator-debug loop (SKILL.md):
1. Write the operator config: the exact candidate call ({operator}), a trusted CPU reference
   (a user module shipped with the run if torch has none), and tolerances fixed now, before
   any result (per_dtype for float16/bfloat16).
2. plan_cases with a base case that reproduces the symptom's call and a star of one-axis
   variations (dtype, shape, strides, layout, mode, attributes, special values). A full example
   request is the resource opdebug://examples/plan-request.
3. check_host on a new host, then run_case_remote (pending cases; outcomes per case).
4. analyze_failures; read opdebug://runs/{{run_id}}/report. Append the suggested next cases
   (plan_cases append=true), changing one axis at a time, run and analyze again - or let
   narrow_failure do that loop under a budget - until the finding is exact.
5. shrink_case, export_repro and export_regression on the failing case; verify_fix after the fix.
Rules: never cast silently or loosen tolerances after a result; unsupported is not a failure;
a harness, reference or connection error leaves a case pending (re-run it)."""


def add_protocol(server: AdaptedServer, root: Path, inventory: str | None, catalog: ToolCatalog) -> None:
    """Register the prompt, completions and the logging handler; advertise the
    notifications the server sends."""
    _add_prompt(server, inventory)
    _add_completions(server, root, inventory, catalog)
    _add_logging(server)
    advertise_resource_list_changes(server)  # a new run is announced: announce_run


async def announce_run(ctx: Context, server: AdaptedServer, root: Path, run_id: str) -> None:
    """After a run is created: list it and tell the client the resource list changed."""
    if not add_run_resource(server, root, run_id):
        return
    try:
        await ctx.notify_resources_changed()  # subscriptions/listen streams (2026-07-28)
    except Exception:
        pass
    try:  # sessions of earlier protocol versions
        await ctx.request_context.session.send_resource_list_changed()
    except Exception:
        pass


async def log(ctx: Context, level: str, message: str) -> None:
    """A log notification to the client, when its level lets it through; never fails a tool."""
    wanted = _LOG_LEVEL_OF_SESSION.get(ctx.request_context.session, "info")
    if LOG_LEVELS.index(level) < LOG_LEVELS.index(wanted):
        return
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await ctx.log(level, message, logger_name="opdebug")  # type: ignore[arg-type]
    except Exception:
        pass


def _add_logging(server: AdaptedServer) -> None:
    from mcp_types import EmptyResult, SetLevelRequestParams

    async def set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        _LOG_LEVEL_OF_SESSION[ctx.session] = params.level
        return EmptyResult()

    add_request_handler(server, "logging/setLevel", SetLevelRequestParams, set_level)


# The level each client session asked for (logging/setLevel); a session gone is forgotten.
_LOG_LEVEL_OF_SESSION: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def debug_loop_prompt(operator: str, symptom: str, host: str = "") -> str:
    """The text of the debug-operator prompt (SKILL.md shows it for one set of arguments)."""
    host_line = (
        f"Run the cases on inventory host {host!r}."
        if host
        else "Run the cases on host 'local' first, then on an NPU host from the inventory."
    )
    return DEBUG_LOOP_PROMPT.format(operator=operator, symptom=symptom, host_line=host_line)


def _add_prompt(server: AdaptedServer, inventory: str | None) -> None:
    @server.prompt(
        name="debug-operator",
        title="Debug an operator",
        description="Start the debugging loop for one operator and the symptom the model shows.",
    )
    def debug_operator(operator: str, symptom: str, host: str = "") -> str:
        return debug_loop_prompt(operator, symptom, host)

    async def check_arguments(name: str, arguments: dict[str, Any] | None) -> None:
        """Arguments checked before the prompt renders: a missing, empty or unknown one is
        a -32602 (invalid params) error with one line naming it, and nothing is logged."""
        prompts = {p.name: p for p in await server.list_prompts()}
        prompt = prompts.get(name)
        if prompt is None:
            raise MCPError(code=INVALID_PARAMS, message=f"unknown prompt {name!r}; prompts: {sorted(prompts)}")
        given = dict(arguments or {})
        declared = {a.name: a for a in prompt.arguments or []}
        missing = [n for n, a in declared.items() if a.required and not str(given.get(n) or "").strip()]
        unknown = sorted(set(given) - set(declared))
        if missing or unknown:
            problems = ([f"missing required argument(s) {missing}"] if missing else []) + (
                [f"unknown argument(s) {unknown}"] if unknown else []
            )
            raise MCPError(
                code=INVALID_PARAMS, message=f"prompt {name!r}: {'; '.join(problems)} (arguments: {sorted(declared)})"
            )

    server.prompt_checks.append(check_arguments)


def _add_completions(server: AdaptedServer, root: Path, inventory: str | None, catalog: ToolCatalog) -> None:
    @server.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Completion | None:
        name, value = argument.name, argument.value or ""
        known = dict((context.arguments or {}) if context is not None else {})
        values: list[str] = []
        if name == "run_id":
            values = run_ids(root, value)
        elif name == "case_id" and known.get("run_id"):
            values = _case_ids(root, known["run_id"], value)
        elif name == "name" and known.get("run_id") and known.get("case_id"):
            try:
                _store, raw = raw_files(root, known["run_id"], known["case_id"])
                values = sorted(p.name for p in raw.iterdir() if p.name.startswith(value))
            except ResourceNotFoundError:
                values = []
        elif name == "host":
            values = [h for h in _host_names(inventory) if h.startswith(value)]
        elif name == "tool" and isinstance(ref, ResourceTemplateReference):
            values = [t for t in catalog.names() if t.startswith(value)]
        elif isinstance(ref, PromptReference):
            return None
        return Completion(values=values[:MAX_COMPLETIONS], total=len(values), has_more=len(values) > MAX_COMPLETIONS)


def _case_ids(root: Path, run_id: str, prefix: str) -> list[str]:
    try:
        store = RunStore(root, run_id)
        return [c.id for c in store.read_cases() if c.id.startswith(prefix)]
    except ToolError:
        return []


def _host_names(inventory: str | None) -> list[str]:
    from tools.remote.inventory import as_inventory

    try:
        return list(as_inventory(inventory).names())
    except (ToolError, OSError, ValueError):
        return ["local"]
