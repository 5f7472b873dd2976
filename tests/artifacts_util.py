"""Helpers for the artefact tests: a virtual environment that has torch (and
the packages torch itself requires) and nothing else of this project's
environment, built once per test session by linking those distributions'
top-level files into a fresh ``python -m venv --without-pip``."""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import sys
from pathlib import Path


def torch_closure() -> list[md.Distribution]:
    seen: dict[str, md.Distribution] = {}
    todo = ["torch"]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen[key] = dist
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            todo.append(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
    return list(seen.values())


def make_torch_only_venv(where: Path) -> Path:
    """A venv whose site-packages holds links to torch's distributions only;
    returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    for dist in torch_closure():
        base = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            src = base / top
            dest = site / top
            if src.exists() and not dest.exists() and not top.startswith("__pycache__"):
                os.symlink(src, dest)
    return python


def clean_env() -> dict[str, str]:
    """The environment for the torch-only python: no PYTHONPATH, no venv of ours."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return env
