"""The MCP server: five tools and the run resources, wired to tools/.

Protocol wiring only.  Every tool's logic lives in tools/ and is imported
lazily inside its handler, so starting the server imports neither torch nor
the transports.  What this module adds on top of the SDK:

- strict input schemas: each tool's argument model forbids unknown fields
  (``additionalProperties: false``), and an argument error names the field;
- structured output: each tool returns a pydantic response model from
  tools/schemas.py, published as its output schema;
- errors as tool errors: a ToolError, a validation error or any unexpected
  exception becomes an ``isError`` result whose text says what to fix; the
  server keeps serving;
- progress: run_case_remote reports one progress notification per case.
"""

from __future__ import annotations

import functools
import json
import sys
import typing
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, AsyncIterator, Awaitable, Callable

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, UnexpectedToolError
from mcp.server.mcpserver.exceptions import ToolError as MCPToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field, ValidationError, create_model

from tools.errors import ToolError
from tools.evidence import (
    ANALYSIS,
    MANIFEST,
    MATRIX,
    REPORT,
    REPRODUCTION,
    RESULTS,
    RunStore,
    list_runs,
    resolve_root,
)
from tools.schemas import (
    SLUG_PATTERN,
    Analysis,
    CaseResult,
    PlanRequest,
    PlanResponse,
    RecordResponse,
    RunResponse,
    Slug,
    Strict,
    format_validation_error,
)

from . import SERVER_NAME

INSTRUCTIONS = """\
Isolate an Ascend NPU operator failure into explicit cases and settle it with evidence.
Loop: plan_cases (operator config with candidate, CPU reference and tolerances fixed up
front, plus explicit cases or a star of one-axis variations) -> run_case_remote (runs
pending cases on an inventory host, compares against the reference, records each result)
or record_result (one result obtained elsewhere) -> analyze_failures (verdict, failure
axes, next cases).  Read evidence through the opdebug://runs/{run_id}/... resources.
Rules: change one axis at a time; unsupported is not a failure; a case is recorded once;
a harness, reference or connection error leaves the case pending."""

PLAN_EXAMPLE = json.dumps({
    "config": {
        "run_id": "rmsnorm-bf16",
        "operator": {"name": "rms_norm", "candidate": "torch_npu.npu_rms_norm", "reference": "my_ref.rms_norm",
                     "modules": ["my_ref.py"]},
        "tolerance": {"atol": 1e-5, "rtol": 1e-5, "per_dtype": {"bfloat16": {"atol": 0.02, "rtol": 0.02}}},
    },
    "module_sources": {"my_ref.py": "import torch\ndef rms_norm(x, gamma, epsilon=1e-6): ..."},
    "stars": [{
        "base": {"id": "base", "seed": 1, "attributes": {"epsilon": 1e-6},
                 "inputs": [{"name": "x", "shape": [4, 256], "dtype": "float32"},
                            {"name": "gamma", "shape": [256], "dtype": "float32"}]},
        "vary": [{"axis": "dtype", "values": ["float16", "bfloat16"]},
                 {"axis": "strides", "input": "x", "values": [[512, 1]]},
                 {"axis": "mode", "values": ["compile", "graph"]}],
    }],
})

# ---------------------------------------------------------------------------
# Argument models (the published input schemas)
# ---------------------------------------------------------------------------

RunIdArg = Annotated[Slug, Field(pattern=SLUG_PATTERN, description="The run's id (a safe slug), as planned.")]
NameArg = Annotated[Slug, Field(pattern=SLUG_PATTERN)]


class RecordResultArgs(Strict):
    run_id: RunIdArg
    result: CaseResult = Field(description="One result for a planned, pending case (the result contract).")


class AnalyzeFailuresArgs(Strict):
    run_id: RunIdArg


class RunCaseRemoteArgs(Strict):
    run_id: RunIdArg
    case_ids: list[NameArg] | None = Field(
        default=None, min_length=1,
        description="Cases to run; omitted means every pending case. A recorded case is refused."
    )
    hosts: list[NameArg] | None = Field(
        default=None, description="Inventory host names to spread the cases over; omitted means ['local']."
    )
    keep_outputs: bool = Field(
        default=False, description="Keep both outputs of each mismatching case (raw-results/<case>/outputs.pt, "
        "at most 8 MiB) for render_pictures."
    )


class CheckHostArgs(Strict):
    host: NameArg = Field(description="A host name from the inventory ('local' is always there).")


# ---------------------------------------------------------------------------
# Tool construction
# ---------------------------------------------------------------------------


def _arguments_model(name: str, request_model: type[BaseModel]) -> type[ArgModelBase]:
    """The request model as the SDK's argument model: same fields, same
    validators, unknown fields forbidden (the request models are Strict)."""
    model = create_model(f"{name}_arguments", __base__=(request_model, ArgModelBase))
    assert model.model_config.get("extra") == "forbid", f"{request_model.__name__} must forbid unknown fields"
    return model


class StrictTool(Tool):
    """A Tool whose argument errors read like every other error of the project:
    all of them at once, each with its field path."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        try:
            return await super().run(arguments, context, convert_result=convert_result)
        except MCPToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
                raise MCPToolError(
                    f"Error executing tool {self.name}: [validation_error] invalid arguments: "
                    + format_validation_error(cause)
                ) from cause
            raise


def _as_tool_errors(body: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Turn every failure of a tool body into a message the agent can act on."""

    @functools.wraps(body)
    async def handler(ctx: Context, **fields: Any) -> Any:
        try:
            return await body(ctx, **fields)
        except MCPToolError:
            raise
        except ToolError as exc:  # its details follow as a JSON line: structured data for the agent
            raise MCPToolError(exc.with_details()) from exc
        except ValidationError as exc:
            raise MCPToolError(f"[validation_error] {format_validation_error(exc)}") from exc
        except Exception as exc:  # a bug or an environment failure: say what it was, keep serving
            raise MCPToolError(f"[internal_error] unexpected {type(exc).__name__}: {exc}") from exc

    return handler


def _tool(
    name: str,
    *,
    title: str,
    description: str,
    arguments: type[BaseModel],
    output: Any,
    annotations: ToolAnnotations,
    body: Callable[..., Awaitable[Any]],
) -> Tool:
    arg_model = _arguments_model(name, arguments)
    metadata = FuncMetadata(arg_model=arg_model, output_model=output)
    return StrictTool(
        fn=_as_tool_errors(body),
        name=name,
        title=title,
        description=description,
        parameters=arg_model.model_json_schema(by_alias=True),
        fn_metadata=metadata,
        is_async=True,
        context_kwarg="ctx",
        annotations=annotations,
    )


def _check_host_output_model() -> Any:
    """check_host's response model, read from its return annotation."""
    from tools.check_host import check_host

    hints = typing.get_type_hints(check_host)
    return hints.get("return")


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------


def build_server(
    evidence_root: str | Path | None = None,
    inventory: str | Path | None = None,
    *,
    log_level: str = "WARNING",
) -> MCPServer:
    """Build the MCP server.  ``evidence_root`` None means $OPDEBUG_EVIDENCE_ROOT
    or .vaws-local/operator-debug under the working directory (resolved now,
    so a later change of directory does not move it)."""
    root = resolve_root(evidence_root)
    inventory_path = str(inventory) if inventory is not None else None

    def in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        return anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    async def plan_body(ctx: Context, **fields: Any) -> PlanResponse:
        from tools.plan_cases import plan_cases

        return await in_thread(plan_cases, PlanRequest(**fields), root=root)

    async def record_body(ctx: Context, *, run_id: str, result: CaseResult) -> RecordResponse:
        from tools.record_result import record_result

        return await in_thread(record_result, run_id, result, root=root)

    async def analyze_body(ctx: Context, *, run_id: str) -> Analysis:
        from tools.analyze_failures import analyze_failures

        return await in_thread(analyze_failures, run_id, root=root)

    async def run_body(ctx: Context, *, run_id: str, case_ids: list[str] | None,
                       hosts: list[str] | None, keep_outputs: bool = False) -> RunResponse:
        from tools.run_case_remote import run_case_remote

        async def progress(done: int, total: int, outcome: Any) -> None:
            await ctx.report_progress(done, total, f"{outcome.case_id}: {outcome.state} - {outcome.summary}")

        return await run_case_remote(run_id, case_ids=case_ids, hosts=hosts, root=root,
                                     inventory=inventory_path, progress=progress, keep_outputs=keep_outputs)

    async def check_body(ctx: Context, *, host: str) -> Any:
        from tools.check_host import check_host

        return await check_host(host, inventory=inventory_path)

    try:
        check_host_output = _check_host_output_model()
    except ImportError:  # the tool module is not there: publish no output schema
        check_host_output = None

    mutating = dict(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
    tools = [
        _tool(
            "plan_cases",
            title="Plan an operator case matrix",
            description=(
                "Validate an operator config (exact candidate call, trusted CPU reference, tolerances fixed "
                "before any result) and explicit cases, and create the run's evidence directory; or, with "
                "append=true, add new cases to an existing run without touching anything recorded. 'stars' "
                "expands a base case plus one-axis variations (dtype, shape, strides, storage_offset, layout, "
                "mode, attribute, values) into explicit cases. Returns every case with its axes and warnings "
                "for cases that differ from all others in more than one axis. Refuses an existing run_id and "
                "duplicate case ids. Example: " + PLAN_EXAMPLE
            ),
            arguments=PlanRequest,
            output=PlanResponse,
            annotations=ToolAnnotations(title="Plan cases", **mutating),
            body=plan_body,
        ),
        _tool(
            "record_result",
            title="Record one case result",
            description=(
                "Record one result obtained elsewhere (a manual run, another tool) for a planned, pending case. "
                "The result is validated against the result contract (crash and unsupported need an error; "
                "metrics finite). A case is recorded once: a second result for it is refused."
            ),
            arguments=RecordResultArgs,
            output=RecordResponse,
            annotations=ToolAnnotations(title="Record a result", **mutating),
            body=record_body,
        ),
        _tool(
            "analyze_failures",
            title="Analyze a run",
            description=(
                "Analyze every recorded result of a run: verdict (diagnosed / inconclusive / passed), status "
                "counts, failures kept apart from unsupported combinations, crash groups by signature, the "
                "failure axes the failing cases share, missing cases, the integration-boundary hint, and the "
                "next cases that would settle it. Writes analysis.json, report.md and reproduction.md "
                "(regenerated each time; evidence is never changed)."
            ),
            arguments=AnalyzeFailuresArgs,
            output=Analysis,
            annotations=ToolAnnotations(title="Analyze failures", readOnlyHint=False, destructiveHint=False,
                                        idempotentHint=True, openWorldHint=False),
            body=analyze_body,
        ),
        _tool(
            "run_case_remote",
            title="Run cases on a host",
            description=(
                "Run planned cases (the named ones, or every pending one) on inventory hosts: one isolated "
                "operator call per case, candidate on the host's device, reference on CPU, compared and "
                "classified (passed / numerical_mismatch / crash / unsupported), raw evidence stored and each "
                "result recorded. Returns one normalized outcome per case. A harness, reference or connection "
                "failure records nothing: that case stays pending and is named for a re-run. Reports progress "
                "per case."
            ),
            arguments=RunCaseRemoteArgs,
            output=RunResponse,
            annotations=ToolAnnotations(title="Run cases", readOnlyHint=False, destructiveHint=False,
                                        idempotentHint=False, openWorldHint=True),
            body=run_body,
        ),
        _tool(
            "check_host",
            title="Check a host",
            description=(
                "Connect to an inventory host and report python, torch, torch_npu and CANN versions, visible "
                "devices, free disk in the work directory and whether the environment script sourced, naming "
                "exactly what is missing. Changes nothing."
            ),
            arguments=CheckHostArgs,
            output=check_host_output,
            annotations=ToolAnnotations(title="Check host", readOnlyHint=True, destructiveHint=False,
                                        idempotentHint=True, openWorldHint=True),
            body=check_body,
        ),
    ]

    from .artifact_tools import add_picture_resources, artifact_tools

    tools += artifact_tools(root, inventory_path, _tool, in_thread)
    server = MCPServer(
        SERVER_NAME,
        title="Ascend operator debug",
        instructions=INSTRUCTIONS,
        tools=tools,
        log_level=log_level,  # type: ignore[arg-type]
        lifespan=close_warm_workers_on_exit,
    )
    _add_resources(server, root)
    add_picture_resources(server, root)
    return server


@asynccontextmanager
async def close_warm_workers_on_exit(_server: MCPServer) -> AsyncIterator[dict[str, Any]]:
    """Warm device workers and SSH connections live while the server does;
    when it stops (the client went away), shut them down so nothing is left
    running on the hosts.  The pool is only looked at if a run imported it."""
    try:
        yield {}
    finally:
        pool = sys.modules.get("tools.remote.pool")
        registry = getattr(pool, "REGISTRY", None)
        if registry is not None:
            with anyio.move_on_after(WORKER_SHUTDOWN_S, shield=True):
                await registry.close_all()


WORKER_SHUTDOWN_S = 20.0

# ---------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------

RUN_FILES = {
    # resource name: (file in the run directory, mime type, what produces it)
    "report": (REPORT, "text/markdown", "analyze_failures"),
    "reproduction": (REPRODUCTION, "text/markdown", "analyze_failures"),
    "analysis": (ANALYSIS, "application/json", "analyze_failures"),
    "case-matrix": (MATRIX, "application/json", "plan_cases"),
    "manifest": (MANIFEST, "application/json", "plan_cases"),
    "results": (RESULTS, "application/json", "plan_cases"),
}


def read_run_file(root: Path, run_id: str, kind: str) -> str:
    """The text of one evidence file of a run; the run id is checked as a slug
    first, so a URI can never name a file outside the evidence root."""
    filename, _mime, producer = RUN_FILES[kind]
    try:
        store = RunStore(root, run_id)
        store.require()
    except ToolError as exc:
        raise ResourceNotFoundError(exc.message) from None
    path = store.path(filename)
    if not path.is_file():
        raise ResourceNotFoundError(f"run {run_id!r} has no {filename} yet (it is written by {producer})")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResourceError(f"cannot read {filename} of run {run_id!r}: {exc}") from None


def _add_resources(server: MCPServer, root: Path) -> None:
    @server.resource("opdebug://runs", name="runs", title="Runs", mime_type="application/json",
                     description="Every run under the evidence root: run_id, operator, status, counts, times.")
    def runs() -> str:
        return json.dumps(list_runs(root), indent=2, default=str)

    for kind, (filename, mime, _producer) in RUN_FILES.items():
        def make(kind: str = kind) -> Callable[[str], str]:
            def read(run_id: str) -> str:
                return read_run_file(root, run_id, kind)
            return read

        server.resource(
            f"opdebug://runs/{{run_id}}/{kind}",
            name=f"run-{kind}",
            title=f"Run {kind}",
            mime_type=mime,
            description=f"{filename} of one run.",
        )(make())
