"""What the artefact tools leave in a run, read without running anything (no
torch, no matplotlib, no cases): the verify records (verify.py writes them)
and the pictures (pictures.py draws them).  The report and ``opdebug show``
read these; nothing here imports the modules that make them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from ..evidence import ARTIFACTS_DIR, RunStore

PICTURES_DIR = "pictures"
VERIFY_DIR = "verify"


def verify_records(store: RunStore) -> list[dict]:
    """Every verify evidence file of the run, oldest first."""
    folder = store.path(ARTIFACTS_DIR, VERIFY_DIR)
    if not folder.is_dir():
        return []
    docs = []
    for path in folder.glob("*.json"):
        if path.stem.isdigit():
            try:
                docs.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError):
                continue
    return sorted(docs, key=lambda d: d.get("index", 0))


def picture_paths(store: RunStore) -> list[Path]:
    """The PNGs of a run (absolute paths), sorted; no imports of torch or matplotlib."""
    folder = store.path(ARTIFACTS_DIR, PICTURES_DIR)
    return sorted(folder.glob("*.png")) if folder.is_dir() else []


def available() -> bool:
    """Whether pictures can be drawn here (matplotlib is installed)."""
    return importlib.util.find_spec("matplotlib") is not None


def install_hint() -> str:
    """How to get pictures where matplotlib is missing."""
    return "pip install 'ascend-operator-debug[pictures]' (matplotlib), then: opdebug pictures RUN_ID"
