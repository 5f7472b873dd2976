"""Protocol wiring of the artefact tools (logic in tools/artifacts/): shrink_case,
export_repro, export_regression, render_pictures, verify_fix (their pictures
are resources: resources.py).  Nothing here imports torch or matplotlib."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations

from tools.answers import capped_answer
from tools.evidence import ARTIFACTS_DIR, RunStore, writable_dir
from tools.schemas import (
    PicturesArgs,
    PicturesResponse,
    RegressionArgs,
    RegressionExport,
    ReproArgs,
    ReproExport,
    ShrinkArgs,
    ShrinkResponse,
    VerifyArgs,
    VerifyResponse,
)

from .tooling import ToolCatalog

HEARTBEAT_S = 2.0  # a long step still running says so this often (the client's clock keeps going)


async def in_thread_with_progress(
    ctx: Context, in_thread: Callable[..., Awaitable[Any]], fn: Callable[..., Any]
) -> Any:
    """``fn(progress=...)`` in a thread; each step it names is a progress notification, and a step
    still running says so every HEARTBEAT_S (the value increases with every notification)."""
    steps: list[str] = []  # appended by the thread, read here (a list append is atomic)
    work = asyncio.ensure_future(in_thread(fn, progress=steps.append))
    sent, since, value = 0, time.monotonic(), 0
    while not work.done():
        await asyncio.wait({work}, timeout=HEARTBEAT_S / 4)
        if len(steps) > sent:
            for text in steps[sent:]:
                value += 1
                await ctx.report_progress(value, None, text)
            sent, since = len(steps), time.monotonic()
        elif time.monotonic() - since >= HEARTBEAT_S and not work.done():
            value += 1
            last = steps[-1] if steps else "starting"
            await ctx.report_progress(value, None, f"{last} - still working ({time.monotonic() - since:.0f} s)")
    return work.result()


def artifact_tools(
    root: Path, inventory: str | None, catalog: ToolCatalog, in_thread: Callable[..., Awaitable[Any]]
) -> list[Any]:
    """The five artefact tools, built by ``catalog``."""
    make_tool = catalog.tool

    def default_dir(run_id: str, sub: str, given: str | None) -> str:
        if given:
            return str(writable_dir(given, "out_dir"))
        return str(RunStore(root, run_id).path(ARTIFACTS_DIR, sub))

    async def shrink_body(ctx: Context, **f: Any) -> Any:
        from tools.artifacts.shrink import shrink_case

        async def progress(done: int, total: int, text: str) -> None:
            await ctx.report_progress(done, total, text)

        return await shrink_case(
            f["run_id"],
            f["case_id"],
            hosts=f["hosts"],
            root=root,
            inventory=inventory,
            max_cases=f["max_cases"],
            max_seconds=f["max_seconds"],
            progress=progress,
        )

    async def repro_body(ctx: Context, **f: Any) -> Any:
        from tools.artifacts.repro import export_repro

        return await in_thread(
            export_repro, f["run_id"], f["case_id"], default_dir(f["run_id"], "repro", f["out_dir"]), root=root
        )

    async def regression_body(ctx: Context, **f: Any) -> Any:
        from tools.artifacts.regression import export_regression

        export = await in_thread(
            export_regression,
            f["run_id"],
            default_dir(f["run_id"], "regression", f["out_dir"]),
            root=root,
            case_ids=f["case_ids"],
            neighbours=f["neighbours"],
        )
        return capped_answer(export, tool="export_regression", root=root)

    async def pictures_body(ctx: Context, **f: Any) -> Any:
        from tools.artifacts.pictures import render_pictures

        return await in_thread_with_progress(
            ctx,
            in_thread,
            functools.partial(render_pictures, f["run_id"], root=root, case_ids=f["case_ids"], outputs=f["outputs"]),
        )

    async def verify_body(ctx: Context, **f: Any) -> Any:
        from tools.artifacts.verify import verify_run

        async def progress(done: int, total: int, outcome: Any) -> None:
            await ctx.report_progress(done, total, f"{outcome.case_id}: {outcome.state}")

        return await verify_run(
            f["run_id"],
            hosts=f["hosts"],
            root=root,
            inventory=inventory,
            run_command=f["run_command"],
            command_timeout_s=f["command_timeout_s"],
            progress=progress,
            candidate=f["candidate"],
            candidate_sources=f["candidate_sources"],
        )

    # Only the hints that differ from the spec's defaults (readOnly false, destructive true,
    # idempotent false, openWorld true).
    writes = dict(destructiveHint=False)
    local = dict(destructiveHint=False, openWorldHint=False)
    return [
        make_tool(
            "shrink_case",
            description="The smallest case that fails like a recorded one (steps <case>.shrink-<n>).",
            arguments=ShrinkArgs,
            output=ShrinkResponse,
            annotations=ToolAnnotations(**writes),
            body=shrink_body,
        ),
        make_tool(
            "export_repro",
            description="Write <case>.py (stdlib + torch): exits 1 while the case fails, 0 once fixed.",
            arguments=ReproArgs,
            output=ReproExport,
            annotations=ToolAnnotations(**local),
            body=repro_body,
        ),
        make_tool(
            "export_regression",
            description="Write a pytest file over the run's failing cases' reproducers.",
            arguments=RegressionArgs,
            output=RegressionExport,
            annotations=ToolAnnotations(**local),
            body=regression_body,
        ),
        make_tool(
            "render_pictures",
            description="PNG error maps and histograms as image/png resources ([pictures] extra).",
            arguments=PicturesArgs,
            output=PicturesResponse,
            annotations=ToolAnnotations(idempotentHint=True, **local),
            body=pictures_body,
        ),
        make_tool(
            "verify_fix",
            description="After a fix: rerun the failing cases and the model command; says what holds.",
            arguments=VerifyArgs,
            output=VerifyResponse,
            annotations=ToolAnnotations(**writes),
            body=verify_body,
        ),
    ]
