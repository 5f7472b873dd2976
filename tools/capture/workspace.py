"""Reading a file the caller names on the server's machine, safely.

``captured_files`` paths come from a tool argument: the server must not copy
``/etc/shadow`` or ``/proc/self/environ`` into the evidence (and ship it to
every host), nor hang on ``/proc/kmsg`` or a FIFO.  So a named file must:

- resolve (symlinks followed) inside an allowed root: the server's working
  directory, the evidence root's project (the directory that holds
  ``.vaws-local``, else the evidence root's parent), or a directory listed in
  ``$OPDEBUG_WORKSPACE`` (``os.pathsep``-separated) - the one rule for
  ``captured_files`` and for capture directories (capture_plan.py);
- be a regular file (opened ``O_NOFOLLOW | O_NONBLOCK`` and checked with
  ``fstat``: no device, FIFO, socket or directory) of at most ``limit`` bytes;
- be read completely within ``timeout_s`` seconds.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from ..errors import ToolError

ROOTS_ENV = "OPDEBUG_WORKSPACE"
READ_TIMEOUT_S = 60.0


def allowed_roots(evidence_root: Path) -> list[Path]:
    root = Path(evidence_root).expanduser().resolve()
    project = root.parent.parent if root.parent.name == ".vaws-local" else root.parent
    roots = [Path.cwd().resolve(), project]
    roots += [Path(p).expanduser().resolve() for p in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if p]
    return list(dict.fromkeys(roots))


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def read_workspace_file(
    given: str, field: str, roots: list[Path], *, limit: int, timeout_s: float = READ_TIMEOUT_S
) -> bytes:
    """The file's bytes, or a ToolError naming ``field`` and what is wrong."""
    path = Path(given).expanduser()
    real = Path(os.path.realpath(path))
    if not _inside(real, roots):
        raise ToolError(
            f"{field}: {given!r} is outside the workspace ({', '.join(map(str, roots))}); copy the "
            f"file into the workspace, or add its directory to ${ROOTS_ENV}",
            code="bad_file",
        )
    box: dict = {}

    def read() -> None:
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode):
                    box["error"] = "not a regular file"
                    return
                if st.st_size > limit:
                    box["error"] = f"{st.st_size} bytes, over the {limit} byte limit for one file"
                    return
                data = fh.read(limit + 1)
            if len(data) > limit:
                box["error"] = f"over the {limit} byte limit for one file"
            else:
                box["data"] = data
        except OSError as exc:
            box["error"] = f"cannot read it ({exc.strerror or exc})"

    thread = threading.Thread(target=read, name="read-captured", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise ToolError(f"{field}: reading {given!r} did not finish within {timeout_s:g} s", code="bad_file")
    if "error" in box:
        raise ToolError(f"{field}: {given!r} is refused: {box['error']}", code="bad_file")
    return box["data"]
