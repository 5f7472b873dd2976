"""The evidence directory: layout, atomic writes, locks and the manifest.

Layout of one run (``<root>/<run_id>/``)::

    manifest.json  operator-config.json  case-matrix.json
    results.jsonl  results.json (a derived view)
    raw-results/<case>/   input-metadata/<case>.json   artifacts/
    analysis.json  report.md  reproduction.md  run.html

Rules: every write is a temp file + rename in the same directory; every
read-modify-write holds the run's file lock (``.lock``, a ``filelock``
lock, so it serializes threads and processes alike); a recorded case is never
overwritten; a path built from an id is checked to stay inside the run.

Recording costs the same at case 10 and at case 10,000: a record is one fresh
directory ``raw-results/<case>/`` (its ``result.json`` plus the raw files,
written under ``raw-results/.new-*`` and renamed into place in one step: the
commit), one line appended to ``results.jsonl`` (the index every read uses)
and a small manifest update.  A journal (``.recording.json``) names the case
being recorded; a writer killed mid-record leaves it, and the next locked
write (or the first one of a process) repairs the run: a committed case gets
its index line and input metadata, an uncommitted one leaves nothing behind,
``recorded_count`` is recounted and stray ``.tmp`` files go.  ``results.json``
is a derived view of the index for people, appended to in place as each case
is recorded (results_view.py: current after every call that records, at a
cost that does not grow with the run) and rewritten whole by each analysis.
"""

from __future__ import annotations

import asyncio
import atexit
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock
from filelock import Timeout as FileLockTimeout

from . import results_view
from .cases.memo import seal
from .errors import ToolError
from .schemas import SLUG_PATTERN, Case, CaseResult, OperatorConfig, check_slug, now_utc

ROOT_ENV = "OPDEBUG_EVIDENCE_ROOT"
DEFAULT_ROOT = Path(".vaws-local") / "operator-debug"
LOCK_TIMEOUT_S = 60.0

MANIFEST = "manifest.json"
CONFIG = "operator-config.json"
MATRIX = "case-matrix.json"
RESULTS = "results.json"
RESULTS_INDEX = "results.jsonl"
JOURNAL = ".recording.json"
NEW_RAW_PREFIX = ".new-"
RESULT_FILE = "result.json"
INPUT_META_FILE = "input-metadata.json"
# A record survives the writer being killed without any fsync (the page cache
# outlives the process); OPDEBUG_FSYNC=1 also fsyncs each record's index line,
# for a power loss, at the price of a disk flush per case (milliseconds).
RECORD_FSYNC = os.environ.get("OPDEBUG_FSYNC", "0") == "1"
# The most ids an error message lists (the rest are counted).
MAX_IDS_IN_ERROR = 5
ANALYSIS = "analysis.json"
REPORT = "report.md"
REPRODUCTION = "reproduction.md"
PAGE = "run.html"  # the run as one self-contained page (render/page.py, page_html.py)
RAW_DIR = "raw-results"
INPUT_META_DIR = "input-metadata"
ARTIFACTS_DIR = "artifacts"
# the calls the reference refused (case id -> its error): not results, the cases stay pending;
# read by tools/cases/constraints.py to learn what a valid call is
REFUSALS = "reference-refusals.json"

# a manifest once analyzed says the run's verdict; "failed" is how runs analyzed before the rename read
ANALYZED_STATES = ("passed", "diagnosed", "inconclusive", "failed")


def _is_slug(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(SLUG_PATTERN, value) is not None


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The evidence root: explicit argument, else $OPDEBUG_EVIDENCE_ROOT, else
    .vaws-local/operator-debug under the working directory."""
    if root is None:
        root = os.environ.get(ROOT_ENV) or DEFAULT_ROOT
    key = os.fspath(root)
    hit = _RESOLVED_ROOTS.get(key)
    if hit is not None:
        return hit
    resolved = Path(root).expanduser().resolve()
    if os.path.isabs(key):  # a relative root follows the working directory: resolved every time
        _RESOLVED_ROOTS[key] = resolved
    return resolved


# Absolute evidence roots as resolved (a realpath walks every component: a store per call would
# pay it each time; the server resolves its root once at start).
_RESOLVED_ROOTS: dict[str, Path] = {}


def safe_component(value: str, what: str = "id") -> str:
    """An id as one path component, or a ToolError. Never a separator, never '..'."""
    try:
        return check_slug(value)
    except (ValueError, TypeError) as exc:
        raise ToolError(f"{what} {value!r} {exc}", code="invalid_id") from None


def few_ids(ids, limit: int = MAX_IDS_IN_ERROR) -> str:
    """At most ``limit`` ids for a message, and how many more there are."""
    ids = list(ids)
    shown = ", ".join(repr(i) for i in ids[:limit])
    return f"[{shown}{f', ... ({len(ids) - limit} more)' if len(ids) > limit else ''}]"


def unknown_cases(run_id: str, unknown, planned) -> ToolError:
    """The refusal of case ids a run does not plan: at most MAX_IDS_IN_ERROR of them and of
    the planned ones, with both counts (a run may plan thousands)."""
    unknown, planned = list(dict.fromkeys(unknown)), list(planned)
    what = f"case {unknown[0]!r} is" if len(unknown) == 1 else f"{len(unknown)} case ids are"
    shown = "" if len(unknown) == 1 else f" {few_ids(unknown)}"
    return ToolError(
        f"{what} not planned in run {run_id!r}{shown}; the run plans {len(planned)} case(s), e.g. "
        f"{few_ids(planned[:3])} (all of them: opdebug://runs/{run_id}/case-matrix)",
        code="unknown_case",
        details={"unknown_count": len(unknown), "planned_count": len(planned)},
    )


def writable_dir(given: str, field: str) -> Path:
    """A directory the caller named (an export's ``out_dir``), created when missing.  One
    that cannot be made or written is the caller's ``[bad_path]`` error naming the field and
    the path, not a server failure."""
    path = Path(given).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolError(
            f"{field}: cannot create the directory {str(path)!r}: {exc.strerror or exc}",
            code="bad_path",
            details={"field": field, "path": str(path)},
        ) from None
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        raise ToolError(
            f"{field}: {str(path)!r} is not a directory this server can write",
            code="bad_path",
            details={"field": field, "path": str(path)},
        )
    return path


def atomic_write_bytes(path: Path, data: bytes, *, fsync: bool = True) -> None:
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
            if fsync:
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
    return ToolError(
        f"writing {path} failed: {exc.strerror or exc} ({name}); the file was left as it was - free "
        "space (or fix the permissions) and retry",
        code="write_failed",
        details={"path": str(path), "errno": name},
    )


def atomic_write_text(path: Path, text: str, *, fsync: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def readable_json(doc: dict) -> str:
    """A JSON object with one top-level key per line, each value compact: as
    readable as an indented file for a person, and encoded by the C encoder
    (``indent`` takes the pure-Python one, a few hundred microseconds a record)."""
    if not doc:
        return "{}\n"

    def value(v: Any) -> str:
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):  # a list of objects: one a line
            return "[\n" + ",\n".join(f"    {json.dumps(x, separators=(', ', ': '), default=str)}" for x in v) + "\n  ]"
        return json.dumps(v, separators=(", ", ": "), default=str)

    return "{\n" + ",\n".join(f"  {json.dumps(k)}: {value(v)}" for k, v in doc.items()) + "\n}\n"


def atomic_write_json(path: Path, obj: Any, *, fsync: bool = True) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n", fsync=fsync)


# Parsed files shared by every RunStore of this process, keyed by what stat()
# says of the file: a matrix of 10,000 cases is parsed once, not per record.
_MATRIX_CACHE: dict[str, tuple[tuple, list[Case], frozenset[str], list[dict]]] = {}
_CASES_BY_ID: dict[str, tuple[tuple, dict[str, Case]]] = {}  # the same matrices, by case id
# operator-config.json as parsed, keyed by what stat() says (it never changes once planned).
_CONFIG_CACHE: dict[str, tuple[tuple, OperatorConfig]] = {}
# results.jsonl read incrementally: path -> (inode, bytes read, {case_id: result doc}).
_INDEX_CACHE: dict[str, tuple[int, int, dict[str, dict]]] = {}
# Each result document of an index as validated: path -> {case_id: (the document, its CaseResult)}; reused
# while the index hands out the same document (a result never changes once recorded).
_RESULTS_PARSED: dict[str, dict[str, tuple[dict, CaseResult]]] = {}
# Where the first pending case of a matrix was last seen: path -> (matrix key, position).
_PENDING_FROM: dict[str, tuple[tuple, int]] = {}
# manifest.json as this process last wrote it: path -> (stat key, document), and when.
_MANIFEST_CACHE: dict[str, tuple[tuple, dict]] = {}
_MANIFEST_WRITTEN_AT: dict[str, float] = {}
MANIFEST_LAG_S = 2.0
# Runs whose manifest.json lags their index (recorded_count) in this process:
# run directory -> (root, run_id); brought up to date MANIFEST_LAG_S later, before
# this process reads a manifest, and at exit (see flush_lagging_manifests).
_MANIFEST_LAGGING: dict[str, tuple[Path, str]] = {}
_FLUSH_PENDING: set[asyncio.AbstractEventLoop] = set()  # event loops with a flush timer set
# Runs this process has swept for what a killed writer left (once per process).
_SWEPT: set[str] = set()
# Directories this process made or found (evidence roots, raw-results/, input-metadata/): not made again.
_DIRS_MADE: set[str] = set()
# A store that found no recording journal looks again after this long (a writer killed in the
# middle of a record leaves one; the next locked write repairs the run whatever the reads saw).
JOURNAL_RECHECK_S = 1.0


def _ensure_dir(path: Path) -> None:
    key = str(path)
    if key not in _DIRS_MADE:
        path.mkdir(exist_ok=True)
        _DIRS_MADE.add(key)


def _stat_key(path: Path) -> tuple:
    st = path.stat()
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


class RunStore:
    """One run's evidence directory."""

    def __init__(self, root: str | os.PathLike | None, run_id: str, *, lock_timeout_s: float = LOCK_TIMEOUT_S):
        """``lock_timeout_s=0``: a write raises filelock.Timeout at once when another
        writer holds the run (run_case_remote then records in a thread instead)."""
        self.run_id = safe_component(run_id, "run_id")
        self.root = resolve_root(root)
        self.dir = self.root / self.run_id
        self._index_path = self.dir / RESULTS_INDEX  # joined once (a path join per read adds up)
        self._matrix_path = self.dir / MATRIX
        self._manifest_path = self.dir / MANIFEST
        self._journal_path = self.dir / JOURNAL
        self._config_path = self.dir / CONFIG
        # polled every 5 ms when contended (filelock's 50 ms default stalls slots recording side by side)
        self._lock = FileLock(str(self.root / f".{self.run_id}.lock"), timeout=lock_timeout_s, poll_interval=0.005)
        self._seen = False  # the run was found to exist (a store lives for one call: not checked again)
        self._root_made = str(self.root) in _DIRS_MADE
        self._journal_checked = -JOURNAL_RECHECK_S  # when this store last found no journal (monotonic)

    # -- paths ------------------------------------------------------------

    def path(self, *parts: str) -> Path:
        """A path inside the run directory; refuses anything that escapes it."""
        p = self.dir.joinpath(*parts).resolve()
        if p != self.dir and self.dir not in p.parents:
            raise ToolError(f"path {'/'.join(parts)!r} escapes the run directory", code="invalid_id")
        return p

    def raw_dir(self, case_id: str) -> Path:
        # one checked component under a fixed name: it cannot leave the run (no resolve() per record)
        return self.dir / RAW_DIR / safe_component(case_id, "case_id")

    def input_meta_path(self, case_id: str) -> Path:
        return self.dir / INPUT_META_DIR / (safe_component(case_id, "case_id") + ".json")

    def exists(self) -> bool:
        return (self._manifest_path).is_file()

    @contextmanager
    def locked(self) -> Iterator[None]:
        if not self._root_made:
            self.root.mkdir(parents=True, exist_ok=True)
            self._root_made = True
            _DIRS_MADE.add(str(self.root))
        with self._lock:
            yield

    def require(self) -> None:
        if self._seen:
            return
        self._seen = self.exists()
        if not self._seen:
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
            atomic_write_json(self._config_path, config.model_dump(mode="json"))
            atomic_write_json(self._matrix_path, self._matrix_doc(cases))
            atomic_write_bytes(self._index_path, b"")
            self._write_results_view({})
            atomic_write_json(
                self._manifest_path,
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
                    "artifacts": [CONFIG, MATRIX, RESULTS_INDEX, RESULTS, f"{RAW_DIR}/", f"{INPUT_META_DIR}/"],
                },
            )

    def append_cases(self, cases: list[Case]) -> list[Case]:
        """Add new cases; refuses ids already planned; leaves results alone.
        Returns the whole matrix after the append."""
        with self.locked():
            self.require()
            existing = self.read_cases()
            known = self.planned_ids()
            clash = [c.id for c in cases if c.id in known]
            if clash:
                raise ToolError(
                    f"case ids already planned in run {self.run_id!r}: {few_ids(clash)}; planned cases are "
                    "never replaced",
                    code="duplicate_case",
                )
            matrix = existing + cases
            atomic_write_json(self._matrix_path, self._matrix_doc(matrix))
            # Results, or an analysis of the smaller matrix: the run is under way again.
            analyzed = read_json(self._manifest_path)["status"] in ANALYZED_STATES
            self._update_manifest(
                case_count=len(matrix), status="running" if analyzed or self._has_results() else None, reopen=True
            )
            return matrix

    def _matrix_doc(self, cases: list[Case]) -> dict:
        return {"schema_version": 1, "run_id": self.run_id, "cases": [c.model_dump(mode="json") for c in cases]}

    # -- reads ------------------------------------------------------------

    def read_config(self) -> OperatorConfig:
        """The run's config (parsed once per process while the file is unchanged;
        treat it as read-only)."""
        self.require()
        path = self._config_path
        key = _stat_key(path)
        hit = _CONFIG_CACHE.get(str(path))
        if hit is None or hit[0] != key:
            hit = (key, OperatorConfig.model_validate(read_json(path)))
            _CONFIG_CACHE[str(path)] = hit
        return hit[1]

    def cases_by_id(self) -> dict[str, Case]:
        """The planned cases by id (shared with later calls while the matrix is
        unchanged: read it, never change it)."""
        self.require()
        cases, _ = self._matrix()
        path = str(self._matrix_path)
        key = _MATRIX_CACHE[path][0]
        hit = _CASES_BY_ID.get(path)
        if hit is None or hit[0] != key:
            hit = (key, {c.id: c for c in cases})
            _CASES_BY_ID[path] = hit
        return hit[1]

    def _matrix(self) -> tuple[list[Case], frozenset[str]]:
        path = self._matrix_path
        key = _stat_key(path)
        hit = _MATRIX_CACHE.get(str(path))
        if hit is None or hit[0] != key:
            docs = read_json(path)["cases"]
            before = hit[3] if hit is not None else []
            cases = []
            for i, doc in enumerate(docs):  # a case never changes once planned: a grown matrix keeps its objects
                if i < len(before) and before[i] == doc:
                    cases.append(hit[1][i])  # type: ignore[index]
                else:
                    cases.append(Case.model_validate(doc))
                    # read-only from here on: what is derived from it is kept (cases/memo.py), its inputs' too
                    seal(cases[-1], *(t for s in cases[-1].inputs for t in (s, *(s.tensors or ()))))
            hit = (key, cases, frozenset(c.id for c in cases), docs)
            _MATRIX_CACHE[str(path)] = hit
        return hit[1], hit[2]

    def read_cases(self) -> list[Case]:
        self.require()
        return list(self._matrix()[0])

    def planned_ids(self) -> frozenset[str]:
        self.require()
        return self._matrix()[1]

    def _index_docs(self) -> dict[str, dict]:
        """Every recorded result document, by case id, in recording order: the
        index read from where this process last stopped, plus a case a killed
        writer committed but did not index (named by the journal)."""
        path = self._index_path
        try:
            st = os.stat(path)
        except FileNotFoundError:  # a run made before the index: its results.json is the record
            legacy = self.dir / RESULTS
            return dict(read_json(legacy)["results"]) if legacy.exists() else {}
        hit = _INDEX_CACHE.get(str(path))
        if hit is None or hit[0] != st.st_ino or hit[1] != st.st_size:  # else nothing new: one stat, no read
            with open(path, "rb") as fh:
                ino = os.fstat(fh.fileno()).st_ino
                if hit is None or hit[0] != ino:
                    hit = (ino, 0, {})
                _, offset, docs = hit
                fh.seek(offset)
                data = fh.read()
            end = data.rfind(b"\n") + 1  # a torn last line (a killed writer) is not read
            for line in data[:end].splitlines():
                if line.strip():
                    doc = json.loads(line)
                    docs.setdefault(doc["case_id"], doc)
            hit = (ino, offset + end, docs)
            _INDEX_CACHE[str(path)] = hit
        docs = hit[2]
        now = time.monotonic()
        if now - self._journal_checked < JOURNAL_RECHECK_S:  # looked a moment ago by this store: none then
            return docs
        journal = self._read_journal()
        if journal is None:
            self._journal_checked = now
        if journal and journal["case_id"] not in docs:
            committed = self._committed_result(journal["case_id"])
            if committed is not None:
                docs = {**docs, journal["case_id"]: committed}
        return docs

    def read_result_docs(self) -> dict[str, dict]:
        """Recorded results as JSON documents (no model validation: cheap)."""
        self.require()
        return dict(self._index_docs())

    def read_results(self) -> dict[str, CaseResult]:
        """Recorded results by case id (validated once per process while the index hands out the same
        document: read them, never change them)."""
        self.require()
        parsed = _RESULTS_PARSED.setdefault(str(self._index_path), {})
        out = {}
        for cid, doc in self._index_docs().items():
            hit = parsed.get(cid)
            if hit is None or (hit[0] is not doc and hit[0] != doc):
                hit = parsed[cid] = (doc, CaseResult.model_validate(doc))
                seal(hit[1])
            out[cid] = hit[1]
        return out

    def recorded_ids(self) -> set[str]:
        self.require()
        return set(self._index_docs())

    def _committed_result(self, case_id: str) -> dict | None:
        path = self.dir / RAW_DIR / case_id / RESULT_FILE
        try:
            return read_json(path)
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
            return None

    def _read_journal(self) -> dict | None:
        try:
            return read_json(self._journal_path)
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def read_manifest(self) -> dict:
        """manifest.json with its counts as the index says: a writer killed mid-run (kill -9)
        leaves a lazily written ``recorded_count`` behind its index until the next locked
        write repairs the file; a reader never sees that lag (the file is brought up to date
        now when no other writer holds the run)."""
        self.require()
        flush_lagging_manifests(self.dir)
        manifest = read_json(self._manifest_path)
        count = len(self._index_docs())
        if manifest.get("recorded_count") != count:
            manifest["recorded_count"] = count
            try:
                RunStore(self.root, self.run_id, lock_timeout_s=0).sync_manifest()
            except (FileLockTimeout, OSError):  # another writer holds the run, or a full disk: the answer is right
                pass
        return manifest

    def _has_results(self) -> bool:
        return bool(self._index_docs())

    def pending_case_ids(self, limit: int | None = None) -> list[str]:
        """Planned cases without a result, in plan order (the first ``limit``).
        Cases only ever gain results, so the scan starts where the first
        pending case was last seen: recording case after case stays cheap."""
        self.require()
        recorded = self._index_docs()
        cases, _ = self._matrix()
        key = _MATRIX_CACHE[str(self._matrix_path)][0]
        hint = _PENDING_FROM.get(str(self.dir))
        start = hint[1] if hint is not None and hint[0] == key else 0
        while start < len(cases) and cases[start].id in recorded:
            start += 1
        _PENDING_FROM[str(self.dir)] = (key, start)
        out = []
        for c in cases[start:]:
            if c.id not in recorded:
                out.append(c.id)
                if limit is not None and len(out) >= limit:
                    break
        return out

    def note_refusal(self, case_id: str, error: str) -> None:
        """Note that the reference refused ``case_id``'s call (not a result: the case stays pending); the
        first note of a case is kept."""
        with self.locked():
            notes = self.read_refusals()
            if case_id not in notes:
                atomic_write_json(self.dir / REFUSALS, {**notes, case_id: error[:500]})

    def read_refusals(self) -> dict[str, str]:
        """Case id -> the reference's refusal of its call, for the pending cases so refused."""
        try:
            notes = read_json(self.dir / REFUSALS)
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return {k: v for k, v in notes.items() if isinstance(k, str) and isinstance(v, str)}

    def pending_count(self) -> int:
        """Planned cases without a result (a result is only ever recorded for a planned case)."""
        return len(self.planned_ids()) - len(self._index_docs())

    # -- recording ----------------------------------------------------------

    def record(
        self,
        result: CaseResult,
        raw_files: dict[str, str | bytes] | None = None,
        input_metadata: dict | None = None,
        *,
        lazy_manifest: bool = False,
    ) -> CaseResult:
        """Record one result for a planned, pending case, with its raw evidence.

        The raw files and ``result.json`` are written into a fresh directory and
        renamed to ``raw-results/<case>/`` in one step (the commit); the index
        line and the manifest follow.  A writer killed before the rename leaves
        the case pending and nothing visible; one killed after it leaves the
        journal, and the next write completes the record (see the module doc).

        ``lazy_manifest``: the manifest's ``recorded_count`` may lag (by at most
        MANIFEST_LAG_S) until :meth:`sync_manifest`: run_case_remote records a
        batch and syncs once (replacing a file costs a disk flush on ext4).
        """
        with self.locked():
            self.require()
            self._migrate_legacy()
            self._recover()
            if result.case_id not in self.planned_ids():
                raise ToolError(
                    f"case {result.case_id!r} is not planned in run {self.run_id!r} "
                    f"({len(self.planned_ids())} planned cases, e.g. {few_ids([c.id for c in self._matrix()[0][:3]])}); "
                    "plan it first with plan_cases (append=true)",
                    code="unknown_case",
                )
            prev = self._index_docs().get(result.case_id)
            if prev is not None:
                raise ToolError(
                    f"case {result.case_id!r} already has a result (status {prev.get('status')!r}, recorded "
                    f"{prev.get('recorded_at')}); a recorded case is never overwritten - plan a new case id "
                    "to run it again",
                    code="already_recorded",
                )
            safe_component(result.case_id, "case_id")
            if result.recorded_at is None:
                result = result.model_copy(update={"recorded_at": now_utc()})
            # raw_path says where this store kept the raw evidence; a submitted
            # one is the caller's claim and stays in its submitted copy.
            rel_raw = f"{RAW_DIR}/{result.case_id}"
            result = result.model_copy(update={"source": result.source.model_copy(update={"raw_path": rel_raw})})
            doc = result.model_dump(mode="json")
            files = {safe_component(name, "raw file name"): content for name, content in (raw_files or {}).items()}
            if input_metadata is not None:
                files[INPUT_META_FILE] = readable_json(input_metadata)
            files[RESULT_FILE] = readable_json(doc)  # last: its presence marks a whole directory

            raw_root = self.dir / RAW_DIR
            _ensure_dir(raw_root)
            final = self.raw_dir(result.case_id)
            with open(self._journal_path, "w", encoding="utf-8") as fh:  # torn: the next write reconciles all
                fh.write(json.dumps({"case_id": result.case_id}))
            tmp = Path(tempfile.mkdtemp(prefix=f"{NEW_RAW_PREFIX}{result.case_id}.", dir=raw_root))
            try:
                for name, content in files.items():
                    with open(tmp / name, "wb") as fh:
                        fh.write(content.encode("utf-8") if isinstance(content, str) else content)
                if final.exists():  # left by a writer that predates the fresh-directory commit: not a record
                    shutil.rmtree(final)
                os.rename(tmp, final)  # the commit
            except BaseException as exc:  # e.g. a full disk: nothing of this record stays, the case stays pending
                shutil.rmtree(tmp, ignore_errors=True)
                (self._journal_path).unlink(missing_ok=True)
                if isinstance(exc, OSError):
                    raise _write_failed(final, exc) from exc
                raise
            self._finish_record(result.case_id, doc, input_metadata, lazy_manifest=lazy_manifest)
            (self._journal_path).unlink()
            return result

    def _finish_record(
        self, case_id: str, doc: dict, input_metadata: dict | None, *, lazy_manifest: bool = False
    ) -> None:
        """After the commit: index line, input metadata, manifest (caller holds the lock)."""
        compact = json.dumps(doc, separators=(",", ":"))
        line = (compact + "\n").encode("utf-8")
        index = self._index_path
        with open(index, "ab") as fh:
            end = fh.tell()
            fh.write(line)
            if RECORD_FSYNC:
                fh.flush()
                os.fsync(fh.fileno())
            ino = os.fstat(fh.fileno()).st_ino
        hit = _INDEX_CACHE.get(str(index))
        if hit is not None and hit[0] == ino and hit[1] == end:  # the cache was current: it is again, read nothing
            hit[2].setdefault(case_id, doc)
            _INDEX_CACHE[str(index)] = (ino, end + len(line), hit[2])
        if input_metadata is not None:
            self._publish_input_metadata(case_id)
        try:  # the person's results.json, current with the index (the line just encoded is reused)
            self.sync_results_view(encoded={case_id: compact})
        except ToolError:
            pass  # a derived view: the record is whole; the next record or analysis rewrites it
        manifest = self._cached_manifest()
        written = _MANIFEST_WRITTEN_AT.get(str(self.dir), 0.0)
        if lazy_manifest and manifest.get("status") == "running" and time.monotonic() - written < MANIFEST_LAG_S:
            return
        self._update_manifest(recorded_count=len(self._index_docs()), status="running", reopen=True, manifest=manifest)

    def sync_manifest(self, *, lazy: bool = False) -> bool:
        """Bring the manifest's recorded_count up to the index (after lazy records).

        ``lazy``: when this process wrote the manifest less than MANIFEST_LAG_S
        ago, or another writer holds the run's lock, nothing is written now
        (replacing a file costs about a millisecond: an agent running one case
        per call would pay it per case); the run is noted and brought up to date
        by :func:`flush_lagging_manifests`.  True when the manifest is current."""
        key = str(self.dir)
        if lazy and time.monotonic() - _MANIFEST_WRITTEN_AT.get(key, 0.0) < MANIFEST_LAG_S:
            _MANIFEST_LAGGING[key] = (self.root, self.run_id)
            return False
        try:
            with self.locked():
                self.require()
                manifest = self._cached_manifest()
                count = len(self._index_docs())
                if manifest.get("recorded_count") != count:
                    self._update_manifest(recorded_count=count, manifest=manifest)
                _MANIFEST_LAGGING.pop(key, None)
        except FileLockTimeout:
            if not lazy:
                raise
            _MANIFEST_LAGGING[key] = (self.root, self.run_id)
            return False
        return True

    def _publish_input_metadata(self, case_id: str) -> None:
        """input-metadata/<case>.json: a hard link to the committed raw copy (one
        system call), or a copy where links are not supported."""
        src = self.dir / RAW_DIR / case_id / INPUT_META_FILE
        dst = self.input_meta_path(case_id)
        _ensure_dir(dst.parent)
        try:
            try:
                os.link(src, dst)
            except FileExistsError:
                tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
                tmp.unlink(missing_ok=True)
                os.link(src, tmp)
                os.replace(tmp, dst)
        except OSError:
            atomic_write_bytes(dst, src.read_bytes(), fsync=False)

    def _cached_manifest(self) -> dict:
        path = self._manifest_path
        key = _stat_key(path)
        hit = _MANIFEST_CACHE.get(str(path))
        if hit is None or hit[0] != key:
            hit = (key, read_json(path))
        return json.loads(json.dumps(hit[1]))  # a copy: the caller changes it

    def _recover(self) -> None:
        """Repair what a writer killed mid-record left (caller holds the lock).

        Cheap unless there is something to repair: the journal is one stat; the
        sweep of stray temp files runs once per process and run."""
        first = str(self.dir) not in _SWEPT
        present = os.path.lexists(self._journal_path)
        if not present and not first:
            return
        journal = self._read_journal() if present else None
        if first and not present:
            # a process that recorded lazily and was killed before syncing the manifest
            self._repair_index_tail()
            count = len(self._index_docs_only())
            if read_json(self._manifest_path).get("recorded_count") != count:
                self._update_manifest(recorded_count=count)
        if present:
            case_id = (journal or {}).get("case_id", "")
            if _is_slug(case_id):
                suspects = [case_id]
            else:  # a torn journal: every committed directory is checked against the index
                raw_root = self.dir / RAW_DIR
                suspects = (
                    [e.name for e in os.scandir(raw_root) if not e.name.startswith(".")] if raw_root.is_dir() else []
                )
            self._repair_index_tail()
            indexed = self._index_docs_only()
            for cid in suspects:
                committed = self._committed_result(cid)
                if committed is None:
                    continue
                if cid not in indexed:
                    line = (json.dumps(committed, separators=(",", ":")) + "\n").encode("utf-8")
                    with open(self._index_path, "ab") as fh:
                        fh.write(line)
                if (self.dir / RAW_DIR / cid / INPUT_META_FILE).is_file():
                    self._publish_input_metadata(cid)
            _INDEX_CACHE.pop(str(self._index_path), None)
            self._update_manifest(recorded_count=len(self._index_docs_only()))
            (self._journal_path).unlink(missing_ok=True)
        self._sweep()
        _SWEPT.add(str(self.dir))

    def _migrate_legacy(self) -> None:
        """A run made before results.jsonl: its results.json becomes the index."""
        if (self._index_path).exists():
            return
        legacy = read_json(self.dir / RESULTS)["results"] if (self.dir / RESULTS).exists() else {}
        atomic_write_bytes(
            self._index_path,
            b"".join((json.dumps(doc, separators=(",", ":")) + "\n").encode("utf-8") for doc in legacy.values()),
        )

    def _index_docs_only(self) -> dict[str, dict]:
        path = self._index_path
        if not path.exists():
            return self._index_docs()
        _INDEX_CACHE.pop(str(path), None)
        docs: dict[str, dict] = {}
        data = path.read_bytes()
        for line in data[: data.rfind(b"\n") + 1].splitlines():
            if line.strip():
                doc = json.loads(line)
                docs.setdefault(doc["case_id"], doc)
        return docs

    def _repair_index_tail(self) -> None:
        """Cut a torn last line off the index (a writer killed inside write())."""
        path = self._index_path
        if not path.exists():
            return
        data = path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            with open(path, "r+b") as fh:
                fh.truncate(keep)
            _INDEX_CACHE.pop(str(path), None)

    def _sweep(self) -> None:
        """Remove fresh record directories never committed and temp files of
        atomic writes a killed writer left (caller holds the lock)."""
        raw_root = self.dir / RAW_DIR
        if raw_root.is_dir():
            for entry in os.scandir(raw_root):
                if entry.name.startswith(NEW_RAW_PREFIX):
                    shutil.rmtree(entry.path, ignore_errors=True)
        for folder in (self.dir, self.dir / INPUT_META_DIR):
            if folder.is_dir():
                for entry in os.scandir(folder):
                    if entry.name.startswith(".") and entry.name.endswith(".tmp") and entry.is_file():
                        os.unlink(entry.path)

    def write_results_view(self) -> None:
        """Rewrite results.json, the derived view of the index (caller holds the lock)."""
        self._write_results_view(self._index_docs())

    def _write_results_view(self, docs: dict[str, dict]) -> None:
        atomic_write_bytes(
            self.dir / RESULTS, results_view.view_bytes(self.run_id, list(docs.values()), RESULTS_INDEX), fsync=False
        )

    def sync_results_view(self, encoded: dict[str, str] | None = None) -> None:
        """results.json up to the index: the results it lacks appended in place (a
        cost that does not grow with the run), or rewritten whole when it is not in
        that form (caller holds the lock; see results_view.py).  ``encoded``: case
        id -> its result already encoded as compact JSON (not encoded again)."""
        docs = self._index_docs()
        path = self.dir / RESULTS
        try:
            if results_view.append_view(path, self.run_id, list(docs.values()), encoded):
                return
        except OSError as exc:
            raise _write_failed(path, exc) from exc
        self._write_results_view(docs)

    # -- analysis outputs -------------------------------------------------

    def write_outputs(self, files: dict[str, str], status: str) -> None:
        """Write analysis.json / report.md / reproduction.md and the results.json
        view (regenerated by each analysis; they are derived, never evidence) and
        set the final status.  The caller may already hold the lock."""
        with self.locked():
            self.require()
            self._recover()
            self.write_results_view()
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

    def _update_manifest(
        self,
        *,
        status: str | None = None,
        case_count: int | None = None,
        recorded_count: int | None = None,
        add_artifacts: list[str] | None = None,
        reopen: bool = False,
        manifest: dict | None = None,
    ) -> None:
        """Caller holds the lock."""
        if manifest is None:
            manifest = read_json(self._manifest_path)
        now = now_utc().isoformat()
        if status is not None and status != manifest["status"]:
            # planned -> running -> passed | diagnosed | inconclusive; adding cases or
            # recording after an analysis moves the run back to running.
            final = manifest["status"] in ANALYZED_STATES
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
        atomic_write_json(self._manifest_path, manifest, fsync=False)
        _MANIFEST_CACHE[str(self._manifest_path)] = (_stat_key(self._manifest_path), manifest)
        _MANIFEST_WRITTEN_AT[str(self.dir)] = time.monotonic()


def flush_lagging_manifests(run_dir: Path | None = None) -> None:
    """Write the manifests this process let lag (``sync_manifest(lazy=True)``):
    all of them, or the one of ``run_dir``.  Runs at exit, MANIFEST_LAG_S after a
    lazy sync (see :func:`schedule_manifest_flush`) and before a manifest is read
    here; another process reads a recorded_count at most MANIFEST_LAG_S old."""
    for key, (root, run_id) in list(_MANIFEST_LAGGING.items()):
        if run_dir is not None and key != str(run_dir):
            continue
        try:
            RunStore(root, run_id).sync_manifest()
        except (ToolError, OSError):  # a run removed meanwhile, or a full disk: the index is the record
            _MANIFEST_LAGGING.pop(key, None)


atexit.register(flush_lagging_manifests)


def schedule_manifest_flush() -> None:
    """Flush the lagging manifests MANIFEST_LAG_S from now, in a thread of the
    running event loop (one timer per loop; at exit, atexit does it)."""
    loop = asyncio.get_running_loop()
    if not _MANIFEST_LAGGING or loop in _FLUSH_PENDING:
        return

    def fire() -> None:
        _FLUSH_PENDING.discard(loop)
        loop.run_in_executor(None, flush_lagging_manifests)

    loop.call_later(MANIFEST_LAG_S, fire)
    _FLUSH_PENDING.add(loop)


def list_runs(root: str | os.PathLike | None = None) -> list[dict]:
    flush_lagging_manifests()
    base = resolve_root(root)
    runs: list[dict] = []
    if not base.is_dir():
        return runs
    for child in sorted(base.iterdir()):
        mf = child / MANIFEST
        if child.is_dir() and mf.is_file():
            try:
                runs.append(_listed_manifest(base, child.name, read_json(mf)))
            except (OSError, json.JSONDecodeError):
                runs.append({"run_id": child.name, "status": "unreadable"})
    return runs


def _listed_manifest(base: Path, name: str, manifest: dict) -> dict:
    """A run's manifest for a listing: one still ``running`` (its writer may have been killed
    before its lazy count was written) is read through the store, with the index's counts."""
    if manifest.get("status") != "running" or not _is_slug(name):
        return manifest
    try:
        return RunStore(base, name).read_manifest()
    except ToolError:
        return manifest


RUN_INDEX_LIMIT = 200


def run_index(root: str | os.PathLike | None = None, limit: int = RUN_INDEX_LIMIT) -> dict:
    """A compact index of the runs under the root, newest first (the first
    ``limit``): id, operator, status, counts and last update; not whole manifests."""
    runs = []
    for m in list_runs(root):
        runs.append(
            {k: m.get(k) for k in ("run_id", "operator", "status", "case_count", "recorded_count", "updated_at")}
        )
    runs.sort(key=lambda r: str(r.get("updated_at") or ""), reverse=True)
    return {
        "run_count": len(runs),
        "runs": runs[:limit],
        "omitted": max(0, len(runs) - limit),
        "read": "opdebug://runs/{run_id}/manifest (report, analysis, case-matrix, results, raw/{case_id})",
    }
