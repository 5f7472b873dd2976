"""The supervisor process and its client: the shipped copy stands alone, the
protocol survives a dying peer, and no process outlives its owner."""

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

from proc_util import alive, ask, live_children, start_supervisor

from tools.remote.local import LocalSlot, stage_runner
from tools.remote.supervisor_client import ConnectionLost, SupervisorClient
from tools.runner.phases import PHASE

OPERATORS = Path(__file__).resolve().parent / "operators"


def wait_for_file(path: Path, within: float = 60.0) -> None:
    """Wait until `path` exists (pid_then_spin.py writes it as its candidate starts spinning)."""
    deadline = time.monotonic() + within
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {within} s"
        time.sleep(0.02)


def wait_dead(*pids: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def test_the_staged_runner_needs_only_stdlib_and_torch(tmp_path: Path) -> None:
    stage = stage_runner(tmp_path / "stage")
    assert stage_runner(tmp_path / "stage") == stage  # staged once per content hash
    code = ("import sys, opdebug_runner.supervisor, opdebug_runner.classify\n"
            "assert 'torch' not in sys.modules, 'the supervisor must not import torch'\n"
            "import opdebug_runner.worker, opdebug_runner.execute, opdebug_runner.devices\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tools', 'pydantic', 'mcp', 'asyncssh'))\n"
            "assert not bad, bad\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(stage)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


def _config(module: str) -> dict:
    stem = module[:-3]
    return {"run_id": "p", "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref",
                                        "modules": [module]}, "tolerance": {"atol": 1e-5, "rtol": 1e-5}}


def _case(case_id: str, **attributes) -> dict:
    return {"id": case_id, "mode": "eager", "inputs": [{"name": "x", "shape": [4, 4]}], "attributes": attributes}


def _modules(tmp_path: Path, *names: str) -> str:
    d = tmp_path / "modules"
    d.mkdir(exist_ok=True)
    for n in names:
        (d / n).write_text((OPERATORS / n).read_text())
    return str(d)


def _event(proc: subprocess.Popen) -> dict:
    """The next event, past the supervisor's news of the phases before the candidate (their budgets)."""
    while True:
        line = proc.stdout.readline()
        assert line, "the supervisor's output ended"
        msg = json.loads(line)
        if msg.get("event") != "phase" or not PHASE[msg["phase"]].prepares:
            return msg


def _hello(proc: subprocess.Popen) -> dict:
    """The hello answer (after the `phase` event `worker_start` of a worker still starting)."""
    while True:
        line = proc.stdout.readline()
        assert line, "the supervisor's output ended"
        event = json.loads(line)
        if event["event"] != "phase":
            return event
        assert event["phase"] == "worker_start" and event["budget_s"] > 0


def test_closing_stdin_mid_case_kills_worker_and_supervisor(tmp_path: Path) -> None:
    modules = _modules(tmp_path, "pid_then_spin.py", "int8_reject.py")
    pid_file = tmp_path / "spinning.pid"
    proc = start_supervisor(tmp_path)
    try:
        ask(proc, {"op": "hello"})
        hello = _hello(proc)
        assert hello["event"] == "hello" and hello["protocol"] == 1 and hello["torch"]
        worker = hello["worker_pid"]
        # a candidate exception; the health check before the next case keeps the same warm worker
        int8 = {"id": "c0", "inputs": [{"name": "x", "shape": [4], "dtype": "int8",
                                        "values": {"kind": "randint", "low": -5, "high": 5}}]}
        ask(proc, {"op": "run", "request_id": "r0", "config": _config("int8_reject.py"), "case": int8,
                    "timeout_s": 30, "modules_dir": modules})
        first = _event(proc)
        assert (first["event"], first["phase"]) == ("phase", "candidate")
        done = _event(proc)
        assert done["result"]["status"] == "unsupported" and done["worker_pid"] == worker
        ask(proc, {"op": "run", "request_id": "r1", "config": _config("pid_then_spin.py"),
                    "case": _case("c1", pid_file=str(pid_file)), "timeout_s": 60, "modules_dir": modules})
        started = _event(proc)
        assert (started["event"], started["phase"]) == ("phase", "candidate") and started["worker_pid"] == worker
        wait_for_file(pid_file)  # the candidate is spinning now
        assert int(pid_file.read_text()) == worker
        proc.stdin.close()  # the server went away
        assert proc.wait(timeout=15) == 0
        assert wait_dead(worker), "the worker outlived its supervisor"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_killed_supervisor_takes_its_worker_along(tmp_path: Path) -> None:
    proc = start_supervisor(tmp_path)
    try:
        ask(proc, {"op": "hello"})
        worker = _hello(proc)["worker_pid"]
        assert alive(worker)
        proc.kill()  # SIGKILL: no chance to clean up; the worker's parent-death signal does it
        proc.wait(timeout=10)
        assert wait_dead(worker)
    finally:
        if proc.poll() is None:
            proc.kill()


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")


@pytest.mark.parametrize("template", ["1", "0"])
def test_a_cpu_worker_is_a_fork_of_the_template_and_a_child_of_the_supervisor(tmp_path: Path, template: str,
                                                                               monkeypatch) -> None:
    # the template (tools/runner/template.py) imported torch; the worker is a new process forked from it,
    # re-parented to the supervisor (which waits for it), titled as a worker; OPDEBUG_WORKER_TEMPLATE=0
    # starts a new interpreter per worker instead.  Shutdown leaves neither.
    monkeypatch.setenv("OPDEBUG_WORKER_TEMPLATE", template)
    proc = start_supervisor(tmp_path)
    try:
        ask(proc, {"op": "hello"})
        worker = _hello(proc)["worker_pid"]
        kids = live_children(proc.pid)
        templates = [p for p in kids if b" template " in _cmdline(p)]
        assert worker in kids and b" worker --device cpu" in _cmdline(worker), _cmdline(worker)
        assert len(templates) == (1 if template == "1" else 0), [_cmdline(p) for p in kids]
        assert worker not in templates
        ask(proc, {"op": "shutdown"})
        assert proc.wait(timeout=30) == 0
        assert wait_dead(worker, *templates)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


_FORK_RACE = """
import ctypes, os, socket, sys, time
out, repo = sys.argv[1], sys.argv[2]  # the worker's main sees its own argv
sys.path.insert(0, repo)
from tools.runner import template
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as the supervisor is
real_fork = os.fork
def slow_fork():  # each fork's child starts late: the worker's first parent has exited by then
    pid = real_fork()
    if pid == 0:
        time.sleep(0.05)
    return pid
os.fork = slow_fork
ours, theirs = socket.socketpair()
def run(args):
    open(os.path.join(out, args[1]), "w").write(str(os.getppid()))
    return 0
pids = []
for i in range(3):
    null = os.open(os.devnull, os.O_RDWR)
    pids.append(template._fork_worker(theirs, ["worker", str(i), "--parent-pid", str(os.getpid())],
                                      [null, os.dup(null), os.dup(null)], run))
print(all(os.waitpid(p, 0)[1] == 0 for p in pids))
"""


def test_a_forked_worker_starts_when_its_first_parent_is_gone_before_it_runs(tmp_path: Path) -> None:
    # the worker waits to be re-parented to the supervisor; it once read its first parent's pid after the fork,
    # where that parent may already have exited: the supervisor's pid, and a wait that never ended (a worker
    # start hung in CI).  Each fork's child here starts late, so the first parent is surely gone.
    done = subprocess.run([sys.executable, "-c", _FORK_RACE, str(tmp_path), str(Path(__file__).parent.parent)],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True", done.stdout + done.stderr
    ran = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert sorted(ran) == ["0", "1", "2"], ran  # every worker ran, each re-parented to the subreaper
    assert len(set(ran.values())) == 1, ran


def test_client_raises_connection_lost_when_the_supervisor_dies_mid_case(tmp_path: Path) -> None:
    modules = _modules(tmp_path, "pid_then_spin.py")
    pid_file = tmp_path / "spinning.pid"

    async def scenario():
        slot = LocalSlot()
        await slot.start()
        try:
            run = type("Run", (), {"config": _config("pid_then_spin.py"), "modules_dir": modules,
                                   "captured_dir": None})
            task = asyncio.ensure_future(slot.run_case(run, _case("c1", pid_file=str(pid_file)), 60))
            deadline = time.monotonic() + 60
            while not pid_file.exists():  # mid-case: the candidate is spinning
                assert time.monotonic() < deadline and not task.done(), "the candidate never started"
                await asyncio.sleep(0.02)
            os.kill(slot.pid, signal.SIGKILL)
            with pytest.raises(ConnectionLost):
                await asyncio.wait_for(task, 20)
            assert not slot.alive
        finally:
            await slot.close()
        return slot.hello["worker_pid"]

    worker = asyncio.run(scenario())
    assert wait_dead(worker)


def test_client_skips_noise_and_reports_a_stream_that_ends() -> None:
    class Reader:
        def __init__(self, lines):
            self.lines = list(lines)

        async def readline(self):
            return self.lines.pop(0) if self.lines else b""

    class Writer:
        def __init__(self):
            self.data = b""

        def write(self, data):
            self.data += data

        async def drain(self):
            pass

    async def scenario():
        client = SupervisorClient(Reader([b"Welcome to the NPU box\n", b'{"event": "hello", "pid": 1}\n']), Writer())
        hello = await client.hello()
        assert hello["pid"] == 1 and list(client.noise) == ["Welcome to the NPU box"]
        with pytest.raises(ConnectionLost, match="ended"):
            await client.run_case({}, {"id": "c"}, 5)

    asyncio.run(scenario())


def test_the_local_worker_keeps_the_callers_pythonpath(tmp_path: Path, monkeypatch) -> None:
    # CANN's set_env.sh puts its te/tbe packages on PYTHONPATH, and an operator package under
    # development often lives there too: the staged runner goes first, the rest stays.
    site = tmp_path / "site"
    site.mkdir()
    (site / "opdebug_extlib.py").write_text("def cand(input):\n    return input * 1\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("OPDEBUG_RUNNER_STAGE", str(tmp_path / "stage"))
    config = {"run_id": "p", "operator": {"name": "ext", "candidate": "opdebug_extlib.cand",
                                          "reference": "torch.clone"}, "tolerance": {"atol": 0, "rtol": 0}}
    run = type("Run", (), {"config": config, "modules_dir": None, "captured_dir": None})()

    async def scenario():
        slot = LocalSlot()
        await slot.start()
        try:
            return await slot.run_case(run, {"id": "c", "inputs": [{"name": "input", "shape": [4]}]}, 30)
        finally:
            await slot.close()

    answer = asyncio.run(scenario())
    assert answer["outcome"] == "result", answer.get("harness_error")
    assert answer["result"]["status"] == "passed"


def test_the_progress_board_keeps_the_last_whole_post(tmp_path: Path) -> None:
    """The worker's board (read by the supervisor at deadlines and deaths): the
    latest whole post wins; a post torn by a killed worker leaves the one before
    it; one too big for a slot is refused (it goes as a message instead)."""
    from tools.runner import board as board_mod

    path = str(tmp_path / "w.board")
    supervisor_side = board_mod.Board(path, create=True)
    worker_side = board_mod.Board(path)
    assert supervisor_side.read() is None
    assert worker_side.post({"request_id": "r1", "events": [{"event": "imported", "at": 1.0}]})
    assert worker_side.post({"request_id": "r1", "events": [{"event": "imported", "at": 1.0},
                                                            {"event": "inputs", "at": 2.0, "input_metadata": {"n": 1}}]})
    assert [e["event"] for e in supervisor_side.read()["events"]] == ["imported", "inputs"]
    # the worker dies inside its next post: that slot is marked in flight (odd) and half written
    nxt = worker_side._seq + 2
    at = (nxt // 2 % 2) * board_mod.SLOT_SIZE
    board_mod._SEQ.pack_into(worker_side._map, at, nxt - 1)
    worker_side._map[at + board_mod.HEADER.size:at + board_mod.HEADER.size + 5] = b'XXXXX'
    assert [e["event"] for e in supervisor_side.read()["events"]] == ["imported", "inputs"]
    # a body whose crc does not match (stores seen out of order) is not taken either
    board_mod._SEQ.pack_into(worker_side._map, at, nxt)
    assert supervisor_side.read()["events"][-1]["event"] == "inputs"
    assert not worker_side.post({"request_id": "r1", "pad": "x" * board_mod.SLOT_SIZE})
    assert supervisor_side.read()["events"][-1]["event"] == "inputs"
    worker_side.close()
    supervisor_side.close()


def test_a_cancelled_case_is_not_kept_waiting_by_an_event_that_arrives_with_the_cancel() -> None:
    """Cancelling run_case_remote while the supervisor's news is arriving cancels the
    case at once (asyncio.wait_for on Python 3.11 returned the event instead, and the
    client went on waiting for the case: minutes for a hanging candidate)."""

    class Writer:
        def write(self, data):
            pass

        async def drain(self):
            pass

    async def scenario():
        reader = asyncio.StreamReader()
        client = SupervisorClient(reader, Writer())
        waiting = asyncio.ensure_future(client._event(60, "the case result"))
        await asyncio.sleep(0.01)  # the client waits for a line
        reader.feed_data(b'{"event": "phase", "phase": "candidate", "request_id": "r"}\n')  # news arrives...
        waiting.cancel()  # ...as the call is cancelled
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(scenario())
