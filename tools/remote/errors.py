"""The transport errors: one family for every host kind (local, SSH, Slurm).

Two bases, by what the caller does next:

- `SlotGone`: the slot's connection or process went away (the stream to the
  supervisor ended or broke, the SSH channel closed).  The case in flight
  stays pending; the slot is discarded (and started again, a bounded number
  of times with a backoff, while cases are left: pool.run_queue).  Members:
  `SlotLost`, `supervisor_client.ConnectionLost`, `slurm.JobEnded` (the
  scheduler ended the slot's job), and `SlotExpired` (the slot ends before
  the case could finish: the case was not started and goes back to the queue).
- `SlotCannotStart`: the slot never became usable (its worker cannot
  start, its device is leased elsewhere, its environment script failed).
  Nothing ran on it; the cases wait for another slot or stay pending with
  this message.  A `ToolError`, so it carries a code and details (one class on
  every host kind: host.SupervisorSlot raises it).  Member: `WorkerCannotStart`.
"""

from __future__ import annotations

import asyncssh

from ..errors import ToolError


class SlotGone(Exception):
    """The slot's connection or process went away; the case in flight stays pending."""


class SlotCannotStart(ToolError):
    """The slot could not be started or used; nothing ran on it."""


class WorkerCannotStart(SlotCannotStart):
    """The supervisor's worker cannot start (torch import, device open), on any transport,
    or it failed to start too many times in a row (the supervisor's bound)."""

    def __init__(self, message: str, *, code: str = "slot_start_failed", details: dict | None = None):
        super().__init__(message, code=code, details=details)


class SlotLost(SlotGone):
    """The slot's connection or process went away; the case in flight stays pending."""


class SlotExpired(SlotGone):
    """The slot would end before the case could finish (its scheduler job's time
    limit is near): the case was not sent; it goes back to the queue and the
    slot is replaced."""


# What a lost slot raises besides the SlotGone family: the raw transport errors of
# asyncssh and the OS that reach the pool unconverted (an SFTP upload, say).
LOST_ERRORS: tuple[type[BaseException], ...] = (SlotGone, ConnectionError, EOFError, asyncssh.Error)
