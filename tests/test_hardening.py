"""Harness faults never become the operator's verdict, and nothing a case
starts outlives it (issue 11).  Real supervisors, real workers, real signals.

The run_case_remote tests share one event loop, hence one warm local slot.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from proc_util import alive, ask, start_supervisor

from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.remote.local import stage_runner
from tools.remote.pool import REGISTRY
from tools.run_case_remote import run_case_remote

OPERATORS = Path(__file__).resolve().parent / "operators"


def plan(root: Path, run_id: str, module: str, cases: list[dict], **operator) -> None:
    stem = module[:-3]
    config = {"run_id": run_id,
              "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref",
                           "modules": [module], **operator},
              "tolerance": {"atol": 1e-5, "rtol": 1e-5}}
    plan_cases({"config": config, "cases": cases,
                "module_sources": {module: (OPERATORS / module).read_text()}}, root=root)


def inp(shape=(4, 8)) -> dict:
    return {"name": "x", "shape": list(shape), "dtype": "float32"}


def run(loop, root, run_id, **kw):
    return loop.run_until_complete(run_case_remote(run_id, root=root, **kw))


def states(response) -> dict[str, str]:
    return {o.case_id: o.state for o in response.outcomes}


def answer(root: Path, run_id: str, case_id: str) -> dict:
    return json.loads((root / run_id / "raw-results" / case_id / "worker-result.json").read_text())


def wait_dead(pids, within: float = 15.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def wait_file(path: Path, within: float = 60.0) -> str:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


# -- wrong verdicts ------------------------------------------------------------


def test_a_worker_killed_while_importing_the_modules_leaves_the_case_pending(loop, tmp_path: Path) -> None:
    plan(tmp_path, "dies", "dies_at_import.py", [{"id": "c1", "inputs": [inp()]}])
    resp = run(loop, tmp_path, "dies")
    (out,) = resp.outcomes
    assert out.state == "pending" and not out.recorded, out
    assert "SIGKILL" in out.error and "import" in out.error and "never ran" in out.error
    assert RunStore(tmp_path, "dies").read_results() == {}


def test_a_fd_closed_by_one_case_is_never_blamed_on_the_next(loop, tmp_path: Path) -> None:
    cases = [{"id": "close1", "inputs": [inp()], "attributes": {"close_fd": 1}},
             {"id": "after1", "inputs": [inp()]},
             {"id": "close2", "inputs": [inp()], "attributes": {"close_fd": 2}},
             {"id": "after2", "inputs": [inp()]}]
    plan(tmp_path, "fds", "closes_stdio.py", cases)
    resp = run(loop, tmp_path, "fds")
    assert states(resp) == {c["id"]: "passed" for c in cases}, [o.summary for o in resp.outcomes]
    close1, after1 = answer(tmp_path, "fds", "close1"), answer(tmp_path, "fds", "after1")
    assert "fd 1" in close1["worker_replaced_after"]
    assert after1["worker_pid"] != close1["worker_pid"] and after1["worker_restarted"]
    assert "fd 2" in answer(tmp_path, "fds", "close2")["worker_replaced_after"]


def test_a_module_that_hangs_at_import_is_bounded_and_the_run_goes_on(loop, tmp_path: Path) -> None:
    plan(tmp_path, "hang", "hangs_at_import.py", [{"id": f"c{i}", "inputs": [inp()]} for i in range(3)],
         import_timeout_s=2)
    t0 = time.monotonic()
    resp = run(loop, tmp_path, "hang")
    assert time.monotonic() - t0 < 60
    assert states(resp) == {"c0": "pending", "c1": "pending", "c2": "pending"}
    for out in resp.outcomes:
        assert "import" in out.error and "import_timeout_s" in out.error and "connection" not in out.error, out
    # the slot is sound for the next run
    plan(tmp_path, "after-hang", "closes_stdio.py", [{"id": "ok", "inputs": [inp()]}])
    assert states(run(loop, tmp_path, "after-hang")) == {"ok": "passed"}


def test_a_worker_killed_from_outside_says_so_and_is_rerun_with_one_call(loop, tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    plan(tmp_path, "ext", "pid_then_spin.py",
         [{"id": "c1", "inputs": [inp()], "attributes": {"pid_file": str(pid_file)}, "timeout_s": 120}])

    async def scenario():
        task = asyncio.ensure_future(run_case_remote("ext", root=tmp_path))
        while not pid_file.exists():
            await asyncio.sleep(0.05)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the host's OOM killer, say
        return await asyncio.wait_for(task, 60)

    resp = loop.run_until_complete(scenario())
    (out,) = resp.outcomes
    assert out.state == "crash" and out.signature == "SIGKILL"
    err = RunStore(tmp_path, "ext").read_results()["c1"].error
    assert "did not send it" in err.message and "phase: candidate" in err.message
    assert out.rerun_case["id"] == "c1.rerun" and out.rerun_case["attributes"] == {"pid_file": str(pid_file)}
    assert "rerun_case" in resp.rerun_hint
    planned = plan_cases({"run_id": "ext", "append": True, "cases": [out.rerun_case]}, root=tmp_path)
    assert planned.added == ["c1.rerun"]


# -- nothing left behind ---------------------------------------------------------


def test_helpers_a_case_started_are_ended_after_it(loop, tmp_path: Path) -> None:
    pid_file = tmp_path / "helper-pids"
    plan(tmp_path, "helpers", "leaves_helpers.py",
         [{"id": "c1", "inputs": [inp()], "attributes": {"pid_file": str(pid_file)}}])
    assert states(run(loop, tmp_path, "helpers")) == {"c1": "passed"}
    *helpers, worker = map(int, pid_file.read_text().split())
    assert wait_dead(helpers, 10) == []  # the plain child, the setsid one and the daemon
    assert alive(worker)  # the warm worker stays for the next case


def _until(proc: subprocess.Popen, predicate) -> dict:
    while True:
        line = proc.stdout.readline()
        assert line, "the supervisor's output ended"
        msg = json.loads(line)
        if predicate(msg):
            return msg


def _modules(tmp_path: Path, name: str) -> str:
    d = tmp_path / "modules"
    d.mkdir(exist_ok=True)
    (d / name).write_text((OPERATORS / name).read_text())
    return str(d)


def _config(module: str) -> dict:
    stem = module[:-3]
    return {"run_id": "p", "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref",
                                        "modules": [module]}, "tolerance": {"atol": 1e-5, "rtol": 1e-5}}


def test_a_sigkilled_supervisor_leaves_no_helper_of_its_worker(tmp_path: Path) -> None:
    pid_file = tmp_path / "helper-pids"
    proc = start_supervisor(tmp_path)
    try:
        ask(proc, {"op": "run", "request_id": "r1", "config": _config("leaves_helpers.py"),
                    "case": {"id": "c1", "inputs": [inp()], "attributes": {"pid_file": str(pid_file), "spin": True}},
                    "timeout_s": 120, "modules_dir": _modules(tmp_path, "leaves_helpers.py")})
        pids = list(map(int, wait_file(pid_file).split()))
        assert all(alive(p) for p in pids)
        proc.kill()  # no chance to clean up: the watchdog does
        proc.wait(timeout=10)
        assert wait_dead(pids) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_worker_killed_while_building_the_inputs_is_not_the_candidates_crash(tmp_path: Path) -> None:
    proc = start_supervisor(tmp_path)
    try:
        ask(proc, {"op": "hello"})
        worker = _until(proc, lambda m: m.get("event") == "hello")["worker_pid"]
        case = {"id": "big", "inputs": [{"name": "x", "shape": [2**27], "dtype": "float32"}]}
        ask(proc, {"op": "run", "request_id": "r1", "config": _config("closes_stdio.py"), "case": case,
                    "timeout_s": 60, "modules_dir": _modules(tmp_path, "closes_stdio.py")})
        _until(proc, lambda m: m.get("event") == "phase" and m.get("phase") == "inputs")
        os.kill(worker, signal.SIGKILL)  # an OOM kill while the inputs are built
        done = _until(proc, lambda m: m.get("event") == "case_done" or m.get("phase") in ("compile", "candidate"))
        assert done["event"] == "case_done", "the candidate never ran, yet the case was started"
        assert done["outcome"] == "harness_error" and "result" not in done
        assert done["harness_error"]["where"] == "inputs" and "SIGKILL" in done["harness_error"]["message"]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_metrics_at_the_edge_of_float64_do_not_overflow() -> None:
    import torch

    from tools.runner.compare import compare_outputs

    ref = torch.tensor([8e307, -8e307, 1.0], dtype=torch.float64)
    (cmp,) = compare_outputs(-ref, ref, names=None, tolerance={"atol": 1e-5, "rtol": 1e-5}, strict_dtype=True)
    assert cmp["cosine"] == -1.0 and cmp["max_abs"] == 1.6e308 and cmp["max_rel"] == 2.0
    assert cmp["mismatch_count"] == 3 and cmp["error_balance"] == pytest.approx(-2 / 3)
    ref = torch.tensor([1e308, -1e308, 1.0], dtype=torch.float64)
    (cmp,) = compare_outputs(-ref, ref, names=None, tolerance={"atol": 1e-5, "rtol": 1e-5}, strict_dtype=True)
    assert cmp["cosine"] == -1.0 and cmp["max_rel"] == 2.0 and cmp["worst_index"] == [0]
    assert cmp["max_abs"] is None  # 2e308 is past float64: unknown, never a wrong finite number


# -- code that is not ours never runs --------------------------------------------------


def test_a_stage_directory_others_can_write_or_own_is_refused(tmp_path: Path) -> None:
    from tools.errors import ToolError

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(ToolError) as exc:
        stage_runner(shared)
    assert exc.value.code == "unsafe_path" and "writable by" in exc.value.message
    if os.getuid() == 0:  # another user's directory (we can hand it over as root)
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(ToolError, match="owned by uid 65534"):
            stage_runner(theirs)


def test_a_planted_runner_copy_is_never_run(tmp_path: Path) -> None:
    from tools.errors import ToolError

    stage = stage_runner(tmp_path / "stage")
    main = stage / "opdebug_runner" / "__main__.py"
    original = main.read_bytes()
    main.write_bytes(original + b"\nimport os; os.system('touch /tmp/pwned')\n")
    with pytest.raises(ToolError, match="differs from the shipped file"):
        stage_runner(tmp_path / "stage")
    main.write_bytes(original)
    assert stage_runner(tmp_path / "stage") == stage
    (stage / "torch.py").write_text("raise SystemExit('shadowed torch')\n")  # would shadow torch on PYTHONPATH
    with pytest.raises(ToolError, match="unexpected file 'torch.py'"):
        stage_runner(tmp_path / "stage")


def test_a_lease_file_symlink_never_touches_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    leases = tmp_path / "work" / "leases"
    leases.mkdir(parents=True, mode=0o700)
    (leases / "cpu-0.lock").symlink_to(victim)
    lease = Path(__file__).resolve().parent.parent / "tools" / "remote" / "lease.py"
    proc = subprocess.run([sys.executable, str(lease), "--lease-file", str(leases / "cpu-0.lock"), "--wait", "1",
                           "--", "true"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 77, proc
    assert json.loads(proc.stdout.splitlines()[-1])["event"] == "lease_refused"
    assert victim.read_text() == "precious\n"


def test_two_processes_on_one_run_execute_each_case_once(loop, tmp_path: Path) -> None:
    loop.run_until_complete(REGISTRY.close_all())  # this process's warm slot holds the cpu:0 lease while it lives
    log = tmp_path / "calls.log"
    plan(tmp_path, "twice", "counts_calls.py",
         [{"id": f"c{i}", "inputs": [inp()], "attributes": {"log_file": str(log), "tag": f"c{i}"}}
          for i in range(4)])
    env = dict(os.environ, OPDEBUG_EVIDENCE_ROOT=str(tmp_path))
    cmd = [sys.executable, "-m", "tools.cli", "run", "--root", str(tmp_path), "--run-id", "twice", "--json"]
    repo = Path(__file__).resolve().parent.parent
    procs = [subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    calls = log.read_text().split()
    assert sorted(calls) == ["c0", "c1", "c2", "c3"], calls  # each case ran once, across both processes
    assert RunStore(tmp_path, "twice").pending_case_ids() == []


def _capture_plan(root: Path, run_id: str, files: dict) -> dict:
    config = {"run_id": run_id, "operator": {"name": "id", "candidate": "torch.clone", "reference": "torch.clone"}}
    return {"config": config, "captured_files": files,
            "cases": [{"id": "c1", "inputs": [{"name": "x", "shape": [2], "values": {"kind": "captured",
                                                                                    "captured": next(iter(files))}}]}]}


def test_captured_files_outside_the_workspace_or_not_regular_are_refused(tmp_path: Path) -> None:
    from tools.errors import ToolError

    root = tmp_path / "ws" / ".vaws-local" / "operator-debug"
    fifo = tmp_path / "ws" / "pipe"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    (tmp_path / "ws" / "link").symlink_to("/etc/passwd")
    cases = {"/etc/passwd": "outside the workspace", "/proc/self/environ": "outside the workspace",
             str(tmp_path / "ws" / "link"): "outside the workspace", str(fifo): "not a regular file"}
    for path, why in cases.items():
        t0 = time.monotonic()
        with pytest.raises(ToolError) as exc:
            plan_cases(_capture_plan(root, "cap", {"act": path}), root=root)
        assert exc.value.code == "bad_file" and why in exc.value.message, (path, exc.value.message)
        assert time.monotonic() - t0 < 10  # a FIFO never blocks the call
        assert not (root / "cap").exists()  # no half-made run: the retry is not refused [run_exists]
    good = tmp_path / "ws" / "act.bin"
    good.write_bytes(b"\0" * 8)
    assert plan_cases(_capture_plan(root, "cap", {"act": str(good)}), root=root).created


# -- input that is refused, and said so ----------------------------------------------


def test_a_trailing_newline_is_refused_everywhere(tmp_path: Path) -> None:
    from tools.errors import ToolError
    from tools.evidence import safe_component
    from tools.remote.inventory import parse_inventory

    with pytest.raises(ToolError, match="safe slug"):
        safe_component("nl\n")
    config = {"run_id": "nl", "operator": {"name": "m", "candidate": "m.cand", "reference": "m.ref",
                                           "modules": ["m.py\n"]}}
    with pytest.raises(ToolError) as exc:
        plan_cases({"config": config, "cases": [{"id": "c\n", "inputs": [inp()]}],
                    "module_sources": {"m.py\n": "def cand(x): return x\n"}}, root=tmp_path)
    assert "config.operator.modules.0" in exc.value.message and "cases.0.id" in exc.value.message
    assert list(tmp_path.iterdir()) == []
    for field, value in (("hostname", "127.0.0.1\n"), ("user", "me\n"), ("work_dir", "/tmp/w\n"), ("work_dir", "/")):
        with pytest.raises(ToolError) as exc:
            parse_inventory({"hosts": {"h": {"hostname": "127.0.0.1", field: value}}})
        assert f"hosts.h.{field}" in exc.value.message, exc.value.message


def test_a_nan_metric_is_refused_as_not_finite() -> None:
    from pydantic import ValidationError

    from tools.schemas import Comparison

    for field in ("max_abs", "mismatch_ratio"):
        with pytest.raises(ValidationError) as exc:
            Comparison.model_validate({"output": "o", "passed": False, field: float("nan")})
        assert "must be a finite number" in str(exc.value) and "greater than" not in str(exc.value)


def test_a_full_disk_names_the_write_that_failed_and_keeps_every_outcome(loop, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.getuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)],
                                          capture_output=True).returncode != 0:
        pytest.skip("needs a small tmpfs (root and mount)")
    try:
        plan(disk, "full", "closes_stdio.py", [{"id": f"c{i}", "inputs": [inp()]} for i in range(2)])
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # fill what is left
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        resp = run(loop, disk, "full")
        assert [o.state for o in resp.outcomes] == ["pending", "pending"]
        for out in resp.outcomes:
            assert "No space left on device (ENOSPC)" in out.error and "writing " in out.error, out.error
        filler.unlink()
        assert states(run(loop, disk, "full")) == {"c0": "passed", "c1": "passed"}  # the retry records them
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_lines_the_mcp_sdk_cannot_read_are_answered_over_stdio(tmp_path: Path) -> None:
    """Raw lines on the server's stdin (no client library sends broken JSON)."""
    proc = subprocess.Popen([sys.executable, "-m", "mcp_server", "--evidence-root", str(tmp_path)],
                            cwd=Path(__file__).resolve().parent.parent, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def send(line: str) -> None:
        proc.stdin.write(line.encode("utf-8", "surrogatepass") + b"\n")
        proc.stdin.flush()

    def reply() -> dict:
        line = proc.stdout.readline()
        assert line, "the server's output ended"
        return json.loads(line)

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        assert reply()["id"] == 1
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        broken = {
            2: '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"plan_cases"',  # truncated
            3: '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"plan_cases","arguments":{"a":'
               + "[" * 300 + "]" * 300 + "}}}",  # nested too deep
            4: '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x\\ud800","arguments":{}}}',
        }
        for request_id, line in broken.items():
            send(line)
            answer = reply()
            assert answer["id"] == request_id and answer["error"]["code"] == -32700, answer
        send(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}))
        listed = reply()
        assert listed["id"] == 5 and {t["name"] for t in listed["result"]["tools"]} >= {"plan_cases"}
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_the_cli_answers_json_too_deep_to_read(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"config": {"x": ' + "[" * 5000 + "]" * 5000 + "}}")
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "plan", "--config", str(deep), "--root",
                           str(tmp_path / "ev")], cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "[bad_file]" in proc.stderr and "nested too deeply" in proc.stderr, proc.stderr
