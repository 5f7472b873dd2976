"""The bundle every transport ships to a host: the runner package, the
lease helper and the Slurm step helper, stored under one content hash (local
stage, SSH work_dir, or a Slurm host's shared work_dir)."""

from __future__ import annotations

import hashlib
from pathlib import Path

RUNNER_SRC = Path(__file__).resolve().parent.parent / "runner"
RUNNER_PACKAGE = "opdebug_runner"


def runner_sources() -> dict[str, bytes]:
    """File name -> content of the runner package (what every host gets)."""
    return {p.name: p.read_bytes() for p in sorted(RUNNER_SRC.glob("*.py"))}


def content_hash(files: dict[str, bytes]) -> str:
    """The hash a shipped bundle is stored under (names and contents)."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


LEASE_SRC = Path(__file__).resolve().parent / "lease.py"
LEASE_SCRIPT = "opdebug_lease.py"
STEP_SRC = Path(__file__).resolve().parent / "slurm_step.py"
STEP_SCRIPT = "opdebug_step.py"


def bundle_files() -> dict[str, bytes]:
    """Relative path on the host -> content: the runner package, the lease
    helper and the Slurm step helper (what every transport stages, under one
    content hash)."""
    files = {f"{RUNNER_PACKAGE}/{name}": data for name, data in runner_sources().items()}
    files[LEASE_SCRIPT] = LEASE_SRC.read_bytes()
    files[STEP_SCRIPT] = STEP_SRC.read_bytes()
    return files
