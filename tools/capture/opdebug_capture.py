"""opdebug_capture: record the calls a model really makes to an operator.

Standalone: the standard library and torch only (torch_npu when present).
Copy this one file next to the model (``opdebug capture-module --out DIR``)
and import it there; nothing else needs installing on the NPU host.

Two ways in:

- ``capture_inputs(stage, **named)`` saves every named tensor (full values,
  shape, strides, storage offset, dtype, device, NPU storage format) and plain
  value under the call id ``stage#N`` (N counts that stage's calls).
- ``capture_calls(target, out_dir, limit=..., when=..., tensors=...)``
  returns a wrapper of an operator (a callable, or a dotted name such as
  ``"torch_npu.npu_rms_norm"``, which is then also patched in its module
  while ``install=True``) that records each real call before running it.
  By default a call is metadata only (shape, strides, offset, dtype, device,
  storage format, value statistics with NaN/Inf counts, the non-tensor
  arguments, the source stack); ``tensors=True`` saves every call's tensors,
  ``tensors=N`` the first N calls', always within ``budget_bytes``.
  A call made with gradients on (an input that ``requires_grad``, recorded
  in its metadata) whose tensors are saved also saves, once the model's
  backward reaches it, the upstream gradient of each output that requires
  grad (``grad_outputs`` in the call's index entry): the call replays with
  its backward and that very upstream gradient.

On disk (``out_dir``): ``index.json`` (the calls, rewritten atomically under
an fcntl lock, so threads and worker processes of one service can share a
directory) and one ``<pid>-<n>.<arg>.pt`` file per saved tensor.  A view is
saved as the storage region it spans (``{"region": 1-D tensor, "shape",
"strides", "storage_offset"}``) so strides and offset replay exactly; a
tensor in an NPU private format (FRACTAL_NZ...) is saved as its logical
values with the format in the index.  Everything is data: load it with
``torch.load(weights_only=True)``.

Plan cases from it with plan_cases' ``captures: [{"dir": ...}]``.  A wrapper
that recorded nothing by the time the process exits (it saw no call, or every
call failed to record) says so on stderr: an empty capture is refused by the
planner, and it is better found out before the model run is over.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import functools
import hashlib
import importlib
import inspect
import json
import math
import os
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Protocol, cast

import torch

try:  # the NPU backend, when this host has it
    import torch_npu
except Exception:  # absent or broken: CPU/CUDA only
    torch_npu = None

FORMAT = "opdebug-capture"
VERSION = 1
INDEX = "index.json"
LOCK = "index.lock"
DEFAULT_DIR_ENV = "OPDEBUG_CAPTURE_DIR"
DEFAULT_BUDGET_BYTES = 1 << 30
MAX_STACK = 12
# torch_npu.get_npu_format ids (the runner's npu_format_cast ids).
NPU_FORMATS = {0: "NCHW", 1: "NHWC", 2: "ND", 3: "NC1HWC0", 4: "FRACTAL_Z", 29: "FRACTAL_NZ"}
PLAIN_FORMATS = ("ND", "NCHW", "NHWC")
LARGE_MAGNITUDE = 1e4

_recorders: dict = {}
_recorders_lock = threading.Lock()
_wrappers: list[
    CaptureWrapper
] = []  # every capture_calls wrapper of this process, checked at exit (see _warn_if_empty)


# --------------------------------------------------------------------------
# Tensor metadata
# --------------------------------------------------------------------------


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def storage_format(t) -> str:
    """The tensor's storage format: an NPU tensor's torch_npu format, else ND."""
    if torch_npu is not None and t.device.type == "npu":
        try:
            fid = int(torch_npu.get_npu_format(t))
        except Exception:  # an older torch_npu: say so
            return "unknown"
        return NPU_FORMATS.get(fid, f"format-{fid}")
    return "ND"


def storage_extent(shape, strides, offset: int) -> int:
    """Elements from ``offset`` to the last element the view reads (0 when empty)."""
    if any(s == 0 for s in shape):
        return 0
    return sum((size - 1) * stride for size, stride in zip(shape, strides)) + 1


def logical_sha256(t) -> str:
    """sha256 of the logical values' bytes (row-major), as the runner computes it."""
    data = t.detach().cpu().contiguous()
    if data.dtype == torch.bool:
        data = data.to(torch.uint8)
    nbytes = data.numel() * data.element_size()
    return hashlib.sha256(ctypes.string_at(data.data_ptr(), nbytes) if nbytes else b"").hexdigest()


def value_stats(t) -> dict:
    """NaN/Inf counts and min/max/mean/absmax of the finite values (float64 sums)."""
    if t.numel() == 0:
        return {"numel": 0}
    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    if x.dtype.is_floating_point and x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = x.float()  # float8: reductions in float32
    if x.dtype.is_floating_point:
        mn, mx = (float(v) for v in torch.aminmax(x))
        if math.isfinite(mn) and math.isfinite(
            mx
        ):  # the common case in two passes: no NaN (it would propagate), no Inf
            return {
                "numel": int(t.numel()),
                "nan": 0,
                "inf": 0,
                "min": mn,
                "max": mx,
                "mean": float(x.mean(dtype=torch.float64)),
                "absmax": max(abs(mn), abs(mx)),
            }
        x = x.float() if x.dtype != torch.float64 else x
        finite = torch.isfinite(x)
        stats: dict[str, int | float] = {
            "numel": int(t.numel()),
            "nan": int(torch.isnan(x).sum()),
            "inf": int(torch.isinf(x).sum()),
        }
        if bool(finite.any()):
            xf = x[finite].to(torch.float64)
            stats.update(min=float(xf.min()), max=float(xf.max()), mean=float(xf.mean()), absmax=float(xf.abs().max()))
        return stats
    xi = x.to(torch.int64)
    return {
        "numel": int(x.numel()),
        "nan": 0,
        "inf": 0,
        "min": int(xi.min()),
        "max": int(xi.max()),
        "mean": float(xi.to(torch.float64).mean()),
        "absmax": int(xi.abs().max()),
    }


def tensor_meta(t) -> dict:
    shape, strides = list(t.shape), list(t.stride())
    return {
        "kind": "tensor",
        "shape": shape,
        "strides": strides,
        "storage_offset": int(t.storage_offset()),
        "dtype": dtype_name(t.dtype),
        "device": str(t.device),
        "format": storage_format(t),
        "contiguous": bool(t.is_contiguous()),
        "requires_grad": bool(t.requires_grad),
        "stats": value_stats(t),
    }


def plain_value(value):
    """A non-tensor argument as JSON (None/bool/int/float/str, lists of them);
    anything else as ``{"repr": ...}`` (recorded, but a case cannot replay it)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (list, tuple)) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        return [plain_value(v) for v in value]
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    return {"repr": repr(value)[:200], "type": type(value).__name__}


# --------------------------------------------------------------------------
# The recorder (one per directory per process)
# --------------------------------------------------------------------------


class Recorder:
    """Writes calls under ``out_dir``: tensor files named by pid, one index
    updated atomically under a lock (threads: a mutex; processes: fcntl)."""

    def __init__(self, out_dir, budget_bytes: int = DEFAULT_BUDGET_BYTES, max_calls: int | None = None):
        self.dir = os.path.abspath(os.fspath(out_dir))
        os.makedirs(self.dir, exist_ok=True)
        self.budget_bytes = int(budget_bytes)
        self.max_calls = max_calls
        self.mutex = threading.Lock()
        self.seq = 0

    def _locked(self):
        recorder = self

        class _Lock:
            def __enter__(self):
                recorder.mutex.acquire()
                self.fh = open(os.path.join(recorder.dir, LOCK), "a+")
                fcntl.flock(self.fh.fileno(), fcntl.LOCK_EX)
                return self

            def __exit__(self, *exc):
                try:
                    fcntl.flock(self.fh.fileno(), fcntl.LOCK_UN)
                    self.fh.close()
                finally:
                    recorder.mutex.release()

        return _Lock()

    def _read_index(self) -> dict:
        path = os.path.join(self.dir, INDEX)
        if not os.path.exists(path):
            return {
                "format": FORMAT,
                "version": VERSION,
                "budget_bytes": self.budget_bytes,
                "bytes_saved": 0,
                "calls": [],
            }
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)

    def _write_index(self, index: dict) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".index.", suffix=".tmp", dir=self.dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(index, fh, indent=1, allow_nan=False)  # no fsync: the rename is what makes it atomic
            os.replace(tmp, os.path.join(self.dir, INDEX))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def record(
        self,
        stage: str,
        target: str,
        args: list,
        *,
        save,
        stack: list,
        limit: int | None,
        kind: str,
        saved: dict | None = None,
    ) -> str | None:
        """Record one call; ``args`` is a list of (name, value, positional).
        ``save(n_stage_calls)`` says whether to save tensors.  Returns the
        call id, or None when the target's limit is reached."""
        metas = []
        for name, value, positional in args:
            if isinstance(value, torch.Tensor):
                meta = tensor_meta(value)
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
                meta = {"kind": "tensor_list", "items": [tensor_meta(v) for v in value]}
            else:
                meta = {"kind": "value", "value": plain_value(value)}
            metas.append((name, value, positional, meta))
        with self._locked():
            index = self._read_index()
            calls = index["calls"]
            if limit is not None and sum(1 for c in calls if c.get("target") == target) >= limit:
                return None
            n = sum(1 for c in calls if c["stage"] == stage)
            call_id = f"{stage}#{n}"
            want = save(n)
            if saved is not None:
                saved["tensors"] = bool(want)  # the caller hooks the upstream gradients of a saved call
            saved_bytes = 0
            pid = os.getpid()
            self.seq += 1
            entry_args = []
            for name, value, positional, meta in metas:
                meta = dict(meta, name=name, positional=positional)
                if meta["kind"] == "tensor" and want:
                    note = self._save_tensor(
                        value, meta, f"{pid}-{self.seq}.{name}.pt", index["bytes_saved"] + saved_bytes
                    )
                    saved_bytes += note
                elif meta["kind"] == "tensor":
                    meta["saved"] = None
                entry_args.append(meta)
            index["bytes_saved"] += saved_bytes
            calls.append(
                {
                    "id": call_id,
                    "stage": stage,
                    "target": target,
                    "kind": kind,
                    "pid": pid,
                    "thread": threading.current_thread().name,
                    "time": time.time(),
                    "args": entry_args,
                    "stack": stack,
                    "grad_enabled": torch.is_grad_enabled(),
                }
            )  # a training call: replayed with backward
            self._write_index(index)
        return call_id

    def record_grad(self, call_id: str, output: str, grad) -> None:
        """Save the upstream gradient of one output of a recorded call (a tensor hook's
        argument during the model's backward) into the call's ``grad_outputs``."""
        if not isinstance(grad, torch.Tensor):
            return
        with self._locked():
            index = self._read_index()
            entry = next((c for c in index["calls"] if c.get("id") == call_id and c.get("pid") == os.getpid()), None)
            if entry is None or any(g.get("name") == output for g in entry.get("grad_outputs") or []):
                return  # not ours, or already saved (a hook fires once per backward)
            self.seq += 1
            meta = dict(tensor_meta(grad), name=output, positional=False)
            note = self._save_tensor(
                grad, meta, f"{os.getpid()}-{self.seq}.grad_output.{output}.pt", index["bytes_saved"]
            )
            index["bytes_saved"] += note
            entry.setdefault("grad_outputs", []).append(meta)
            self._write_index(index)

    def _save_tensor(self, t, meta: dict, file_name: str, used: int) -> int:
        """Save one tensor's values into ``meta`` (file, bytes, hashes); 0 bytes
        and a ``not_saved`` reason when it would break the budget."""
        meta["saved"] = None
        detached = t.detach()
        fmt = meta["format"]
        if fmt in PLAIN_FORMATS:
            extent = storage_extent(meta["shape"], meta["strides"], meta["storage_offset"])
            need = extent * detached.element_size()
        else:
            need = detached.numel() * detached.element_size()
        if used + need > self.budget_bytes:
            meta["not_saved"] = f"size budget: {used + need} bytes over {self.budget_bytes}"
            return 0
        if fmt in PLAIN_FORMATS:
            region = detached.as_strided((extent,), (1,), meta["storage_offset"]).cpu().clone()
            payload = {
                "opdebug_capture": VERSION,
                "region": region,
                "shape": meta["shape"],
                "strides": meta["strides"],
                "storage_offset": meta["storage_offset"],
            }
            meta["saved"] = "region"
        else:  # a private NPU format: its logical values; the format is in the index
            payload = detached.cpu().contiguous().clone()
            meta["saved"] = "tensor"
        path = os.path.join(self.dir, file_name)
        tmp = path + ".tmp"
        torch.save(payload, tmp)
        size = os.path.getsize(tmp)
        if used + size > self.budget_bytes:  # the archive's own bytes count too
            os.unlink(tmp)
            meta["saved"] = None
            meta["not_saved"] = f"size budget: {used + size} bytes over {self.budget_bytes}"
            return 0
        os.replace(tmp, path)
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        meta.update(
            file=file_name,
            file_bytes=os.path.getsize(path),
            file_sha256=digest.hexdigest(),
            sha256=logical_sha256(detached),
        )
        return os.path.getsize(path)


def recorder(out_dir=None, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> Recorder:
    """The process's recorder for ``out_dir`` (default $OPDEBUG_CAPTURE_DIR or ./opdebug-capture)."""
    path = os.path.abspath(os.fspath(out_dir or os.environ.get(DEFAULT_DIR_ENV) or "opdebug-capture"))
    with _recorders_lock:
        rec = _recorders.get((path, os.getpid()))
        if rec is None:
            rec = _recorders[(path, os.getpid())] = Recorder(path, budget_bytes)
        return rec


def _stack() -> list:
    frames = traceback.extract_stack()[:-1]
    here = os.path.abspath(__file__)
    frames = [f for f in frames if os.path.abspath(f.filename) != here][-MAX_STACK:]
    return [f"{f.filename}:{f.lineno} in {f.name}" for f in frames]


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def capture_inputs(stage: str, out_dir=None, budget_bytes: int = DEFAULT_BUDGET_BYTES, **named) -> str | None:
    """Save every named tensor (full values) and plain value under ``stage#N``.
    Returns the call id (None when the budget or limit stopped it)."""
    rec = recorder(out_dir, budget_bytes)
    args = [(name, value, False) for name, value in named.items()]
    return rec.record(stage, stage, args, save=lambda n: True, stack=_stack(), limit=None, kind="inputs")


def _resolve(target):
    if callable(target):
        return target, getattr(target, "__module__", None), getattr(target, "__qualname__", repr(target))
    if not isinstance(target, str) or "." not in target:
        raise ValueError(f"target must be a callable or a dotted name such as 'torch_npu.npu_rms_norm', not {target!r}")
    module_name, attr = target.rsplit(".", 1)
    module = importlib.import_module(module_name)
    return getattr(module, attr), module_name, attr


def _param_names(fn) -> list | None:
    try:
        return [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return None


def _hook_upstream(rec: Recorder, call_id: str, out, errors: list) -> None:
    """A tensor hook on each output that requires grad: the gradient the model's backward
    sends into it is saved as that call's upstream gradient (``out``, or ``out0``, ``out1``...
    for a tuple, as the runner names outputs by position)."""
    outs = (
        [("out", out)]
        if isinstance(out, torch.Tensor)
        else [(f"out{i}", o) for i, o in enumerate(out)]
        if isinstance(out, (tuple, list))
        else []
    )
    for name, t in outs:
        if isinstance(t, torch.Tensor) and t.requires_grad:

            def hook(grad, name=name):
                try:
                    rec.record_grad(call_id, name, grad)
                except Exception as exc:  # never break the model's backward
                    errors.append(f"{type(exc).__name__}: {exc}")

            t.register_hook(hook)


class CaptureWrapper(Protocol):
    """What capture_calls returns: the operator, called as before, and what it recorded."""

    recorded: list[str]  # the call ids recorded by this wrapper
    errors: list[str]  # recording failures (the calls themselves ran)
    full: bool  # the limit is reached: calls just run
    out_dir: str
    calls_seen: int
    target_name: str
    pid: int
    uninstall: Callable[[], None]

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def capture_calls(
    target,
    out_dir=None,
    *,
    limit: int | None = 100,
    when=None,
    tensors=False,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    stage: str | None = None,
    install: bool = False,
) -> CaptureWrapper:
    """A wrapper of ``target`` that records each real call under ``out_dir``.

    - ``limit``: most calls recorded for this target (all processes together);
      later calls just run.  ``when(*args, **kwargs)``: record only when it is true.
    - ``tensors``: False (metadata only), True (every recorded call's tensors),
      or N (the first N calls' tensors); always within ``budget_bytes``.
    - ``stage``: the call-id prefix (default the target's name).
    - ``install``: with a dotted name, also replace the attribute in its module
      (calls through ``torch_npu.npu_rms_norm`` are then recorded); undo with
      ``wrapper.uninstall()``.

    Positional arguments are named after the target's parameters when its
    signature is known, else ``arg0``, ``arg1``...  A recording failure never
    breaks the model: it is counted in ``wrapper.errors`` and the call runs.
    """
    fn, module_name, attr = _resolve(target)
    name = f"{module_name}.{attr}" if module_name else attr
    stage = stage or attr.split(".")[-1]
    rec = recorder(out_dir, budget_bytes)
    params = _param_names(fn)

    def save(n: int) -> bool:
        return bool(tensors) if isinstance(tensors, bool) else n < int(tensors)

    def _record(args: tuple, kwargs: dict) -> str | None:
        named = [((params[i] if params and i < len(params) else f"arg{i}"), v, True) for i, v in enumerate(args)]
        named += [(k, v, False) for k, v in kwargs.items()]
        saved: dict = {}
        call_id = rec.record(stage, name, named, save=save, stack=_stack(), limit=limit, kind="call", saved=saved)
        if call_id is None:
            wrapper.full = True  # the limit is reached (by any process): just run from now on
            return None
        wrapper.recorded.append(call_id)
        return call_id if saved.get("tensors") and torch.is_grad_enabled() else None

    def call(*args, **kwargs):
        wrapper.calls_seen += 1
        grad_call = None
        if not wrapper.full:
            try:
                if when is None or when(*args, **kwargs):
                    grad_call = _record(args, kwargs)
            except Exception as exc:  # never break the model
                wrapper.errors.append(f"{type(exc).__name__}: {exc}")
        out = fn(*args, **kwargs)
        if grad_call is not None:
            try:
                _hook_upstream(rec, grad_call, out, wrapper.errors)
            except Exception as exc:  # never break the model
                wrapper.errors.append(f"{type(exc).__name__}: {exc}")
        return out

    # a function with the attributes CaptureWrapper names, all set just below
    wrapper = cast(CaptureWrapper, functools.wraps(fn)(call))
    wrapper.recorded = []
    wrapper.errors = []
    wrapper.full = False
    wrapper.out_dir = rec.dir
    wrapper.calls_seen = 0
    wrapper.target_name = name
    wrapper.pid = os.getpid()
    with _recorders_lock:
        _wrappers.append(wrapper)

    def uninstall():
        if isinstance(target, str):
            setattr(importlib.import_module(module_name), attr, fn)

    wrapper.uninstall = uninstall
    if install and isinstance(target, str):
        setattr(importlib.import_module(module_name), attr, wrapper)
    return wrapper


def empty_capture_warnings() -> list:
    """What ``_warn_if_empty`` prints at exit: one line per wrapper of this process
    that recorded nothing (it saw no call, ``when`` let none through, or every
    call failed to record)."""
    out = []
    for w in list(_wrappers):
        if w.pid != os.getpid() or w.recorded or w.full:
            continue
        if w.calls_seen == 0:
            why = (
                "saw no call: the model may call the operator through another name (a 'from ... import' bound "
                "before install=True, a method or a compiled graph); wrap that name, or call capture_inputs at "
                "the call site"
            )
        elif w.errors:
            why = f"saw {w.calls_seen} call(s) and every one failed to record; the first error: {w.errors[0]}"
        else:
            why = f"saw {w.calls_seen} call(s) and 'when' let none through"
        out.append(
            f"opdebug_capture: WARNING: capture_calls({w.target_name!r}) recorded nothing in {w.out_dir} "
            f"(pid {w.pid}): it {why}. Planning from this capture is refused."
        )
    return out


def _warn_if_empty() -> None:
    for line in empty_capture_warnings():
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except Exception:  # stderr gone at exit: nothing more to do
            pass


atexit.register(_warn_if_empty)
