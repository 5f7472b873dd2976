"""Only our own code runs: checks on the directories the runner is staged in.

NPU hosts are shared by many users.  A directory another user owns, or can
write to, may hold a planted "runner" (or a ``torch.py`` that shadows torch on
PYTHONPATH), so:

- a stage, work or lease directory must be a real directory (not a symlink),
  owned by the user that runs the code, and not writable by group or others;
- a staged runner is used only after its files are compared, byte for byte,
  with the files this server ships (nothing missing, nothing extra);
- new files are created with ``O_EXCL | O_NOFOLLOW`` inside a fresh private
  directory (``mkdtemp``) that is renamed into place when complete.

Local checks work on paths; the SSH transport applies the same rules to SFTP
attributes (see ``tools/remote/ssh.py``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Protocol

from ..errors import ToolError

CACHE_DIRS = ("__pycache__",)


class ModeAndOwner(Protocol):
    """The two os.stat_result fields unsafe_reason reads (ssh.py reads them from SFTP
    attributes, where the owner may be missing)."""

    @property
    def st_mode(self) -> int: ...

    @property
    def st_uid(self) -> int | None: ...


def unsafe_reason(st: ModeAndOwner, uid: int, what: str) -> str | None:
    """Why a directory with these attributes must not be trusted, or None."""
    if stat.S_ISLNK(st.st_mode):
        return f"{what} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{what} is not a directory"
    if st.st_uid != uid:
        return f"{what} is owned by uid {st.st_uid}, not by uid {uid} that runs the code"
    if st.st_mode & 0o022:
        return f"{what} is writable by {'group' if st.st_mode & 0o020 else 'others'} (mode {st.st_mode & 0o777:o})"
    return None


def refuse(path, reason: str) -> ToolError:
    return ToolError(
        f"refusing to use {str(path)!r}: {reason}. Another user could plant code there; remove it "
        f"(or make it yours, mode 700), or point the stage elsewhere",
        code="unsafe_path",
        details={"path": str(path)},
    )


def private_dir(path: Path) -> Path:
    """``path`` as a directory we own and nobody else can write; created (mode 700) when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    why = unsafe_reason(os.lstat(path), os.getuid(), "the directory")
    if why:
        raise refuse(path, why)
    return path


def write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _read_regular(path: Path, uid: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
            return None
        return fh.read()


def tree_mismatch(root: Path, files: dict[str, bytes]) -> str | None:
    """None when ``root`` holds exactly ``files`` (relative path -> content), in
    directories we own; else what differs.  ``__pycache__`` directories are
    allowed (Python writes them), in directories we own."""
    uid = os.getuid()
    expected_dirs = {""} | {str(Path(rel).parent) for rel in files if str(Path(rel).parent) != "."}
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir
        why = unsafe_reason(os.lstat(dirpath), uid, f"directory {rel_dir or '.'!r}")
        if why:
            return why
        for name in list(dirnames):
            rel = os.path.join(rel_dir, name) if rel_dir else name
            if name in CACHE_DIRS:
                continue
            if rel not in expected_dirs:
                return f"unexpected directory {rel!r}"
        for name in filenames:
            rel = os.path.join(rel_dir, name) if rel_dir else name
            if os.path.basename(rel_dir) in CACHE_DIRS:
                continue
            if rel not in files:
                return f"unexpected file {rel!r}"
            data = _read_regular(Path(dirpath) / name, uid)
            if data is None:
                return f"{rel!r} is not a regular file of ours (or not readable)"
            if data != files[rel]:
                return f"{rel!r} differs from the shipped file"
            seen.add(rel)
    missing = sorted(set(files) - seen)
    return f"missing {missing}" if missing else None


def stage_tree(base: Path, name: str, files: dict[str, bytes]) -> Path:
    """``base/name`` holding exactly ``files``: verified when it exists, else
    written into a private temporary directory renamed into place."""
    private_dir(base)
    final = base / name
    for _ in range(2):
        if os.path.lexists(final):
            why = tree_mismatch(final, files)
            if why is None:
                return final
            raise refuse(final, f"the staged runner is not the one this server ships: {why}")
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=base))
        for rel in sorted(files):
            (tmp / rel).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_new(tmp / rel, files[rel])
        try:
            os.rename(tmp, final)  # a directory never replaces a non-empty one: the first stage wins
            return final
        except OSError:
            _remove_tree(tmp)
    raise refuse(final, "it changed while being staged")


def _remove_tree(path: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            os.rmdir(os.path.join(dirpath, name))
    os.rmdir(path)
