"""Cases from the model's real calls: an opdebug_capture directory or an
Ascend accuracy-checker (msprobe) dump.

- A call recorded with its tensors becomes a case whose inputs replay
  exactly: the saved files are copied into the run's artifacts/captured/ and
  each input says ``{"kind": "captured", ...}`` with the recorded shape,
  strides, storage offset, dtype and storage format (the runner rebuilds the
  storage region, so strides and offset are kept).  Non-tensor arguments
  become attributes.
- A metadata-only call (or a statistics-only dump) becomes a case with
  generated values of the recorded specification (uniform over the recorded
  finite range, plus the recorded NaN/Inf counts); the recorded statistics
  stay in ``case.origin.stats``.
- ``star: true`` adds one-axis variations around each call: generated values
  per input ("is it the values?"), contiguous strides / offset 0 / ND layout
  per input that has them ("is it the layout?").

Captures are data, never code: every file is checked before anything is
planned (size limits per file and per capture, sha256 against the index,
pickles read by a data-only unpickler, .npy without pickles; see
tools/capture_files.py), and a problem names the file.  Paths are limited to
the workspace (:func:`workspace_path`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from pydantic import ValidationError

from ..cases.ids import fit_id
from ..errors import ToolError
from ..evidence import file_sha256, resolve_root
from ..schemas import DTYPES, FLOAT_DTYPES, LAYOUTS, CaptureSelection, Case, contiguous_strides, format_validation_error
from .files import CaptureFileError, FileInfo, inspect_file
from .workspace import allowed_roots

MAX_FILE_BYTES = 1 << 30  # one captured tensor file
MAX_CAPTURE_BYTES = 4 << 30  # every file of one capture together
MAX_INDEX_BYTES = 64 << 20  # index.json / dump.json
WORKSPACE_ENV = "OPDEBUG_WORKSPACE"
ID_PREFIX, DUMP_ID_PREFIX = "cap-", "dump-"  # case ids: cap-<stage>-<N>, dump-<API name>
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._#-]{0,250}$")


# --------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------


def workspace_roots(evidence_root=None) -> list[Path]:
    """Where capture paths may point: the server's working directory, the
    project of the evidence root (the directory holding ``.vaws-local``, else
    the evidence root's parent) and the directories in $OPDEBUG_WORKSPACE
    (os.pathsep-separated): the same rule as ``captured_files``
    (workspace_files.allowed_roots)."""

    return allowed_roots(resolve_root(evidence_root))


def workspace_path(given: str, where: str, evidence_root=None) -> Path:
    """``given`` resolved (symlinks too) and checked to lie in the workspace."""
    path = Path(given).expanduser().resolve()
    roots = workspace_roots(evidence_root)
    if not any(path == r or r in path.parents for r in roots):
        raise ToolError(
            f"{where}: {given!r} is outside the workspace ({', '.join(str(r) for r in roots)}); "
            f"copy the capture into the project or add its directory to ${WORKSPACE_ENV}",
            code="bad_file",
        )
    return path


def _read_json(path: Path, where: str) -> Any:
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ToolError(f"{where}: {str(path)!r} is not a regular file", code="bad_file")
        if size > MAX_INDEX_BYTES:
            raise ToolError(
                f"{where}: {str(path)!r} is {size} bytes, over the {MAX_INDEX_BYTES} limit", code="bad_file"
            )
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise ToolError(f"{where}: cannot read {str(path)!r} ({exc.strerror or exc})", code="bad_file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CaptureFileError(path, f"not valid JSON ({exc})") from None


class _Budget:
    def __init__(self, where: str) -> None:
        self.where, self.total = where, 0

    def take(self, path: Path) -> None:
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise CaptureFileError(path, f"missing or unreadable ({exc.strerror or exc})") from None
        if not path.is_file():
            raise CaptureFileError(path, "not a regular file")
        if size > MAX_FILE_BYTES:
            raise CaptureFileError(path, f"{size} bytes, over the {MAX_FILE_BYTES}-byte limit per captured file")
        self.total += size
        if self.total > MAX_CAPTURE_BYTES:
            raise ToolError(
                f"{self.where}: the capture's files pass {MAX_CAPTURE_BYTES} bytes (per-capture limit); "
                "choose fewer calls ('calls')",
                code="bad_file",
            )


def _data_file(base: Path, name: Any, where: str) -> Path:
    if not isinstance(name, str) or not _FILE_NAME.fullmatch(name) or ".." in name:
        raise ToolError(f"{where}: data file name {name!r} is not one plain file name", code="bad_capture")
    path = base / name
    if path.is_symlink() and base.resolve() not in path.resolve().parents:
        raise CaptureFileError(path, "a link out of the capture directory is not followed")
    return path


# --------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------


def _finite(x: Any) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def generated_values(stats: dict, dtype: str, numel: int) -> dict:
    """A ValueSpec of the recorded specification: uniform over the recorded
    finite range (full when it is one value), integer dtypes randint, plus the
    recorded NaN and Inf counts as specials."""
    lo, hi = stats.get("min"), stats.get("max")
    if dtype == "bool":
        spec: dict = {"kind": "randint", "low": 0, "high": 2}
    elif dtype.startswith("complex"):
        spec = {"kind": "normal"}
    elif not dtype.startswith(("float", "bfloat")):
        spec = (
            {"kind": "randint", "low": int(lo), "high": int(hi) + 1}
            if _finite(lo) and _finite(hi)
            else {"kind": "randint", "low": -8, "high": 8}
        )
    elif _finite(lo) and _finite(hi) and lo < hi:
        spec = {"kind": "uniform", "low": float(lo), "high": float(hi)}
    elif _finite(lo) and lo == hi:
        spec = {"kind": "full", "fill": float(lo)}
    else:
        spec = {"kind": "normal"}
    specials, room = [], numel
    for kind in ("nan", "inf"):
        count = stats.get(kind)
        if isinstance(count, int) and count > 0 and room > 0 and dtype in ("float16", "bfloat16", "float32", "float64"):
            specials.append({"value": kind, "count": min(count, room)})
            room -= min(count, room)
    if specials:
        spec["specials"] = specials
    return spec


# --------------------------------------------------------------------------
# Calls -> cases
# --------------------------------------------------------------------------


@dataclass
class Planned:
    cases: list[Case] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)  # stored capture name -> source file


@dataclass
class _Arg:
    name: str
    meta: dict
    file: Path | None = None


def _case_id(prefix: str, call: str) -> str:
    return fit_id(prefix + call.replace("#", "-"))


def _build_case(
    case_id: str,
    origin: dict,
    tensors: list[tuple[str, dict, str | None]],
    attributes: dict,
    description: str,
    grad_output: dict | None = None,
    training: bool = False,
) -> Case:
    inputs = []
    for name, meta, stored in tensors:
        strides = meta["strides"] if meta["strides"] != contiguous_strides(meta["shape"]) else None
        numel = math.prod(meta["shape"])
        values = (
            {"kind": "captured", "captured": stored}
            if stored
            else generated_values(meta.get("stats") or {}, meta["dtype"], numel)
        )
        inputs.append(
            {
                "name": name,
                "shape": meta["shape"],
                "strides": strides,
                "storage_offset": meta["storage_offset"],
                "dtype": meta["dtype"],
                "layout": meta["layout"],
                "values": values,
            }
        )
    doc = {"id": case_id, "inputs": inputs, "attributes": attributes, "description": description, "origin": origin}
    # a training call (gradients on) replays with its backward for the inputs that required
    # grad (the model's own upstream gradients when they were captured, else generated ones)
    grads = [
        name for name, meta, _ in tensors if training and meta.get("requires_grad") and meta["dtype"] in FLOAT_DTYPES
    ]
    if grads:
        doc["grad_inputs"] = grads
        if grad_output:
            doc["grad_output"] = grad_output
    try:
        return Case.model_validate(doc)
    except ValidationError as exc:
        raise ToolError(
            f"{origin['source']} call {origin['call']!r} gives an invalid case: " + format_validation_error(exc),
            code="bad_capture",
        ) from None


def _star(base: Case, tensors: list[tuple[str, dict, str | None]]) -> list[Case]:
    """One-axis variations around a captured case."""
    out = []
    for name, meta, stored in tensors:
        spec = next(i for i in base.inputs if i.name == name)
        variants: list[tuple[str, dict[str, Any]]] = []
        if stored:
            variants.append(
                (
                    "values-generated",
                    {"values": generated_values(meta.get("stats") or {}, meta["dtype"], math.prod(meta["shape"]))},
                )
            )
        if not spec.is_contiguous():
            variants.append(("strides-contiguous", {"strides": None}))
        if spec.storage_offset:
            variants.append(("offset-0", {"storage_offset": 0}))
        if spec.layout != "ND":
            variants.append(("layout-ND", {"layout": "ND"}))
        for slug, change in variants:
            doc = base.model_dump(mode="json")
            for item in doc["inputs"]:
                if item["name"] == name:
                    item.update(change)
            doc["id"] = fit_id(f"{base.id}.{name}.{slug}")
            doc["origin"] = dict(doc["origin"], kind="capture_star", exact=False)
            doc["description"] = f"{base.id} with {name} {slug.replace('-', ' ')} (one axis changed)"
            out.append(Case.model_validate(doc))
    return out


def _tensor_meta(meta: dict, where: str) -> dict:
    """The recorded tensor spec, checked: dtype and layout a case can take."""
    try:
        shape = [int(s) for s in meta["shape"]]
        strides = [int(s) for s in meta.get("strides") or contiguous_strides(shape)]
        offset = int(meta.get("storage_offset") or 0)
        dtype = str(meta["dtype"]).replace("torch.", "")
    except (KeyError, TypeError, ValueError):
        raise ToolError(f"{where}: the recorded tensor lacks shape/dtype", code="bad_capture") from None
    if dtype not in DTYPES:
        raise ToolError(
            f"{where}: dtype {dtype!r} is not one a case can take ({', '.join(DTYPES)}); nothing is cast",
            code="bad_capture",
        )
    layout = meta.get("format") or "ND"
    if layout not in LAYOUTS:
        raise ToolError(
            f"{where}: storage format {layout!r} is not one a case can take ({', '.join(LAYOUTS)})", code="bad_capture"
        )
    return {
        "shape": shape,
        "strides": strides,
        "storage_offset": offset,
        "dtype": dtype,
        "layout": layout,
        "stats": meta.get("stats") or {},
        "requires_grad": meta.get("requires_grad") is True,
    }


def _attribute(value: Any, where: str) -> Any:
    ok = value is None or isinstance(value, (bool, int, str)) or _finite(value)
    if isinstance(value, list):
        ok = all(v is None or isinstance(v, (bool, int, str)) or _finite(v) for v in value)
    if not ok:
        raise ToolError(
            f"{where}: the recorded value {json.dumps(value)[:120]} cannot be a case attribute "
            "(None, bool, int, finite float, str or a list of them)",
            code="bad_capture",
        )
    return value


def _check_region(path: Path, info: FileInfo, meta: dict, entry: dict) -> None:
    t = info.tensor
    if t.dtype != meta["dtype"]:
        raise CaptureFileError(path, f"holds {t.dtype}, the index says {meta['dtype']}")
    if info.kind == "region":
        view = {"shape": meta["shape"], "strides": meta["strides"], "storage_offset": meta["storage_offset"]}
        if info.view != view:
            raise CaptureFileError(path, f"holds the view {info.view}, the index says {view}")
        extent = (
            0
            if 0 in meta["shape"]
            else sum((s - 1) * st for s, st in zip(meta["shape"], meta["strides"], strict=True)) + 1
        )
        if t.shape != [extent]:
            raise CaptureFileError(path, f"its region has shape {t.shape}, the view spans {extent} elements")
    elif t.shape != meta["shape"]:
        raise CaptureFileError(path, f"holds shape {t.shape}, the index says {meta['shape']}")
    want = entry.get("file_sha256")
    if want is not None and file_sha256(path) != want:
        raise CaptureFileError(path, "its sha256 differs from the index (changed or truncated since capture)")


def _opdebug_cases(sel: CaptureSelection, base: Path, where: str) -> Planned:
    index = _read_json(base / "index.json", where)
    if (
        not isinstance(index, dict)
        or index.get("format") != "opdebug-capture"
        or not isinstance(index.get("calls"), list)
    ):
        raise CaptureFileError(base / "index.json", "not an opdebug-capture index")
    calls = {c["id"]: c for c in index["calls"] if isinstance(c, dict) and isinstance(c.get("id"), str)}
    if not calls:
        raise empty_capture(where, sel.dir, f"{str(base / 'index.json')!r} lists no call")
    chosen = sel.calls or list(calls)
    unknown = [c for c in chosen if c not in calls]
    if unknown:
        raise ToolError(
            f"{where}: calls {unknown} are not in {str(base / 'index.json')!r} (it has {sorted(calls)[:20]})",
            code="validation_error",
        )
    planned, budget = Planned(), _Budget(where)
    for call_id in chosen:
        entry = calls[call_id]
        cwhere = f"{where} call {call_id!r}"
        tensors, attributes, stats, exact = [], {}, {}, True
        case_id = _case_id(ID_PREFIX, call_id)
        for arg in entry.get("args") or []:
            name = arg.get("name")
            awhere = f"{cwhere} argument {name!r}"
            if not isinstance(name, str) or not _IDENT.fullmatch(name):
                raise ToolError(f"{awhere}: not an identifier a case input can take", code="bad_capture")
            if arg.get("kind") == "tensor":
                meta = _tensor_meta(arg, awhere)
                stored = None
                if arg.get("file"):
                    path = _data_file(base, arg["file"], awhere)
                    budget.take(path)
                    info = inspect_file(path)
                    _check_region(path, info, meta, arg)
                    stored = fit_id(f"{case_id}.{name}")
                    planned.files[stored] = path
                else:
                    exact = False
                stats[name] = {k: v for k, v in meta["stats"].items() if v is None or isinstance(v, (int, float, str))}
                tensors.append((name, meta, stored))
            elif arg.get("kind") == "value":
                attributes[name] = _attribute(arg.get("value"), awhere)
            else:
                raise ToolError(
                    f"{awhere}: a {arg.get('kind')!r} argument (a list of tensors) is not replayed yet",
                    code="bad_capture",
                )
        if not tensors:
            raise ToolError(f"{cwhere}: no tensor argument to replay", code="bad_capture")
        grad_output = {}
        for grad in entry.get("grad_outputs") or []:  # the model's upstream gradients of this call
            gname = grad.get("name")
            gwhere = f"{cwhere} upstream gradient {gname!r}"
            if not isinstance(gname, str) or not re.fullmatch(r"out\d*", gname) or not grad.get("file"):
                continue
            meta = _tensor_meta(grad, gwhere)
            path = _data_file(base, grad["file"], gwhere)
            budget.take(path)
            _check_region(path, inspect_file(path), meta, grad)
            stored = fit_id(f"{case_id}.grad_output.{gname}")
            planned.files[stored] = path
            grad_output[gname] = {"kind": "captured", "captured": stored}
        origin = {
            "kind": "captured_call",
            "source": str(base),
            "call": call_id,
            "target": entry.get("target"),
            "exact": exact,
            "stats": stats,
            "stack": [str(s)[:1000] for s in (entry.get("stack") or [])][-8:],
        }
        desc = f"captured call {call_id} of {entry.get('target')}: " + (
            "exact recorded values" if exact else "metadata only - generated values of the recorded spec"
        )
        case = _build_case(
            case_id, origin, tensors, attributes, desc, grad_output, training=entry.get("grad_enabled") is True
        )
        planned.cases.append(case)
        if sel.star:
            planned.cases.extend(_star(case, tensors))
    return planned


# --------------------------------------------------------------------------
# Accuracy-checker (msprobe) dumps
# --------------------------------------------------------------------------


def _dump_cases(sel: CaptureSelection, dump_json: Path, where: str) -> Planned:
    """dump.json: {"task", "level", "framework", "dump_data_dir", "data": {API:
    {"input_args": [...], "input_kwargs": {...}, "output": [...]}}}; a tensor
    entry has type torch.Tensor, dtype ("torch.float32"), shape, Max/Min/Mean/
    Norm and, when its values were dumped, data_name (a file in the
    dump_tensor_data directory beside dump.json)."""
    doc = _read_json(dump_json, where)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        raise CaptureFileError(dump_json, "not an accuracy-checker dump.json (no 'data' object)")
    apis, chosen = _dumped_apis(sel, doc, dump_json, where)
    planned, budget = Planned(), _Budget(where)
    for api in chosen:
        case, tensors = _dumped_call_case(doc, dump_json, api, apis[api], where, planned, budget)
        planned.cases.append(case)
        if sel.star:
            planned.cases.extend(_star(case, tensors))
    return planned


def _dumped_apis(sel: CaptureSelection, doc: dict, dump_json: Path, where: str) -> tuple[dict, list[str]]:
    """(the dump's APIs with inputs, the ones to replay: those named in 'calls', else every forward call)."""
    apis = {k: v for k, v in doc["data"].items() if isinstance(v, dict) and ("input_args" in v or "input_kwargs" in v)}
    if not apis:
        raise empty_capture(where, str(dump_json), "its 'data' has no API with inputs")
    chosen = sel.calls or [k for k in apis if k.endswith(".forward")]
    if not chosen:
        raise empty_capture(
            where,
            str(dump_json),
            f"none of its {len(apis)} APIs is a forward call; name the ones "
            f"to replay in 'calls' (it has {sorted(apis)[:10]})",
        )
    unknown = [c for c in chosen if c not in apis]
    if unknown:
        raise ToolError(
            f"{where}: APIs {unknown} are not in {str(dump_json)!r} (it has {sorted(apis)[:20]})",
            code="validation_error",
        )
    return apis, chosen


def _dumped_call_case(doc: dict, dump_json: Path, api: str, entry: dict, where: str, planned: Planned, budget: _Budget):
    """(the case replaying one dumped API call, its tensor inputs); its dumped values go to ``planned.files``."""
    cwhere = f"{where} API {api!r}"
    case_id = _case_id(DUMP_ID_PREFIX, api)
    named = [(f"arg{i}", a) for i, a in enumerate(entry.get("input_args") or [])]
    named += list((entry.get("input_kwargs") or {}).items())
    tensors, attributes, stats, exact = [], {}, {}, True
    for name, arg in named:
        awhere = f"{cwhere} input {name!r}"
        if not _IDENT.fullmatch(name):
            raise ToolError(f"{awhere}: not an identifier a case input can take", code="bad_capture")
        if isinstance(arg, dict) and str(arg.get("type", "")).endswith("Tensor"):
            meta, st = _dumped_tensor_meta(arg, awhere)
            stored = None
            if arg.get("data_name"):
                path = _dumped_values(dump_json.parent / "dump_tensor_data", arg["data_name"], meta, awhere, budget)
                stored = fit_id(f"{case_id}.{name}")
                planned.files[stored] = path
            else:
                exact = False
            stats[name] = st
            tensors.append((name, meta, stored))
        elif (
            isinstance(arg, dict)
            and "value" in arg
            and arg.get("type") in ("int", "float", "bool", "str", "NoneType", "slice")
        ):
            attributes[name] = _attribute(arg["value"], awhere)
        elif arg is None:
            attributes[name] = None
        else:
            raise ToolError(
                f"{awhere}: a {str(arg)[:80]} argument cannot be replayed (tensors, int, float, bool, "
                "str, None and slices can)",
                code="bad_capture",
            )
    if not tensors:
        raise ToolError(f"{cwhere}: no tensor input to replay", code="bad_capture")
    origin = {
        "kind": "accuracy_dump",
        "source": str(dump_json),
        "call": api,
        "target": api.rsplit(".", 2)[0],
        "exact": exact,
        "stats": stats,
        "stack": [],
    }
    desc = f"accuracy-checker dump {api} (task {doc.get('task')}, level {doc.get('level')}): " + (
        "exact dumped values" if exact else "statistics only - generated values of the dumped spec"
    )
    # a training dump has the API's backward too: then its inputs that required grad get theirs
    backward = api.endswith(".forward") and f"{api[: -len('.forward')]}.backward" in doc["data"]
    return _build_case(case_id, origin, tensors, attributes, desc, training=backward), tensors


def _dumped_tensor_meta(arg: dict, awhere: str) -> tuple[dict, dict]:
    """(the tensor spec of a dumped tensor entry, its statistics; a non-finite one as text, nan/inf flagged)."""
    st = {"min": arg.get("Min"), "max": arg.get("Max"), "mean": arg.get("Mean"), "norm": arg.get("Norm")}
    nonfinite = [v for v in st.values() if isinstance(v, float) and not math.isfinite(v)]
    st = {k: (v if _finite(v) else (None if v is None else str(v))) for k, v in st.items()}
    if any(math.isnan(v) for v in nonfinite):
        st["nan"] = 1
    if any(math.isinf(v) for v in nonfinite):
        st["inf"] = 1
    meta = _tensor_meta(
        {"shape": arg.get("shape"), "dtype": arg.get("dtype"), "stats": st, "requires_grad": arg.get("requires_grad")},
        awhere,
    )
    meta["stats"] = st
    return meta, st


def _dumped_values(data_dir: Path, data_name: Any, meta: dict, awhere: str, budget: _Budget) -> Path:
    """The file of a tensor's dumped values, checked to hold the dtype and shape dump.json says."""
    path = _data_file(data_dir, data_name, awhere)
    budget.take(path)
    info = inspect_file(path)
    if info.kind != "tensor":
        raise CaptureFileError(path, "holds a region dict, not the dumped tensor")
    if info.tensor.dtype != meta["dtype"] or info.tensor.shape != meta["shape"]:
        raise CaptureFileError(
            path, f"holds {info.tensor.dtype} {info.tensor.shape}, dump.json says {meta['dtype']} {meta['shape']}"
        )
    return path


def empty_capture(where: str, source: str, detail: str) -> ToolError:
    """A capture that recorded nothing: refused by name, with the usual cause."""
    return ToolError(
        f"{where}.dir: the capture {source!r} recorded no call ({detail}); nothing was planned. A "
        "wrapper that saw no call usually means the model calls the operator through another name "
        "(a 'from torch_npu import npu_rms_norm' bound before install=True, a method of a module): wrap "
        "that name, or call capture_inputs at the call site, and run the model again "
        "(opdebug_capture warns at exit when a wrapper saw no call)",
        code="empty_capture",
    )


def plan_from_captures(selections: list[CaptureSelection], evidence_root=None) -> Planned:
    """Every selection's cases and files, all checked before anything is planned."""
    out = Planned()
    for i, sel in enumerate(selections):
        where = f"captures[{i}]"
        path = workspace_path(sel.dir, f"{where}.dir", evidence_root)
        if path.is_dir() and (path / "index.json").is_file():
            planned = _opdebug_cases(sel, path, where)
        elif path.is_dir() and (path / "dump.json").is_file():
            planned = _dump_cases(sel, path / "dump.json", where)
        elif path.is_file() and path.suffix == ".json":
            planned = _dump_cases(sel, path, where)
        elif path.is_dir() and not [p for p in path.iterdir() if p.name != "index.lock"]:
            raise empty_capture(where, sel.dir, "the directory holds no index.json: no call was recorded")
        else:
            raise ToolError(
                f"{where}.dir: {sel.dir!r} holds neither an opdebug capture (index.json) nor an "
                "accuracy-checker dump (dump.json)",
                code="bad_file",
            )
        for name, file in planned.files.items():
            if name in out.files and out.files[name] != file:
                raise ToolError(
                    f"{where}: stored capture name {name!r} comes from two captures; plan them in separate runs",
                    code="validation_error",
                )
            out.files[name] = file
        out.cases.extend(planned.cases)
    return out
