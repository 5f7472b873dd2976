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
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError, create_model

from tools.errors import ToolError
from tools.evidence import (
    ANALYSIS,
    CONFIG,
    MANIFEST,
    MATRIX,
    REPORT,
    REPRODUCTION,
    RESULTS,
    RunStore,
    resolve_root,
    run_index,
)
from tools.schemas import (
    SLUG_PATTERN,
    Analysis,
    CaseResult,
    NarrowRequest,
    NarrowResponse,
    PlanRequest,
    PlanResponse,
    RecordResponse,
    RunResponse,
    Slug,
    Strict,
    format_validation_error,
)

from . import SERVER_NAME
from .compact import compact_schema, shallow_output_schema
from .protocol import add_protocol, announce_run, log

# Each tool's full output schema (tools/list publishes the top level only): opdebug://schemas/{tool}.
# Each tool's input schema with every field's description and default (tools/list carries the same
# contract, equally strict, with the top-level arguments' descriptions only): .../{tool}/input.
# Both as pydantic generates them, compacted when first read (not at start-up).
FULL_OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {}
DOCUMENTED_INPUT_SCHEMAS: dict[str, dict[str, Any]] = {}


@functools.lru_cache(maxsize=None)
def _schema_text(kind: str, tool: str) -> str:
    """A tool's full output schema, or its documented input schema, compacted when first read."""
    schemas = FULL_OUTPUT_SCHEMAS if kind == "output" else DOCUMENTED_INPUT_SCHEMAS
    if tool not in schemas:
        raise ResourceNotFoundError(f"no tool {tool!r}; tools: {sorted(schemas)}")
    if kind == "output":
        schema = compact_schema(schemas[tool], output=True)
    else:
        schema = compact_schema(schemas[tool], defaults=True, share=False)
    return json.dumps(schema, separators=(",", ":"))


INSTRUCTIONS = """\
Isolate an Ascend NPU operator failure into explicit cases and settle it with evidence.
Loop: plan_cases (operator config with candidate, CPU reference and tolerances fixed up
front, plus explicit cases or a star of one-axis variations) -> run_case_remote (runs
pending cases on an inventory host, compares against the reference, records each result)
or record_result (one result obtained elsewhere) -> analyze_failures (verdict, findings
with minimal pairs, next cases ready to append) -> repeat, or narrow_failure (the autopilot
of that loop under a budget).  Read evidence through the opdebug://runs/{run_id}/... resources; each tool's
fields, described, with their defaults: opdebug://schemas/{tool}/input.
Rules: change one axis at a time; unsupported is not a failure; a case is recorded once;
a harness, reference or connection error leaves the case pending."""

PLAN_EXAMPLE_URI = "opdebug://examples/plan-request"
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

RunIdArg = Annotated[Slug, Field(pattern=SLUG_PATTERN)]
NameArg = Annotated[Slug, Field(pattern=SLUG_PATTERN)]


class RecordResultArgs(Strict):
    run_id: RunIdArg
    result: CaseResult = Field(description="One pending case's result.")


class AnalyzeFailuresArgs(Strict):
    run_id: RunIdArg


class RunCaseRemoteArgs(Strict):
    run_id: RunIdArg
    case_ids: list[NameArg] | None = Field(
        default=None, min_length=1,
        description="Omitted: all pending."
    )
    hosts: list[NameArg] | None = Field(
        default=None, description="Omitted: ['local']."
    )
    keep_outputs: bool = Field(
        default=False, description="Mismatching ones, for render_pictures."
    )


class CheckHostArgs(Strict):
    host: NameArg


# ---------------------------------------------------------------------------
# Tool construction
# ---------------------------------------------------------------------------


def _arguments_model(name: str, request_model: type[BaseModel]) -> type[ArgModelBase]:
    """The request model as the SDK's argument model: same fields, same
    validators, unknown fields forbidden (the request models are Strict)."""
    model = create_model(f"{name}_arguments", __base__=(request_model, ArgModelBase))
    assert model.model_config.get("extra") == "forbid", f"{request_model.__name__} must forbid unknown fields"
    return model


# tools/list carries the input schemas (strict, complete) but not the output schemas: with
# them it passed 15,000 characters as the tools grew. Each tool's full output schema is the
# resource opdebug://schemas/{tool}, and every answer is still validated against it here.
PUBLISH_OUTPUT_SCHEMAS = False


class StrictTool(Tool):
    """A Tool whose argument errors read like every other error of the project:
    all of them at once, each with its field path."""

    @property
    def output_schema(self) -> dict[str, Any] | None:  # what tools/list publishes
        return self.fn_metadata.output_schema if PUBLISH_OUTPUT_SCHEMAS else None

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        # Strict types, as the published schema says: "4" is not an integer, "1e-5" not a
        # number, "yes" or 1 not a boolean, and a list is not a JSON string of one.
        try:
            self.fn_metadata.arg_model.model_validate_json(json.dumps(arguments), strict=True)
        except ValidationError as exc:
            raise MCPToolError(f"Error executing tool {self.name}: [validation_error] invalid arguments: "
                               + format_validation_error(exc)) from exc
        except (TypeError, ValueError) as exc:
            raise MCPToolError(f"Error executing tool {self.name}: [validation_error] invalid arguments: "
                               f"not JSON: {exc}") from exc
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


def _as_tool_errors(name: str, body: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Turn every failure of a tool body into a message the agent can act on,
    and an answer into a short human summary (text) beside the data (structured)."""

    @functools.wraps(body)
    async def handler(ctx: Context, **fields: Any) -> Any:
        try:
            response = await body(ctx, **fields)
            if not isinstance(response, BaseModel):
                return response
            from tools.summary import summarize

            return CallToolResult(content=[TextContent(type="text", text=summarize(name, response))],
                                  structured_content=response.model_dump(mode="json", by_alias=True))
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
    description: str,
    arguments: type[BaseModel],
    output: Any,
    annotations: ToolAnnotations,
    body: Callable[..., Awaitable[Any]],
) -> Tool:
    arg_model = _arguments_model(name, arguments)
    metadata = FuncMetadata(arg_model=arg_model, output_model=output)
    input_schema = arg_model.model_json_schema(by_alias=True)
    DOCUMENTED_INPUT_SCHEMAS[name] = input_schema
    if metadata.output_schema is not None:
        FULL_OUTPUT_SCHEMAS[name] = metadata.output_schema
        metadata.output_schema = shallow_output_schema(metadata.output_schema)
    return StrictTool(
        fn=_as_tool_errors(name, body),
        name=name,
        description=description,
        parameters=compact_schema(input_schema, nested_descriptions=False),
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

        response = await in_thread(plan_cases, PlanRequest(**fields), root=root)
        if response.created:
            await announce_run(ctx, server, root, response.run_id)
        return response

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
            message = f"{outcome.case_id}: {outcome.state} - {outcome.summary}"
            await ctx.report_progress(done, total, message)
            await log(ctx, "warning" if outcome.state == "pending" else "info", f"[{done}/{total}] {message}")

        return await run_case_remote(run_id, case_ids=case_ids, hosts=hosts, root=root,
                                     inventory=inventory_path, progress=progress, keep_outputs=keep_outputs)

    async def narrow_body(ctx: Context, **fields: Any) -> NarrowResponse:
        from tools.narrow import narrow_failure

        async def progress(done: int, total: int, message: str) -> None:
            await ctx.report_progress(done, total, message)

        return await narrow_failure(NarrowRequest(**fields), root=root, inventory=inventory_path, progress=progress)

    async def check_body(ctx: Context, *, host: str) -> Any:
        from tools.check_host import check_host

        return await check_host(host, inventory=inventory_path, root=root)

    try:
        check_host_output = _check_host_output_model()
    except ImportError:  # the tool module is not there: publish no output schema
        check_host_output = None

    # Hints left out take the spec's defaults (readOnly false, destructive true, idempotent false,
    # openWorld true): every tool states destructiveHint=false, and only the hints that differ.
    mutating = dict(destructiveHint=False, openWorldHint=False)
    tools = [
        _tool(
            "plan_cases",
            description=(
                "Create a run or append cases: explicit, or stars (a base + one-axis variations). "
                "Example: " + PLAN_EXAMPLE_URI
            ),
            arguments=PlanRequest,
            output=PlanResponse,
            annotations=ToolAnnotations(**mutating),
            body=plan_body,
        ),
        _tool(
            "record_result",
            description=(
                "Record a result obtained elsewhere; once per case."
            ),
            arguments=RecordResultArgs,
            output=RecordResponse,
            annotations=ToolAnnotations(**mutating),
            body=record_body,
        ),
        _tool(
            "analyze_failures",
            description=(
                "Verdict, one-axis findings with minimal pairs, next cases to append; writes report.md."
            ),
            arguments=AnalyzeFailuresArgs,
            output=Analysis,
            annotations=ToolAnnotations(destructiveHint=False, idempotentHint=True, openWorldHint=False),
            body=analyze_body,
        ),
        _tool(
            "run_case_remote",
            description=(
                "Run pending (or named) cases on hosts; each is recorded or left pending."
            ),
            arguments=RunCaseRemoteArgs,
            output=RunResponse,
            annotations=ToolAnnotations(destructiveHint=False),
            body=run_body,
        ),
        _tool(
            "narrow_failure",
            description=(
                "Autopilot: plan, run and analyze next cases until each finding is exact or a budget runs out."
            ),
            arguments=NarrowRequest,
            output=NarrowResponse,
            annotations=ToolAnnotations(destructiveHint=False),
            body=narrow_body,
        ),
        _tool(
            "check_host",
            description=(
                "What a host has and lacks; may create its work directory."
            ),
            arguments=CheckHostArgs,
            output=check_host_output,
            annotations=ToolAnnotations(destructiveHint=False, idempotentHint=True),
            body=check_body,
        ),
    ]

    from .artifact_tools import add_picture_resources, artifact_tools

    tools += artifact_tools(root, inventory_path, _tool, in_thread)
    server = MCPServer(
        SERVER_NAME,
        version=server_version(),
        title="Ascend operator debug",
        instructions=INSTRUCTIONS,
        tools=tools,
        log_level=log_level,  # type: ignore[arg-type]
        lifespan=close_warm_workers_on_exit,
    )
    _add_resources(server, root)
    add_protocol(server, root, inventory_path)
    add_picture_resources(server, root)
    return server


def server_version() -> str:
    """The installed package's version (serverInfo.version)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ascend-operator-debug")
    except PackageNotFoundError:
        return "0+unknown"


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
    "results": (RESULTS, "application/json", "record_result"),
    "operator-config": (CONFIG, "application/json", "plan_cases"),
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
    if kind == "results":  # current, from the index (results.json is the view the last analysis wrote)
        return json.dumps({"schema_version": 1, "run_id": store.run_id, "results": store.read_result_docs()},
                          indent=1)
    path = store.path(filename)
    if not path.is_file():
        raise ResourceNotFoundError(f"run {run_id!r} has no {filename} yet (it is written by {producer})")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResourceError(f"cannot read {filename} of run {run_id!r}: {exc}") from None


def _add_resources(server: MCPServer, root: Path) -> None:
    @server.resource(PLAN_EXAMPLE_URI, name="plan-request-example", title="Example plan_cases request",
                     mime_type="application/json", description="A complete plan_cases request: config, module, star.")
    def plan_example() -> str:
        return json.dumps(json.loads(PLAN_EXAMPLE), indent=2)

    @server.resource("opdebug://schemas/{tool}", name="output-schema", title="A tool's full output schema",
                     mime_type="application/schema+json",
                     description="The complete output schema of a tool (tools/list shows its top level).")
    def output_schema(tool: str) -> str:
        return _schema_text("output", tool)

    @server.resource("opdebug://schemas/{tool}/input", name="input-schema", title="A tool's documented input",
                     mime_type="application/schema+json",
                     description="A tool's input schema with every field described and its default.")
    def input_schema(tool: str) -> str:
        return _schema_text("input", tool)

    @server.resource("opdebug://runs", name="runs", title="Runs", mime_type="application/json",
                     description="Index of the runs under the evidence root (newest 200): id, operator, status, "
                                 "counts, last update.")
    def runs() -> str:
        return json.dumps(run_index(root), separators=(",", ":"), default=str)

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
