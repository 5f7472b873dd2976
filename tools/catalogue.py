"""The catalogue of worked operator configs.

``references/operators/<op>.json`` holds a ready plan request for one
torch_npu LLM-inference operator (config + star), and
``references/operators/npu_reference.py`` the CPU reference module they all
ship, written from the formulas in torch_npu 2.14.0's op docs.  This module
loads a config with its module source filled in, ready for ``plan_cases``
(or the MCP tool), and makes the CPU self-check variant (the reference also
as the candidate) used where no NPU is present.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

CATALOGUE_DIR = Path(__file__).resolve().parent.parent / "references" / "operators"
REFERENCE_MODULE = "npu_reference.py"


def catalogue_names() -> list[str]:
    """The operators with a worked config, e.g. ``npu_rms_norm``."""
    return sorted(p.stem for p in CATALOGUE_DIR.glob("npu_*.json"))


TRAINING_DIR = CATALOGUE_DIR / "training"


def training_names() -> list[str]:
    """The training configs: backward operators called directly
    (``npu_rms_norm_backward``...) and the fused attention's gradients, in
    ``references/operators/training/``."""
    return sorted(p.stem for p in TRAINING_DIR.glob("npu_*.json"))


def load_config(op: str, run_id: str | None = None) -> dict:
    """The plan request for ``op`` (a catalogue or a training config) with
    ``module_sources`` filled in (and the run id replaced when given)."""
    if op in catalogue_names():
        path = CATALOGUE_DIR / f"{op}.json"
    elif op in training_names():
        path = TRAINING_DIR / f"{op}.json"
    else:
        raise KeyError(f"no catalogue config for {op!r}; have {catalogue_names() + training_names()}")
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["module_sources"] = {REFERENCE_MODULE: (CATALOGUE_DIR / REFERENCE_MODULE).read_text(encoding="utf-8")}
    if run_id is not None:
        doc["config"]["run_id"] = run_id
    return doc


def cpu_self_check(doc: dict) -> dict:
    """The same request with the reference also as the candidate: on a host
    without torch_npu every case must pass (a check of the config and the
    reference, not of the operator)."""
    out = copy.deepcopy(doc)
    op = out["config"]["operator"]
    op["candidate"] = op["reference"]
    op["name"] = f"{op['name']} (CPU self-check: reference as candidate)"
    return out
