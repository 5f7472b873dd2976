"""Real OpenSSH sshd instances on 127.0.0.1 for the SSH transport tests.

Each `Sshd` is Debian's /usr/sbin/sshd started in the foreground (`-D -e`)
with a throw-away config, a throw-away ed25519 host key and one client key in
its authorized_keys.  Nothing is mocked: asyncssh talks to a real server that
runs the runner as a real remote command.

`kill()` simulates a host going away: the listener and every process under it
(the per-connection sshd processes and the remote commands they started) are
SIGKILLed.  `start()` again brings it back on the same port with the same host
key, so known_hosts stays valid.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, comment: str = "opdebug-test") -> str:
    """A fresh ed25519 key pair at `path`; returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)
    return Path(str(path) + ".pub").read_text().strip()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces: split after the last ')'
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        for c in tree.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def processes_mentioning(marker: str, also: str | None = None) -> list[int]:
    """Live processes (not this one, not zombies) whose command line or environment
    contains `marker` (and `also`, when given)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue  # a zombie is dead, whatever its parent does
            blob = b""
            for part in ("cmdline", "environ"):
                with open(f"/proc/{entry}/{part}", "rb") as fh:
                    blob += fh.read()
        except OSError:
            continue
        if marker.encode() in blob and (also is None or also.encode() in blob):
            found.append(int(entry))
    return found


def processes_with_marker(marker: str) -> list[int]:
    """Runner processes whose command line or environment mentions `marker`
    (the remote runner's PYTHONPATH points into the test's work_dir)."""
    return processes_mentioning(marker, also="opdebug_runner")


@dataclass
class Sshd:
    base: Path
    client_key: Path
    port: int = field(default_factory=free_port)
    max_sessions: int = 64
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.host_key = self.base / "ssh_host_ed25519_key"
        if not self.host_key.exists():
            keygen(self.host_key, "opdebug-test-host")
        pub = Path(str(self.client_key) + ".pub").read_text()
        (self.base / "authorized_keys").write_text(pub)
        self.config = self.base / "sshd_config"
        self.config.write_text(textwrap.dedent(f"""\
            Port {self.port}
            ListenAddress 127.0.0.1
            HostKey {self.host_key}
            PidFile {self.base}/sshd.pid
            AuthorizedKeysFile {self.base}/authorized_keys
            UsePAM no
            StrictModes no
            PermitRootLogin yes
            PubkeyAuthentication yes
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            Subsystem sftp internal-sftp
            MaxSessions {self.max_sessions}
            MaxStartups 64
            LogLevel ERROR
            """))
        try:
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation dir (as root)
        except PermissionError:
            pass

    @property
    def host_key_line(self) -> str:
        """The known_hosts line that trusts this server."""
        kind, blob = Path(str(self.host_key) + ".pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {blob}"

    def start(self, timeout: float = 10.0) -> "Sshd":
        log = open(self.base / "sshd.log", "ab")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: "
                                   f"{(self.base / 'sshd.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd on port {self.port} did not come up")

    def kill(self) -> None:
        """The host goes away: SIGKILL the listener and everything under it."""
        if self.proc is None:
            return
        victims = [self.proc.pid] + descendants(self.proc.pid)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        self.kill()


def make_client_key(base: Path) -> Path:
    key = base / "client_ed25519"
    if not key.exists():
        base.mkdir(parents=True, exist_ok=True)
        keygen(key, "opdebug-test-client")
    return key


def write_inventory(path: Path, hosts: dict[str, dict]) -> Path:
    """A TOML inventory ([hosts.NAME] tables) from plain dicts."""
    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = []
    for name, h in hosts.items():
        lines.append(f"[hosts.{name}]")
        for k, v in h.items():
            lines.append(f"{k} = {val(v)}")
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def login_user() -> str:
    """Who the tests log in as: whoever runs them (root in CI)."""
    return getpass.getuser()


def remote_python() -> str:
    """The Python the 'remote' host runs: this venv's (it has torch)."""
    return sys.executable


def cleanup_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------
# pytest fixtures (import them into a test module to use them)
# --------------------------------------------------------------------------

import pytest  # noqa: E402


@dataclass
class SshEnv:
    """Two sshd 'hosts' on 127.0.0.1 trusted by one known_hosts file."""

    base: Path
    client_key: Path
    servers: dict[str, Sshd]
    known_hosts: Path

    def host(self, name: str, **over) -> dict:
        s = self.servers[name]
        return {"hostname": "127.0.0.1", "port": s.port, "user": login_user(),
                "identity_files": [str(self.client_key)], "known_hosts": str(self.known_hosts),
                "python": remote_python(), "device": "cpu", "devices": [0, 1],
                "work_dir": str(self.base / "work" / name), "connect_timeout": 10.0, **over}

    def inventory(self, **hosts: dict):
        from tools.remote.inventory import parse_inventory
        return parse_inventory({"hosts": {name: self.host(name, **over) for name, over in hosts.items()}})

    def trust_all(self) -> None:
        self.known_hosts.write_text("".join(s.host_key_line + "\n" for s in self.servers.values()))


def sshd_required() -> bool:
    """In CI (``CI`` set) or with ``OPDEBUG_REQUIRE_SSHD=1`` (scripts/test.sh sets it) a
    missing sshd fails the SSH tests instead of skipping them: a skip would hide the gap."""
    return os.environ.get("OPDEBUG_REQUIRE_SSHD") == "1" or os.environ.get("CI", "").lower() not in ("", "0", "false")


@pytest.fixture(scope="module")
def ssh_env(tmp_path_factory):
    if not os.access(SSHD, os.X_OK):
        why = f"{SSHD} is missing: install openssh-server (scripts/test.sh does)"
        if sshd_required():
            pytest.fail(f"{why}; the SSH tests are required here (CI or OPDEBUG_REQUIRE_SSHD=1), not skipped")
        pytest.skip(why)
    base = tmp_path_factory.mktemp("sshd")
    key = make_client_key(base / "client")
    servers = {name: Sshd(base / name, key).start() for name in ("hosta", "hostb")}
    env = SshEnv(base, key, servers, base / "known_hosts")
    env.trust_all()
    try:
        yield env
    finally:
        for s in servers.values():
            s.stop()
