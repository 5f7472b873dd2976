"""The slot pool: warm device workers over every chosen host, shared by tool calls.

A *slot* (slot.py) is one device on one host with one warm supervisor (hence
one warm worker).  The module-level `REGISTRY` keeps slots and what their host
kinds share (host.HostContext: SSH connections...) alive between tool calls
while the server lives:

- `checkout` gives a tool call exclusive use of a slot (an asyncio lock per
  slot: two tool calls of this server never share a device) and starts the
  slot's supervisor on first use; the host-side lease (lease.py) keeps other
  servers/agents off the device for as long as that supervisor lives.
- a slot nobody used for `idle_timeout_s` is shut down, releasing its lease;
  a host's connection is closed when its last slot goes.
- a slot whose connection broke, or whose tool call was cancelled, is
  discarded: its channel is closed, so the supervisor's stdin closes and it
  exits, taking its worker with it.

`run_queue` spreads cases over slots: one task per slot consuming a shared
queue.  A case whose slot is lost mid-case is reported as lost (it stays
pending: nothing is recorded for it); the slot is then started again, at most
`RETRY_DELAYS_S` times in a row with those pauses (said in the run's news), so
one dropped connection or one cancelled job does not leave the rest of the
run pending; the cases nobody started stay pending.

A scheduler host's slots (Slurm jobs, slurm.py) live for one run: each is
closed - its job ended - as soon as the queue has nothing more for it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..errors import ToolError
from .busy import busy_text, wait_budget, waiting_text
from .errors import LOST_ERRORS, SlotCannotStart, SlotExpired
from .host import HostContext, HostKind
from .inventory import HostConfig
from .kinds import kind_of
from .slot import DeviceSlot, RunFiles, SlotSpec

REAP_INTERVAL_S = 5.0
# What a slot's start may raise that the pool reports or retries (a bare timeout: nothing answered in time).
START_FAILURES: tuple[type[BaseException], ...] = (ToolError, *LOST_ERRORS, asyncio.TimeoutError)
# The pauses before a lost slot is started again (a bound of len() tries in a row;
# a case finished on the slot resets the count).
RETRY_DELAYS_S: tuple[float, ...] = (1.0, 3.0, 9.0)


# --------------------------------------------------------------------------
# The registry of warm slots and connections
# --------------------------------------------------------------------------


@dataclass
class _Entry:
    slot: DeviceSlot
    cfg: HostConfig
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)
    started: bool = False
    run_id: str | None = None  # the run of the tool call that holds it (or last held it), and since when
    since: float | None = None

    @property
    def idle_timeout_s(self) -> float:
        return self.cfg.idle_timeout_s


class SlotRegistry:
    """Warm slots keyed by (host, device) and what their host kinds share (one
    connection per SSH host...).

    Bound to the event loop that first uses it (the server's); a new loop
    (a new asyncio.run in tests or the CLI) starts from a clean registry."""

    def __init__(self, slot_factory: Callable[[SlotRegistry, HostConfig, int], DeviceSlot] | None = None):
        self._slot_factory = slot_factory
        self._reset(None)

    def _reset(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        self._entries: dict[tuple[str, int], _Entry] = {}
        self.context = HostContext()
        self._reaper: asyncio.Task | None = None

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._reset(loop)

    def host(self, host: HostConfig) -> HostKind:
        """The host's kind, sharing this registry's connections (a short command runs on it)."""
        self._bind()
        return kind_of(host)(host, self.context)

    # -- slots --------------------------------------------------------------

    def _new_slot(self, host: HostConfig, device: int) -> DeviceSlot:
        if self._slot_factory is not None:
            return self._slot_factory(self, host, device)
        return kind_of(host)(host, self.context).new_slot(device)

    async def checkout(self, host: HostConfig, device: int, run: RunFiles, *, wait: bool = True) -> DeviceSlot | None:
        """Exclusive use of (host, device), its supervisor started. None when
        `wait` is false and another tool call holds it."""
        self._bind()
        key = (host.name, int(device))
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(self._new_slot(host, device), cfg=host)
        if not wait and entry.lock.locked():
            return None
        if entry.lock.locked():  # another call of this server uses the device: wait within the call's budget
            await self._wait_for_entry(entry, host, device, run)
        else:
            await entry.lock.acquire()
        entry.run_id, entry.since = getattr(run, "run_id", None), time.time()
        try:
            if entry.cfg.worker_identity() != host.worker_identity():
                # the inventory entry changed: never reuse a worker started from the old one
                await entry.slot.close()
                entry.slot, entry.started = self._new_slot(host, device), False
            entry.cfg = host  # idle_timeout_s and the like follow the latest inventory
            if not entry.slot.alive:
                if entry.started:
                    entry.slot = self._new_slot(host, device)  # a used-up slot is never restarted in place
                entry.started = True
                await entry.slot.start(run)
        except BaseException:
            entry.lock.release()
            raise
        entry.last_used = time.monotonic()
        self._ensure_reaper()
        return entry.slot

    async def _wait_for_entry(self, entry: _Entry, host: HostConfig, device: int, run: RunFiles) -> None:
        """Wait for the slot another tool call of this server holds, telling ``run.news``
        who holds it about once a second; past the call's budget, a device_busy refusal."""
        budget = wait_budget(host.lease_wait_s, run)
        label = f"{host.device}:{int(device)}"
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "owner": "this server (another tool call)",
            "run_id": entry.run_id,
            "since": entry.since,
        }
        t0 = time.monotonic()
        getting = asyncio.ensure_future(entry.lock.acquire())
        try:
            while True:
                waited = time.monotonic() - t0
                done, _ = await asyncio.wait({getting}, timeout=min(1.0, max(0.0, budget - waited)))
                if done:
                    getting.result()
                    return
                waited = time.monotonic() - t0
                if waited >= budget:
                    raise SlotCannotStart(
                        busy_text(host.name, label, holder, waited, budget),
                        code="device_busy",
                        details={"holder": holder, "waited_s": round(waited, 1), "budget_s": budget},
                    )
                await run.say(waiting_text(host.name, label, holder, waited, budget))
        except BaseException:
            if not getting.done():
                getting.cancel()
            elif not getting.cancelled() and getting.exception() is None:
                entry.lock.release()  # granted just as this call gave up
            raise

    def release(self, slot: DeviceSlot) -> None:
        entry = self._find(slot)
        if entry is not None:
            entry.last_used = time.monotonic()
            if entry.lock.locked():
                entry.lock.release()

    async def finished(self, slot: DeviceSlot) -> None:
        """The run needs the slot no more: released (kept warm), or - on a host kind whose
        slots live for one run (a scheduler's jobs) - closed and forgotten."""
        entry = self._find(slot)
        if entry is None or kind_of(entry.cfg).keep_warm:
            self.release(slot)
            return
        for key, e in list(self._entries.items()):
            if e is entry:
                del self._entries[key]
        try:
            await asyncio.shield(slot.close())
        finally:
            if entry.lock.locked():
                entry.lock.release()

    async def discard(self, slot: DeviceSlot) -> None:
        """Close a slot that broke or was cancelled, and release it."""
        entry = self._find(slot)
        try:
            await asyncio.shield(slot.abort())
        except (Exception, asyncio.CancelledError):
            pass
        if entry is not None and entry.lock.locked():
            entry.lock.release()

    def _find(self, slot: DeviceSlot) -> _Entry | None:
        for entry in self._entries.values():
            if entry.slot is slot:
                return entry
        return None

    def warm_slots(self) -> list[tuple[str, int]]:
        return [k for k, e in self._entries.items() if e.slot.alive]

    # -- idle shutdown ------------------------------------------------------

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        while self._entries:
            await asyncio.sleep(REAP_INTERVAL_S)
            await self.reap_idle()

    async def reap_idle(self, now: float | None = None) -> list[tuple[str, int]]:
        """Shut down slots idle for longer than their host's idle_timeout_s; close unused connections."""
        now = time.monotonic() if now is None else now
        closed = []
        for key, entry in list(self._entries.items()):
            if entry.lock.locked() or now - entry.last_used < entry.idle_timeout_s:
                continue
            del self._entries[key]
            await entry.slot.close()
            closed.append(key)
        self.context.close_unused({k[0] for k in self._entries})
        return closed

    async def close_idle(self, hosts: list[str]) -> list[tuple[str, int]]:
        """Shut down the idle warm workers of these hosts, so the next case starts
        a fresh one (after a fix, a warm worker still holds the old operator)."""
        self._bind()
        closed = []
        for key, entry in list(self._entries.items()):
            if key[0] in hosts and not entry.lock.locked():
                del self._entries[key]
                await entry.slot.close()
                closed.append(key)
        return closed

    async def close_all(self) -> None:
        """Shut every warm worker down and close every connection (server shutdown)."""
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            self._reset(None)
            return
        if self._reaper is not None:
            self._reaper.cancel()
        entries, self._entries = list(self._entries.values()), {}
        await asyncio.gather(*(e.slot.close() for e in entries), return_exceptions=True)
        self.context.close_unused(set())


REGISTRY = SlotRegistry()


# --------------------------------------------------------------------------
# Spreading cases over slots
# --------------------------------------------------------------------------


@dataclass
class QueueReport:
    done: list[str] = field(default_factory=list)  # run_one returned for these
    lost: dict[str, str] = field(default_factory=dict)  # case -> why (slot lost mid-case)
    not_started: list[str] = field(default_factory=list)
    slot_errors: dict[str, str] = field(default_factory=dict)  # "host device" -> why it never started
    slots_used: list[str] = field(default_factory=list)


async def run_queue(
    specs: list[SlotSpec],
    case_ids: list[str],
    run: RunFiles,
    run_one: Callable[[DeviceSlot, str], Awaitable[None]],
    *,
    registry: SlotRegistry | None = None,
) -> QueueReport:
    """One task per slot consuming a shared queue of case ids.

    `run_one(slot, case_id)` runs and records one case; a SlotGone (or a
    connection error) it raises marks that case lost and discards the slot,
    which is then started again after a pause (`RETRY_DELAYS_S`, said in
    ``run.news``) while cases are left - up to that many times in a row, a
    case finished on it resetting the count; a `SlotExpired` puts its case back
    in the queue (it was never sent) and replaces the slot; a SlotCannotStart
    it raises (the case itself was answered) retires the slot and names why
    in `slot_errors`.  A slot that cannot start is retired at once, unless it
    is being started again after a loss (then it counts as one more loss).
    Cancellation closes every checked-out slot (no orphaned workers) and
    propagates."""
    return await _CaseQueue(case_ids, run, run_one, registry or REGISTRY).run(specs)


class _CaseQueue:
    """The shared queue of one run_queue call and what its slot tasks share."""

    def __init__(
        self,
        case_ids: list[str],
        run: RunFiles,
        run_one: Callable[[DeviceSlot, str], Awaitable[None]],
        registry: SlotRegistry,
    ):
        self.run_files, self.run_one, self.registry = run, run_one, registry
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        for cid in case_ids:
            self.queue.put_nowait(cid)
        self.report = QueueReport()
        self.in_flight = 0
        self.settled = asyncio.Event()  # every case taken and finished (or lost): slots still starting are not needed

    async def run(self, specs: list[SlotSpec]) -> QueueReport:
        self.check_settled()
        tasks = [asyncio.ensure_future(self.consume(s)) for s in specs]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        while not self.queue.empty():
            self.report.not_started.append(self.queue.get_nowait())
        return self.report

    def check_settled(self) -> None:
        if self.queue.empty() and self.in_flight == 0:
            self.settled.set()

    async def checkout_unless_settled(self, spec: SlotSpec) -> DeviceSlot | None:
        """The slot, or None when the other slots finished every case while this
        one was still starting (or waiting for a device leased elsewhere)."""
        getting = asyncio.ensure_future(self.registry.checkout(spec.host, spec.device, self.run_files))
        waiting = asyncio.ensure_future(self.settled.wait())
        try:
            await asyncio.wait({getting, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            if not getting.done():
                getting.cancel()
                await asyncio.gather(getting, return_exceptions=True)
        return None if getting.cancelled() else getting.result()

    async def again(self, label: str, losses: int, why: str) -> bool:
        """Pause before starting a lost slot again; False when the bound is reached
        or nothing is left to run."""
        if losses > len(RETRY_DELAYS_S) or self.queue.empty():
            return False
        delay = RETRY_DELAYS_S[losses - 1]
        await self.run_files.say(
            f"{label}: {why}; starting it again in {delay:g} s (retry {losses} of {len(RETRY_DELAYS_S)})"
        )
        sleeping = asyncio.ensure_future(asyncio.sleep(delay))
        waiting = asyncio.ensure_future(self.settled.wait())
        try:
            await asyncio.wait({sleeping, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            waiting.cancel()
        return not self.settled.is_set() and not self.queue.empty()

    def gave_up(self, label: str, losses: int, last: str) -> None:
        if losses > len(RETRY_DELAYS_S):
            self.report.slot_errors[label] = f"lost {losses} times in a row, not started again; the last time: {last}"

    async def consume(self, spec: SlotSpec) -> None:
        """One slot's task: check it out (again after a loss), run cases until none is left."""
        held = _Held(f"{spec.host.name} {spec.host.device}:{spec.device}")
        try:
            while True:
                if held.slot is None and not await self.start_slot(spec, held):
                    return
                if held.slot is None:
                    continue  # started again after a loss
                try:
                    cid = self.queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                if not await self.run_case(held, cid):
                    return
        except BaseException:
            if held.slot is not None:
                await self.registry.discard(held.slot)
                held.slot = None
            raise
        finally:
            if held.slot is not None:
                await self.registry.finished(held.slot)

    async def start_slot(self, spec: SlotSpec, held: _Held) -> bool:
        """Check the slot out into ``held`` (None: try again); False when this slot's task is over."""
        try:
            held.slot = await self.checkout_unless_settled(spec)
        except START_FAILURES as exc:
            # a bare timeout says nothing by itself: name what did not answer in time
            why = str(exc) or f"{type(exc).__name__}: the slot did not start in time"
            if held.losses == 0 and not isinstance(exc, LOST_ERRORS):
                self.report.slot_errors[held.label] = why  # never started: a host that cannot, said at once
                return False
            held.losses += 1
            if await self.again(held.label, held.losses, f"could not start ({why})"):
                return True
            self.gave_up(held.label, held.losses, why)
            return False
        if held.slot is None:
            return False
        if held.label not in self.report.slots_used:
            self.report.slots_used.append(held.label)
        return True

    async def drop(self, held: _Held) -> None:
        slot, held.slot = held.slot, None
        if slot is not None:
            await self.registry.discard(slot)

    async def run_case(self, held: _Held, cid: str) -> bool:
        """One case on the held slot; False when this slot's task is over."""
        assert held.slot is not None
        self.in_flight += 1
        try:
            await self.run_one(held.slot, cid)
            self.report.done.append(cid)
            held.losses = 0
        except SlotExpired as exc:  # the case was never sent: back to the queue
            self.queue.put_nowait(cid)
            await self.drop(held)
            await self.run_files.say(str(exc))
        except LOST_ERRORS as exc:
            why = str(exc) or type(exc).__name__
            self.report.lost[cid] = why
            await self.drop(held)
            held.losses += 1
            if not await self.again(held.label, held.losses, f"lost ({why})"):
                self.gave_up(held.label, held.losses, why)
                return False
        except SlotCannotStart as exc:  # e.g. the supervisor gave up restarting its worker
            self.report.slot_errors[held.label] = str(exc)
            await self.drop(held)
            return False
        finally:
            self.in_flight -= 1
            self.check_settled()
        return True


@dataclass
class _Held:
    """One slot task's slot (None while it has none) and its losses in a row."""

    label: str
    slot: DeviceSlot | None = None
    losses: int = 0
