"""Entry point: ``python -m <pkg> supervise --device cpu`` (what transports
start) or ``python -m <pkg> worker ...`` / ``template ...`` (what the supervisor starts)."""

from __future__ import annotations

import argparse
import os
import sys


def _env_number(name: str, default: float) -> float:
    """A positive number from the environment (the local transport passes its own on), else the default."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise SystemExit(f"opdebug runner: {name}={raw!r} is not a positive number")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opdebug_runner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sup = sub.add_parser("supervise", help="speak the runner protocol on stdin/stdout, owning one worker")
    sup.add_argument("--device", default="cpu", choices=("cpu", "cuda", "npu"))
    sup.add_argument(
        "--worker-start-timeout",
        type=float,
        default=_env_number("OPDEBUG_WORKER_START_TIMEOUT_S", 600.0),
        help="seconds a worker may take to import torch and open the device (also the budget for "
        "loading user modules and building inputs); default $OPDEBUG_WORKER_START_TIMEOUT_S or 600",
    )
    sup.add_argument(
        "--max-worker-start-failures",
        type=int,
        default=int(_env_number("OPDEBUG_MAX_WORKER_START_FAILURES", 3)),
        help="consecutive worker start failures after which no further start is tried; "
        "default $OPDEBUG_MAX_WORKER_START_FAILURES or 3",
    )
    work = sub.add_parser("worker", help="internal: started by the supervisor")
    work.add_argument("--device", default="cpu", choices=("cpu", "cuda", "npu"))
    work.add_argument("--stderr-file", required=True)
    work.add_argument("--capture-file", required=True)
    work.add_argument("--parent-pid", type=int, required=True)
    work.add_argument("--board", default=None, help="the progress board file the supervisor made (board.py)")
    tpl = sub.add_parser("template", help="internal: the process the supervisor's cpu workers are forks of")
    tpl.add_argument("--socket-fd", type=int, required=True)
    tpl.add_argument("--parent-pid", type=int, required=True)
    dog = sub.add_parser("watchdog", help="internal: sweeps a run's processes once the supervisor is gone")
    dog.add_argument("--token", required=True)
    args = parser.parse_args(argv)
    if args.command == "watchdog":
        from .reaper import watchdog_main

        return watchdog_main(args.token)
    if args.command == "template":
        from .template import template_main

        return template_main(args.socket_fd, args.parent_pid, main)
    if args.command == "supervise":
        from .supervisor import main as supervise

        return supervise(args.device, args.worker_start_timeout, args.max_worker_start_failures)
    from .worker import main as work_main

    return work_main(args.device, args.stderr_file, args.parent_pid, args.capture_file, args.board)


if __name__ == "__main__":
    sys.exit(main())
