"""What a Slurm transport can rely on, shown on a real single-node Slurm.

Every test talks to real munged, slurmctld and slurmd daemons (tests/slurm_fixture.py)
through the real srun, squeue, scancel and scontrol.  Each slot of the transport will
be one ``srun`` job step whose stdin/stdout is the runner's line channel; these tests
pin down how such a step starts, waits, is told apart from its neighbours, is killed
by the scheduler, and is cleaned up by name.  Timings go to stdout (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurm_fixture import SlurmCluster, processes_mentioning, require_slurm, slurm_cluster  # noqa: F401

PY = sys.executable

# A task that says hello with what identifies its device, then echoes lines until EOF.
ECHO = r"""
import json, os, sys
keys = ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS",
        "SLURM_JOB_GRES", "SLURM_STEP_GRES", "SLURM_GPUS_ON_NODE")
seen = {k: os.environ[k] for k in keys if k in os.environ}
print("hello", os.environ["SLURM_JOB_ID"], os.environ["SLURM_STEP_ID"], os.isatty(1), json.dumps(seen), flush=True)
for line in sys.stdin:
    sys.stdout.write("echo " + line)
    sys.stdout.flush()
print("bye", flush=True)
"""

# The line slurmstepd writes to the step's stderr when the scheduler kills it (22.05:
# "*** STEP 7.0 ON vm CANCELLED AT <time> ***", "... DUE TO TIME LIMIT ***"; older
# releases leave out "ON <node>", and PREEMPTION / NODE FAILURE are other reasons).
CANCELLED = re.compile(r"\*\*\* (?:STEP|JOB) (\d+)(?:\.\d+)?(?: ON (\S+))? CANCELLED AT (\S+)(?: DUE TO ([^*]+?))? \*\*\*")


class Step:
    """One ``srun`` client process with reader threads on its stdout and stderr,
    so a test can wait for a line with a timeout instead of blocking forever."""

    def __init__(self, cluster: SlurmCluster, name: str, code: str, *opts: str,
                 gres: str | None = "npu:1", new_session: bool = False) -> None:
        self.name = name
        argv = ["srun", f"--partition={cluster.partition}", f"--job-name={name}"]
        if gres:
            argv.append(f"--gres={gres}")
        self.argv = [*argv, *opts, PY, "-c", code]
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, env=cluster.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=new_session)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.err: list[str] = []
        threading.Thread(target=self._pump_out, daemon=True).start()
        self._err_thread = threading.Thread(target=self._pump_err, daemon=True)
        self._err_thread.start()

    def _pump_out(self) -> None:
        for raw in self.proc.stdout:
            self.lines.put(raw.decode(errors="replace"))
        self.lines.put(None)

    def _pump_err(self) -> None:
        for raw in self.proc.stderr:
            self.err.append(raw.decode(errors="replace"))

    def line(self, timeout: float = 20.0) -> str | None:
        """The next stdout line (None at EOF); fails the test after `timeout`."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"{self.name}: no stdout line within {timeout}s; stderr so far: {''.join(self.err)!r}")

    def send(self, text: str) -> None:
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass

    def wait(self, timeout: float = 30.0) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._err_thread.join(timeout=5)
        return rc

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def hello(step: Step) -> tuple[str, dict]:
    """The echo task's first line: (job id, the device variables it saw)."""
    first = step.line()
    assert first and first.startswith("hello "), (first, step.stderr)
    _, job_id, step_id, _tty, seen = first.split(" ", 4)
    assert step_id == "0"  # srun outside an allocation: a new job whose only step is 0
    return job_id, json.loads(seen)


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def job_state(cluster: SlurmCluster, job_id: str) -> tuple[str, str]:
    """(state, reason) of a job, finished ones included (they stay MinJobAge seconds: 300 in the fixture, so a
    test that read it after a long run still finds it)."""
    out = cluster.run("squeue", "-h", "--states=all", "-j", job_id, "-o", "%T|%r").stdout.strip()
    state, reason = out.split("|")
    return state, reason


@pytest.fixture
def steps(slurm_cluster):
    """The Step objects a test started; their jobs are cancelled by name afterwards and
    the test's jobs must have left squeue before the next test starts."""
    started: list[Step] = []
    yield started
    # Cancel first, while srun still listens: a step whose srun is already dead makes
    # slurmstepd retry its exit message for ~2.5 s before the job leaves COMPLETING.
    for name in {s.name for s in started if s.proc.poll() is None}:
        slurm_cluster.run("scancel", f"--name={name}")
    for s in started:
        try:
            s.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            s.kill()
    wait_for(lambda: not slurm_cluster.jobs(), 20, "the test's jobs to leave squeue")


# --------------------------------------------------------------------------


def test_the_cluster_is_up_with_one_idle_node_and_four_count_only_npus(slurm_cluster):
    print(f"\n[slurm] daemons started and node idle in {slurm_cluster.startup_s:.2f}s")
    assert slurm_cluster.startup_s < 15
    out = slurm_cluster.run("sinfo", "-h", "-o", "%P|%T|%G|%N").stdout.strip()
    assert out == f"{slurm_cluster.partition}*|idle|npu:4|{slurm_cluster.node}"
    for name, path in slurm_cluster.logs.items():
        assert path.is_file(), name


def test_a_step_is_a_bidirectional_line_channel(slurm_cluster, steps):
    """A step's stdin/stdout carries lines both ways while it stays alive.  A line of up
    to 1024 bytes (newline included) makes a round trip in well under a millisecond;
    a longer one is cut into several I/O messages by srun/slurmstepd and each
    direction then waits ~44 ms (Nagle's algorithm against a delayed ACK on their TCP
    connection), whatever the length, until the stream is big enough to flow."""
    s = Step(slurm_cluster, "opdebug-chan-0", ECHO)
    steps.append(s)
    job_id, _ = hello(s)
    startup = time.monotonic() - s.t0
    assert slurm_cluster.jobs(name="opdebug-chan-0")[0].state == "RUNNING"

    def round_trips(payload_len: int, n: int) -> list[float]:
        out = []
        for i in range(n):
            text = f"{i:04d}" + "x" * (payload_len - 5) + "\n"  # the echo adds 5 bytes: "echo "
            t = time.monotonic()
            s.send(text)
            assert s.line() == "echo " + text
            out.append(time.monotonic() - t)
        return sorted(out)

    small = round_trips(1024 - 5, 20)  # the echoed line is exactly 1024 bytes
    big = round_trips(1024 - 4, 6)     # one byte more each way
    # Still the same live step after the exchange: one job, one step, running.
    assert [j.job_id for j in slurm_cluster.jobs(name="opdebug-chan-0")] == [job_id]
    huge = "y" * 1_000_000  # one long line passes whole (no pty, no 4096-byte canonical line limit)
    s.send(huge + "\n")
    assert s.line() == "echo " + huge + "\n"
    s.close_stdin()  # EOF on srun's stdin reaches the task: it leaves its loop and exits 0
    assert s.line() == "bye\n"
    assert s.line() is None
    assert s.wait() == 0
    assert s.stderr == ""  # srun itself says nothing on a step that starts at once and exits 0
    print(f"\n[slurm] srun start -> first line {startup * 1000:.0f} ms; round trip of a 1024-byte line "
          f"median {small[len(small) // 2] * 1000:.2f} ms (max {small[-1] * 1000:.2f}), of a 1025-byte line "
          f"median {big[len(big) // 2] * 1000:.1f} ms")
    assert startup < 10
    assert small[len(small) // 2] < 0.025
    assert big[len(big) // 2] > 0.035, "lines over 1024 bytes no longer pay the ~2x44 ms: update the notes"


def test_unbuffered_srun_gives_the_task_a_pty_for_stdout(slurm_cluster, steps):
    """``srun -u`` runs the task with a pseudo-terminal as stdout; without it stdout is a
    pipe and a line the task flushes still arrives at once (the channel above)."""
    for opt, tty in (("-u", "True"), (None, "False")):
        s = Step(slurm_cluster, "opdebug-pty-0", ECHO, *([opt] if opt else []))
        steps.append(s)
        first = s.line()
        assert first.split(" ")[3] == tty, first
        s.close_stdin()
        assert s.wait() == 0


def test_four_steps_run_at_once_and_a_fifth_waits_for_an_npu(slurm_cluster, steps):
    running = [Step(slurm_cluster, f"opdebug-pool-{i}", ECHO) for i in range(4)]
    steps.extend(running)
    hellos = [hello(s) for s in running]
    ids = [h[0] for h in hellos]
    assert len(set(ids)) == 4
    assert sorted(j.state for j in slurm_cluster.jobs()) == ["RUNNING"] * 4
    # A count-only GRES hands out a count, not a device: no variable tells the steps apart.
    assert all(seen == {} for _, seen in hellos), hellos
    for job_id in ids:
        detail = slurm_cluster.run("scontrol", "-d", "show", "job", job_id).stdout
        assert "JOB_GRES=npu:1" in detail and "GRES=npu(CNT:1)" in detail, detail

    fifth = Step(slurm_cluster, "opdebug-pool-4", ECHO)
    steps.append(fifth)
    out = wait_for(lambda: slurm_cluster.run("squeue", "-h", "--name=opdebug-pool-4",
                                             "-o", "%i|%T|%r|%j").stdout.strip(), what="the fifth job")
    job5, state, reason, name = out.split("|")
    assert (state, reason, name) == ("PENDING", "Resources", "opdebug-pool-4")
    wait_for(lambda: f"srun: job {job5} queued and waiting for resources" in fifth.stderr,
             what="srun's 'queued and waiting' line")
    assert fifth.lines.empty()  # nothing on stdout while it waits

    running[0].close_stdin()  # one slot ends cleanly...
    assert running[0].wait() == 0
    t = time.monotonic()
    assert hello(fifth)[0] == job5  # ...and the waiting step starts on its npu
    waited = time.monotonic() - t
    wait_for(lambda: f"srun: job {job5} has been allocated resources" in fifth.stderr, what="the allocation line")
    print(f"\n[slurm] pending step started {waited * 1000:.0f} ms after a running one exited")
    assert waited < 10
    for s in running[1:] + [fifth]:
        s.close_stdin()
        assert s.wait() == 0


def test_a_step_killed_by_the_scheduler_is_told_apart_from_a_crash(slurm_cluster, steps):
    # scancel of a running step: SIGTERM to the task, and slurmstepd's CANCELLED line on stderr.
    s = Step(slurm_cluster, "opdebug-kill-0", ECHO)
    steps.append(s)
    job_id, _ = hello(s)
    r = slurm_cluster.run("scancel", "--name=opdebug-kill-0")
    assert r.returncode == 0 and r.stderr == ""
    assert s.wait() == 128 + signal.SIGTERM
    m = CANCELLED.search(s.stderr)
    assert m and m.group(1) == job_id and m.group(2) == slurm_cluster.node and m.group(4) is None, s.stderr
    assert "srun: error: %s: task 0: Terminated" % slurm_cluster.node in s.stderr
    # COMPLETING (KillWait, epilog) for a moment, then CANCELLED while the job stays in memory.
    wait_for(lambda: job_state(slurm_cluster, job_id) == ("CANCELLED", "None"), what="state CANCELLED")

    # A task that handles SIGTERM chooses srun's exit code: the stderr line, not the code, says "scheduler".
    handles = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\nprint('up', flush=True)\ntime.sleep(60)\n"
    s = Step(slurm_cluster, "opdebug-kill-1", handles)
    steps.append(s)
    assert s.line() == "up\n"
    slurm_cluster.run("scancel", "--name=opdebug-kill-1")
    assert s.wait() == 7
    assert CANCELLED.search(s.stderr) and "task 0: Exited with exit code 7" in s.stderr, s.stderr

    # Crashes of the task itself: no CANCELLED line, srun's code is 128+signal or the exit code.
    crashes = {
        "segv": ("import os, signal\nprint('up', flush=True)\nos.kill(os.getpid(), signal.SIGSEGV)\n",
                 128 + signal.SIGSEGV, "task 0: Segmentation fault", "JobLaunchFailure"),  # sic, in 22.05
        "exit3": ("import sys\nprint('up', flush=True)\nsys.exit(3)\n", 3, "task 0: Exited with exit code 3",
                  "NonZeroExitCode"),
    }
    for tag, (code, rc, says, reason) in crashes.items():
        s = Step(slurm_cluster, f"opdebug-crash-{tag}", code)
        steps.append(s)
        assert s.line() == "up\n"
        assert s.wait() == rc
        assert says in s.stderr and not CANCELLED.search(s.stderr), s.stderr
        job_id = wait_for(lambda: [j.job_id for j in slurm_cluster.jobs(name=f"opdebug-crash-{tag}", states="all")],
                          what="the crashed job")[0]
        wait_for(lambda: job_state(slurm_cluster, job_id) == ("FAILED", reason), what=f"state FAILED ({reason})")

    # scancel of a step still waiting for an npu: srun exits 1 before the task ever ran.
    blockers = [Step(slurm_cluster, f"opdebug-block-{i}", ECHO) for i in range(4)]
    steps.extend(blockers)
    for b in blockers:
        hello(b)
    waiting = Step(slurm_cluster, "opdebug-wait-0", ECHO)
    steps.append(waiting)
    wait_for(lambda: "queued and waiting for resources" in waiting.stderr, what="the waiting step")
    slurm_cluster.run("scancel", "--name=opdebug-wait-0")
    assert waiting.wait() == 1
    assert "srun: Job has been cancelled" in waiting.stderr
    assert "Unable to allocate resources: Job/step already completing or completed" in waiting.stderr
    assert waiting.line() is None


def test_signals_to_the_srun_client(slurm_cluster, steps):
    """What the transport's own signal to srun does: SIGTERM (and SIGHUP) make srun
    SIGKILL the task at once; a single SIGINT only prints status unless ``-X`` is
    given, then the task gets SIGINT; with ``--quit-on-interrupt`` srun sends the task
    its Ctrl-C *and* ends the step at once, so the task exits by its handler or is
    killed first, whichever the node's scheduler runs first (7 or 137: a race of
    srun's own, which the transport never uses - the option is refused).  Each signal
    goes once srun says the task started (``-v``: "_task_start: ... tasks started")."""
    # the task's last line (None: none) for each exit status; with --quit-on-interrupt the kill may also land
    # after the handler printed and before it exited, so 137 may follow the handler's line
    code = ("import signal, sys, time\n"
            "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
            "    signal.signal(s, lambda n, f: (print('got', n, flush=True), sys.exit(7)))\n"
            "print('up', flush=True)\ntime.sleep(60)\n")
    got_int = f"got {int(signal.SIGINT)}\n"
    cases = [((), signal.SIGTERM, {128 + signal.SIGKILL: (None,)}), ((), signal.SIGHUP, {128 + signal.SIGKILL: (None,)}),
             (("-X",), signal.SIGINT, {7: (got_int,)}),
             (("--quit-on-interrupt",), signal.SIGINT, {7: (got_int,), 128 + signal.SIGKILL: (None, got_int)})]
    for opts, sig, outcomes in cases:
        s = Step(slurm_cluster, "opdebug-sig-0", code, "-v", *opts)
        steps.append(s)
        assert s.line() == "up\n"
        wait_for(lambda: "tasks started" in s.stderr, what="srun's word that the task started")
        s.proc.send_signal(sig)
        rc = s.wait()
        assert rc in outcomes, (opts, sig, rc, s.stderr)
        assert s.line() in outcomes[rc], (opts, sig)
        if rc == 128 + signal.SIGKILL:
            assert "task 0: Killed" in s.stderr, s.stderr
        if sig != signal.SIGINT or "--quit-on-interrupt" in opts:
            assert "srun: forcing job termination" in s.stderr, s.stderr
        wait_for(lambda: not slurm_cluster.jobs(name="opdebug-sig-0"), what="the job to end")
    s = Step(slurm_cluster, "opdebug-sig-1", code, "-v")
    steps.append(s)
    assert s.line() == "up\n"
    wait_for(lambda: "tasks started" in s.stderr, what="srun's word that the task started")
    s.proc.send_signal(signal.SIGINT)
    wait_for(lambda: "srun: interrupt (one more within 1 sec to abort)" in s.stderr, what="srun's interrupt notice")
    time.sleep(1.5)
    assert s.proc.poll() is None and slurm_cluster.jobs(name="opdebug-sig-1")[0].state == "RUNNING"


def test_jobs_are_found_and_cancelled_by_name(slurm_cluster, steps):
    names = [f"opdebug-run42-{i}" for i in range(3)]
    for n in names:
        steps.append(Step(slurm_cluster, n, ECHO))
    for s in steps:
        hello(s)
    listed = slurm_cluster.run("squeue", "-h", f"--name={','.join(names)}", "-o", "%j").stdout.split()
    assert sorted(listed) == names  # squeue --name takes a comma-separated list
    # scancel --name takes ONE name: a comma-separated list matches no job and still exits 0.
    r = slurm_cluster.run("scancel", f"--name={names[0]},{names[1]}")
    assert r.returncode == 0 and r.stderr == ""
    time.sleep(0.5)
    assert sorted(j.name for j in slurm_cluster.jobs()) == names
    # An unknown name is not an error either.
    assert slurm_cluster.run("scancel", "--name=opdebug-nosuchrun-0").returncode == 0
    for n in names:
        assert slurm_cluster.run("scancel", f"--name={n}", "--user=root").returncode == 0
    t = time.monotonic()
    wait_for(lambda: not slurm_cluster.jobs(), what="the named jobs to leave squeue")
    print(f"\n[slurm] 3 jobs cancelled by name left squeue in {(time.monotonic() - t) * 1000:.0f} ms")
    assert [s.wait() for s in steps] == [128 + signal.SIGTERM] * 3


def test_a_sigkilled_srun_and_a_sigkilled_server(slurm_cluster, steps):
    """Four ways the client side dies, all at once: srun alone SIGKILLed (its helper
    child ends the job); srun's whole process group SIGKILLed (the job runs on); the
    server that holds srun's pipes SIGKILLed while srun lives on, with a task that reads
    its stdin (EOF ends it) or one stuck in a case (runs on).  What runs on is ended by
    ``scancel --name``."""
    server = ("import subprocess, sys, time\n"
              "p = subprocess.Popen(['srun', '--job-name=' + sys.argv[2], sys.executable, '-c', sys.argv[1]],"
              " stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)\n"
              "assert p.stdout.readline() == b'up\\n'\n"
              "print(p.pid, flush=True)\ntime.sleep(120)\n")
    reads = "import sys\nprint('up', flush=True)\nfor line in sys.stdin: pass\n"
    stuck = "import time\nprint('up', flush=True)\ntime.sleep(120)\n"
    alone = Step(slurm_cluster, "opdebug-orphan-alone", ECHO, new_session=True)
    group = Step(slurm_cluster, "opdebug-orphan-group", ECHO, new_session=True)
    steps.extend([alone, group])
    servers = {tag: subprocess.Popen([PY, "-c", server, task, f"opdebug-server-{tag}"], env=slurm_cluster.env,
                                     stdout=subprocess.PIPE, start_new_session=True)
               for tag, task in (("reads", reads), ("stuck", stuck))}
    hello(alone)
    hello(group)
    sruns = {tag: int(srv.stdout.readline()) for tag, srv in servers.items()}
    try:
        t = time.monotonic()
        alone.proc.kill()
        os.killpg(group.proc.pid, signal.SIGKILL)
        for srv in servers.values():
            srv.kill()
        alone.proc.wait()
        group.proc.wait()
        for srv in servers.values():
            srv.wait()
        wait_for(lambda: not slurm_cluster.jobs(name="opdebug-orphan-alone"), 15, "the job of a SIGKILLed srun to end")
        print(f"\n[slurm] job of a SIGKILLed srun gone after {(time.monotonic() - t) * 1000:.0f} ms")
        wait_for(lambda: not slurm_cluster.jobs(name="opdebug-server-reads"), 15, "the job whose task saw EOF to end")
        wait_for(lambda: not Path(f"/proc/{sruns['reads']}").exists(), 15, "the orphaned srun to exit")
        print(f"[slurm] job whose server was SIGKILLed (task reads stdin) gone after "
              f"{(time.monotonic() - t) * 1000:.0f} ms")
        time.sleep(max(0.0, t + 1.5 - time.monotonic()))  # the clean-ups above show within ~0.1 s
        assert [j.state for j in slurm_cluster.jobs(name="opdebug-orphan-group")] == ["RUNNING"]
        assert [j.state for j in slurm_cluster.jobs(name="opdebug-server-stuck")] == ["RUNNING"]
        assert Path(f"/proc/{sruns['stuck']}").exists()  # an orphaned srun, waiting on its step
        t = time.monotonic()
        for name in ("opdebug-orphan-group", "opdebug-server-stuck"):
            slurm_cluster.run("scancel", f"--name={name}")
        wait_for(lambda: not slurm_cluster.jobs(), 15, "the jobs left behind to be cancelled")
        wait_for(lambda: not Path(f"/proc/{sruns['stuck']}").exists(), 15, "the stuck step's srun to exit")
        print(f"[slurm] jobs left behind, cancelled by name, gone after {(time.monotonic() - t) * 1000:.0f} ms")
    finally:
        for pid in sruns.values():
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)


def test_a_killed_cluster_starts_again_in_the_same_directory_and_device_files_give_indexes(tmp_path):
    """The fixture's own guarantees: a cluster whose daemons were SIGKILLed (stale munge
    socket, pid files, job state) starts again in the same directory, stop() leaves
    nothing behind; and with ``File=`` device entries the scheduler gives each step a
    distinct index, visible in ``scontrol -d show job`` only (no variable for a GRES
    named npu)."""
    require_slurm()
    cluster = SlurmCluster(tmp_path / "slurm", gres_files=True).start()
    try:
        for proc in list(cluster.procs.values()):
            proc.kill()
            proc.wait()
        assert (cluster.munge_dir / "munge.socket").exists() and (cluster.base / "slurmctld.pid").exists()
        cluster.procs.clear()
        cluster.start()
        print(f"\n[slurm] restart over a SIGKILLed cluster's files: node idle in {cluster.startup_s:.2f}s")
        running = [Step(cluster, f"opdebug-idx-{i}", ECHO) for i in range(4)]
        try:
            hellos = [hello(s) for s in running]
            assert all(seen == {} for _, seen in hellos), hellos
            indexes = []
            for job_id, _ in hellos:
                detail = cluster.run("scontrol", "-d", "show", "job", job_id).stdout
                m = re.search(r"GRES=npu:1\(IDX:(\d+)\)", detail)
                assert m, detail
                indexes.append(int(m.group(1)))
            assert sorted(indexes) == [0, 1, 2, 3]
        finally:
            for s in running:
                s.close_stdin()
                s.wait()
    finally:
        killed = cluster.stop()
    assert not killed
    assert not processes_mentioning(cluster.marker)


# A step past its time limit (``--time=1``: killed at slurmctld's next 30-second check after its
# minute, DUE TO TIME LIMIT, state TIMEOUT) is tested in test_slurm_hosts.py beside the slot whose
# limit it shares: one wait of 60-90 s for both.
