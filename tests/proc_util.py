"""Process helpers shared by the tests that check nothing outlives a run."""

from __future__ import annotations


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
