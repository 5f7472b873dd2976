"""A real single-node Slurm cluster on this machine for the Slurm transport tests.

`SlurmCluster` is Debian's munged, slurmctld and slurmd (slurm-wlm 22.05)
started in the foreground with a throw-away configuration under one temporary
directory: its own munge key, munge socket, pid, state, spool and log files and
two free TCP ports, so it never touches a system-wide Slurm or munge and a
stale file of an earlier run cannot break the next start.  The node is this
machine (``hostname -s``) at 127.0.0.1 with a count-only generic resource
``npu`` (``Name=npu Count=4``: four slots, no device files).  Nothing is
mocked: `srun`, `squeue`, `scancel` and `sinfo` talk to the real daemons; they
find them through ``SLURM_CONF`` in `SlurmCluster.env`.

`stop()` cancels every job, stops the daemons by pid, then SIGKILLs whatever
still carries the cluster's directory in its command line or environment (a
slurmstepd, a task, an srun client) and checks that nothing is left.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from sshd_fixture import free_port, processes_mentioning  # noqa: F401 - processes_mentioning is re-exported

MUNGED = "/usr/sbin/munged"
SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
CLIENTS = ("srun", "squeue", "scancel", "sinfo", "scontrol")


def short_hostname() -> str:
    """The node name slurmd answers to: ``hostname -s``."""
    return socket.gethostname().split(".")[0]


def slurm_missing() -> str | None:
    """Which Slurm or munge binaries are missing (a sentence), or None."""
    missing = [p for p in (MUNGED, SLURMCTLD, SLURMD) if not os.access(p, os.X_OK)]
    missing += [c for c in CLIENTS if shutil.which(c) is None]
    if missing:
        return (f"Slurm is missing ({', '.join(missing)}): install slurm-wlm and munge "
                "(scripts/test.sh does)")
    return None


def _listening(port: int) -> bool:
    """A TCP socket in LISTEN state on `port` (read from /proc/net, no probe connection)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                return True
    return False


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:300]
    except OSError:
        return "?"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@dataclass(frozen=True)
class SlurmJob:
    """One line of ``squeue -h -o '%i|%T|%r|%j'``: job id, state, reason, name."""

    job_id: str
    state: str
    reason: str
    name: str


@dataclass
class SlurmCluster:
    """munged + slurmctld + slurmd with a throw-away config under `base`.

    `cpus` is what the node line declares (``SlurmdParameters=config_overrides``
    lets it exceed the real core count, so four one-CPU steps fit on a 2-core
    machine); the npu count, not the CPUs, is what makes a fifth step wait.
    With `gres_files` the npu entries get fake device files under ``base/dev``
    (``File=``) instead of a bare count: the scheduler then hands out device
    indexes (``scontrol -d show job``: ``GRES=npu:1(IDX:2)``)."""

    base: Path
    partition: str = "opdebug"
    gres_name: str = "npu"
    gres_count: int = 4
    cpus: int = 8
    gres_files: bool = False
    kill_wait_s: int = 1
    node: str = field(default_factory=short_hostname)
    ctld_port: int = field(default_factory=free_port)
    slurmd_port: int = field(default_factory=free_port)
    startup_s: float | None = None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.base = Path(self.base)
        self.conf = self.base / "slurm.conf"
        self.munge_dir = self.base / "munge"
        if len(str(self.munge_dir / "munge.socket")) > 100:  # AF_UNIX paths end at 108 bytes
            # a deep base (pytest-xdist's popen-gwN level, a long test name): munge's
            # files go to a short directory of their own, removed with the cluster
            self.munge_dir = Path(tempfile.mkdtemp(prefix="opdebug-munge-"))
        self.munge_socket = self.munge_dir / "munge.socket"
        self.log_dir = self.base / "log"

    # ------------------------------------------------------------------ paths

    @property
    def marker(self) -> str:
        """What every process of this cluster carries in its command line or
        environment (a path inside `base`; the slash keeps ``slurm1`` from matching
        ``slurm10``)."""
        return f"{self.base}/"

    @property
    def logs(self) -> dict[str, Path]:
        """The daemons' logs: slurmctld's and slurmd's log files, munged's stderr
        (munged in the foreground logs there), and each daemon's console output."""
        d = self.log_dir
        return {"munged": d / "munged.out", "slurmctld": d / "slurmctld.log", "slurmd": d / "slurmd.log",
                "slurmctld.out": d / "slurmctld.out", "slurmd.out": d / "slurmd.out"}

    @property
    def env(self) -> dict[str, str]:
        """The environment for srun/squeue/scancel/sinfo/scontrol against this
        cluster: ``SLURM_CONF`` set, and no ``SLURM_*`` variable inherited from
        an outer allocation (srun inside a job would start a step of that job)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    # ----------------------------------------------------------------- config

    def _write_config(self) -> None:
        # Fresh runtime directories every start: a stale munge socket or lock,
        # pid file, job state or spool of an earlier run is never read.
        for d in {self.munge_dir, *(self.base / sub for sub in ("state", "spool", "log", "dev"))}:
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True, mode=0o700)
        key = self.munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        if self.gres_files:
            devices = [self.base / "dev" / f"{self.gres_name}{i}" for i in range(self.gres_count)]
            for d in devices:
                d.symlink_to("/dev/null")  # slurmd wants a character or block device
            gres_line = "\n".join(f"NodeName={self.node} Name={self.gres_name} File={d}" for d in devices)
        else:
            gres_line = f"NodeName={self.node} Name={self.gres_name} Count={self.gres_count}"
        (self.base / "gres.conf").write_text(gres_line + "\n")
        (self.base / "plugstack.conf").write_text("")  # not Debian's /etc/slurm/plugstack.conf
        b = self.base
        self.conf.write_text(textwrap.dedent(f"""\
            ClusterName=opdebug
            SlurmctldHost={self.node}(127.0.0.1)
            SlurmctldPort={self.ctld_port}
            SlurmdPort={self.slurmd_port}
            SlurmUser=root
            SlurmdUser=root
            AuthType=auth/munge
            CredType=cred/munge
            AuthInfo=socket={self.munge_socket}
            StateSaveLocation={b}/state
            SlurmdSpoolDir={b}/spool
            SlurmctldPidFile={b}/slurmctld.pid
            SlurmdPidFile={b}/slurmd.pid
            SlurmctldLogFile={self.logs['slurmctld']}
            SlurmdLogFile={self.logs['slurmd']}
            PlugStackConfig={b}/plugstack.conf
            ProctrackType=proctrack/linuxproc
            TaskPlugin=task/none
            MpiDefault=none
            MailProg=/bin/true
            SelectType=select/cons_tres
            SelectTypeParameters=CR_CPU
            SlurmdParameters=config_overrides
            GresTypes={self.gres_name}
            ReturnToService=2
            KillWait={self.kill_wait_s}
            MinJobAge=300
            AccountingStorageType=accounting_storage/none
            JobAcctGatherType=jobacct_gather/none
            JobCompType=jobcomp/none
            NodeName={self.node} NodeAddr=127.0.0.1 NodeHostname={self.node} CPUs={self.cpus} RealMemory=1000 Gres={self.gres_name}:{self.gres_count} State=UNKNOWN
            PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
            """))

    # -------------------------------------------------------------- lifecycle

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.log_dir / f"{name}.out", "ab")
        try:
            self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                env=self.env, cwd=self.base, start_new_session=True)
        finally:
            log.close()

    def _check_running(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                out = (self.log_dir / f"{name}.out").read_text(errors="replace")
                raise RuntimeError(f"{name} exited with {proc.returncode}: {out[-3000:]}")

    def start(self, timeout: float = 30.0) -> "SlurmCluster":
        """Start munged, slurmctld and slurmd and wait until sinfo shows the node idle
        (about 0.1 s here); on any failure whatever was started is stopped again."""
        t0 = time.monotonic()
        try:
            self._start(t0 + timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _wait(self, what: str, ready, deadline: float, step: float) -> None:
        while not ready():
            self._check_running()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} (logs: {self.log_dir})")
            time.sleep(step)

    def _start(self, deadline: float) -> None:
        self._write_config()
        m = self.munge_dir
        # --force: the pytest temp dir's parents are mode 0700, and munged refuses a
        # socket directory that is not searchable by everyone unless forced (root
        # runs every client here, so nobody else needs the socket).
        self._spawn("munged", [MUNGED, "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={m}/munge.key", f"--pid-file={m}/munged.pid",
                               f"--seed-file={m}/munged.seed", f"--log-file={self.log_dir}/munged.log",
                               "--num-threads=4"])
        self._wait("munged did not create its socket", self.munge_socket.exists, deadline, 0.01)
        # -c: a clean start, no job state of an earlier controller is recovered.
        self._spawn("slurmctld", [SLURMCTLD, "-D", "-c", "-f", str(self.conf)])
        # slurmd only once slurmctld listens: its first registration then succeeds at
        # once, and sinfo does not sit in its own retry sleep (0.1 s to idle, not 1-2.5 s).
        self._wait(f"slurmctld does not listen on port {self.ctld_port}",
                   lambda: _listening(self.ctld_port), deadline, 0.01)
        self._spawn("slurmd", [SLURMD, "-D", "-N", self.node, "-f", str(self.conf)])

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-n", self.node, "-o", "%T"], env=self.env,
                                 capture_output=True, text=True).stdout.strip()
            return out == "idle"

        self._wait("the Slurm node did not become idle", idle, deadline, 0.05)

    def stop(self, timeout: float = 20.0) -> list[int]:
        """Cancel every job, stop the daemons by pid, then SIGKILL whatever still
        carries this cluster's directory.  Returns the pids that had to be killed
        that way; raises AssertionError when anything is still alive after it."""
        deadline = time.monotonic() + timeout
        ctld = self.procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            try:
                ids = [j.job_id for j in self.jobs()]
                if ids:
                    subprocess.run(["scancel", *ids], env=self.env, capture_output=True)
                while self.jobs() and time.monotonic() < deadline:
                    time.sleep(0.1)
            except subprocess.CalledProcessError:
                pass  # a controller that cannot answer: the daemons go by pid below
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.procs.clear()
        leftovers = processes_mentioning(self.marker)
        self.killed_at_stop = {pid: cmdline(pid) for pid in leftovers}
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        end = time.monotonic() + 10
        while any(_alive(p) for p in leftovers) and time.monotonic() < end:
            time.sleep(0.05)
        still = processes_mentioning(self.marker)
        assert not still, f"processes of the Slurm cluster at {self.base} outlived stop(): {still}"
        if not self.munge_dir.is_relative_to(self.base):
            shutil.rmtree(self.munge_dir, ignore_errors=True)
        return leftovers

    # ---------------------------------------------------------------- queries

    def jobs(self, name: str | None = None, states: str | None = None) -> list[SlurmJob]:
        """The cluster's jobs as squeue lists them (by default: pending, running,
        completing...; ``states="all"`` adds the finished ones still in memory)."""
        argv = ["squeue", "-h", "-o", "%i|%T|%r|%j"]
        if name is not None:
            argv += ["--name", name]
        if states is not None:
            argv += ["--states", states]
        out = subprocess.run(argv, env=self.env, capture_output=True, text=True, check=True).stdout
        return [SlurmJob(*line.split("|", 3)) for line in out.splitlines() if line.strip()]

    def run(self, *argv: str, **kw) -> subprocess.CompletedProcess:
        """A Slurm client command (squeue, scancel, scontrol...) against this cluster."""
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, **kw)


# --------------------------------------------------------------------------
# pytest fixtures (import them into a test module to use them)
# --------------------------------------------------------------------------

import pytest  # noqa: E402


def slurm_required() -> bool:
    """In CI (``CI`` set) or with ``OPDEBUG_REQUIRE_SLURM=1`` (scripts/test.sh sets it)
    a missing Slurm fails the Slurm tests instead of skipping them."""
    return os.environ.get("OPDEBUG_REQUIRE_SLURM") == "1" or os.environ.get("CI", "").lower() not in ("", "0", "false")


def require_slurm() -> None:
    """Skip (or, where required, fail) a test that needs a real Slurm here.  Not being
    root is always a skip: slurmd must run as root to start tasks, which no install
    fixes (.ci/run still fails on any Slurm skip)."""
    why = slurm_missing()
    if why is not None:
        if slurm_required():
            pytest.fail(f"{why}; the Slurm tests are required here (CI or OPDEBUG_REQUIRE_SLURM=1), not skipped")
        pytest.skip(why)
    if os.geteuid() != 0:
        pytest.skip("the Slurm tests start slurmd, which must run as root")


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """One real Slurm cluster per test module; stopped, and checked to leave
    nothing running, when the module is done."""
    require_slurm()
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield cluster
    finally:
        killed = cluster.stop()
        assert not killed, (f"processes of the Slurm cluster were still running after every job was "
                            f"cancelled and the daemons stopped (SIGKILLed now): {cluster.killed_at_stop}")
