"""The bundle every transport ships to a host: the runner package, the
lease helper and the Slurm step helper, stored under one content hash (local
stage, SSH work_dir, or a Slurm host's shared work_dir)."""

from __future__ import annotations

from pathlib import Path

from .stage_files import content_hash as content_hash  # the hash every stage is stored under

RUNNER_SRC = Path(__file__).resolve().parent.parent / "runner"
RUNNER_PACKAGE = "opdebug_runner"


def runner_sources() -> dict[str, bytes]:
    """File name -> content of the runner package (what every host gets)."""
    return {p.name: p.read_bytes() for p in sorted(RUNNER_SRC.glob("*.py"))}


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


def dir_files(local: Path | None) -> dict[str, bytes]:
    """A run's directory of user modules or captured inputs as shipped: its visible files."""
    if local is None or not local.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(local.iterdir()) if p.is_file() and not p.name.startswith(".")}


def dir_stamp(path: Path | None) -> list:
    """What says a run's directory changed (names, sizes, times) without reading it."""
    if path is None or not path.is_dir():
        return []
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir() if p.is_file())
