"""The first program of a Slurm slot's job step: says where it runs, takes its device, relays the supervisor.

Shipped next to the runner as ``opdebug_step.py`` (standard library only) and
started by the Slurm transport inside the ``srun`` step, after the node's
environment scripts::

    python opdebug_step.py -- python -m opdebug_runner supervise --device npu

1. It writes one line on stdout: ``{"event": "step_started", "job_id",
   "step_id", "node", "pid", "visible": {...}}`` - the job it runs in (from
   the variables Slurm sets in every task) and the device variables the
   step was given (by Slurm's GRES plugin or the site's TaskProlog).
2. It reads one line from stdin: ``{"op": "place", "env": {NAME: VALUE}}``,
   the device the server settled on (the scheduler's variable, the job's GRES
   index read with ``scontrol -d show job``, or the slot's number on a node
   whose GRES is a bare count).  Only the names in ``PLACEMENT_NAMES`` are
   taken, each with a short value of safe characters; anything else ends the
   step with ``{"event": "step_refused", "reason"}`` and exit 64.  End of input
   ends it quietly (the server went away before placing it).
3. It says ``{"event": "step_placed", "env": {...}}``, starts the supervisor
   with those variables set (its stderr is the step's), and from then on
   relays the runner's protocol lines between the step's stdin/stdout and the
   supervisor, framed (below); it exits with the supervisor's status.  End of
   the step's stdin closes the supervisor's stdin (the supervisor then stops
   its worker and exits); the end of the supervisor's output ends the relay.

**Why a relay and a framing.**  srun and slurmstepd carry a step's stdio in
I/O messages of at most 1024 bytes over TCP.  Whenever one side sends a
message while its previous one is not yet acknowledged - the rest of a line
over 1 KB, or a second line right behind a first - Nagle's algorithm holds it
until the peer's delayed ACK (40 ms on Linux): every protocol line over 1 KB
(a ``run`` request with its config, a ``case_done`` with its comparisons)
cost 44 ms each way, and so did each of a case's news lines behind another
(tests/test_slurm_fixture.py and benchmarks/bench_slurm.py measure it).
Neither socket is ours to set TCP_NODELAY on, but any message from the peer
carries the ACK at once.  So each side sends what it has as a byte stream cut
into chunks of at most `PIECE` bytes, one wire line each: every chunk but
the last of a burst waits for the peer's ack of the one before, and the
last is not acked - the peer speaks next anyway (a request is answered, an
answer is followed by the next request), and its message carries the ACK.
A fast case so costs one message for the rest of its request, one ack, and
its answer burst (news and ``case_done`` together, as the supervisor writes
them) in chunks, each acked but the last: 0.2 ms a round trip here instead
of 44 ms.  On the wire every line is a tag, a chunk, a newline:

- ``+`` + a chunk, more of this burst follows: the receiver answers ``.``;
- ``~`` + a chunk (up to `STREAM_PIECE` bytes) of a burst over `STREAM_MIN`
  bytes, more follows (not acked: a long burst flows, as a plain stream does;
  at most its end may wait);
- ``=`` + the last chunk of a burst (not acked);
- ``.``: the ack of one ``+`` chunk;
- ``:``: a nudge, ignored: the server sends one when it has read a whole burst
  and waits for more (a case's first news came alone; the rest would else wait
  behind it), so that the relay's next message finds its last one acknowledged.

Newlines inside a chunk are sent as 0x1E (RS): protocol lines are JSON, in
which a raw control character never occurs.  The server side of the same
framing is ``slurm_channel.FramedChannel``.

stdin is read one byte at a time up to the placement's newline, so nothing
sent after it is swallowed before the relay reads on.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

EXIT_REFUSED = 64  # EX_USAGE
MAX_LINE = 8192
PIECE = 1000  # bytes of a protocol line per wire line: tag + piece + newline stay under srun's 1024
LINE, MORE, STREAM, ACK, NUDGE = b"=", b"+", b"~", b".", b":"
# A burst longer than this flows without acks (one ack round trip per 1000 bytes
# would cap it at a few MB/s; a long burst keeps TCP's window full anyway).
STREAM_MIN = 32 * PIECE
STREAM_PIECE = 1 << 16  # a flowing burst's chunks: srun cuts them into its messages anyway
RS = b"\x1e"  # a newline inside a chunk
PR_SET_CHILD_SUBREAPER = 36
ADOPTED_WAIT_S = 10.0  # the supervisor's watchdog sweeps for about 0.3 s once the supervisor is gone
PLACEMENT_NAMES = ("OPDEBUG_DEVICE_ID", "OPDEBUG_DEVICE_SOURCE", "ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
PLACEMENT_VALUE = re.compile(r"^[A-Za-z0-9 _.,:;()/=+-]{0,200}$")
# What the step may have been given: Slurm's GRES plugins and sites' TaskProlog scripts set these.
VISIBLE_NAMES = (
    "ASCEND_RT_VISIBLE_DEVICES",
    "ASCEND_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "SLURM_STEP_GPUS",
    "SLURM_JOB_GPUS",
    "GPU_DEVICE_ORDINAL",
)


def _emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def read_line(fd: int = 0) -> bytes:
    """One line from ``fd``, byte by byte (b"" at end of input)."""
    data = bytearray()
    while len(data) < MAX_LINE:
        b = os.read(fd, 1)
        if not b:
            return bytes(data)
        if b == b"\n":
            return bytes(data) + b"\n"
        data += b
    return bytes(data)


def placement(line: bytes) -> dict:
    """The variables of a ``place`` message; raises ValueError naming what is wrong."""
    try:
        msg = json.loads(line)
    except ValueError:
        raise ValueError("the placement is not JSON") from None
    if not isinstance(msg, dict) or msg.get("op") != "place" or not isinstance(msg.get("env"), dict):
        raise ValueError("expected {\"op\": \"place\", \"env\": {...}}")
    env = msg["env"]
    for name, value in env.items():
        if name not in PLACEMENT_NAMES:
            raise ValueError(f"{name!r} is not a placement variable ({', '.join(PLACEMENT_NAMES)})")
        if not isinstance(value, str) or not PLACEMENT_VALUE.fullmatch(value):
            raise ValueError(f"the value of {name} is not a short string of safe characters")
    return env


def frames(data: bytes) -> list[bytes]:
    """A burst of the byte stream as wire lines: ``+chunk`` (``~chunk`` for a long
    burst) ... then ``=chunk``."""
    body = data.replace(b"\n", RS)
    tag, size = (STREAM, STREAM_PIECE) if len(body) > STREAM_MIN else (MORE, PIECE)
    out = []
    while len(body) > size:
        out.append(tag + body[:size] + b"\n")
        body = body[size:]
    out.append(LINE + body + b"\n")
    return out


def unframe(chunk: bytes) -> bytes:
    """A wire line's chunk (tag and newline removed) back as stream bytes."""
    return chunk.replace(RS, b"\n")


class Relay:
    """Protocol lines between the step's stdio (framed) and the supervisor's pipes (plain)."""

    def __init__(self, proc: subprocess.Popen, wire_in: int = 0, wire_out: int = 1):
        self.proc = proc
        self.wire_in, self.wire_out = wire_in, wire_out
        self._lock = threading.Lock()  # one wire line at a time: an ack never splits a piece
        self._acks = threading.Semaphore(0)
        self.ended = False  # the step's stdin ended: no ack will come any more

    def _send(self, data: bytes) -> None:
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self.wire_out, view) :]

    def up(self) -> None:
        """Supervisor -> wire: what it wrote, as one burst, each chunk but the last after an ack."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            data = os.read(fd, 1 << 16)
            if not data:
                return
            for piece in frames(data):
                self._send(piece)
                if piece[:1] == MORE:
                    self._acks.acquire()
                    if self.ended:
                        return

    def down(self) -> None:
        """Wire -> supervisor; acks ``+`` chunks; end of input closes the supervisor's stdin."""
        assert self.proc.stdin is not None
        reader = os.fdopen(self.wire_in, "rb", buffering=1 << 16, closefd=False)
        try:
            for line in iter(reader.readline, b""):
                tag, body = line[:1], line[1:].rstrip(b"\n")
                if tag == ACK:
                    self._acks.release()
                elif tag == NUDGE:
                    pass  # only here to carry the TCP ACK of what we sent
                elif tag in (MORE, STREAM, LINE):
                    if tag == MORE:
                        self._send(ACK + b"\n")
                    self.proc.stdin.write(unframe(body))
                    self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        finally:
            self.ended = True
            self._acks.release()  # up() may be waiting for an ack that will not come
            try:
                self.proc.stdin.close()
            except OSError:
                pass


def relay(command: list[str]) -> int:
    """Run the supervisor and relay its protocol until it exits; its exit status.

    Slurm follows a step by its process tree (proctrack/linuxproc: the offspring of
    slurmstepd) and ends it with SIGTERM to every process, then SIGKILL.  Were this
    helper to die of the SIGTERM, the supervisor - and its watchdog, in a session of
    its own - would be orphaned to init, out of the step's sight: the job could end
    while they still run.  So it outlives the signal (the supervisor gets its own
    from Slurm, and SIGKILL ends every process of the step after KillWait), adopts
    the supervisor's orphans (a child subreaper) and leaves only once every one of
    them is gone."""
    _adopt_orphans()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # after the Popen: the supervisor keeps its own
        signal.signal(sig, signal.SIG_IGN)
    r = Relay(proc)
    threading.Thread(target=r.down, daemon=True).start()
    try:
        r.up()
    except (BrokenPipeError, OSError):
        pass  # the step's stdout is gone: the supervisor's stdin closes when down() ends
    code = proc.wait()
    _reap_adopted(ADOPTED_WAIT_S)
    return code if code >= 0 else 128 - code


def _adopt_orphans() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: nothing to adopt


def _reap_adopted(limit_s: float) -> None:
    """Wait for the children this helper adopted (the supervisor's watchdog) to exit."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # none left
        if pid == 0:
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[1:] if args[:1] == ["--"] else args
    if not command:
        sys.stderr.write("usage: opdebug_step.py -- COMMAND...\n")
        return EXIT_REFUSED
    try:
        _emit(
            {
                "event": "step_started",
                "job_id": os.environ.get("SLURM_JOB_ID"),
                "step_id": os.environ.get("SLURM_STEP_ID"),
                "node": os.environ.get("SLURMD_NODENAME"),
                "pid": os.getpid(),
                "visible": {k: os.environ[k] for k in VISIBLE_NAMES if k in os.environ},
            }
        )
        line = read_line()
    except (BrokenPipeError, OSError):
        return 0  # nobody is listening any more
    if not line:
        return 0
    try:
        env = placement(line)
    except ValueError as exc:
        _emit({"event": "step_refused", "reason": str(exc)})
        return EXIT_REFUSED
    os.environ.update(env)
    try:
        _emit({"event": "step_placed", "env": env})
    except (BrokenPipeError, OSError):
        return 0
    return relay(command)


if __name__ == "__main__":
    sys.exit(main())
