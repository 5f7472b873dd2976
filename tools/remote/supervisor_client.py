"""An async client for one runner supervisor, over any pair of byte streams.

Transport-agnostic: ``reader`` has ``async readline()`` (bytes or str),
``writer`` has ``write(bytes)`` and ``async drain()`` - asyncio subprocess
pipes (the local transport) and asyncssh process streams opened with
``encoding=None`` (the SSH transport) both fit.  One request at a time (an
asyncio lock).  Lines on the stream that are not protocol events (noise from
an environment script, a login banner) are skipped and kept for diagnostics.

If the stream ends, breaks, or the supervisor stops answering, the call
raises ``ConnectionLost``: the caller leaves the case pending.

Its waits follow the supervisor's clocks: during ``hello`` a ``phase`` event
(``worker_start``) names the worker start's budget; ``hello`` announces the
supervisor's deadlines, and the wait for a case's first ``phase`` event is
derived from them (a
health check, a worker start and the harness phase, plus a grace), so a slow
start within those bounds is never read as a lost connection.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections import deque
from dataclasses import dataclass

from ..runner.phases import PHASE, PHASE_EVENT  # stdlib only: the one table of a case's phases
from .envelopes import MalformedEnvelope, SupervisorDeadlines, parse_deadlines
from .errors import SlotCannotStart, SlotGone

# How long to wait for a case's start (or for hello) until the supervisor has
# announced its own deadlines (then the wait is derived from them), and how
# much longer than the case timeout the supervisor may take to report a killed
# worker.
START_TIMEOUT_S = 600.0
ANSWER_GRACE_S = 60.0


@dataclass(frozen=True)
class Event:
    """One protocol event, read once: its name, request, phase (phases.PHASES) and budget."""

    name: str
    request_id: str | None
    phase: str | None
    budget_s: float | None
    doc: dict

    @classmethod
    def parse(cls, msg: dict) -> Event:
        rid, phase = msg.get("request_id"), msg.get("phase")
        return cls(
            msg["event"],
            rid if isinstance(rid, str) else None,
            phase if isinstance(phase, str) else None,
            _budget(msg.get("budget_s"), None),
            msg,
        )


@dataclass
class CaseWait:
    """What a case's call waits for next, and how long: each phase's news sets it (its budget plus
    the grace), one handler per event as the supervisor sends them (references/runner-protocol.md)."""

    waiting: str
    timeout: float
    case_timeout_s: float
    start_timeout_s: float
    grace_s: float

    def on_phase(self, event: Event) -> None:
        """A phase of phases.PHASES began: one before the candidate (health check, worker start, resolve,
        inputs) is waited its own budget; from the candidate on, its budget (at least the case timeout)."""
        phase = PHASE.get(event.phase or "")
        if phase is not None and phase.prepares:
            self.waiting = f"the end of the case's {phase.name} phase ({phase.text})"
            self.timeout = (event.budget_s or self.start_timeout_s) + self.grace_s
            return
        self.waiting = "the case result"
        self.timeout = max(self.case_timeout_s, event.budget_s or 0.0) + self.grace_s


class ConnectionLost(SlotGone):
    """The stream to the supervisor ended or broke; the in-flight case stays pending."""


if sys.version_info >= (3, 11):

    async def within(awaitable, timeout: float):
        """``awaitable`` within ``timeout`` seconds (asyncio.TimeoutError past it).
        Not asyncio.wait_for: on 3.11 it returns a result that arrives with a
        cancellation and drops the cancellation (a cancelled run then waited
        for its hanging case)."""
        async with asyncio.timeout(timeout):
            return await awaitable
else:  # 3.10 has no asyncio.timeout; its wait_for has the race above
    within = asyncio.wait_for


class SupervisorClient:
    def __init__(
        self,
        reader,
        writer,
        *,
        label: str = "supervisor",
        start_timeout_s: float = START_TIMEOUT_S,
        answer_grace_s: float = ANSWER_GRACE_S,
    ):
        self.reader = reader
        self.writer = writer
        self.label = label
        self.start_timeout_s = start_timeout_s
        self.answer_grace_s = answer_grace_s
        self.noise: deque[str] = deque(maxlen=20)
        self.deadlines: SupervisorDeadlines | None = None  # announced in hello
        self.closed = False
        self._lock = asyncio.Lock()

    async def _send(self, msg: dict) -> None:
        if self.closed:
            raise ConnectionLost(f"{self.label}: the client is closed")
        data = json.dumps(msg, allow_nan=False).encode("utf-8") + b"\n"
        try:
            self.writer.write(data)
            await self.writer.drain()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any transport failure (OSError, asyncssh errors)
            self.closed = True
            raise ConnectionLost(
                f"{self.label}: cannot write to the supervisor ({type(exc).__name__}: {exc})"
            ) from None

    async def _event(self, timeout: float, waiting_for: str) -> dict:
        """The next protocol event (a JSON object with "event")."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                self.closed = True
                raise ConnectionLost(f"{self.label}: no {waiting_for} from the supervisor within {timeout:g} s")
            try:
                line = await within(self.reader.readline(), remaining)
            except asyncio.TimeoutError:
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # stream broke, line too long, channel error
                self.closed = True
                raise ConnectionLost(
                    f"{self.label}: reading from the supervisor failed ({type(exc).__name__}: {exc})"
                ) from None
            if not line:
                self.closed = True
                raise ConnectionLost(
                    f"{self.label}: the supervisor's output ended while waiting for {waiting_for}"
                    + (f" (last output: {list(self.noise)[-3:]})" if self.noise else "")
                )
            text = line.decode("utf-8", "replace") if isinstance(line, (bytes, bytearray)) else str(line)
            try:
                msg = json.loads(text)
            except ValueError:
                msg = None
            if isinstance(msg, dict) and isinstance(msg.get("event"), str):
                return msg
            if text.strip():
                self.noise.append(text.strip()[:500])

    def started_wait_s(self) -> float:
        """How long a case may take, in bounds, to send its first ``phase`` event (or a ``case_done``
        without it): derived from the announced deadlines, else ``start_timeout_s``."""
        if self.deadlines is None:
            return self.start_timeout_s
        return self.deadlines.started_within_s() + self.answer_grace_s

    async def hello(self, timeout: float | None = None) -> dict:
        """The supervisor's description of itself (starts its worker: may take seconds).
        ``timeout`` bounds the wait for the first answer; a ``phase`` event (worker_start) then
        sets the wait to the worker start's budget plus the grace.  Raises
        ConnectionLost (stream gone or silent) or SlotCannotStart (malformed deadlines)."""
        async with self._lock:
            await self._send({"op": "hello"})
            wait = timeout or self.start_timeout_s
            while True:
                msg = await self._event(wait, "hello")
                event = Event.parse(msg)
                if event.name == PHASE_EVENT:
                    wait = (event.budget_s or wait) + self.answer_grace_s
                elif event.name == "hello":
                    try:
                        self.deadlines = parse_deadlines(msg)
                    except MalformedEnvelope as exc:
                        raise SlotCannotStart(f"{self.label}: {exc}", code="protocol_error") from None
                    return msg

    async def run_case(
        self,
        config: dict,
        case: dict,
        timeout_s: float,
        modules_dir: str | None = None,
        captured_dir: str | None = None,
    ) -> dict:
        """Run one case; returns the ``case_done`` event (after the phases' news)."""
        request_id = uuid.uuid4().hex
        async with self._lock:
            await self._send(
                {
                    "op": "run",
                    "request_id": request_id,
                    "config": config,
                    "case": case,
                    "timeout_s": float(timeout_s),
                    "modules_dir": None if modules_dir is None else str(modules_dir),
                    "captured_dir": None if captured_dir is None else str(captured_dir),
                }
            )
            wait = CaseWait(
                "the case start", self.started_wait_s(), float(timeout_s), self.start_timeout_s, self.answer_grace_s
            )
            while True:
                event = Event.parse(await self._event(wait.timeout, wait.waiting))
                if event.request_id != request_id:
                    continue
                if event.name == "case_done":
                    return event.doc
                handler = getattr(wait, f"on_{event.name}", None)
                if handler is not None:
                    handler(event)

    async def close(self) -> None:
        """Ask the supervisor to stop its worker and exit, then close our end."""
        if not self.closed:
            try:
                async with self._lock:
                    await self._send({"op": "shutdown"})
                    while True:
                        if (await self._event(10.0, "bye"))["event"] == "bye":
                            break
            except ConnectionLost:
                pass
        self.closed = True
        try:
            if hasattr(self.writer, "write_eof") and self.writer.can_write_eof():
                self.writer.write_eof()
        except (Exception, NotImplementedError):  # best effort, the stream may be gone
            pass


def _budget(value, default):
    """A positive finite number of seconds from an event, else ``default``."""
    try:
        budget = float(value)
    except (TypeError, ValueError):
        return default
    return budget if 0 < budget < float("inf") else default
