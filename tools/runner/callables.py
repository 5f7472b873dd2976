"""Resolve the candidate and reference callables and call them.

A callable is a dotted path ``module.attr[.attr...]`` resolved with
importlib (the longest importable module prefix, then attributes).  User
modules shipped with the run live in ``modules_dir``: that directory goes
first on sys.path, and each named module file is (re)loaded from it whenever
its content differs from what this warm worker loaded before - two runs can
ship different files under the same module name.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys

_loaded: dict[str, str] = {}  # module name -> sha256 of the file it was loaded from
_dirs: list[str] = []  # modules directories this process put on sys.path


class ResolveError(Exception):
    """A callable or user module cannot be loaded (a harness error)."""


def load_user_modules(modules_dir: str | None, module_files: list[str]) -> None:
    if not module_files:
        return
    if not modules_dir or not os.path.isdir(modules_dir):
        raise ResolveError(
            f"the run ships modules {module_files} but the modules directory {modules_dir!r} does not exist"
        )
    # only this run's modules directory on sys.path (a warm worker serves many runs)
    for old in [d for d in _dirs if d != modules_dir]:
        _dirs.remove(old)
        while old in sys.path:
            sys.path.remove(old)
    if modules_dir not in sys.path:
        sys.path.insert(0, modules_dir)
        _dirs.append(modules_dir)
    for file_name in module_files:
        path = os.path.join(modules_dir, file_name)
        name = file_name[:-3]
        try:
            with open(path, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
        except OSError as exc:
            raise ResolveError(f"user module {file_name!r} cannot be read: {exc}") from exc
        if _loaded.get(name) == digest and name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ResolveError(f"user module {file_name!r} cannot be loaded as a module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:
            sys.modules.pop(name, None)
            raise ResolveError(f"user module {file_name!r} failed to import: {type(exc).__name__}: {exc}") from exc
        _loaded[name] = digest


def resolve(dotted: str):
    parts = dotted.split(".")
    errors = []
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                errors.append(str(exc))
                continue
            raise ResolveError(f"importing {module_name!r} for {dotted!r} failed: {exc}") from exc
        except BaseException as exc:
            raise ResolveError(f"importing {module_name!r} for {dotted!r} failed: {type(exc).__name__}: {exc}") from exc
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError as exc:
            raise ResolveError(
                f"{dotted!r}: module {module_name!r} has no attribute path {'.'.join(parts[cut:])!r} ({exc})"
            ) from exc
        if not callable(obj):
            raise ResolveError(f"{dotted!r} resolves to a {type(obj).__name__}, which is not callable")
        return obj
    raise ResolveError(f"cannot import any module prefix of {dotted!r}: {errors[-1] if errors else 'not found'}")


def call_arguments(call: dict | None, inputs: dict, attributes: dict) -> tuple[list, dict]:
    """Inputs (and attributes) as positional args in the configured order,
    the rest as keywords; attributes are keyword options by default."""
    call = call or {}
    named = dict(inputs)
    for key, value in attributes.items():
        if key in named:
            raise ResolveError(f"attribute {key!r} has the same name as an input")
        named[key] = value
    args = []
    if call.get("style") == "positional":
        for name in call.get("order") or []:
            if name not in named:
                raise ResolveError(
                    f"call order names {name!r}, which is neither an input nor an attribute "
                    f"of this case (have {sorted(named)})"
                )
            args.append(named.pop(name))
    return args, named


# Ascend-only dtype names (torch_npu attributes, not torch.dtype objects).
ASCEND_ONLY = ("hifloat8", "float4_e2m1fn_x2", "float4_e1m2fn_x2", "int4")


def is_dtype_arg(value) -> bool:
    return isinstance(value, dict) and value.get("kind") == "dtype"


def resolve_attributes(attributes: dict, device_kind: str) -> dict:
    """Attribute values as the callable gets them: ``{"kind": "dtype", "value":
    "bfloat16"}`` becomes ``torch.bfloat16`` (an Ascend-only name becomes
    ``torch_npu.<name>``, on npu hosts only); everything else unchanged."""
    out = {}
    for key, value in attributes.items():
        if is_dtype_arg(value):
            name = value["value"]
            if name in ASCEND_ONLY:
                if device_kind != "npu":
                    raise ResolveError(f"attribute {key!r}: dtype {name!r} is Ascend-only (torch_npu.{name})")
                import torch_npu  # present on npu hosts

                value = getattr(torch_npu, name)
            else:
                import torch

                value = getattr(torch, name, None)
                if not isinstance(value, torch.dtype):
                    raise ResolveError(f"attribute {key!r}: torch {torch.__version__} has no dtype {name!r}")
        out[key] = value
    return out


def ascend_only_reason(case: dict, device_kind: str) -> str | None:
    """Why a case cannot run on this device because it names an Ascend-only
    dtype (an input's or a dtype attribute's), or None."""
    if device_kind == "npu":
        return None
    names = []
    for spec in case.get("inputs") or []:
        for member in (spec.get("tensors") or [spec]) if not spec.get("none") else []:
            if member.get("dtype") in ASCEND_ONLY:
                names.append(f"input {spec['name']!r} dtype {member['dtype']}")
    for key, value in (case.get("attributes") or {}).items():
        if is_dtype_arg(value) and value["value"] in ASCEND_ONLY:
            names.append(f"attribute {key!r} dtype {value['value']}")
    if not names:
        return None
    return (
        f"{'; '.join(names)}: Ascend-only (torch_npu names, packed carriers); this host's device is "
        f"{device_kind}, and only an npu host can run it"
    )
