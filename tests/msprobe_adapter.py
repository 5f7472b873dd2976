"""msprobe's own verdict, for parity tests and benchmarks: an adapter that
imports Ascend's accuracy checker (mindstudio-probe 26.2.0) from its wheel and
calls its functions.  Nothing of msprobe is copied here, and the project never
depends on it (the server and the runner do not import this module).

Where the wheel comes from (first that exists):

1. ``$MSPROBE_WHEEL_ROOT``: an unpacked wheel (a directory holding
   ``msprobe/``) or a ``.whl`` file;
2. the cache ``$OPDEBUG_CACHE_DIR/msprobe-26.2.0`` (default
   ``~/.cache/opdebug/msprobe-26.2.0``), filled by ``fetch()``:
   ``pip download --no-deps mindstudio-probe==26.2.0`` and unzip - run only
   when ``OPDEBUG_MSPROBE_DOWNLOAD=1`` (CI sets it; PyPI must be reachable).

``available()`` says whether it can run and, if not, why.

How msprobe runs here: its two stages, as its own pipeline does.  Stage 1
(``acc_check``, once per device): ``Comparator._compare_core_wrapper``
(compare/compare.py) measures one device output against the golden, and
``Comparator._get_acc_check_detail`` formats the row as msprobe writes its
``accuracy_checking_details`` CSV.  Stage 2 (``api_precision_compare``):
``get_api_status`` (compare/api_precision_compare.py) reads the candidate's
("NPU") row and the baseline's ("GPU") row and decides with the standard
msprobe routes to.  msprobe's package ``__init__`` files pull in its dump
hooks, pandas and tensorboard; they are not run: the computational modules
are imported from their files under empty package modules, and the few
modules that only do file I/O (csv/yaml readers, file checks, the CLI
parser, the checker's config object) are replaced by stand-ins built from
the wheel's own ``config.yaml``.  ``sys.modules`` is restored afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import types
import zipfile
from pathlib import Path

VERSION = "26.2.0"
AAC = "msprobe.pytorch.api_accuracy_checker"
MARKER = Path("msprobe/pytorch/api_accuracy_checker/precision_standard/benchmark_compare.py")
# our standard names -> msprobe's (core/common/const.py CompareConst)
STANDARDS = {"benchmark": "benchmark", "ulp": "ulp_compare", "binary": "binary_consistency",
             "absolute": "absolute_threshold", "thousandth": "thousandth_threshold"}
# msprobe's stage-2 column -> our ratio name, per standard
COLUMNS = {
    "benchmark": {"small_value_err_ratio": "small_value", "rmse_ratio": "rmse", "max_rel_err_ratio": "max_rel",
                  "mean_rel_err_ratio": "mean_rel", "eb_ratio": "error_balance"},
    "ulp": {"mean_ulp_err": "mean_ulp_error", "ulp_err_proportion": "ulp_error_proportion",
            "ulp_err_proportion_ratio": "ulp_error_proportion_ratio"},
    "binary": {"error_rate": "error_rate"},
    "thousandth": {"rel_err_thousandth": "rel_err_thousandth"},
    "absolute": {"inf_nan_error_ratio": "inf_nan_error_ratio", "rel_err_ratio": "rel_err_ratio",
                 "abs_err_ratio": "abs_err_ratio"},
}
_MODULES = {"const": "msprobe.core.common.const", "compare": AAC + ".compare.compare",
            "columns": AAC + ".compare.compare_column", "utils": AAC + ".common.utils",
            "detail": AAC + ".compare.compare_utils", "config": AAC + ".precision_standard.standard_config",
            "register": AAC + ".precision_standard.standard_register", "apc": AAC + ".compare.api_precision_compare"}
_PACKAGES = ("msprobe", "msprobe.core", "msprobe.core.common", "msprobe.pytorch", "msprobe.pytorch.common", AAC,
             AAC + ".common", AAC + ".compare", AAC + ".precision_standard", AAC + ".acc_check")
_lock = threading.RLock()
_loaded: dict = {}


def cache_dir() -> Path:
    base = os.environ.get("OPDEBUG_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "opdebug")
    return Path(base) / f"msprobe-{VERSION}"


def _unpack(wheel: Path, dest: Path) -> Path:
    if not (dest / MARKER).is_file():
        tmp = Path(tempfile.mkdtemp(dir=dest.parent if dest.parent.is_dir() else None))
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        if dest.exists():
            return dest
        tmp.rename(dest)
    return dest


def fetch() -> Path:
    """Download msprobe's wheel into the cache (``pip download --no-deps``) and unpack it."""
    from filelock import FileLock

    dest = cache_dir()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest.parent / f"msprobe-{VERSION}.lock")):  # test workers fetch it once between them
        if (dest / MARKER).is_file():
            return dest
        return _download(dest)


def _download(dest: Path) -> Path:
    wheels = dest.parent / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    f"mindstudio-probe=={VERSION}", "-d", str(wheels)], check=True, capture_output=True, timeout=600)
    wheel = next(wheels.glob(f"mindstudio_probe-{VERSION}-*.whl"))
    return _unpack(wheel, dest)


def wheel_root() -> tuple[Path | None, str]:
    """(the unpacked wheel, "") or (None, why not)."""
    given = os.environ.get("MSPROBE_WHEEL_ROOT")
    if given:
        path = Path(given)
        if path.is_dir() and (path / MARKER).is_file():
            return path, ""
        if path.is_file() and path.suffix == ".whl":
            return _unpack(path, Path(tempfile.gettempdir()) / f"opdebug-{path.stem}"), ""
        return None, f"MSPROBE_WHEEL_ROOT={given} is neither an unpacked msprobe wheel nor a .whl"
    if (cache_dir() / MARKER).is_file():
        return cache_dir(), ""
    if os.environ.get("OPDEBUG_MSPROBE_DOWNLOAD") == "1":
        try:
            return fetch(), ""
        except (OSError, subprocess.SubprocessError, StopIteration, zipfile.BadZipFile) as exc:
            return None, f"downloading mindstudio-probe {VERSION} failed: {type(exc).__name__}: {exc}"
    return None, (f"msprobe's wheel is not here: set MSPROBE_WHEEL_ROOT to an unpacked mindstudio-probe {VERSION} "
                  f"wheel (pip download --no-deps mindstudio-probe=={VERSION}), or OPDEBUG_MSPROBE_DOWNLOAD=1 to "
                  f"download it into {cache_dir()}")


def _scalar(text: str):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _small_yaml(text: str) -> dict:
    out, key = {}, None
    for line in text.splitlines():
        line = line.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if line.lstrip().startswith("- ") and key is not None:
            out[key].append(_scalar(line.lstrip()[2:]))
        elif ":" in line and not line.startswith(" "):
            key, value = (part.strip() for part in line.split(":", 1))
            if not value:
                out[key] = []
            elif value.startswith("["):
                out[key] = [_scalar(v) for v in value.strip("[]").split(",") if v.strip()]
            else:
                out[key] = _scalar(value)
    return out


def _stand_ins(root: Path) -> dict:
    """Modules that only read or write files, replaced; the values msprobe reads from them come from the wheel."""
    def refuse(name):
        def fn(*_a, **_k):
            raise NotImplementedError(f"{name}: file I/O is not part of the comparison")
        return fn

    def load_yaml(path):
        """msprobe's two yaml files (config.yaml, api_precision_standard.yaml): ``key: value``,
        ``key: [a, "b"]`` and ``key:`` followed by ``  - item`` lines (PyYAML when installed)."""
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        try:
            import yaml
            return yaml.safe_load(text)
        except ImportError:
            return _small_yaml(text)

    files = types.ModuleType("msprobe.core.common.file_utils")
    files.load_yaml = load_yaml
    for name in ("FileOpen", "FileChecker", "check_file_or_directory_path", "load_json", "load_construct_json",
                 "write_csv", "read_csv", "get_json_contents", "create_directory", "check_path_before_create",
                 "save_json"):
        setattr(files, name, refuse(name))
    common = types.ModuleType("msprobe.pytorch.common.utils")
    common.save_pt = refuse("save_pt")
    settings = load_yaml(root / "msprobe/pytorch/api_accuracy_checker/config.yaml") or {}
    config = types.ModuleType(AAC + ".common.config")
    config.msCheckerConfig = types.SimpleNamespace(
        white_list=settings.get("white_list", []), black_list=settings.get("black_list", []),
        error_data_path=settings.get("error_data_path", "./"), precision=settings.get("precision", 14),
        quantization_api_list=settings.get("quantization_api_list", []))
    acc = types.ModuleType(AAC + ".acc_check.acc_check_utils")
    acc.get_validated_result_csv_path = refuse("get_validated_result_csv_path")
    cli = types.ModuleType("msprobe.core.common.cli_help")
    cli.MindStudioArgumentParser = argparse.ArgumentParser
    return {m.__name__: m for m in (files, common, config, acc, cli)}


def _load() -> tuple[dict | None, str]:
    with _lock:
        if "modules" in _loaded or "error" in _loaded:
            return _loaded.get("modules"), _loaded.get("error", "")
        root, why = wheel_root()
        if root is None:
            _loaded["error"] = why
            return None, why
        import importlib

        saved = {k: v for k, v in sys.modules.items() if k == "msprobe" or k.startswith("msprobe.")}
        for k in saved:
            del sys.modules[k]
        try:
            for name in _PACKAGES:
                pkg = types.ModuleType(name)
                pkg.__path__ = [str(root.joinpath(*name.split(".")))]
                sys.modules[name] = pkg
            sys.modules.update(_stand_ins(root))
            _loaded["modules"] = {k: importlib.import_module(v) for k, v in _MODULES.items()}
            _loaded["root"] = root
        except Exception as exc:  # noqa: BLE001 - said by available()
            _loaded["error"] = f"msprobe's modules in {root} did not load: {type(exc).__name__}: {exc}"
        finally:
            for k in [k for k in sys.modules if k == "msprobe" or k.startswith("msprobe.")]:
                del sys.modules[k]
            sys.modules.update(saved)
        return _loaded.get("modules"), _loaded.get("error", "")


def available() -> tuple[bool, str]:
    mods, why = _load()
    return (True, f"mindstudio-probe {VERSION} at {_loaded['root']}") if mods else (False, why)


@contextlib.contextmanager
def _forced(mods: dict, standard: str, level: str | None):
    """msprobe's own routing and level, overridden for one call where asked: its
    StandardRegistry._get_standard_category answers ``standard``, its
    get_benchmark_ratio_threshold gets ``level=`` (its own argument)."""
    registry, config = mods["register"].StandardRegistry, mods["config"].StandardConfig
    category, threshold = registry.__dict__["_get_standard_category"], config.__dict__["get_benchmark_ratio_threshold"]
    try:
        if standard != "auto":
            registry._get_standard_category = lambda self, api, out, inp: STANDARDS[standard]
        if level is not None:
            func = threshold.__func__
            config.get_benchmark_ratio_threshold = classmethod(
                lambda cls, metric, api_name=None, level_=None: func(cls, metric, api_name=api_name, level=level))
        yield
    finally:
        registry._get_standard_category = category
        config.get_benchmark_ratio_threshold = threshold


def _row(mods: dict, comparator, api_name: str, golden, output) -> dict:
    """One stage-1 row as msprobe writes it to its details CSV (every cell a string)."""
    status, detail = comparator._compare_core_wrapper(api_name, golden, output, False)
    rows = mods["compare"].Comparator._get_acc_check_detail([f"Torch.{api_name}.0", status, " ", detail, []])
    header = mods["detail"].DETAIL_TEST_ROWS[0]
    return {h: v if isinstance(v, str) else str(v) for h, v in zip(header, rows[0])}


def _number(value):
    if isinstance(value, str):
        value = value.strip()
        if not value:
            return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def judge(standard: str, level: str | None, candidate, benchmark, truth, api_name: str = "parity_op") -> dict:
    """msprobe's verdict on ``candidate`` (its NPU side) against ``benchmark`` (its GPU side), both measured
    against ``truth`` (its golden, as given: pass it in msprobe's golden dtype).  ``standard``: "auto" or one of
    STANDARDS; ``level``: None (msprobe's, by ``api_name``) or L0/L1/L2.  Returns {"status": "pass" | "error" |
    "SKIP", "standard": our name, "ratios": {our name: number}, "message"}."""
    mods, why = _load()
    if mods is None:
        raise RuntimeError(why)
    import numpy

    with _lock, _forced(mods, standard, level), numpy.errstate(all="ignore"):  # msprobe's overflow warnings
        comparator = object.__new__(mods["compare"].Comparator)  # its __init__ only opens csv files
        comparator.registry = comparator._register_compare_func()
        npu = _row(mods, comparator, api_name, truth, candidate)
        gpu = _row(mods, comparator, api_name, truth, benchmark)
        name, _, _ = mods["utils"].extract_detailed_api_segments(npu["API Name"])
        column = mods["columns"].ApiPrecisionOutputColumn()
        try:
            status = mods["apc"].get_api_status(npu, gpu, name, column, mods["apc"].register_compare_func())
        except Exception as exc:  # noqa: BLE001 - msprobe's analyse_csv records SKIP for these
            return {"status": "SKIP", "standard": None, "ratios": {}, "message": f"{type(exc).__name__}: {exc}"}
    names = {"标杆比对法": "benchmark", "ULP误差比对法": "ulp", "二进制一致法": "binary", "绝对阈值法": "absolute",
             "双千指标法": "thousandth"}
    ours = names.get(column.compare_algorithm)
    ratios = {mine: _number(getattr(column, col)) for col, mine in COLUMNS.get(ours, {}).items()}
    return {"status": status, "standard": ours, "ratios": ratios, "message": str(column.compare_message or "")}
