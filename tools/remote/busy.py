"""What a busy device says: who holds it, since when, and how long this call waited.

The device lease (lease.py, on the host) records its holder: the supervisor's
pid, the server that started it (``owner``: host:pid), the host, the device
and when it took the lease (``since``, seconds since the epoch); while it
runs a case the supervisor adds the run id and the case (runner/lease_note.py).
Every transport words a wait and a refusal with these functions, so the agent
reads the same sentence on the local and the SSH transport.  A wait is bounded
by the call's budget (:func:`wait_budget`).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any


def when(epoch: Any, now: float | None = None) -> str:
    """``2026-12-01 19:52:03 UTC (3 min 12 s ago)``; '?' when unknown."""
    if not isinstance(epoch, (int, float)) or isinstance(epoch, bool):
        return "?"
    stamp = datetime.fromtimestamp(float(epoch), timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{stamp} ({duration((now if now is not None else time.time()) - float(epoch))} ago)"


def duration(seconds: float) -> str:
    """``45 s``, ``3 min 12 s``, ``2 h 5 min``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def holder_text(holder: dict | None, now: float | None = None) -> str:
    """``pid 6685 on host-a (owner host-a:6673, ...), run demo-1, case rms.x since ...; it has held ... since ...``."""
    if not holder:
        return "another process (its holder is not recorded yet)"
    text = (
        f"pid {holder.get('pid', '?')} on {holder.get('host') or '?'} (owner {holder.get('owner') or '?'}, the "
        "server that started it)"
    )
    if holder.get("run_id"):
        text += f", run {holder['run_id']}"
        if holder.get("case_id"):
            text += f", case {holder['case_id']} since {when(holder.get('case_since'), now)}"
    return text + f"; it has held the device since {when(holder.get('since'), now)}"


def waiting_text(host: str, device: str, holder: dict | None, waited_s: float, budget_s: float) -> str:
    """One progress line while a slot waits for its device."""
    return (
        f"waiting for {host} {device}: leased by {holder_text(holder)}; waited {duration(waited_s)} of at most "
        f"{duration(budget_s)}"
    )


def busy_text(
    host: str, device: str, holder: dict | None, waited_s: float, budget_s: float, lease_file: str | None = None
) -> str:
    """The refusal once the call's budget for the wait is spent."""
    where = f" (lease file {lease_file})" if lease_file else ""
    return (
        f"{host} {device} is leased by {holder_text(holder)}{where}; this call waited {duration(waited_s)} "
        f"(its budget for the wait: {duration(budget_s)}). A warm worker holds its device until it has been "
        "idle for its server's idle_timeout_s or that server stops; use another device or host, or run again "
        "later"
    )


def wait_budget(host_wait_s: float, run: Any) -> float:
    """How long a slot may wait for its device: what the call asked for (``run.device_wait_s``,
    run_case_remote's device_wait_s) or else the host's lease_wait_s; less when the call has
    less time left (``run.lease_wait_s``, e.g. narrow_failure's budget)."""
    asked = getattr(run, "device_wait_s", None)
    wait = float(host_wait_s) if asked is None else float(asked)
    limit = getattr(run, "lease_wait_s", None)
    return wait if limit is None else max(0.0, min(wait, float(limit)))
