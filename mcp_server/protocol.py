"""The rest of the protocol an IDE expects, beside the tools: the debugging-loop
prompt, completions (run ids, case ids, raw file names, hosts), per-run
resources listed as runs appear (with ``list_changed``), raw evidence per case
as resources, and a ``logging/setLevel`` handler for the log messages the tools
send.  Wiring only: what is read comes from tools/ (evidence, inventory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.mcpserver.resources import FunctionResource
from mcp_types import Completion, PromptReference, ResourceTemplateReference

from tools.errors import ToolError
from tools.evidence import RunStore, safe_component

MAX_COMPLETIONS = 100
MAX_RAW_FILE_CHARS = 1_000_000
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
   (plan_cases append=true), changing one axis at a time, run and analyze again.
Rules: never cast silently or loosen tolerances after a result; unsupported is not a failure;
a harness, reference or connection error leaves a case pending (re-run it)."""


def add_protocol(server: MCPServer, root: Path, inventory: str | None) -> None:
    """Register the prompt, completions, run resources and the logging handler."""
    _add_prompt(server, inventory)
    _add_raw_resources(server, root)
    _add_completions(server, root, inventory)
    _add_logging(server)
    for run_id in run_ids(root):
        add_run_resource(server, root, run_id)


def run_ids(root: Path, prefix: str = "") -> list[str]:
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir()
                  if d.name.startswith(prefix) and (d / "manifest.json").is_file())


def add_run_resource(server: MCPServer, root: Path, run_id: str) -> bool:
    """List one run as a concrete resource (its manifest); False if it already is."""
    uri = f"opdebug://runs/{run_id}/manifest"
    if uri in {str(r.uri) for r in server._resource_manager.list_resources()}:
        return False

    def read() -> str:
        from .server import read_run_file

        return read_run_file(root, run_id, "manifest")

    server.add_resource(FunctionResource(uri=uri, name=f"run {run_id}", title=f"Run {run_id}",
                                         mime_type="application/json", fn=read,
                                         description=f"Manifest of run {run_id}"))
    return True


async def announce_run(ctx: Context, server: MCPServer, root: Path, run_id: str) -> None:
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
    wanted = getattr(ctx.request_context.session, "_opdebug_log_level", "info")
    if LOG_LEVELS.index(level) < LOG_LEVELS.index(wanted):
        return
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await ctx.log(level, message, logger_name="opdebug")  # type: ignore[arg-type]
    except Exception:
        pass


def _add_logging(server: MCPServer) -> None:
    from mcp_types import EmptyResult, SetLevelRequestParams

    async def set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        ctx.session._opdebug_log_level = params.level
        return EmptyResult()

    server._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)


def _add_prompt(server: MCPServer, inventory: str | None) -> None:
    @server.prompt(name="debug-operator", title="Debug an operator",
                   description="Start the debugging loop for one operator and the symptom the model shows.")
    def debug_operator(operator: str, symptom: str, host: str = "") -> str:
        host_line = f"Run the cases on inventory host {host!r}." if host else \
            "Run the cases on host 'local' first, then on an NPU host from the inventory."
        return DEBUG_LOOP_PROMPT.format(operator=operator, symptom=symptom, host_line=host_line)


def _raw_files(root: Path, run_id: str, case_id: str) -> tuple[RunStore, Path]:
    try:
        store = RunStore(root, run_id)
        store.require()
        raw = store.raw_dir(case_id)
    except ToolError as exc:
        raise ResourceNotFoundError(exc.message) from None
    if not raw.is_dir():
        raise ResourceNotFoundError(f"case {case_id!r} of run {run_id!r} has no raw evidence (not recorded yet)")
    return store, raw


def _add_raw_resources(server: MCPServer, root: Path) -> None:
    @server.resource("opdebug://runs/{run_id}/raw/{case_id}", name="raw-evidence-index", title="Raw evidence of a case",
                     mime_type="application/json",
                     description="The raw evidence files of one recorded case (read each at .../raw/{case_id}/{name}).")
    def raw_index(run_id: str, case_id: str) -> str:
        _store, raw = _raw_files(root, run_id, case_id)
        files = sorted(p.name for p in raw.iterdir() if p.is_file())
        return json.dumps({"run_id": run_id, "case_id": case_id, "files": files,
                           "uris": [f"opdebug://runs/{run_id}/raw/{case_id}/{n}" for n in files]})

    @server.resource("opdebug://runs/{run_id}/raw/{case_id}/{name}", name="raw-evidence-file",
                     title="One raw evidence file", mime_type="text/plain",
                     description="One raw evidence file of a recorded case (worker-result.json, stderr.txt...).")
    def raw_file(run_id: str, case_id: str, name: str) -> str:
        _store, raw = _raw_files(root, run_id, case_id)
        try:
            path = raw / safe_component(name, "raw file name")
        except ToolError as exc:
            raise ResourceNotFoundError(exc.message) from None
        if not path.is_file():
            raise ResourceNotFoundError(f"case {case_id!r} of run {run_id!r} has no raw file {name!r}")
        try:
            with open(path, "r", encoding="utf-8", errors="replace") as fh:
                text = fh.read(MAX_RAW_FILE_CHARS + 1)
        except OSError as exc:
            raise ResourceError(f"cannot read {name} of case {case_id!r}: {exc}") from None
        if len(text) > MAX_RAW_FILE_CHARS:
            text = text[:MAX_RAW_FILE_CHARS] + f"\n[... cut at {MAX_RAW_FILE_CHARS} characters; the file is {path}]"
        return text


def _add_completions(server: MCPServer, root: Path, inventory: str | None) -> None:
    from .server import FULL_OUTPUT_SCHEMAS

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
                _store, raw = _raw_files(root, known["run_id"], known["case_id"])
                values = sorted(p.name for p in raw.iterdir() if p.name.startswith(value))
            except ResourceNotFoundError:
                values = []
        elif name == "host":
            values = [h for h in _host_names(inventory) if h.startswith(value)]
        elif name == "tool" and isinstance(ref, ResourceTemplateReference):
            values = [t for t in sorted(FULL_OUTPUT_SCHEMAS) if t.startswith(value)]
        elif isinstance(ref, PromptReference):
            return None
        return Completion(values=values[:MAX_COMPLETIONS], total=len(values),
                          has_more=len(values) > MAX_COMPLETIONS)


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

