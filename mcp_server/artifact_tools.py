"""Protocol wiring of the artefact tools (logic in tools/artifacts/): shrink_case,
export_repro, export_regression, render_pictures, verify_fix; and the run's
pictures as image/png resources.  Nothing here imports torch or matplotlib."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.mcpserver.resources import FileResource
from mcp_types import ToolAnnotations
from pydantic import Field

from tools.errors import ToolError
from tools.evidence import ARTIFACTS_DIR, RunStore, list_runs, safe_component
from tools.schemas import SLUG_PATTERN, Slug, Strict



def RunId() -> Any:  # noqa: N802 - a Field factory
    return Field(pattern=SLUG_PATTERN)


class ShrinkArgs(Strict):
    run_id: Slug = RunId()
    case_id: Slug = Field(pattern=SLUG_PATTERN, description="A recorded failing case.")
    hosts: list[Slug] | None = Field(default=None, description="Default ['local'].")
    max_cases: int = Field(default=30, ge=1, le=200)
    max_seconds: float = Field(default=600.0, gt=0, le=7200)


class ReproArgs(Strict):
    run_id: Slug = RunId()
    case_id: Slug = Field(pattern=SLUG_PATTERN)
    out_dir: str | None = Field(default=None, max_length=4096,
                                description="Server path; default <run>/artifacts/repro.")


class RegressionArgs(Strict):
    run_id: Slug = RunId()
    out_dir: str | None = Field(default=None, max_length=4096,
                                description="Server path; default <run>/artifacts/regression.")
    case_ids: list[Slug] | None = Field(default=None, description="Default: the failing ones.")
    neighbours: bool = Field(default=False, description="Also passing cases one axis from a failure.")


class PicturesArgs(Strict):
    run_id: Slug = RunId()
    case_ids: list[Slug] | None = Field(default=None, description="Default: the mismatching ones.")
    outputs: dict[Slug, str] = Field(default_factory=dict, description=(
        "Case id -> its reproducer's --save-outputs file (a server path)."))


class VerifyArgs(Strict):
    run_id: Slug = RunId()
    hosts: list[Slug] | None = Field(default=None, description="Default ['local'].")
    run_command: bool = Field(default=True, description="Also the config's model command.")
    command_timeout_s: float = Field(default=600.0, gt=0, le=7200)


def artifact_tools(root: Path, inventory: str | None, make_tool: Callable[..., Any],
                   in_thread: Callable[..., Awaitable[Any]]) -> list[Any]:
    from tools.artifacts.models import (PicturesResponse, RegressionExport, ReproExport, ShrinkResponse,
                                        VerifyResponse)

    def default_dir(run_id: str, sub: str, given: str | None) -> str:
        if given:
            return given
        return str(RunStore(root, run_id).path(ARTIFACTS_DIR, sub))

    async def shrink_body(ctx: Context, **f: Any) -> Any:
        from tools.artifacts.shrink import shrink_case

        async def progress(done: int, total: int, text: str) -> None:
            await ctx.report_progress(done, total, text)

        return await shrink_case(f["run_id"], f["case_id"], hosts=f["hosts"], root=root, inventory=inventory,
                                 max_cases=f["max_cases"], max_seconds=f["max_seconds"], progress=progress)

    async def repro_body(ctx: Context, **f: Any) -> Any:
        from tools.artifacts.repro import export_repro

        return await in_thread(export_repro, f["run_id"], f["case_id"],
                               default_dir(f["run_id"], "repro", f["out_dir"]), root=root)

    async def regression_body(ctx: Context, **f: Any) -> Any:
        from tools.artifacts.regression import export_regression

        return await in_thread(export_regression, f["run_id"], default_dir(f["run_id"], "regression", f["out_dir"]),
                               root=root, case_ids=f["case_ids"], neighbours=f["neighbours"])

    async def pictures_body(ctx: Context, **f: Any) -> Any:
        from tools.artifacts.pictures import render_pictures

        return await in_thread(render_pictures, f["run_id"], root=root, case_ids=f["case_ids"],
                               outputs=f["outputs"])

    async def verify_body(ctx: Context, **f: Any) -> Any:
        from tools.artifacts.verify import verify_run

        async def progress(done: int, total: int, outcome: Any) -> None:
            await ctx.report_progress(done, total, f"{outcome.case_id}: {outcome.state}")

        return await verify_run(f["run_id"], hosts=f["hosts"], root=root, inventory=inventory,
                                run_command=f["run_command"], command_timeout_s=f["command_timeout_s"],
                                progress=progress)

    # Only the hints that differ from the spec's defaults (readOnly false, destructive true,
    # idempotent false, openWorld true).
    writes = dict(destructiveHint=False)
    local = dict(destructiveHint=False, openWorldHint=False)
    return [
        make_tool("shrink_case",
                  description="The smallest case that fails like a recorded one (steps <case>.shrink-<n>).",
                  arguments=ShrinkArgs, output=ShrinkResponse,
                  annotations=ToolAnnotations(**writes), body=shrink_body),
        make_tool("export_repro",
                  description="Write <case>.py (stdlib + torch): exits 1 while the case fails, 0 once fixed.",
                  arguments=ReproArgs, output=ReproExport,
                  annotations=ToolAnnotations(**local), body=repro_body),
        make_tool("export_regression",
                  description="Write a pytest file over the run's failing cases' reproducers.",
                  arguments=RegressionArgs, output=RegressionExport,
                  annotations=ToolAnnotations(**local), body=regression_body),
        make_tool("render_pictures",
                  description="PNG error maps and histograms as image/png resources ([pictures] extra).",
                  arguments=PicturesArgs, output=PicturesResponse,
                  annotations=ToolAnnotations(idempotentHint=True, **local), body=pictures_body),
        make_tool("verify_fix",
                  description="After a fix: rerun the failing cases and the model command; says what holds.",
                  arguments=VerifyArgs, output=VerifyResponse,
                  annotations=ToolAnnotations(**writes), body=verify_body),
    ]


def _picture_resource(store_dir: Path, run_id: str, png: Path) -> FileResource:
    return FileResource(uri=f"opdebug://runs/{run_id}/pictures/{png.name}", name=f"{run_id}-{png.stem}",
                        title=f"{run_id}: {png.stem}", description=f"Picture {png.name} of run {run_id}.",
                        mime_type="image/png", path=png, encoding=None)


def add_picture_resources(server: MCPServer, root: Path) -> None:
    """Every run's PNGs as listed resources (image/png, read as blobs), found anew
    on each listing; plus a template for reading one by name."""

    def sync() -> None:
        known = {str(r.uri) for r in server._resource_manager.list_resources()}
        for run in list_runs(root):
            try:
                store = RunStore(root, str(run.get("run_id")))
            except ToolError:
                continue
            folder = store.dir / ARTIFACTS_DIR / "pictures"
            for png in sorted(folder.glob("*.png")) if folder.is_dir() else []:
                resource = _picture_resource(store.dir, store.run_id, png.resolve())
                if str(resource.uri) not in known:
                    server.add_resource(resource)

    original = server.list_resources

    async def list_resources() -> Any:
        await anyio.to_thread.run_sync(sync)
        return await original()

    server.list_resources = list_resources  # type: ignore[method-assign]

    @server.resource("opdebug://runs/{run_id}/pictures/{name}", name="run-picture", title="Run picture",
                     mime_type="image/png", description="One PNG of a run's artifacts/pictures/.")
    def picture(run_id: str, name: str) -> bytes:
        try:
            store = RunStore(root, run_id)
            store.require()
            path = store.path(ARTIFACTS_DIR, "pictures", safe_component(name, "picture name"))
        except ToolError as exc:
            raise ResourceNotFoundError(exc.message) from None
        if path.suffix != ".png" or not path.is_file():
            raise ResourceNotFoundError(f"run {run_id!r} has no picture {name!r} (render_pictures draws them)")
        return path.read_bytes()
