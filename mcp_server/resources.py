"""The resources: each run's evidence files, its raw evidence per case and its
pictures; the runs index; every tool's schemas; the example request.

Wiring only: what is read comes from tools/ (RunStore checks every id as a
slug first, so a URI can never name a file outside the evidence root).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.to_thread
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.mcpserver.resources import FileResource, FunctionResource

from tools import results_view
from tools.errors import ToolError
from tools.evidence import (
    ANALYSIS,
    ARTIFACTS_DIR,
    CONFIG,
    MANIFEST,
    MATRIX,
    PAGE,
    REPORT,
    REPRODUCTION,
    RESULTS,
    RESULTS_INDEX,
    RunStore,
    list_runs,
    run_index,
    safe_component,
)

from .sdk_adapter import AdaptedServer
from .tooling import ToolCatalog

MAX_RAW_FILE_CHARS = 1_000_000

PLAN_EXAMPLE_URI = "opdebug://examples/plan-request"
PLAN_EXAMPLE = json.dumps(
    {
        "config": {
            "run_id": "rmsnorm-bf16",
            "operator": {
                "name": "rms_norm",
                "candidate": "torch_npu.npu_rms_norm",
                "reference": "my_ref.rms_norm",
                "modules": ["my_ref.py"],
            },
            "tolerance": {"atol": 1e-5, "rtol": 1e-5, "per_dtype": {"bfloat16": {"atol": 0.02, "rtol": 0.02}}},
        },
        "module_sources": {"my_ref.py": "import torch\ndef rms_norm(x, gamma, epsilon=1e-6): ..."},
        "stars": [
            {
                "base": {
                    "id": "base",
                    "seed": 1,
                    "attributes": {"epsilon": 1e-6},
                    "inputs": [
                        {"name": "x", "shape": [4, 256], "dtype": "float32"},
                        {"name": "gamma", "shape": [256], "dtype": "float32"},
                    ],
                },
                "vary": [
                    {"axis": "dtype", "values": ["float16", "bfloat16"]},
                    {"axis": "strides", "input": "x", "values": [[512, 1]]},
                    {"axis": "mode", "values": ["compile", "graph"]},
                ],
            }
        ],
    }
)

RUN_FILES = {
    # resource name: (file in the run directory, mime type, what produces it)
    "report": (REPORT, "text/markdown", "analyze_failures"),
    "page": (PAGE, "text/html", "analyze_failures"),  # run.html, the run as one self-contained page
    "reproduction": (REPRODUCTION, "text/markdown", "analyze_failures"),
    "analysis": (ANALYSIS, "application/json", "analyze_failures"),
    "case-matrix": (MATRIX, "application/json", "plan_cases"),
    "manifest": (MANIFEST, "application/json", "plan_cases"),
    "results": (RESULTS, "application/json", "record_result"),
    "operator-config": (CONFIG, "application/json", "plan_cases"),
}


def add_resources(server: AdaptedServer, root: Path, catalog: ToolCatalog) -> None:
    """Register every resource and template; list the runs already on disk."""
    _add_static(server, root, catalog)
    _add_page_app(server)
    _add_run_files(server, root)
    _add_raw(server, root)
    _add_kept_outputs(server, root)
    _add_full_answers(server, root)
    _add_pictures(server, root)
    for run_id in run_ids(root):
        add_run_resource(server, root, run_id)


# ---------------------------------------------------------------------------
# The example, the schemas, the runs index
# ---------------------------------------------------------------------------


def _add_static(server: AdaptedServer, root: Path, catalog: ToolCatalog) -> None:
    @server.resource(
        PLAN_EXAMPLE_URI,
        name="plan-request-example",
        title="Example plan_cases request",
        mime_type="application/json",
        description="A complete plan_cases request: config, module, star.",
    )
    def plan_example() -> str:
        return json.dumps(json.loads(PLAN_EXAMPLE), indent=2)

    @server.resource(
        "opdebug://schemas/{tool}",
        name="output-schema",
        title="A tool's full output schema",
        mime_type="application/schema+json",
        description="A tool's complete output schema, every field described (tools/list carries no "
        "output schema; each answer is validated against this one).",
    )
    def output_schema(tool: str) -> str:
        return catalog.schema_text("output", tool)

    @server.resource(
        "opdebug://schemas/{tool}/input",
        name="input-schema",
        title="A tool's documented input",
        mime_type="application/schema+json",
        description="A tool's input schema with every field described and its default.",
    )
    def input_schema(tool: str) -> str:
        return catalog.schema_text("input", tool)

    @server.resource(
        "opdebug://runs",
        name="runs",
        title="Runs",
        mime_type="application/json",
        description="Index of the runs under the evidence root (newest 200): id, operator, status, "
        "counts, last update.",
    )
    def runs() -> str:
        return json.dumps(run_index(root), separators=(",", ":"), default=str)


# ---------------------------------------------------------------------------
# The MCP App view of a run (the MCP Apps extension, io.modelcontextprotocol/ui)
# ---------------------------------------------------------------------------

# analyze_failures and narrow_failure name it in tools/list (``_meta.ui.resourceUri``); a host with
# the extension renders their answers in it, one without it reads the same answers as ever.
PAGE_APP_URI = "ui://opdebug/run-page"
PAGE_APP_MIME = "text/html;profile=mcp-app"
PAGE_APP_META = {"ui": {"resourceUri": PAGE_APP_URI}}


def _add_page_app(server: AdaptedServer) -> None:
    @server.resource(
        PAGE_APP_URI,
        name="run-page",
        title="Run page",
        mime_type=PAGE_APP_MIME,
        description="The run of an analyze_failures or narrow_failure answer as a page: verdict, findings, the "
        "case matrix as a grid, every case (it reads opdebug://runs/{run_id}/page through the host).",
        meta={"ui": {"prefersBorder": True}},
    )
    def page_app() -> str:
        from tools.render.page_html import app_html

        return app_html()


# ---------------------------------------------------------------------------
# A run's evidence files
# ---------------------------------------------------------------------------


def read_run_file(root: Path, run_id: str, kind: str) -> str:
    """The text of one evidence file of a run; the run id is checked as a slug
    first, so a URI can never name a file outside the evidence root."""
    filename, _mime, producer = RUN_FILES[kind]
    try:
        store = RunStore(root, run_id)
        store.require()
    except ToolError as exc:
        raise ResourceNotFoundError(exc.message) from None
    if kind == "results":  # current and whole, from the index, in results.json's form (result_count, record_index)
        return results_view.view_bytes(store.run_id, list(store.read_result_docs().values()), RESULTS_INDEX).decode(
            "utf-8"
        )
    if kind == "manifest":  # its counts as the index says, also right after a writer was killed mid-run
        return json.dumps(store.read_manifest(), indent=2) + "\n"
    path = store.path(filename)
    if not path.is_file():
        raise ResourceNotFoundError(f"run {run_id!r} has no {filename} yet (it is written by {producer})")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResourceError(f"cannot read {filename} of run {run_id!r}: {exc}") from None


def _add_run_files(server: AdaptedServer, root: Path) -> None:
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


def run_ids(root: Path, prefix: str = "") -> list[str]:
    """The runs under the evidence root (those with a manifest), sorted."""
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if d.name.startswith(prefix) and (d / "manifest.json").is_file())


def add_run_resource(server: AdaptedServer, root: Path, run_id: str) -> bool:
    """List one run as a concrete resource (its manifest); False if it already is."""

    def read() -> str:
        return read_run_file(root, run_id, "manifest")

    return server.add_listed_resource(
        FunctionResource(
            uri=f"opdebug://runs/{run_id}/manifest",
            name=f"run {run_id}",
            title=f"Run {run_id}",
            mime_type="application/json",
            fn=read,
            description=f"Manifest of run {run_id}",
        )
    )


# ---------------------------------------------------------------------------
# Raw evidence per case
# ---------------------------------------------------------------------------


def raw_files(root: Path, run_id: str, case_id: str) -> tuple[RunStore, Path]:
    """The run's store and the case's raw evidence directory (ResourceNotFoundError if none)."""
    try:
        store = RunStore(root, run_id)
        store.require()
        raw = store.raw_dir(case_id)
    except ToolError as exc:
        raise ResourceNotFoundError(exc.message) from None
    if not raw.is_dir():
        raise ResourceNotFoundError(f"case {case_id!r} of run {run_id!r} has no raw evidence (not recorded yet)")
    return store, raw


def _add_raw(server: AdaptedServer, root: Path) -> None:
    @server.resource(
        "opdebug://runs/{run_id}/raw/{case_id}",
        name="raw-evidence-index",
        title="Raw evidence of a case",
        mime_type="application/json",
        description="The raw evidence files of one recorded case (read each at .../raw/{case_id}/{name}).",
    )
    def raw_index(run_id: str, case_id: str) -> str:
        _store, raw = raw_files(root, run_id, case_id)
        files = sorted(p.name for p in raw.iterdir() if p.is_file())
        return json.dumps(
            {
                "run_id": run_id,
                "case_id": case_id,
                "files": files,
                "uris": [f"opdebug://runs/{run_id}/raw/{case_id}/{n}" for n in files],
            }
        )

    @server.resource(
        RAW_FILE_TEMPLATE,
        name="raw-evidence-file",
        title="One raw evidence file",
        mime_type="application/octet-stream",
        description="One raw evidence file of a recorded case: text files (worker-result.json, "
        "stderr.txt...) as text with their MIME type, binary ones (outputs.pt) as blobs.",
    )
    def raw_file(run_id: str, case_id: str, name: str) -> str | bytes:
        _store, raw = raw_files(root, run_id, case_id)
        try:
            path = raw / safe_component(name, "raw file name")
        except ToolError as exc:
            raise ResourceNotFoundError(exc.message) from None
        if not path.is_file():
            raise ResourceNotFoundError(f"case {case_id!r} of run {run_id!r} has no raw file {name!r}")
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_RAW_FILE_BYTES + 1)
        except OSError as exc:
            raise ResourceError(f"cannot read {name} of case {case_id!r}: {exc}") from None
        mime = raw_file_mime(name)
        unknown_kind = Path(name).suffix.lower() not in _MIME_BY_SUFFIX
        if mime.startswith("text/") or mime == "application/json" or (unknown_kind and _is_utf8(data)):
            text = data.decode("utf-8", "replace")
            if len(text) > MAX_RAW_FILE_CHARS:
                text = text[:MAX_RAW_FILE_CHARS] + f"\n[... cut at {MAX_RAW_FILE_CHARS} characters; the file is {path}]"
            return text
        if len(data) > MAX_RAW_FILE_BYTES:
            raise ResourceError(
                f"{name} of case {case_id!r} is over {MAX_RAW_FILE_BYTES} bytes: read it on the "
                f"server's machine at {path}"
            )
        return data

    def with_mime_type(uri: str, contents: Any) -> Any:
        """Each raw file with its own MIME type (a template has one for all)."""
        match = RAW_FILE_URI.match(uri)
        if match is None or not isinstance(contents, list):
            return contents
        mime = raw_file_mime(match.group("name"))
        return [
            ReadResourceContents(
                content=c.content,
                meta=c.meta,
                mime_type="text/plain" if mime == UNKNOWN_MIME and isinstance(c.content, str) else mime,
            )
            for c in contents
        ]

    server.after_reading.append(with_mime_type)


RAW_FILE_TEMPLATE = "opdebug://runs/{run_id}/raw/{case_id}/{name}"
RAW_FILE_URI = re.compile(r"^opdebug://runs/[^/]+/raw/[^/]+/(?P<name>[^/]+)$")
MAX_RAW_FILE_BYTES = 16 << 20  # a blob (base64 on the wire) at most; a bigger file is read on disk
UNKNOWN_MIME = "application/octet-stream"
_MIME_BY_SUFFIX = {
    ".json": "application/json",
    ".jsonl": "application/json",
    ".txt": "text/plain",
    ".log": "text/plain",
    ".md": "text/markdown",
    ".py": "text/x-python",
    ".csv": "text/csv",
    ".png": "image/png",
    ".pt": UNKNOWN_MIME,
    ".npy": UNKNOWN_MIME,
    ".npz": UNKNOWN_MIME,
}


def raw_file_mime(name: str) -> str:
    """The MIME type of a raw evidence file, by its suffix (application/octet-stream if unknown)."""
    return _MIME_BY_SUFFIX.get(Path(name).suffix.lower(), UNKNOWN_MIME)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return b"\x00" not in data
    except UnicodeDecodeError:
        return False


def _add_kept_outputs(server: AdaptedServer, root: Path) -> None:
    @server.resource(
        KEPT_OUTPUTS_TEMPLATE,
        name="kept-outputs",
        title="Kept outputs of a case",
        mime_type="application/json",
        description="Both outputs of a mismatching case run with keep_outputs: per output its shape, "
        "dtype, NaN/Inf counts, where they differ most and the first values of each side.",
    )
    async def kept(run_id: str, case_id: str) -> str:
        from tools.kept_outputs import kept_outputs

        try:
            view = await anyio.to_thread.run_sync(kept_outputs, root, run_id, case_id)
        except ToolError as exc:
            raise ResourceNotFoundError(exc.message) from None
        return json.dumps(view, separators=(",", ":"))


KEPT_OUTPUTS_TEMPLATE = "opdebug://runs/{run_id}/outputs/{case_id}"


def _add_full_answers(server: AdaptedServer, root: Path) -> None:
    @server.resource(
        "opdebug://runs/{run_id}/answers/{tool}",
        name="full-answer",
        title="A whole tool answer",
        mime_type="application/json",
        description="The whole structured answer of a tool's last call on a run whose answer had lists "
        "cut (its full_answer).",
    )
    def full_answer(run_id: str, tool: str) -> str:
        from tools.answers import read_full_answer

        try:
            return read_full_answer(root, run_id, tool)
        except ToolError as exc:
            raise ResourceNotFoundError(exc.message) from None


# ---------------------------------------------------------------------------
# Pictures
# ---------------------------------------------------------------------------


def _picture_resource(run_id: str, png: Path) -> FileResource:
    return FileResource(
        uri=f"opdebug://runs/{run_id}/pictures/{png.name}",
        name=f"{run_id}-{png.stem}",
        title=f"{run_id}: {png.stem}",
        description=f"Picture {png.name} of run {run_id}.",
        mime_type="image/png",
        path=png,
        encoding=None,
    )


def _add_pictures(server: AdaptedServer, root: Path) -> None:
    """Every run's PNGs as listed resources (image/png, read as blobs), found anew
    on each listing; plus a template for reading one by name."""

    def sync() -> None:
        for run in list_runs(root):
            try:
                store = RunStore(root, str(run.get("run_id")))
            except ToolError:
                continue
            folder = store.dir / ARTIFACTS_DIR / "pictures"
            for png in sorted(folder.glob("*.png")) if folder.is_dir() else []:
                server.add_listed_resource(_picture_resource(store.run_id, png.resolve()))

    async def find_pictures() -> None:
        await anyio.to_thread.run_sync(sync)

    server.before_listing.append(find_pictures)

    @server.resource(
        "opdebug://runs/{run_id}/pictures/{name}",
        name="run-picture",
        title="Run picture",
        mime_type="image/png",
        description="One PNG of a run's artifacts/pictures/.",
    )
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
