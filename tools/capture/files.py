"""Captured tensor files checked as data, on the server, without torch.

A ``torch.save`` file is a zip whose ``data.pkl`` is a pickle; unpickling it
normally can run any code.  :func:`inspect_pt` reads that pickle with a
restricted unpickler that resolves only the names a saved tensor needs
(``torch._utils._rebuild_tensor_v2``, the typed storage classes,
``collections.OrderedDict``) to inert stand-ins and refuses every other name,
so nothing in the file is executed; what comes back is the tensor's (or the
dict of tensors') dtype, shape, strides, offset and storage size, checked
against the storage bytes in the zip.  :func:`inspect_npy` reads a ``.npy``
file with numpy (``allow_pickle=False``, memory-mapped: object arrays, which
need pickle, and truncated files are refused; numpy is imported only then).  The runner loads the same files with ``torch.load(weights_only=True)``
(a second, independent barrier).

Every problem is a :class:`CaptureFileError` naming the file.
"""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ToolError

# typed storage class -> (dtype, bytes per element)
STORAGES = {
    "FloatStorage": ("float32", 4),
    "HalfStorage": ("float16", 2),
    "BFloat16Storage": ("bfloat16", 2),
    "DoubleStorage": ("float64", 8),
    "ByteStorage": ("uint8", 1),
    "CharStorage": ("int8", 1),
    "ShortStorage": ("int16", 2),
    "IntStorage": ("int32", 4),
    "LongStorage": ("int64", 8),
    "BoolStorage": ("bool", 1),
    "ComplexFloatStorage": ("complex64", 8),
    "ComplexDoubleStorage": ("complex128", 16),
}
# torch dtypes a _rebuild_tensor_v3 pickle names (float8, wide unsigned...), with their element sizes
V3_DTYPES = {
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}
NPY_DTYPES = {
    "<f2": "float16",
    "<f4": "float32",
    "<f8": "float64",
    "|i1": "int8",
    "|u1": "uint8",
    "<i2": "int16",
    "<i4": "int32",
    "<i8": "int64",
    "|b1": "bool",
}
ITEM_BYTES = {**V3_DTYPES}
MAX_PICKLE_BYTES = 1 << 20


class CaptureFileError(ToolError):
    """A captured file that is not plain tensor data, or not what its index says."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"captured file {str(path)!r}: {problem}; nothing was planned from it", code="bad_capture")


@dataclass
class TensorInfo:
    dtype: str
    shape: list[int]
    strides: list[int]
    storage_offset: int
    storage_numel: int
    storage_key: str = ""


@dataclass
class FileInfo:
    """What a captured file holds: one tensor, or an opdebug region dict."""

    kind: str  # "tensor" | "region"
    tensor: TensorInfo
    view: dict = field(default_factory=dict)  # region: shape, strides, storage_offset of the captured view


class _Storage:
    def __init__(self, dtype: str, key: str, numel: int) -> None:
        self.dtype, self.key, self.numel = dtype, key, numel


class _StorageClass:
    def __init__(self, name: str) -> None:
        self.name = name


def _rebuild_tensor(storage, offset, size, stride, *rest):  # pickle arguments
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("a tensor without a storage")
    return TensorInfo(
        storage.dtype, [int(s) for s in size], [int(s) for s in stride], int(offset), storage.numel, storage.key
    )


class _Dtype:
    def __init__(self, name: str) -> None:
        self.name = name


def _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype, *rest):
    """torch >= 2.1 for dtypes without a typed storage: an untyped (byte) storage plus the dtype."""
    if not isinstance(storage, _Storage) or storage.dtype != "bytes" or not isinstance(dtype, _Dtype):
        raise pickle.UnpicklingError("a tensor without an untyped storage and a dtype")
    item = V3_DTYPES[dtype.name]
    return TensorInfo(
        dtype.name, [int(s) for s in size], [int(s) for s in stride], int(offset), storage.numel // item, storage.key
    )


def _ordered_dict(*args):
    return dict(*args)


class _DataOnlyUnpickler(pickle.Unpickler):
    """Resolves only tensor-rebuilding names, to inert stand-ins."""

    def find_class(self, module: str, name: str):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("torch._utils", "_rebuild_tensor_v3"):
            return _rebuild_tensor_v3
        if (module, name) == ("torch.storage", "UntypedStorage"):
            return _StorageClass("UntypedStorage")
        if module == "torch" and name in V3_DTYPES:
            return _Dtype(name)
        if (module, name) == ("collections", "OrderedDict"):
            return _ordered_dict
        if module == "torch" and name in STORAGES:
            return _StorageClass(name)
        raise pickle.UnpicklingError(f"it needs {module}.{name}, which is code, not tensor data")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageClass)):
            raise pickle.UnpicklingError(f"an unknown persistent id {str(pid)[:80]}")
        if pid[1].name == "UntypedStorage":
            return _Storage("bytes", str(pid[2]), int(pid[4]))
        return _Storage(STORAGES[pid[1].name][0], str(pid[2]), int(pid[4]))


def inspect_pt(path: Path) -> FileInfo:
    """The tensor a torch.save file holds, read without running its pickle."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(pkl) != 1:
                raise CaptureFileError(path, "not a torch.save file (no data.pkl in the archive)")
            prefix = pkl[0][: -len("data.pkl")]
            info = zf.getinfo(pkl[0])
            if info.file_size > MAX_PICKLE_BYTES:
                raise CaptureFileError(path, f"its pickle is {info.file_size} bytes, not one tensor")
            try:
                obj = _DataOnlyUnpickler(io.BytesIO(zf.read(pkl[0]))).load()
            except (
                pickle.UnpicklingError,
                EOFError,
                ValueError,
                TypeError,
                AttributeError,
                IndexError,
                KeyError,
            ) as exc:
                raise CaptureFileError(path, f"refused: {exc} (captures are data, never code)") from None
            bad = zf.testzip()
            if bad is not None:
                raise CaptureFileError(path, f"corrupt (CRC mismatch in {bad!r})")
            sizes = {
                n[len(prefix) + len("data/") :]: zf.getinfo(n).file_size
                for n in names
                if n.startswith(prefix + "data/")
            }
    except zipfile.BadZipFile as exc:
        raise CaptureFileError(path, f"truncated or not a torch.save archive ({exc})") from None
    except OSError as exc:
        raise CaptureFileError(path, f"cannot read it ({exc.strerror or exc})") from None
    if isinstance(obj, TensorInfo):
        result = FileInfo("tensor", obj)
    elif isinstance(obj, dict) and isinstance(obj.get("region"), TensorInfo):
        view = {k: obj.get(k) for k in ("shape", "strides", "storage_offset")}
        if not (
            isinstance(view["shape"], list)
            and isinstance(view["strides"], list)
            and isinstance(view["storage_offset"], int)
        ):
            raise CaptureFileError(path, "a region without its view's shape, strides and storage_offset")
        result = FileInfo("region", obj["region"], view)
    else:
        raise CaptureFileError(path, f"holds a {type(obj).__name__}, not one tensor or an opdebug region")
    t = result.tensor
    need = t.storage_numel * ITEM_BYTES[t.dtype]
    have = sizes.get(t.storage_key)
    if have != need:
        raise CaptureFileError(path, f"its storage holds {have} bytes, the tensor needs {need} (truncated?)")
    return result


def inspect_npy(path: Path) -> TensorInfo:
    """dtype, shape and strides of a .npy file, read by numpy with
    ``allow_pickle=False`` and memory-mapped (no data is read): an object array
    (a pickle) is refused, and so is a file shorter than its header says.
    numpy is imported here only, never when the server starts."""
    try:
        import numpy
    except ImportError:
        raise CaptureFileError(
            path,
            "reading a .npy capture needs numpy (pip install numpy, or the '[pictures]' "
            "extra); a torch.save file needs nothing more",
        ) from None
    try:
        if os.path.getsize(path) == 0:
            raise CaptureFileError(path, "empty (0 bytes)")
        array = numpy.load(path, mmap_mode="r", allow_pickle=False)
    except CaptureFileError:
        raise
    except OSError as exc:
        raise CaptureFileError(path, f"cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        text = str(exc)
        pickled = "pickle" in text.lower() or "python objects" in text.lower()
        why = (
            "an object array needs pickle (captures are data, never code)"
            if pickled
            else f"an unreadable or truncated .npy file ({text})"
        )
        raise CaptureFileError(path, f"refused: {why}") from None
    if not isinstance(array, numpy.ndarray):  # an .npz archive read through a .npy name
        raise CaptureFileError(path, "not a .npy file")
    descr = array.dtype.str
    if descr not in NPY_DTYPES:
        raise CaptureFileError(path, f"refused: dtype {descr!r} is not one a case can take")
    dtype = NPY_DTYPES[descr]
    shape = [int(s) for s in array.shape]
    strides = [int(s) // array.itemsize for s in array.strides] if array.size else _contiguous(shape)
    numel = int(array.size)
    del array  # the memory map
    return TensorInfo(dtype, shape, strides, 0, numel)


def _contiguous(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(int(size), 1)
    return list(reversed(strides))


def inspect_file(path: Path) -> FileInfo:
    """A .pt or .npy capture (told apart by content, not name)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError as exc:
        raise CaptureFileError(path, f"cannot read it ({exc.strerror or exc})") from None
    if head == b"\x93NUMPY":
        return FileInfo("tensor", inspect_npy(path))
    if head[:4] == b"PK\x03\x04":
        return inspect_pt(path)
    raise CaptureFileError(
        path, "neither a torch.save archive nor a .npy file (a legacy pickle is refused: captures are data, never code)"
    )
