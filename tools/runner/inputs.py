"""Build a case's inputs exactly as the case says.

Values are generated on CPU from the case seed (a ``torch.Generator``), in
float32 (float64 for float64 inputs), over the whole storage the view needs,
then cast to the input's dtype once; special values are written after the
cast at the given or seeded-random logical positions.  The result is a 1-D
storage tensor plus (shape, strides, storage_offset): the candidate gets that
storage moved to its device and viewed with ``as_strided`` (strides and offset
preserved), the reference gets the same storage upcast on CPU, viewed the
same way - so both see bit-identical values, strides and offset.

Conversions are never silent: integer inputs from a floating distribution are
rounded half-to-even and clamped to the dtype range, and the metadata says so.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
# dtypes this torch may have (float8, complex, wide unsigned)
for _name in ("float8_e4m3fn", "float8_e5m2", "complex64", "complex128", "uint16", "uint32", "uint64"):
    if isinstance(getattr(torch, _name, None), torch.dtype):
        DTYPES[_name] = getattr(torch, _name)
# Ascend-only dtypes (torch_npu names; torch has no tensor dtype for them): the
# tensor holds raw bits in a carrier dtype - int4 packs 8 values per int32
# (torch_npu op docs), hifloat8 one value per byte, float4 *_x2 two per byte.
ASCEND_CARRIERS = {"hifloat8": "uint8", "float4_e2m1fn_x2": "uint8", "float4_e1m2fn_x2": "uint8", "int4": "int32"}
FLOATS = ("float16", "bfloat16", "float32", "float64")
FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
COMPLEX = ("complex64", "complex128")
FAMILIES = {  # mirrors tools/schemas.DTYPE_FAMILIES
    "float": FLOATS,
    "float8": FLOAT8,
    "complex": COMPLEX,
    "int": ("int8", "int16", "int32", "int64"),
    "uint": ("uint8", "uint16", "uint32", "uint64"),
    "bool": ("bool",),
    "ascend": tuple(ASCEND_CARRIERS),
}
MAX_RECORDED_POSITIONS = 64


class InputError(Exception):
    """The case's inputs cannot be built as written (a harness error)."""


@dataclass
class BuiltInput:
    name: str
    dtype: str
    shape: list
    strides: list
    storage_offset: int
    layout: str
    storage: torch.Tensor  # 1-D, CPU, in the input's dtype
    metadata: dict = field(default_factory=dict)

    def view(self, storage: torch.Tensor | None = None) -> torch.Tensor:
        base = self.storage if storage is None else storage
        return base.as_strided(self.shape, self.strides, self.storage_offset)


def contiguous_strides(shape) -> list:
    strides, acc = [], 1
    for size in reversed(list(shape)):
        strides.append(acc)
        acc *= max(size, 1)
    return list(reversed(strides))


def storage_numel(shape, strides, offset: int) -> int:
    if any(s == 0 for s in shape):
        return offset
    return offset + sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True)) + 1


def case_seed(case: dict) -> int:
    """The case's seed, or a stable one derived from its id."""
    if case.get("seed") is not None:
        return int(case["seed"])
    return int.from_bytes(hashlib.sha256(case["id"].encode()).digest()[:7], "big")


def input_seed(seed: int, index: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{index}:{name}".encode()).digest()
    return int.from_bytes(digest[:7], "big")


def build_inputs(case: dict, captured_dir: str | None = None) -> list[BuiltInput]:
    seed = case_seed(case)
    return [build_input(spec, input_seed(seed, i, spec["name"]), captured_dir) for i, spec in enumerate(case["inputs"])]


def build_input(spec: dict, seed: int, captured_dir: str | None = None) -> BuiltInput:
    name = spec["name"]
    dtype_name = spec.get("dtype", "float32")
    if dtype_name not in DTYPES and dtype_name not in ASCEND_CARRIERS:
        raise InputError(f"input {name!r}: dtype {dtype_name!r} is not known to this torch {torch.__version__}")
    shape = [int(s) for s in spec["shape"]]
    strides = [int(s) for s in spec["strides"]] if spec.get("strides") is not None else contiguous_strides(shape)
    if len(strides) != len(shape):
        raise InputError(f"input {name!r}: strides {strides} do not match the rank of shape {shape}")
    offset = int(spec.get("storage_offset", 0))
    planned = spec.get("values") or {"kind": "normal"}
    values = effective_values(planned, dtype_name)
    numel_storage = storage_numel(shape, strides, offset)
    gen = torch.Generator().manual_seed(seed)
    notes: list[str] = []
    storage = _generate(values, numel_storage, dtype_name, gen, notes, name)
    built = BuiltInput(name, dtype_name, shape, strides, offset, spec.get("layout", "ND"), storage)
    view = built.view()
    if values.get("kind") == "captured":
        _fill_captured(view, values, captured_dir, name)
    positions = []
    for special in values.get("specials") or []:
        positions.append(_inject(view, special, gen, dtype_name, name))
    _place(view, values.get("place") or [], name)
    numel = view.numel()
    built.metadata = {
        "name": name,
        "shape": shape,
        "strides": strides,
        "storage_offset": offset,
        "dtype": dtype_name,
        "layout": built.layout,
        "storage_numel": numel_storage,
        "numel": numel,
        "contiguous": view.is_contiguous(),
        "seed": seed,
        "values": values,
        "family": family(dtype_name),
        "specials_at": positions,
        "conversion": "; ".join(notes) or None,
        "sha256": tensor_sha256(view),
        "stats": _stats(view),
    }
    if values is not planned:
        built.metadata["values_from"] = "by_dtype." + (
            dtype_name if dtype_name in planned["by_dtype"] else family(dtype_name)
        )
    if dtype_name in ASCEND_CARRIERS:
        built.metadata["carrier"] = ASCEND_CARRIERS[dtype_name]
    return built


def family(dtype_name: str) -> str:
    return next((f for f, members in FAMILIES.items() if dtype_name in members), "unknown")


def effective_values(values: dict | None, dtype_name: str) -> dict:
    """The value spec that applies to ``dtype_name``: its ``by_dtype`` entry for
    the dtype, else for the dtype's family, else the spec itself."""
    values = values or {"kind": "normal"}
    by = values.get("by_dtype") or {}
    return by.get(dtype_name) or by.get(family(dtype_name)) or values


def _generate(values: dict, n: int, dtype_name: str, gen, notes: list, name: str) -> torch.Tensor:
    """Values of one storage; float8, complex and Ascend-only dtypes by their
    own rules, the rest by :func:`_generate_plain`; then ``exclude_zero``."""
    kind = values.get("kind", "normal")
    if dtype_name in ASCEND_CARRIERS:
        carrier = ASCEND_CARRIERS[dtype_name]
        if kind in ("normal", "uniform"):
            info = torch.iinfo(DTYPES[carrier])
            notes.append(
                f"{dtype_name}: uniformly random raw bit patterns in a {carrier} carrier (no {dtype_name} "
                "encoder in the runner; some patterns may be NaN/Inf encodings)"
            )
            return torch.randint(info.min, info.max + 1, (n,), generator=gen, dtype=torch.int64).to(DTYPES[carrier])
        notes.append(f"{dtype_name}: values are {carrier} carrier values (raw bits)")
        x = _generate_plain(values, n, carrier, gen, notes, name)
    elif dtype_name in FLOAT8:
        dtype = DTYPES[dtype_name]
        if kind in ("zeros", "ones", "captured"):
            x = _generate_plain(values, n, dtype_name, gen, notes, name)
        else:
            wide = _generate_plain(values, n, "float32", gen, notes, name)
            top = torch.finfo(dtype).max
            clamped = int(((wide > top) | (wide < -top)).sum())
            notes.append(
                f"{kind} values generated in float32, clamped to [-{top:g}, {top:g}] ({clamped} clamped) "
                f"and rounded to nearest {dtype_name}: every value is representable"
            )
            x = wide.clamp(-top, top).to(dtype)
    elif dtype_name in COMPLEX:
        part = "float64" if dtype_name == "complex128" else "float32"
        if kind in ("captured", "zeros", "ones"):
            x = _generate_plain(values, n, dtype_name, gen, notes, name)
        else:
            pair = _generate_plain(values, 2 * n, part, gen, notes, name)
            notes.append(f"{kind} real and imaginary parts drawn independently in {part}")
            x = torch.view_as_complex(pair.view(n, 2))
    else:
        x = _generate_plain(values, n, dtype_name, gen, notes, name)
    if values.get("exclude_zero") and kind != "captured":
        zero = x == 0
        count = int(zero.sum())
        if count:
            x = x.masked_fill(zero, 1)
        notes.append(f"exclude_zero: {count} zeros replaced by 1")
    return x


def _generate_plain(values: dict, n: int, dtype_name: str, gen, notes: list, name: str) -> torch.Tensor:
    kind = values.get("kind", "normal")
    dtype = DTYPES[dtype_name]
    work = torch.float64 if dtype_name == "float64" else torch.float32
    if kind == "normal":
        x = torch.randn(n, generator=gen, dtype=work) * float(values.get("std", 1.0)) + float(values.get("mean", 0.0))
    elif kind == "uniform":
        low, high = float(values["low"]), float(values["high"])
        x = torch.rand(n, generator=gen, dtype=work) * (high - low) + low
    elif kind == "randint":
        low, high = int(values["low"]), int(values["high"])
        if dtype == torch.bool:
            low, high = max(low, 0), min(high, 2)
        elif not dtype.is_floating_point:
            # clipped to the dtype's range (and int64's, where randint draws), said so in the metadata
            info = torch.iinfo(dtype)
            clip_low, clip_high = max(low, info.min), min(high, info.max + 1, 2**63 - 1)
            if (clip_low, clip_high) != (low, high) and clip_high > clip_low:
                notes.append(f"randint range [{low}, {high}) clipped to [{clip_low}, {clip_high}) for {dtype_name}")
            low, high = clip_low, clip_high
        if high <= low:
            raise InputError(
                f"input {name!r}: randint range [{values['low']}, {values['high']}) is empty for {dtype_name}"
            )
        ints = torch.randint(low, high, (n,), generator=gen, dtype=torch.int64)
        return ints.to(dtype)
    elif kind == "zeros":
        return torch.zeros(n, dtype=dtype)
    elif kind == "ones":
        return torch.ones(n, dtype=dtype)
    elif kind == "full":
        fill = float(values["fill"])
        if dtype_name not in FLOATS:
            if fill != int(fill):
                raise InputError(f"input {name!r}: fill {fill} is not an integer but the dtype is {dtype_name}")
            _check_range(None, int(fill), int(fill), dtype_name, name)
            return torch.full((n,), int(fill), dtype=dtype)
        return torch.full((n,), fill, dtype=work).to(dtype)
    elif kind == "arange":
        x = torch.arange(n, dtype=torch.float64 if dtype_name not in FLOATS else work)
        if dtype_name not in FLOATS:
            _check_range(None, 0, max(n - 1, 0), dtype_name, name)
            return x.to(torch.int64).to(dtype)
    elif kind == "captured":
        return torch.zeros(n, dtype=dtype)  # filled through the view afterwards
    else:
        raise InputError(f"input {name!r}: unknown values kind {kind!r}")
    if dtype_name in FLOATS:
        return x.to(dtype)
    if dtype == torch.bool:
        notes.append(f"{kind} values made bool as value != 0 after rounding")
        return torch.round(x) != 0
    info = torch.iinfo(dtype)
    notes.append(
        f"{kind} values generated in {str(work).replace('torch.', '')}, rounded half-to-even and "
        f"clamped to [{info.min}, {info.max}] for {dtype_name}"
    )
    return torch.round(x).clamp_(info.min, info.max).to(dtype)


def _check_range(ints, low: int, high: int, dtype_name: str, name: str) -> None:
    dtype = DTYPES[dtype_name]
    if dtype == torch.bool or dtype.is_floating_point:
        return
    info = torch.iinfo(dtype)
    if low < info.min or high > info.max:
        raise InputError(
            f"input {name!r}: values in [{low}, {high}] do not fit {dtype_name} "
            f"[{info.min}, {info.max}] (refusing to wrap them silently)"
        )


def _fill_captured(view: torch.Tensor, values: dict, captured_dir: str | None, name: str) -> None:
    """Fill the view from a captured file: a tensor (torch.save, or .npy read
    without pickle) copied into the view, or an opdebug_capture region
    ({"region", "shape", "strides", "storage_offset"}): with the case's
    strides and offset equal to the recorded ones the storage region is
    rebuilt exactly (values between the view's elements too), else the
    recorded view's logical values are copied (same shape)."""
    if not captured_dir:
        raise InputError(f"input {name!r}: values kind 'captured' but the run has no captured directory")
    path = os.path.join(captured_dir, values["captured"])
    if os.path.dirname(os.path.realpath(path)) != os.path.realpath(captured_dir):
        raise InputError(f"input {name!r}: captured file {values['captured']!r} is outside the captured directory")
    try:
        with open(path, "rb") as fh:
            npy = fh.read(6) == b"\x93NUMPY"
        loaded = _load_npy(path) if npy else torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # reported as a harness error
        raise InputError(f"input {name!r}: cannot load captured tensor {values['captured']!r}: {exc}") from exc
    region = None
    if isinstance(loaded, dict) and isinstance(loaded.get("region"), torch.Tensor):
        region = loaded["region"]
        rec = ([int(s) for s in loaded["shape"]], [int(s) for s in loaded["strides"]], int(loaded["storage_offset"]))
        tensor = region.as_strided(rec[0], rec[1], 0)
    elif isinstance(loaded, torch.Tensor):
        tensor = loaded
    else:
        raise InputError(f"input {name!r}: captured file {values['captured']!r} does not hold one tensor")
    if list(tensor.shape) != list(view.shape):
        raise InputError(
            f"input {name!r}: captured tensor has shape {list(tensor.shape)}, the case says {list(view.shape)}"
        )
    if tensor.dtype != view.dtype:
        raise InputError(
            f"input {name!r}: captured tensor is {str(tensor.dtype).replace('torch.', '')}, the case "
            f"says {str(view.dtype).replace('torch.', '')} (refusing to cast silently)"
        )
    if region is not None and (list(view.stride()), view.storage_offset()) == (rec[1], rec[2]):
        view.as_strided((region.numel(),), (1,), view.storage_offset()).copy_(region)
    else:
        view.copy_(tensor)


_NPY_DTYPES = {
    "<f2": torch.float16,
    "<f4": torch.float32,
    "<f8": torch.float64,
    "|i1": torch.int8,
    "|u1": torch.uint8,
    "<i2": torch.int16,
    "<i4": torch.int32,
    "<i8": torch.int64,
    "|b1": torch.bool,
}


def _load_npy(path: str) -> torch.Tensor:
    """A .npy file as a tensor, never through pickle (object arrays refused)."""
    import ast

    with open(path, "rb") as fh:
        magic = fh.read(8)
        hlen = int.from_bytes(fh.read(2 if magic[6] == 1 else 4), "little")
        header = ast.literal_eval(fh.read(hlen).decode("latin1"))
        data = fh.read()
    descr, shape = header["descr"], [int(s) for s in header["shape"]]
    if descr not in _NPY_DTYPES:
        raise ValueError(f".npy dtype {descr!r} is not plain tensor data")
    dtype = _NPY_DTYPES[descr]
    numel = math.prod(shape)
    flat = torch.frombuffer(bytearray(data), dtype=dtype) if numel else torch.empty(0, dtype=dtype)
    if flat.numel() != numel:
        raise ValueError(f".npy holds {flat.numel()} elements, its shape {shape} needs {numel}")
    if header.get("fortran_order"):
        return flat.reshape(list(reversed(shape))).permute(*reversed(range(len(shape)))).contiguous()
    return flat.reshape(shape)


def special_value(kind: str, dtype: torch.dtype) -> float:
    if kind == "+0":
        return 0.0 if dtype.is_floating_point else 0
    info = torch.finfo(dtype)
    return {
        "nan": float("nan"),
        "inf": float("inf"),
        "-inf": float("-inf"),
        "denormal": info.tiny * info.eps,  # the smallest subnormal of the dtype
        "-0": -0.0,
        "large": info.max / 2,
        "-large": -info.max / 2,
    }[kind]


def _inject(view: torch.Tensor, special: dict, gen, dtype_name: str, name: str) -> dict:
    kind = special["value"]
    shape = list(view.shape)
    numel = view.numel()
    if special.get("positions") is not None:
        positions = [list(p) for p in special["positions"]]
        for p in positions:
            if len(p) != len(shape) or any(i >= s for i, s in zip(p, shape, strict=True)):
                raise InputError(f"input {name!r}: special {kind!r} position {p} is outside shape {shape}")
    else:
        count = int(special["count"])
        if count > numel:
            raise InputError(f"input {name!r}: {count} special {kind!r} values but only {numel} elements")
        flat = (
            torch.randperm(numel, generator=gen)[:count]
            if numel <= 1 << 20
            else torch.randint(numel, (count,), generator=gen)
        )
        positions = [_unravel(int(i), shape) for i in flat.tolist()]
    value = special_value(kind, view.dtype)
    for p in positions:
        view[tuple(p)] = value
    return {"value": kind, "count": len(positions), "positions": positions[:MAX_RECORDED_POSITIONS]}


def _place(view: torch.Tensor, place: list, name: str) -> None:
    """Given values at given positions, written last (after generation and the specials); a value
    the dtype cannot hold (out of an integer's range, past a float's largest finite) is refused."""
    shape = list(view.shape)
    for k, item in enumerate(place):
        index, value = [int(i) for i in item["index"]], item["value"]
        if len(index) != len(shape) or any(not 0 <= i < s for i, s in zip(index, shape, strict=True)):
            raise InputError(f"input {name!r}: values.place[{k}].index {index} is outside shape {shape}")
        number = float(value) if isinstance(value, str) else value
        if not view.dtype.is_floating_point and not view.dtype.is_complex:
            if isinstance(value, str) or number != int(number):
                raise InputError(f"input {name!r}: values.place[{k}].value {value!r} needs a floating dtype")
            _check_range(None, int(number), int(number), dtype_name_of(view.dtype), name)
            number = int(number)
        elif math.isfinite(number) and not math.isfinite(float(torch.tensor(number).to(view.dtype))):
            raise InputError(
                f"input {name!r}: values.place[{k}].value {value!r} overflows {dtype_name_of(view.dtype)} "
                "(place 'inf' if an infinity is meant)"
            )
        view[tuple(index)] = number


def dtype_name_of(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _unravel(flat: int, shape: list) -> list:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return list(reversed(index))


def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 of the logical values' bytes (row-major), independent of strides."""
    data = t.detach().cpu().contiguous()
    if data.dtype == torch.bool:
        data = data.to(torch.uint8)
    nbytes = data.numel() * data.element_size()
    return hashlib.sha256(ctypes.string_at(data.data_ptr(), nbytes) if nbytes else b"").hexdigest()


def _stats(view: torch.Tensor) -> dict:
    if view.numel() == 0:
        return {}
    if view.dtype.is_complex:  # over the real and imaginary parts
        return _stats(torch.view_as_real(view))
    if view.dtype.is_floating_point:
        x = view if view.dtype == torch.float64 else view.float()
        total = float(x.sum(dtype=torch.float64))
        if math.isfinite(total):  # no NaN and no inf (either makes the sum non-finite): three reductions, not nine
            low, high = torch.aminmax(x)
            return {"nan": 0, "inf": 0, "min": float(low), "max": float(high), "mean": total / x.numel()}
        finite = torch.isfinite(x)
        stats: dict[str, int | float] = {"nan": int(torch.isnan(x).sum()), "inf": int(torch.isinf(x).sum())}
        count = int(finite.sum())
        if count:
            # masked reductions, not x[finite]: boolean indexing runs a parallel region whose
            # threads spin against each other on a busy host (8 ms for 64x64 instead of 30 us)
            # accumulate in float64: a few 'large' specials overflow a float32 sum (an inf
            # mean is not valid JSON, and the case could not be sent); scaled first if even that overflows
            mean = float(torch.where(finite, x, 0.0).sum(dtype=torch.float64)) / count
            if not math.isfinite(mean):
                mean = float((torch.where(finite, x, 0.0).to(torch.float64) / count).sum())
            stats.update(
                min=float(torch.where(finite, x, math.inf).min()),
                max=float(torch.where(finite, x, -math.inf).max()),
                mean=mean,
            )
        return stats
    x = view.to(torch.int64)
    return {"min": int(x.min()), "max": int(x.max()), "sum": int(x.sum())}


# --------------------------------------------------------------------------
# Arguments: tensor lists, None, the reference's upcast rule
# --------------------------------------------------------------------------


@dataclass
class BuiltList:
    """A Tensor[] input: one BuiltInput per member (named ``x[0]``, ``x[1]``...)."""

    name: str
    members: list

    @property
    def metadata(self) -> dict:
        return {
            "name": self.name,
            "kind": "list",
            "length": len(self.members),
            "members": [m.metadata for m in self.members],
        }


@dataclass
class BuiltNone:
    """An optional Tensor? argument passed as None."""

    name: str

    @property
    def metadata(self) -> dict:
        return {"name": self.name, "kind": "none"}


def build_case_inputs(case: dict, captured_dir: str | None = None) -> list:
    """Every input of the case: a BuiltInput, a BuiltList (a ``tensors`` list,
    each member from its own seed ``input_seed(seed, i, "x[j]")``) or a BuiltNone."""
    seed = case_seed(case)
    built: list[BuiltInput | BuiltList | BuiltNone] = []
    for i, spec in enumerate(case["inputs"]):
        name = spec["name"]
        if spec.get("none"):
            built.append(BuiltNone(name))
        elif spec.get("tensors") is not None:
            members = []
            for j, member in enumerate(spec["tensors"]):
                label = f"{name}[{j}]"
                members.append(build_input(dict(member, name=label), input_seed(seed, i, label), captured_dir))
            built.append(BuiltList(name, members))
        else:
            built.append(build_input(spec, input_seed(seed, i, name), captured_dir))
    return built


def tensors_of(built: list) -> list:
    """Every BuiltInput, list members included, in argument order."""
    out = []
    for b in built:
        out.extend(b.members if isinstance(b, BuiltList) else [] if isinstance(b, BuiltNone) else [b])
    return out


def map_built(built: list, fn) -> dict:
    """name -> fn(BuiltInput) for a tensor, [fn(member)...] for a list, None for None."""
    out: dict[str, Any] = {}
    for b in built:
        if isinstance(b, BuiltNone):
            out[b.name] = None
        elif isinstance(b, BuiltList):
            out[b.name] = [fn(m) for m in b.members]
        else:
            out[b.name] = fn(b)
    return out


def reference_dtype(dtype_name: str, ref_float: str = "float32") -> str:
    """The dtype the reference gets an input in: floating (float8 included)
    below float64 -> ``ref_float``; float64 stays; complex64 -> complex128 when
    ``ref_float`` is float64, else stays; integers, bool and Ascend-only
    carriers as they are (never downcast, never reinterpreted)."""
    if dtype_name in FLOATS[:3] or dtype_name in FLOAT8:
        return ref_float
    if dtype_name == "complex64" and ref_float == "float64":
        return "complex128"
    return dtype_name


def auto_reference_float(built: list) -> str:
    """``reference_dtype: auto`` as msprobe raises a CPU golden's inputs
    (acc_check/acc_check_utils.py ``PRECISION_MAPPING``, ``generate_cpu_params``):
    float64 when float32 is the one floating dtype below float64 among the
    inputs (a float32 operator gets a float64 truth), else float32 (half
    precision, float8, or several floating dtypes together)."""
    found = {b.dtype for b in tensors_of(built) if b.dtype in FLOATS[:3] or b.dtype in FLOAT8}
    return "float64" if found == {"float32"} else "float32"


def reference_inputs(built: list, ref_float: str) -> tuple[dict, bool]:
    """The reference's arguments: the same storages, each cast once by
    :func:`reference_dtype` (recorded as ``reference_dtype`` in the input's
    metadata) and viewed with the same strides and offset; and whether any
    input was upcast."""
    upcast = False

    def one(b: BuiltInput) -> torch.Tensor:
        nonlocal upcast
        target = reference_dtype(b.dtype, ref_float)
        b.metadata["reference_dtype"] = target
        if target != b.dtype:
            upcast = upcast or b.storage.dtype != DTYPES[target]
            return b.view(b.storage.to(DTYPES[target], copy=True))
        return b.view(b.storage.clone())

    return map_built(built, one), upcast
