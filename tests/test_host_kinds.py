"""The host layer: a host kind is one module; every kind's slot is the one SupervisorSlot.

A kind written here - the supervisor as a local subprocess started through
``env`` under the kind name ``relayed`` - is registered by this file and runs a
whole run through the real pool and run_case_remote: nothing outside this file
changes for it (references/host-kinds.md).  The local host's ``all_devices``
lends a slot per device it sees, each with its own lease.
"""

from __future__ import annotations

import asyncio
import re
import sys
import shutil
from pathlib import Path

import pytest

from tools.errors import ToolError
from tools.plan_cases import plan_cases
from tools.remote import kinds, pool
from tools.remote.host import SupervisorSlot
from tools.remote.inventory import LOCAL_HOST, HostConfig, parse_inventory
from tools.remote.local import LocalHost, LocalProcess, seen_devices
from tools.remote.slot import slot_specs
from tools.run_case_remote import run_case_remote

REPO = Path(__file__).resolve().parent.parent
OPERATORS = Path(__file__).resolve().parent / "operators"
STARTED: list[list[str]] = []


class RelayedHost(LocalHost):
    """A host kind of its own: the supervisor starts through ``env`` (another program
    in front of it), with a variable that says which kind started it."""

    name = "relayed"

    async def start_process(self, argv: list[str], env: dict[str, str], root: str, device: int) -> LocalProcess:
        STARTED.append(argv)
        env_prog = shutil.which("env") or "/usr/bin/env"
        return await super().start_process([env_prog, "OPDEBUG_TEST_KIND=relayed", *argv], env, root, device)


kinds.register(RelayedHost)


def plan(root: Path, run_id: str, cases: list[dict]) -> None:
    config = {"run_id": run_id, "operator": {"name": "bf16_only", "candidate": "bf16_only.cand",
                                            "reference": "bf16_only.ref", "modules": ["bf16_only.py"]},
              "tolerance": {"atol": 1e-5, "rtol": 1e-5, "per_dtype": {"bfloat16": {"atol": 8e-3, "rtol": 8e-3}}}}
    plan_cases({"config": config, "cases": cases,
                "module_sources": {"bf16_only.py": (OPERATORS / "bf16_only.py").read_text()}}, root=root)


def run(coro, hellos: list[dict] | None = None):
    async def main():
        try:
            return await coro
        finally:
            if hellos is not None:  # what each warm supervisor said when it started
                hellos.extend(e.slot.hello for e in pool.REGISTRY._entries.values())
            await pool.REGISTRY.close_all()
    return asyncio.run(main())


def test_a_new_host_kind_is_one_module_and_its_inventory_entry(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPDEBUG_RUNNER_STAGE", str(tmp_path / "stage"))
    STARTED.clear()
    inv = parse_inventory({"hosts": {"box": {"transport": "relayed", "device": "cpu", "devices": [0, 1]}}})
    cases = [{"id": f"x-{d}-{i}", "inputs": [{"name": "x", "shape": [4, 8], "dtype": d}], "seed": i}
             for d in ("float32", "bfloat16") for i in range(2)]
    plan(tmp_path, "kind", cases)
    hellos: list[dict] = []
    resp = run(run_case_remote("kind", hosts=["box"], root=tmp_path, inventory=inv), hellos)
    states = {o.case_id: o.state for o in resp.outcomes}
    assert states == {"x-float32-0": "passed", "x-float32-1": "passed",
                      "x-bfloat16-0": "numerical_mismatch", "x-bfloat16-1": "numerical_mismatch"}, states
    # every slot started through the kind's own start_process, each under its own device lease
    assert STARTED and all(argv[-4:] == ["opdebug_runner", "supervise", "--device", "cpu"] for argv in STARTED)
    leases = {Path(argv[argv.index("--lease-file") + 1]).name for argv in STARTED}
    assert leases <= {"cpu-0.lock", "cpu-1.lock"} and leases
    assert hellos and all(h["env"].get("OPDEBUG_TEST_KIND") == "relayed" for h in hellos), hellos
    # the pool made the kind's slots: the common SupervisorSlot
    assert isinstance(RelayedHost(inv.get("box"), pool.REGISTRY.context).new_slot(0), SupervisorSlot)


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
    inv = parse_inventory({"hosts": {"local": {"transport": "local", "device": "cpu", "all_devices": True,
                                               "concurrency": 2}}})
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
            hits += [f"{rel}: {line.strip()}" for line in path.read_text().splitlines()
                     if re.search(r"\b(transport|scheduler)\s*[!=]=\s*['\"](local|ssh|slurm)", line)]
    assert hits == []


def test_the_lease_handshake_is_defined_once() -> None:
    readers = [p.name for p in (REPO / "tools" / "remote").glob("*.py")
               if '"lease_acquired"' in p.read_text() or "'lease_acquired'" in p.read_text()]
    assert sorted(readers) == ["host.py", "lease.py"]  # the helper that says it, the slot that reads it


def test_the_built_in_local_host_is_a_valid_entry() -> None:
    """LOCAL_HOST is built without validation (validating imports the kinds, which import the inventory)."""
    assert HostConfig.model_validate(LOCAL_HOST.model_dump()) == LOCAL_HOST
    assert kinds.kind_of(LOCAL_HOST) is LocalHost and not LocalHost.remote
