"""Process helpers shared by the tests that check nothing outlives a run."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """True when the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
