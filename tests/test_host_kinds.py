"""The host layer: a host kind is one module; every kind's slot is the one SupervisorSlot.

A kind written here - ``dirbox``, a machine of its own under a directory: its
own inventory fields (a strict model), the runner and the run's files staged
into its work_dir there, the supervisor started in a clean environment with
that directory as its home, check_host's probe run the same way - is
registered by this file and runs a whole run through the real pool and
run_case_remote, and check_host reports on it: nothing outside this file
changes for it (references/host-kinds.md).  It is not a subclass of the local
kind, and nothing asks it for an SSH address or known_hosts.  The local
host's ``all_devices`` lends a slot per device it sees, each with its own lease.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import AfterValidator

from tools.check_host import check_host
from tools.errors import ToolError
from tools.plan_cases import plan_cases
from tools.remote import kinds, pool
from tools.remote.bundle import bundle_files, content_hash, dir_files
from tools.remote.host import HostContext, HostKind, SupervisorSlot
from tools.remote.inventory import LOCAL_HOST, AbsPath, HostConfig, matching, parse_inventory
from tools.remote.local import LocalHost, LocalProcess, run_local, seen_devices, spawn
from tools.remote.slot import slot_specs
from tools.remote.stage_files import stage_tree
from tools.run_case_remote import run_case_remote
from tools.schemas import Strict

REPO = Path(__file__).resolve().parent.parent
OPERATORS = Path(__file__).resolve().parent / "operators"
STARTED: list[list[str]] = []
Label = Annotated[str, AfterValidator(matching(re.compile(r"^[a-z][a-z0-9-]{0,31}$"), "dirbox label"))]


class DirBoxFields(Strict):
    """The dirbox kind's own inventory fields: where its machine lives, and what it is called."""

    root: AbsPath
    label: Label = "box"


class DirBoxHost(HostKind):
    """A machine of its own under ``root``: files are staged into its work_dir there (never
    this machine's stage), and everything runs in a clean environment whose home is ``root``."""

    name = "dirbox"
    fields = DirBoxFields

    def __init__(self, cfg: HostConfig, context: HostContext):
        super().__init__(cfg, context)
        self.box = cfg.fields(DirBoxFields)
        self.python = sys.executable

    @property
    def address(self) -> str:
        return f"{self.box.label} at {self.box.root}"

    def _there(self) -> Path:
        return Path(self.box.root + self.cfg.work_dir)

    def _env(self, extra: dict[str, str]) -> list[str]:
        clean = {"PATH": "/usr/bin:/bin", "HOME": self.box.root, "OPDEBUG_TEST_BOX": self.box.label, **extra}
        return ["env", "-i", *(f"{k}={v}" for k, v in clean.items())]

    async def stage_runner(self) -> str:
        files = bundle_files()
        return str(stage_tree(self._there(), f"runner-{content_hash(files)[:12]}", files))

    async def stage_run_files(self, run: Any) -> tuple[str | None, str | None]:
        out: list[str | None] = []
        for name, local in (("modules", run.modules_dir), ("captured", run.captured_dir)):
            files = dir_files(local)
            out.append(
                str(stage_tree(self._there() / "files", f"{name}-{content_hash(files)[:12]}", files)) if files else None
            )
        return out[0], out[1]

    async def start_process(self, argv: list[str], env: dict[str, str], root: str, device: int) -> LocalProcess:
        STARTED.append(argv)
        return await spawn([*self._env({**env, "PYTHONPATH": root}), *argv], {})

    async def run_command(
        self,
        argv: list[str],
        timeout: float,
        *,
        stdin: bytes | None = None,
        merge_stderr: bool = False,
        each_env_script: bool = False,
    ) -> tuple[int | None, str, str]:
        return await run_local([*self._env({}), *argv], timeout, stdin=stdin, merge_stderr=merge_stderr)


HOST_KIND = DirBoxHost
kinds.register(DirBoxHost)


def plan(root: Path, run_id: str, cases: list[dict]) -> None:
    config = {
        "run_id": run_id,
        "operator": {
            "name": "bf16_only",
            "candidate": "bf16_only.cand",
            "reference": "bf16_only.ref",
            "modules": ["bf16_only.py"],
        },
        "tolerance": {"atol": 1e-5, "rtol": 1e-5, "per_dtype": {"bfloat16": {"atol": 8e-3, "rtol": 8e-3}}},
    }
    plan_cases(
        {
            "config": config,
            "cases": cases,
            "module_sources": {"bf16_only.py": (OPERATORS / "bf16_only.py").read_text()},
        },
        root=root,
    )


def run(coro, hellos: list[dict] | None = None):
    async def main():
        try:
            return await coro
        finally:
            if hellos is not None:  # what each warm supervisor said when it started
                hellos.extend(e.slot.hello for e in pool.REGISTRY._entries.values())
            await pool.REGISTRY.close_all()

    return asyncio.run(main())


def test_a_new_remote_host_kind_is_one_module_and_its_inventory_entry(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPDEBUG_RUNNER_STAGE", str(tmp_path / "this-machine-stage"))
    STARTED.clear()
    box = tmp_path / "box"
    inv = parse_inventory(
        {
            "hosts": {
                "box": {
                    "transport": "dirbox",
                    "root": str(box),
                    "label": "npu-box",
                    "device": "cpu",
                    "devices": [0, 1],
                    "work_dir": "/work",
                }
            }
        }
    )
    cases = [
        {"id": f"x-{d}-{i}", "inputs": [{"name": "x", "shape": [4, 8], "dtype": d}], "seed": i}
        for d in ("float32", "bfloat16")
        for i in range(2)
    ]
    plan(tmp_path, "kind", cases)
    hellos: list[dict] = []
    resp = run(run_case_remote("kind", hosts=["box"], root=tmp_path, inventory=inv), hellos)
    states = {o.case_id: o.state for o in resp.outcomes}
    assert states == {
        "x-float32-0": "passed",
        "x-float32-1": "passed",
        "x-bfloat16-0": "numerical_mismatch",
        "x-bfloat16-1": "numerical_mismatch",
    }, states
    # every slot started through the kind's own start_process, from the runner staged on its machine,
    # each under its own device lease there
    assert STARTED and all(argv[-4:] == ["opdebug_runner", "supervise", "--device", "cpu"] for argv in STARTED)
    assert all(argv[1].startswith(f"{box}/work/runner-") for argv in STARTED)
    assert sorted(p.name for p in (box / "work" / "leases").iterdir()) == ["cpu-0.lock", "cpu-1.lock"]
    assert not (tmp_path / "this-machine-stage").exists()  # nothing of the local kind was used
    assert hellos and all(h["env"].get("OPDEBUG_TEST_BOX") == "npu-box" for h in hellos), hellos
    assert isinstance(DirBoxHost(inv.get("box"), pool.REGISTRY.context).new_slot(0), SupervisorSlot)
    assert not issubclass(DirBoxHost, LocalHost)

    check = asyncio.run(check_host("box", inventory=inv))  # the default probe: where the worker runs
    assert check.ok, check.missing
    assert check.transport == "dirbox" and check.address == f"npu-box at {box}"
    assert check.torch and check.devices == [0, 1] and check.work_dir == "/work"


def test_a_kinds_own_fields_are_checked_by_its_model() -> None:
    def refused(entry: dict) -> str:
        with pytest.raises(ToolError) as err:
            parse_inventory({"hosts": {"box": {"transport": "dirbox", "device": "cpu", **entry}}})
        return err.value.message

    assert "hosts.box.root: Field required" in refused({})
    assert "hosts.box.root" in refused({"root": "relative/dir"})
    assert "hosts.box.hostname: Value error, not a field of a 'dirbox' host (its kind's own fields: label, root)" in (
        refused({"root": "/b", "hostname": "h"})
    )
    assert "'Box!' is not a valid dirbox label" in refused({"root": "/b", "label": "Box!"})


def test_an_unknown_host_kind_is_refused_naming_the_field() -> None:
    with pytest.raises(ToolError) as err:
        parse_inventory({"hosts": {"box": {"transport": "kubectl", "device": "cpu"}}})
    assert "hosts.box.transport" in err.value.message and "no host kind 'kubectl'" in err.value.message
    for name in ("pool", "host_probe"):  # modules of tools/remote that are no host kind: never imported
        with pytest.raises(ToolError) as err:
            parse_inventory({"hosts": {"box": {"transport": name, "device": "cpu"}}})
        assert f"no host kind {name!r}" in err.value.message
    assert "tools.remote.host_probe" not in sys.modules  # it probes when imported


def test_the_local_host_lends_every_device_it_sees_when_the_inventory_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPDEBUG_RUNNER_STAGE", str(tmp_path / "stage"))
    seen = seen_devices("cpu")
    default = parse_inventory({})
    assert [s.device for s in slot_specs([default.get("local")])] == [0]  # the default is unchanged
    inv = parse_inventory(
        {"hosts": {"local": {"transport": "local", "device": "cpu", "all_devices": True, "concurrency": 2}}}
    )
    specs = slot_specs([inv.get("local")])
    assert [s.device for s in specs] == list(range(min(2, seen)))
    if seen < 2:
        pytest.skip("one CPU seen here: one slot")
    cases = [{"id": f"x-{i}", "inputs": [{"name": "x", "shape": [4, 8]}], "seed": i} for i in range(4)]
    plan(tmp_path, "all", cases)
    resp = run(run_case_remote("all", inventory=inv, root=tmp_path))
    assert {o.state for o in resp.outcomes} == {"passed"}
    leases = sorted(p.name for p in (tmp_path / "stage" / "leases").iterdir())
    assert leases == ["cpu-0.lock", "cpu-1.lock"]  # each slot under a lease of its own


def test_all_devices_is_refused_on_a_host_of_another_machine() -> None:
    with pytest.raises(ToolError) as err:
        parse_inventory({"hosts": {"a": {"hostname": "h", "known_hosts": "/dev/null", "all_devices": True}}})
    assert "all_devices" in err.value.message


def test_no_module_outside_the_host_layer_branches_on_a_transport_name() -> None:
    hits = []
    for root in ("tools", "mcp_server"):
        for path in (REPO / root).rglob("*.py"):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("tools/remote/"):
                continue
            hits += [
                f"{rel}: {line.strip()}"
                for line in path.read_text().splitlines()
                if re.search(r"\b(transport|scheduler)\s*[!=]=\s*['\"](local|ssh|slurm|command)", line)
            ]
    assert hits == []
    # check_host, the pool and verify ask the kind: never its name, whether it is remote, or a scheduler
    for rel in ("tools/check_host.py", "tools/remote/pool.py", "tools/artifacts/verify.py"):
        code = (REPO / rel).read_text()
        found = re.findall(r"\w\.(?:remote|scheduler)\b(?!\.)|\.transport\s*[!=]=|\.name\s*[!=]=\s*['\"]", code)
        assert found == [], rel


def test_the_lease_handshake_is_defined_once() -> None:
    readers = [
        p.name
        for p in (REPO / "tools" / "remote").glob("*.py")
        if '"lease_acquired"' in p.read_text() or "'lease_acquired'" in p.read_text()
    ]
    assert sorted(readers) == ["host.py", "lease.py"]  # the helper that says it, the slot that reads it


def test_the_built_in_local_host_is_a_valid_entry() -> None:
    """LOCAL_HOST is built without validation (validating imports the kinds, which import the inventory)."""
    assert HostConfig.model_validate(LOCAL_HOST.model_dump()) == LOCAL_HOST
    assert kinds.kind_of(LOCAL_HOST) is LocalHost
