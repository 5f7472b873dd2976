"""``opdebug-mcp`` / ``python -m mcp_server``: run the MCP server (stdio by default)."""

from __future__ import annotations

import argparse
import gc
import os
import sys

INVENTORY_ENV = "OPDEBUG_INVENTORY"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="opdebug-mcp",
        description="MCP server of ascend-operator-debug: plan_cases, run_case_remote, record_result, "
        "analyze_failures, check_host, and the run evidence as opdebug:// resources.",
    )
    parser.add_argument(
        "--transport", choices=("stdio", "streamable-http"), default="stdio", help="stdio (default) or streamable-http"
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address for streamable-http (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port for streamable-http (default 8000)")
    parser.add_argument(
        "--evidence-root",
        default=None,
        help="evidence root (default: $OPDEBUG_EVIDENCE_ROOT, else .vaws-local/operator-debug)",
    )
    parser.add_argument(
        "--inventory",
        default=None,
        help=f"host inventory TOML file (default: ${INVENTORY_ENV}; 'local' is always there)",
    )
    parser.add_argument(
        "--auth-token-file",
        default=None,
        help="streamable-http: file holding the bearer token clients must send (default: "
        "$OPDEBUG_HTTP_TOKEN); required off loopback",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        help="streamable-http: an extra Host header value to accept (HOST:PORT), repeatable",
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        help="streamable-http: a browser Origin to accept (e.g. https://ide.example), repeatable",
    )
    parser.add_argument(
        "--allow-unauthenticated-remote-code-execution",
        action="store_true",
        help="streamable-http off loopback WITHOUT a token: anyone who reaches the port can run "
        "code on your hosts. Only behind another layer that authenticates.",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        help="server log level, written to stderr (default WARNING)",
    )
    return parser.parse_args(argv)


def inventory_problem(path: str, source: str) -> str | None:
    """Why the inventory file ``path`` (named by ``source``) cannot serve, or None."""
    from tools.errors import ToolError
    from tools.remote.inventory import load_inventory

    try:
        load_inventory(path)
    except ToolError as exc:
        return f"{exc.message} (given by {source})"
    except OSError as exc:
        return f"cannot read the inventory file {path} (given by {source}): {exc.strerror or exc}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from .server import build_server

    inventory = args.inventory or os.environ.get(INVENTORY_ENV) or None
    if inventory is not None:  # refused now, not by every call later
        problem = inventory_problem(inventory, "--inventory" if args.inventory else f"${INVENTORY_ENV}")
        if problem:
            print(f"opdebug-mcp: {problem}", file=sys.stderr)
            return 2
    policy = None
    if args.transport == "streamable-http":
        from .http_security import UnsafeHttpConfig, http_policy, read_token

        try:
            policy = http_policy(
                args.host,
                args.port,
                read_token(dict(os.environ), args.auth_token_file),
                allowed_hosts=args.allowed_host,
                allowed_origins=args.allowed_origin,
                allow_unauthenticated=args.allow_unauthenticated_remote_code_execution,
            )
        except (UnsafeHttpConfig, OSError) as exc:
            print(f"opdebug-mcp: {exc}", file=sys.stderr)
            return 2
        if policy.token is None and args.allow_unauthenticated_remote_code_execution:
            print(
                f"opdebug-mcp: WARNING: serving {args.host}:{args.port} WITHOUT authentication; anyone who "
                "reaches it can run code on your hosts",
                file=sys.stderr,
            )
    server = build_server(evidence_root=args.evidence_root, inventory=inventory, log_level=args.log_level)
    try:
        return _serve(server, args, policy)
    finally:
        # The client waits for the process to end: the interpreter's last collections over the
        # whole heap (the SDK's and pydantic's schemas, about a second) are skipped - nothing
        # left in it holds anything to release (the runs and their files are closed by now).
        gc.freeze()


def _serve(server, args: argparse.Namespace, policy) -> int:
    if policy is None:
        import anyio

        from .stdio_guard import run_stdio

        anyio.run(run_stdio, server)  # the SDK's stdio, plus an answer to every line it cannot read
    else:
        from .http_security import CannotListen, serve_http

        try:
            serve_http(server, args.host, args.port, policy, log_level=args.log_level)
        except CannotListen as exc:
            print(f"opdebug-mcp: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
