"""The model-side capture module (``opdebug_capture.py``, standard library +
torch only) and where its text lives.  Nothing here imports torch: the module
is shipped as text (``opdebug capture-module --out DIR``) and imported inside
the model process on the NPU host."""

from __future__ import annotations

from pathlib import Path

MODULE_FILE = Path(__file__).resolve().parent / "opdebug_capture.py"


def module_source() -> str:
    """The capture module's source text."""
    return MODULE_FILE.read_text(encoding="utf-8")
