"""The run and the case this supervisor is running, noted in its device lease.

The lease helper (opdebug_lease.py) execs the supervisor with the locked lease
file open and its descriptor in ``$OPDEBUG_LEASE_FD``.  Before each case the
supervisor rewrites the holder record there with the run id, the case id and
when the case started, so a second server waiting for the device can say who
holds it and what it is doing (tools/remote/busy.py).  One ``pwrite`` per
case, padded with spaces to the longest record written (no truncation); a
reader that catches it mid-write reads the next second's copy.  Standard
library only; without the variable (a supervisor started by hand) nothing is
written.
"""

from __future__ import annotations

import json
import os
import time

LEASE_FD_ENV = "OPDEBUG_LEASE_FD"


class LeaseNote:
    def __init__(self) -> None:
        try:
            self.fd: int | None = int(os.environ[LEASE_FD_ENV])
        except (KeyError, ValueError):
            self.fd = None
        self.base: dict | None = None
        self.written = 0

    def case_started(self, run_id, case_id) -> None:
        if self.fd is None:
            return
        try:
            if self.base is None:
                data = os.pread(self.fd, 65536, 0).decode("utf-8", "replace").strip()
                self.base = json.loads(data) if data else {}
                self.written = len(data)
            doc = dict(self.base, run_id=run_id, case_id=case_id, case_since=time.time())
            line = json.dumps(doc)
            line = line.ljust(self.written) + "\n"
            os.pwrite(self.fd, line.encode("utf-8"), 0)
            self.written = max(self.written, len(line) - 1)
        except (OSError, ValueError):
            self.fd = None  # the lease file is not ours to write: leave it as the helper wrote it
