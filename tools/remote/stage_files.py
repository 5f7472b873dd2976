"""Staging files so that only our own code runs: the checks, and the stager a command host runs.

Standard library only: this module is what ``safe_stage`` (this machine) and
the SFTP upload (``ssh``) check directories with, and its source is what the
``command`` kind runs on the far side of its command prefix as
``python -c SOURCE WORK_DIR`` (run as ``__main__``), reading one staging
request from stdin: a JSON line ``{"name": "runner", "size": N, "sha256": H}``
then N bytes of an uncompressed tar.  The stager checks the bytes against the
hash, takes regular files with plain relative names only, and stages them as
``WORK_DIR/[files/]NAME-<content hash 12>`` exactly as this machine's stage is
made (`stage_tree`); it answers one JSON line, ``staged`` with the path (and
whether it was written now) or ``stage_refused`` with the reason.

NPU hosts are shared by many users, so a directory another user owns, or can
write to, may hold a planted "runner": a stage, work or lease directory must be
a real directory owned by the user that runs the code and writable by nobody
else; a staged tree is used only after its files are compared, byte for byte,
with the files shipped; new files are created with ``O_EXCL | O_NOFOLLOW``
inside a fresh private directory that is renamed into place when complete.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Protocol

CACHE_DIRS = ("__pycache__",)
KINDS = ("runner", "modules", "captured")  # what a command host is sent: WORK/runner-H, WORK/files/modules-H
MAX_STAGE_BYTES = 1 << 30


class Unsafe(Exception):
    """A path that must not be trusted (``path``, ``reason``)."""

    def __init__(self, path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason


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


def content_hash(files: dict[str, bytes]) -> str:
    """The hash a shipped tree is stored under (names and contents)."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def private_dir(path: Path) -> Path:
    """``path`` as a directory we own and nobody else can write; created (mode 700) when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    why = unsafe_reason(os.lstat(path), os.getuid(), "the directory")
    if why:
        raise Unsafe(path, why)
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
            raise Unsafe(final, f"the staged files are not the ones this server ships: {why}")
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=base))
        for rel in sorted(files):
            (tmp / rel).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_new(tmp / rel, files[rel])
        try:
            os.rename(tmp, final)  # a directory never replaces a non-empty one: the first stage wins
            return final
        except OSError:
            remove_tree(tmp)
    raise Unsafe(final, "it changed while being staged")


def remove_tree(path: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            os.rmdir(os.path.join(dirpath, name))
    os.rmdir(path)


# --------------------------------------------------------------------------
# The stager of a command host: one request on stdin, one answer on stdout
# --------------------------------------------------------------------------

_REL = re.compile(r"^[A-Za-z0-9_.-]{1,128}(?:/[A-Za-z0-9_.-]{1,128}){0,7}$")


def tar_files(data: bytes) -> dict[str, bytes]:
    """Relative path -> content of the regular files of an uncompressed tar: plain
    relative names only, no links, devices or '..'."""
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if member.isdir():
                continue
            if not member.isreg() or not _REL.fullmatch(member.name) or ".." in parts or "." in parts:
                raise ValueError(f"refused tar member {member.name!r} (regular files with plain relative names only)")
            extracted = tar.extractfile(member)
            files[member.name] = extracted.read() if extracted is not None else b""
    return files


def _read_exactly(stream, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = stream.read(min(left, 1 << 20))
        if not chunk:
            raise ValueError(f"the stream ended {left} bytes short of {size}")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def stage_request(work_dir: str, stream) -> tuple[str, bool]:
    """Read one request from ``stream`` and stage it under ``work_dir``; the staged directory,
    and whether it was written now (False: the same files were there already)."""
    header = json.loads(stream.readline().decode("utf-8"))
    kind, size, digest = header.get("name"), header.get("size"), header.get("sha256")
    if kind not in KINDS or not isinstance(size, int) or not 0 < size <= MAX_STAGE_BYTES:
        raise ValueError(f"a staging request names one of {KINDS} and a size up to {MAX_STAGE_BYTES}")
    data = _read_exactly(stream, size)
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError("the staged bytes do not match the sha256 they were sent with")
    files = tar_files(data)
    base = private_dir(Path(work_dir))
    if kind != "runner":
        base = private_dir(base / "files")
    name = f"{kind}-{content_hash(files)[:12]}"
    new = not os.path.lexists(base / name)
    return str(stage_tree(base, name, files)), new


def main() -> int:
    try:
        path, new = stage_request(sys.argv[1], sys.stdin.buffer)
    except (Unsafe, ValueError, OSError, tarfile.TarError) as exc:
        sys.stdout.write(json.dumps({"event": "stage_refused", "reason": f"{type(exc).__name__}: {exc}"}) + "\n")
        return 3
    sys.stdout.write(json.dumps({"event": "staged", "path": path, "new": new}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
