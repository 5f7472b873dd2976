"""Only our own code runs: the staging checks of stage_files.py, with the tools' clear error.

NPU hosts are shared by many users.  A directory another user owns, or can
write to, may hold a planted "runner" (or a ``torch.py`` that shadows torch on
PYTHONPATH), so a stage, work or lease directory must be a real directory
owned by the user that runs the code and writable by nobody else, and a staged
runner is used only after its files are compared, byte for byte, with the
files this server ships.  The checks themselves live in ``stage_files`` (the
standard library only: a command host runs that very module to stage what it
is sent); here a path refused is an ``[unsafe_path]`` ToolError.  The SSH
transport applies the same rules to SFTP attributes (see ``tools/remote/ssh.py``).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ToolError
from . import stage_files
from .stage_files import CACHE_DIRS, Unsafe, tree_mismatch, unsafe_reason, write_new

__all__ = ["CACHE_DIRS", "private_dir", "refuse", "stage_tree", "tree_mismatch", "unsafe_reason", "write_new"]


def refuse(path, reason: str) -> ToolError:
    return ToolError(
        f"refusing to use {str(path)!r}: {reason}. Another user could plant code there; remove it "
        f"(or make it yours, mode 700), or point the stage elsewhere",
        code="unsafe_path",
        details={"path": str(path)},
    )


def private_dir(path: Path) -> Path:
    """``path`` as a directory we own and nobody else can write; created (mode 700) when missing."""
    try:
        return stage_files.private_dir(path)
    except Unsafe as exc:
        raise refuse(exc.path, exc.reason) from None


def stage_tree(base: Path, name: str, files: dict[str, bytes]) -> Path:
    """``base/name`` holding exactly ``files``: verified when it exists, else
    written into a private temporary directory renamed into place."""
    try:
        return stage_files.stage_tree(base, name, files)
    except Unsafe as exc:
        raise refuse(exc.path, exc.reason) from None
