"""Entry point: ``python -m <pkg> supervise --device cpu`` (what transports
start) or ``python -m <pkg> worker ...`` (what the supervisor starts)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opdebug_runner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sup = sub.add_parser("supervise", help="speak the runner protocol on stdin/stdout, owning one worker")
    sup.add_argument("--device", default="cpu", choices=("cpu", "cuda", "npu"))
    sup.add_argument("--worker-start-timeout", type=float, default=600.0,
                     help="seconds a worker may take to import torch and open the device")
    work = sub.add_parser("worker", help="internal: started by the supervisor")
    work.add_argument("--device", default="cpu", choices=("cpu", "cuda", "npu"))
    work.add_argument("--stderr-file", required=True)
    work.add_argument("--capture-file", required=True)
    work.add_argument("--parent-pid", type=int, required=True)
    dog = sub.add_parser("watchdog", help="internal: sweeps a run's processes once the supervisor is gone")
    dog.add_argument("--token", required=True)
    args = parser.parse_args(argv)
    if args.command == "watchdog":
        from .reaper import watchdog_main

        return watchdog_main(args.token)
    if args.command == "supervise":
        from .supervisor import main as supervise

        return supervise(args.device, args.worker_start_timeout)
    from .worker import main as work_main

    return work_main(args.device, args.stderr_file, args.parent_pid, args.capture_file)


if __name__ == "__main__":
    sys.exit(main())
