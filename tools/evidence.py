"""The evidence directory: layout, atomic writes, locks and the manifest.

Layout of one run (``<root>/<run_id>/``)::

    manifest.json  operator-config.json  case-matrix.json  results.json
    raw-results/<case>/   input-metadata/<case>.json   artifacts/
    analysis.json  report.md  reproduction.md

Rules: every write is a temp file + rename in the same directory; every
read-modify-write holds the run's file lock (``.lock``, a ``filelock``
lock, so it serializes threads and processes alike); a recorded case is never
overwritten; a path built from an id is checked to stay inside the run.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from filelock import FileLock

from .errors import ToolError
from .schemas import SLUG_PATTERN, Case, CaseResult, OperatorConfig, now_utc, _slug

ROOT_ENV = "OPDEBUG_EVIDENCE_ROOT"
DEFAULT_ROOT = Path(".vaws-local") / "operator-debug"
LOCK_TIMEOUT_S = 60.0

MANIFEST = "manifest.json"
CONFIG = "operator-config.json"
MATRIX = "case-matrix.json"
RESULTS = "results.json"
ANALYSIS = "analysis.json"
REPORT = "report.md"
REPRODUCTION = "reproduction.md"
RAW_DIR = "raw-results"
INPUT_META_DIR = "input-metadata"
ARTIFACTS_DIR = "artifacts"

# planned -> running -> passed | failed | inconclusive; adding cases or
# recording after an analysis moves the run back to running.
RUN_STATES = ("planned", "running", "passed", "failed", "inconclusive")


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The evidence root: explicit argument, else $OPDEBUG_EVIDENCE_ROOT, else
    .vaws-local/operator-debug under the working directory."""
    if root is None:
        root = os.environ.get(ROOT_ENV) or DEFAULT_ROOT
    return Path(root).expanduser().resolve()


def safe_component(value: str, what: str = "id") -> str:
    """An id as one path component, or a ToolError. Never a separator, never '..'."""
    try:
        return _slug(value)
    except (ValueError, TypeError) as exc:
        raise ToolError(f"{what} {value!r} {exc}", code="invalid_id") from None


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``path`` atomically; a failing write (a full disk, a read-only
    file system) is a ``[write_failed]`` ToolError naming the file, and leaves
    the previous file intact."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _write_failed(path, exc) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise _write_failed(path, exc) from exc
        raise


def _write_failed(path: Path, exc: OSError) -> ToolError:
    name = errno.errorcode.get(exc.errno or 0, "OSError")
    return ToolError(f"writing {path} failed: {exc.strerror or exc} ({name}); the file was left as it was - free "
                     "space (or fix the permissions) and retry", code="write_failed",
                     details={"path": str(path), "errno": name})


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    with open(path, "r", encoding="utf-8") as fh:
        return json.load(fh)


class RunStore:
    """One run's evidence directory."""

    def __init__(self, root: str | os.PathLike | None, run_id: str):
        self.run_id = safe_component(run_id, "run_id")
        self.root = resolve_root(root)
        self.dir = self.root / self.run_id
        self._lock = FileLock(str(self.root / f".{self.run_id}.lock"), timeout=LOCK_TIMEOUT_S)

    # -- paths ------------------------------------------------------------

    def path(self, *parts: str) -> Path:
        """A path inside the run directory; refuses anything that escapes it."""
        p = self.dir.joinpath(*parts).resolve()
        if p != self.dir and self.dir not in p.parents:
            raise ToolError(f"path {'/'.join(parts)!r} escapes the run directory", code="invalid_id")
        return p

    def raw_dir(self, case_id: str) -> Path:
        return self.path(RAW_DIR, safe_component(case_id, "case_id"))

    def input_meta_path(self, case_id: str) -> Path:
        return self.path(INPUT_META_DIR, safe_component(case_id, "case_id") + ".json")

    def exists(self) -> bool:
        return (self.dir / MANIFEST).is_file()

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with self._lock:
            yield

    def require(self) -> None:
        if not self.exists():
            raise ToolError(
                f"run {self.run_id!r} does not exist under {self.root} (plan it first with plan_cases)",
                code="unknown_run",
            )

    # -- creation ---------------------------------------------------------

    def create(self, config: OperatorConfig, cases: list[Case]) -> None:
        """Create the run. Refuses to touch an existing one."""
        with self.locked():
            if self.dir.exists() and any(self.dir.iterdir()):
                raise ToolError(
                    f"run {self.run_id!r} already exists at {self.dir}; choose another run_id "
                    "or append cases to it (append=true)",
                    code="run_exists",
                )
            for sub in (RAW_DIR, INPUT_META_DIR, ARTIFACTS_DIR):
                (self.dir / sub).mkdir(parents=True, exist_ok=True)
            now = now_utc().isoformat()
            atomic_write_json(self.dir / CONFIG, config.model_dump(mode="json"))
            atomic_write_json(self.dir / MATRIX, self._matrix_doc(cases))
            atomic_write_json(self.dir / RESULTS, {"schema_version": 1, "run_id": self.run_id, "results": {}})
            atomic_write_json(
                self.dir / MANIFEST,
                {
                    "schema_version": 1,
                    "run_id": self.run_id,
                    "operator": config.operator.name,
                    "status": "planned",
                    "created_at": now,
                    "updated_at": now,
                    "history": [{"status": "planned", "at": now}],
                    "case_count": len(cases),
                    "recorded_count": 0,
                    "artifacts": [CONFIG, MATRIX, RESULTS],
                },
            )

    def append_cases(self, cases: list[Case]) -> list[Case]:
        """Add new cases; refuses ids already planned; leaves results alone.
        Returns the whole matrix after the append."""
        with self.locked():
            self.require()
            existing = self.read_cases()
            known = {c.id for c in existing}
            clash = [c.id for c in cases if c.id in known]
            if clash:
                raise ToolError(
                    f"case ids already planned in run {self.run_id!r}: {clash}; planned cases are never replaced",
                    code="duplicate_case",
                )
            matrix = existing + cases
            atomic_write_json(self.dir / MATRIX, self._matrix_doc(matrix))
            # Results, or an analysis of the smaller matrix: the run is under way again.
            analyzed = read_json(self.dir / MANIFEST)["status"] in ("passed", "failed", "inconclusive")
            self._update_manifest(case_count=len(matrix),
                                  status="running" if analyzed or self._has_results() else None, reopen=True)
            return matrix

    def _matrix_doc(self, cases: list[Case]) -> dict:
        return {"schema_version": 1, "run_id": self.run_id,
                "cases": [c.model_dump(mode="json") for c in cases]}

    # -- reads ------------------------------------------------------------

    def read_config(self) -> OperatorConfig:
        self.require()
        return OperatorConfig.model_validate(read_json(self.dir / CONFIG))

    def read_cases(self) -> list[Case]:
        self.require()
        return [Case.model_validate(c) for c in read_json(self.dir / MATRIX)["cases"]]

    def read_results(self) -> dict[str, CaseResult]:
        self.require()
        raw = read_json(self.dir / RESULTS)["results"]
        return {cid: CaseResult.model_validate(r) for cid, r in raw.items()}

    def read_manifest(self) -> dict:
        self.require()
        return read_json(self.dir / MANIFEST)

    def _has_results(self) -> bool:
        return bool(read_json(self.dir / RESULTS)["results"])

    def pending_case_ids(self) -> list[str]:
        results = self.read_results()
        return [c.id for c in self.read_cases() if c.id not in results]

    # -- recording ----------------------------------------------------------

    def record(self, result: CaseResult, raw_files: dict[str, str | bytes] | None = None,
               input_metadata: dict | None = None) -> CaseResult:
        """Record one result for a planned, pending case, with its raw evidence.

        The raw files are written first, then results.json is replaced in one
        rename: a crash in between leaves the case pending, never half-recorded.
        """
        with self.locked():
            self.require()
            planned = {c.id for c in self.read_cases()}
            if result.case_id not in planned:
                raise ToolError(
                    f"case {result.case_id!r} is not planned in run {self.run_id!r}; "
                    f"planned cases: {sorted(planned)}",
                    code="unknown_case",
                )
            doc = read_json(self.dir / RESULTS)
            if result.case_id in doc["results"]:
                prev = doc["results"][result.case_id]
                raise ToolError(
                    f"case {result.case_id!r} already has a result (status {prev.get('status')!r}, recorded "
                    f"{prev.get('recorded_at')}); a recorded case is never overwritten - plan a new case id "
                    "to run it again",
                    code="already_recorded",
                )
            raw_dir = self.raw_dir(result.case_id)
            if result.recorded_at is None:
                result = result.model_copy(update={"recorded_at": now_utc()})
            # raw_path says where this store kept the raw evidence; a submitted
            # one is the caller's claim and stays in its submitted copy.
            rel_raw = f"{RAW_DIR}/{result.case_id}"
            result = result.model_copy(update={"source": result.source.model_copy(update={"raw_path": rel_raw})})
            files = dict(raw_files or {})
            files.setdefault("result.json", json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
            for name, content in files.items():
                target = self.path(RAW_DIR, result.case_id, safe_component(name, "raw file name"))
                atomic_write_bytes(target, content.encode("utf-8") if isinstance(content, str) else content)
            if input_metadata is not None:
                atomic_write_json(self.input_meta_path(result.case_id), input_metadata)
            doc["results"][result.case_id] = result.model_dump(mode="json")
            atomic_write_json(self.dir / RESULTS, doc)
            artifacts = [f"{rel_raw}/{n}" for n in files]
            if input_metadata is not None:
                artifacts.append(f"{INPUT_META_DIR}/{result.case_id}.json")
            self._update_manifest(recorded_count=len(doc["results"]), status="running", add_artifacts=artifacts,
                                  reopen=True)
            return result

    # -- analysis outputs -------------------------------------------------

    def write_outputs(self, files: dict[str, str], status: str) -> None:
        """Write analysis.json / report.md / reproduction.md (regenerated by
        each analysis; they are derived, never evidence) and set the final status."""
        with self.locked():
            self.require()
            for name, text in files.items():
                atomic_write_text(self.path(name), text)
            self._update_manifest(status=status, add_artifacts=list(files))

    def write_artifact(self, rel_name: str, content: str | bytes) -> Path:
        parts = [safe_component(p, "artifact path component") for p in rel_name.split("/")]
        target = self.path(ARTIFACTS_DIR, *parts)
        with self.locked():
            atomic_write_bytes(target, content.encode("utf-8") if isinstance(content, str) else content)
            self._update_manifest(add_artifacts=[f"{ARTIFACTS_DIR}/{'/'.join(parts)}"])
        return target

    def _update_manifest(self, *, status: str | None = None, case_count: int | None = None,
                         recorded_count: int | None = None, add_artifacts: list[str] | None = None,
                         reopen: bool = False) -> None:
        """Caller holds the lock."""
        manifest = read_json(self.dir / MANIFEST)
        now = now_utc().isoformat()
        if status is not None and status != manifest["status"]:
            final = manifest["status"] in ("passed", "failed", "inconclusive")
            if status == "running" and final and not reopen:
                status = manifest["status"]
            if status != manifest["status"]:
                manifest["status"] = status
                manifest["history"].append({"status": status, "at": now})
        if case_count is not None:
            manifest["case_count"] = case_count
        if recorded_count is not None:
            manifest["recorded_count"] = recorded_count
        for a in add_artifacts or []:
            if a not in manifest["artifacts"]:
                manifest["artifacts"].append(a)
        manifest["updated_at"] = now
        atomic_write_json(self.dir / MANIFEST, manifest)


def list_runs(root: str | os.PathLike | None = None) -> list[dict]:
    base = resolve_root(root)
    runs = []
    if not base.is_dir():
        return runs
    for child in sorted(base.iterdir()):
        mf = child / MANIFEST
        if child.is_dir() and mf.is_file():
            try:
                runs.append(read_json(mf))
            except (OSError, json.JSONDecodeError):
                runs.append({"run_id": child.name, "status": "unreadable"})
    return runs
