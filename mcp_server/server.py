"""The MCP server: the eleven tools, wired to tools/.

Protocol wiring only.  Every tool's logic lives in tools/ and is imported
lazily inside its handler, so starting the server imports neither torch nor
the transports.  The tool list is here; how a tool is built and published is
tooling.py, the resources are resources.py, the prompt, completions and
logging are protocol.py, the artefact tools are artifact_tools.py:

- strict input schemas: each tool's argument model forbids unknown fields
  (``additionalProperties: false``), and an argument error names the field;
- structured output: each tool returns a pydantic response model from
  tools/schemas/tool_io.py, whose full schema is a resource;
- errors as tool errors: a ToolError, a validation error or any unexpected
  exception becomes an ``isError`` result whose text says what to fix; the
  server keeps serving;
- progress: run_case_remote reports one progress notification per case, and
  one per piece of news in between (a scheduler job waiting in the queue, a
  lost slot started again).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations

from tools.answers import capped_answer
from tools.evidence import resolve_root
from tools.schemas import (
    Analysis,
    AnalyzeFailuresArgs,
    CaseResult,
    CheckHostArgs,
    HostCheck,
    NarrowRequest,
    NarrowResponse,
    PlanRequest,
    PlanResponse,
    RecordResponse,
    RecordResultArgs,
    RunCaseRemoteArgs,
    RunResponse,
)

from . import SERVER_NAME
from .artifact_tools import artifact_tools
from .protocol import add_protocol, announce_run, log
from .resources import PLAN_EXAMPLE_URI, add_resources
from .sdk_adapter import AdaptedServer
from .tooling import ToolCatalog

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

# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------


def build_server(
    evidence_root: str | Path | None = None, inventory: str | Path | None = None, *, log_level: str = "WARNING"
) -> AdaptedServer:
    """Build the MCP server.  ``evidence_root`` None means $OPDEBUG_EVIDENCE_ROOT
    or .vaws-local/operator-debug under the working directory (resolved now,
    so a later change of directory does not move it)."""
    root = resolve_root(evidence_root)
    catalog = ToolCatalog()
    _tool = catalog.tool
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

    async def analyze_body(ctx: Context, *, run_id: str, conditions: list[str] | None = None) -> Analysis:
        from tools.analyze_failures import analyze_failures

        analysis = await in_thread(analyze_failures, run_id, root=root, conditions=conditions)
        return capped_answer(analysis, tool="analyze_failures", root=root)

    async def run_body(
        ctx: Context,
        *,
        run_id: str,
        case_ids: list[str] | None,
        hosts: list[str] | None,
        keep_outputs: bool = False,
        device_wait_s: float | None = None,
    ) -> RunResponse:
        from tools.run_case_remote import run_case_remote

        clock = ProgressClock(ctx)

        async def progress(done: int, total: int, outcome: Any) -> None:
            message = f"{outcome.case_id}: {outcome.state} - {outcome.summary}"
            await clock.step(done, total, message)
            await log(ctx, "warning" if outcome.state == "pending" else "info", f"[{done}/{total}] {message}")

        return await run_case_remote(
            run_id,
            case_ids=case_ids,
            hosts=hosts,
            root=root,
            inventory=inventory_path,
            progress=progress,
            keep_outputs=keep_outputs,
            on_news=clock.news,
            device_wait_s=device_wait_s,
        )

    async def narrow_body(ctx: Context, **fields: Any) -> NarrowResponse:
        from tools.narrow import narrow_failure

        clock = ProgressClock(ctx)
        return await narrow_failure(
            NarrowRequest(**fields),
            root=root,
            inventory=inventory_path,
            progress=clock.step,
            on_news=clock.news,
            detach=True,
        )

    async def check_body(ctx: Context, *, host: str) -> Any:
        from tools.check_host import check_host

        return await check_host(host, inventory=inventory_path, root=root)

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
            description=("Record a result obtained elsewhere; once per case."),
            arguments=RecordResultArgs,
            output=RecordResponse,
            annotations=ToolAnnotations(**mutating),
            body=record_body,
        ),
        _tool(
            "analyze_failures",
            description=("Verdict, one-axis findings with minimal pairs, next cases to append; writes report.md."),
            arguments=AnalyzeFailuresArgs,
            output=Analysis,
            annotations=ToolAnnotations(destructiveHint=False, idempotentHint=True, openWorldHint=False),
            body=analyze_body,
        ),
        _tool(
            "run_case_remote",
            description=("Run pending (or named) cases on hosts; each is recorded or left pending."),
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
            description=("What a host has and lacks; may create its work directory."),
            arguments=CheckHostArgs,
            output=HostCheck,
            annotations=ToolAnnotations(destructiveHint=False, idempotentHint=True),
            body=check_body,
        ),
    ]

    tools += artifact_tools(root, inventory_path, catalog, in_thread)
    server = AdaptedServer(
        SERVER_NAME,
        version=server_version(),
        title="Ascend operator debug",
        instructions=INSTRUCTIONS,
        tools=tools,
        log_level=log_level,
        lifespan=close_warm_workers_on_exit,
    )
    server.tool_checks.append(catalog.check_known)
    add_resources(server, root, catalog)
    add_protocol(server, root, inventory_path, catalog)
    return server


class ProgressClock:
    """One tool call's progress notifications: a step (a case, a round) as ``done`` of
    ``total``; news between steps (who holds an awaited device and for how long, a job
    waiting in a scheduler's queue, a lost slot started again) as a fraction after the last
    step, so the value still increases with every notification, as the protocol asks."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.done, self.waits = ctx, 0.0, 0
        self.total: int | None = None

    async def step(self, done: int, total: int | None, message: str) -> None:
        self.done, self.total, self.waits = float(done), total, 0
        await self.ctx.report_progress(done, total, message)

    async def news(self, line: str) -> None:
        """A line between two steps (a device held elsewhere, a job waiting in a scheduler's queue, a
        lost slot started again): progress a fraction past the last step, and a log message."""
        self.waits += 1
        await self.ctx.report_progress(self.done + 1 - 1 / (self.waits + 1), self.total, line)
        await log(self.ctx, "info", line)


def server_version() -> str:
    """The installed package's version (serverInfo.version)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ascend-operator-debug")
    except PackageNotFoundError:
        return "0+unknown"


@asynccontextmanager
async def close_warm_workers_on_exit(_server: AdaptedServer) -> AsyncIterator[dict[str, Any]]:
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
