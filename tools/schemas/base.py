"""The ground every contract stands on: the strict base model, safe slugs and
identifiers, finite numbers, the dtype/layout/mode/status vocabularies, and
the one validation-error formatter."""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import JsonDict
from typing_extensions import TypeAliasType

SCHEMA_VERSION = 1

# A slug starts with a letter or digit, so ".", ".." and "-x" are impossible;
# "/" and "\" are not in the alphabet, so a slug is always one path component.
SLUG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"
_SLUG_RE = re.compile(SLUG_PATTERN)
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_MODULE_FILE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\.py$")

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
# Dtype families (value specs may be keyed by a family, see ValueSpec.by_dtype); mirrored in tools/runner/inputs.py.
DTYPE_FAMILIES = {
    "float": FLOAT_DTYPES,
    "float8": ("float8_e4m3fn", "float8_e5m2"),
    "complex": ("complex64", "complex128"),
    "int": ("int8", "int16", "int32", "int64"),
    "uint": ("uint8", "uint16", "uint32", "uint64"),
    "bool": ("bool",),
    "ascend": ("hifloat8", "float4_e2m1fn_x2", "float4_e1m2fn_x2", "int4"),
}
ASCEND_ONLY_DTYPES = DTYPE_FAMILIES["ascend"]


_FAMILY_OF = {d: f for f, members in DTYPE_FAMILIES.items() for d in members}


def dtype_family(dtype: str) -> str:
    return _FAMILY_OF[dtype]


# Ascend storage formats (torch_npu.npu_format_cast ids live in the runner).
LAYOUTS = ("ND", "NCHW", "NHWC", "NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ")
MODES = ("eager", "compile", "graph")
# The most storage elements one input may need (16 Gi elements: 64 GiB of
# float32).  Above it the host (CPU generation, then the device copy) would
# only run out of memory or overflow; refuse it when the case is planned.
MAX_STORAGE_ELEMENTS = 2**34
# Every list an argument holds is bounded (the schema says maxItems; pydantic refuses a longer
# one before it reads the items), so no argument costs more than linear work on a bound.
MAX_RANK = 64  # dimensions of a tensor (torch's TensorIterator takes 25; a shape of 100,000 is refused)
MAX_NAMES = 256  # names in one list: hosts, outputs, modules, inputs, rules...
MAX_CASES_PER_CALL = 10_000  # cases (or case ids) one call plans, runs or names
MAX_POSITIONS = 4096  # multi-indices of special values in one tensor
STATUSES = ("passed", "numerical_mismatch", "crash", "unsupported")

# A named alias: published once in $defs and referenced (the schema stays compact).
Dtype = TypeAliasType(
    "Dtype",
    Literal[
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int8",
        "uint8",
        "int16",
        "int32",
        "int64",
        "bool",
        "float8_e4m3fn",
        "float8_e5m2",
        "complex64",
        "complex128",
        "uint16",
        "uint32",
        "uint64",
        "hifloat8",
        "float4_e2m1fn_x2",
        "float4_e1m2fn_x2",
        "int4",
    ],
)
# every dtype a case may name, in the Literal's order (the Literal is the one list: a type checker reads it)
DTYPES: tuple[str, ...] = get_args(Dtype.__value__)
Layout = Literal["ND", "NCHW", "NHWC", "NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ"]
Mode = Literal["eager", "compile", "graph"]
Status = Literal["passed", "numerical_mismatch", "crash", "unsupported"]


def check_slug(value: str) -> str:
    if not isinstance(value, str) or not _SLUG_RE.fullmatch(value):
        raise ValueError(
            "must be a safe slug: 1-96 characters of letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (no '/', no '..', no spaces)"
        )
    if ".." in value:
        raise ValueError("must not contain '..'")
    return value


def _ident(value: str) -> str:
    if not _IDENT_RE.fullmatch(value):
        raise ValueError("must be a Python identifier of at most 64 characters")
    return value


def _dotted(value: str) -> str:
    if not _DOTTED_RE.fullmatch(value):
        raise ValueError("must be a dotted callable path such as 'torch_npu.npu_rms_norm' (module.attr)")
    return value


def _finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _finite_non_negative(value: float) -> float:
    """Finite first, so a NaN says "must be a finite number", not a bound."""
    _finite(value)
    if value < 0:
        raise ValueError("must be greater than or equal to 0")
    return value


def finite_ratio(value: float) -> float:
    _finite_non_negative(value)
    if value > 1:
        raise ValueError("must be less than or equal to 1")
    return value


def _finite_json(value: Any) -> Any:
    """Free-form JSON whose numbers are all finite (it is written as standard JSON)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("numbers must be finite (write non-finite values as strings)")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return value


def _server_path(value: str) -> str:
    if "\x00" in value:  # the OS refuses it deep in a write; said here, as a bad argument
        raise ValueError("a path cannot contain a NUL byte (\\x00)")
    return value


def _module_file(value: str) -> str:
    if not _MODULE_FILE_RE.fullmatch(value):
        raise ValueError("module file must be NAME.py with NAME a Python identifier (no directories)")
    return value


# The pattern is published in the JSON schema (what an agent fills ids in from);
# check_slug validates, with a message that says what a slug is.
Slug = Annotated[str, AfterValidator(check_slug), Field(json_schema_extra={"pattern": SLUG_PATTERN})]
FreeJson = Annotated[dict[str, Any], AfterValidator(_finite_json)]
ModuleFile = Annotated[str, AfterValidator(_module_file)]
ServerPath = Annotated[
    str, Field(min_length=1, max_length=4096), AfterValidator(_server_path)
]  # a path on this machine
Ident = Annotated[str, AfterValidator(_ident)]
Dotted = Annotated[str, AfterValidator(_dotted)]
FiniteFloat = Annotated[float, AfterValidator(_finite)]
# Non-finite input is refused before the bound is checked: NaN says "must be a finite number".
NonNegFinite = Annotated[float, AfterValidator(_finite_non_negative), Field(json_schema_extra={"minimum": 0})]
# A tensor element as JSON: finite numbers as numbers, the rest spelled out.
ElementValue = float | int | bool | Literal["nan", "inf", "-inf"]


# json_schema_extra of a top-level tool argument whose name says enough in tools/list (run_id,
# case_id, host, a bounded budget): its description is in the documented input schema only.
DOCUMENTED_ONLY_KEY = "x-documented-only"
DOCUMENTED_ONLY: JsonDict = {DOCUMENTED_ONLY_KEY: True}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=False)


def drop_titles(schema: dict) -> None:
    """Drop the generated titles and null defaults (the published schema stays small)."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        if "default" in prop and prop["default"] is None:
            prop.pop("default")


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def format_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """All errors at once, each with its field path and what was wrong."""
    from .union_errors import prune_union_errors  # one line per actual mistake in a union's value

    lines = []
    for err in prune_union_errors(exc.errors()):
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        if prefix:
            loc = f"{prefix}.{loc}" if loc != "(root)" else prefix
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (not part of the contract)"
        lines.append(f"{loc}: {msg}")
    return f"{len(lines)} validation error(s):\n" + "\n".join(f"  - {line}" for line in lines)
