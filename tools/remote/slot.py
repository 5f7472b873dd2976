"""The slot contract: what every transport's device slot is, and what it is given.

A *slot* is one device on one host with one warm supervisor (hence one warm
worker).  The pool (pool.py) schedules cases over slots; every host kind's slot
(host.SupervisorSlot, over local.py, ssh.py, slurm.py) implements `DeviceSlot`.  Both sides import this module and
nothing of each other's internals, as pytest-xdist's scheduler protocol is
shared by its schedulers and its session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .inventory import HostConfig
from .kinds import kind_of


@dataclass
class RunFiles:
    """What a slot needs to know about the run, besides the case."""

    run_id: str
    config: dict
    modules_dir: Path | None = None
    captured_dir: Path | None = None
    # How long a slot may wait for a device another process (or call) holds: None, the
    # host's lease_wait_s; less when the call has less time left (busy.wait_budget).
    lease_wait_s: float | None = None
    # Progress news that is not a finished case - a wait for a device held elsewhere (about
    # once a second: busy.waiting_text), a scheduler job waiting in the queue, a lost slot
    # started again: one line of text, for the caller's progress.
    news: Callable[[str], Awaitable[None]] | None = None
    # The wait for a busy device the call asked for (run_case_remote's device_wait_s), in
    # place of the host's lease_wait_s; None, the host's (busy.wait_budget).
    device_wait_s: float | None = None

    async def say(self, text: str) -> None:
        """Tell ``news`` one line; news is best effort, never a reason to fail a case."""
        if self.news is not None:
            try:
                await self.news(text)
            except Exception:
                pass


class DeviceSlot(Protocol):
    """One warm supervisor on one device.

    ``start`` raises a ``SlotCannotStart`` (nothing ran) or a ``SlotGone``
    (the connection or process went away); ``run_case`` returns the
    supervisor's ``case_done`` envelope or raises ``SlotGone`` (the case stays
    pending).  ``abort`` closes the slot at once (cancelled or broken);
    ``close`` shuts it down politely."""

    host: str
    device: str

    @property
    def alive(self) -> bool: ...

    async def start(self, run: RunFiles) -> None: ...
    async def run_case(self, run: RunFiles, case: dict, timeout_s: float) -> dict: ...
    async def abort(self) -> None: ...
    async def close(self) -> None: ...


@dataclass
class SlotSpec:
    """One slot a run may use: a device of an inventory host."""

    host: HostConfig
    device: int


def slot_specs(hosts: list[HostConfig]) -> list[SlotSpec]:
    """Every slot the chosen hosts lend: their first `concurrency` devices each (a
    local host with all_devices: every device it sees)."""
    return [SlotSpec(h, d) for h in hosts for d in kind_of(h).slot_devices(h)]
