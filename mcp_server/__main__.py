"""``opdebug-mcp`` / ``python -m mcp_server``: run the MCP server (stdio by default)."""

from __future__ import annotations

import argparse
import os
import sys

INVENTORY_ENV = "OPDEBUG_INVENTORY"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="opdebug-mcp",
        description="MCP server of ascend-operator-debug: plan_cases, run_case_remote, record_result, "
        "analyze_failures, check_host, and the run evidence as opdebug:// resources.",
    )
    parser.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio",
                        help="stdio (default) or streamable-http")
    parser.add_argument("--host", default="127.0.0.1", help="bind address for streamable-http (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port for streamable-http (default 8000)")
    parser.add_argument("--evidence-root", default=None,
                        help="evidence root (default: $OPDEBUG_EVIDENCE_ROOT, else .vaws-local/operator-debug)")
    parser.add_argument("--inventory", default=None,
                        help=f"host inventory TOML file (default: ${INVENTORY_ENV}; 'local' is always there)")
    parser.add_argument("--log-level", default="WARNING",
                        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                        help="server log level, written to stderr (default WARNING)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from .server import build_server

    inventory = args.inventory or os.environ.get(INVENTORY_ENV) or None
    server = build_server(evidence_root=args.evidence_root, inventory=inventory, log_level=args.log_level)
    if args.transport == "stdio":
        import anyio

        from .stdio_guard import run_stdio

        anyio.run(run_stdio, server)  # the SDK's stdio, plus an answer to every line it cannot read
    else:
        server.run("streamable-http", host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
