"""Cases still running when the server stops are handed over, not lost.

narrow_failure answers by its deadline and leaves a case still running to finish
after the answer (``still_running``).  A stdio client that then goes away ends the
server: the MCP SDK's client closes its stdin, and two seconds later kills the
server's whole process group, supervisor sessions aside.  The answer of the case
would come back to a process that no longer exists, and the case would stay
pending although the agent was told it would be recorded.

So a stopping server hands each such case over: one detached process per run
(``python -m tools.cli run ROOT/RUN --case ...``, in a session of its own, so the
client's kill of the server's group does not reach it) runs the case again from
its start on the same hosts once the server's own supervisors are closed (their
device leases free), and records it as any run does.  No argument of a tool goes
through a shell: the argv is a list; run ids, case ids and host names are slugs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .evidence import resolve_root


def hand_over(late: list) -> list[str]:
    """Start a detached ``opdebug run`` for the running cases of each of ``late``
    (narrow.late_runs()); the lines saying what was handed over (and where its log is)."""
    said = []
    for run in late:
        if not run.running:
            continue
        argv = [sys.executable, "-m", "tools.cli", "run", "--root", str(resolve_root(run.root)), "--run-id", run.run_id]
        argv += [word for case_id in run.running for word in ("--case", case_id)]
        argv += [word for host in run.hosts or [] for word in ("--host", host)]
        if run.inventory is not None:
            argv += ["--inventory", str(run.inventory)]
        log = Path(tempfile.gettempdir()) / f"opdebug-handover-{os.getpid()}-{run.run_id}.log"
        env = dict(os.environ, PYTHONPATH=_project_path())
        with open(log, "ab") as out:
            subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, start_new_session=True, close_fds=True
            )
        said.append(f"run {run.run_id}: case(s) {run.running} still running handed over to a detached run (log {log})")
    return said


def _project_path() -> str:
    """PYTHONPATH for the detached process: this project's directory first, then what was there."""
    here = str(Path(__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH")
    return here + (os.pathsep + rest if rest else "")
