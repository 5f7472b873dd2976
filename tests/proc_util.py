"""Process helpers shared by the tests that check nothing outlives a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def alive(pid: int) -> bool:
    """True when the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False



def live_children(pid: int) -> list[int]:
    """The live (non-zombie) direct children of `pid` (any thread's)."""
    import os

    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(entry))
    return kids


def start_supervisor(tmp_path: Path) -> subprocess.Popen:
    """A staged runner's supervisor on CPU, spoken to over its stdin/stdout (bytes)."""
    from tools.remote.local import stage_runner

    env = dict(os.environ, PYTHONPATH=str(stage_runner(tmp_path / "stage")))
    return subprocess.Popen([sys.executable, "-m", "opdebug_runner", "supervise", "--device", "cpu"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=tmp_path,
                            start_new_session=True)


def ask(proc: subprocess.Popen, msg: dict) -> None:
    """One request line to a supervisor."""
    proc.stdin.write(json.dumps(msg).encode() + b"\n")
    proc.stdin.flush()
