"""Streamable HTTP that is safe to expose.

``run_case_remote`` with ``module_sources`` runs the caller's code, so anyone
who can reach the HTTP endpoint can run code on the inventory hosts.  Hence:

- bound to a loopback address, the SDK's DNS-rebinding protection applies
  (Host and Origin must be loopback names); a bearer token is optional;
- bound to anything else, the server refuses to start without a bearer token
  (``$OPDEBUG_HTTP_TOKEN`` or ``--auth-token-file``), unless the operator
  passes the loudly named ``--allow-unauthenticated-remote-code-execution``;
  Host must be one of the machine's names or ``--allowed-host`` values, and a
  browser Origin must be listed with ``--allowed-origin`` (clients that send
  no Origin, like the SDK's, are not affected).

The token is compared in constant time; a request without it gets 401 before
it reaches the MCP session.  See references/http-security.md.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOKEN_ENV = "OPDEBUG_HTTP_TOKEN"
OPT_OUT_FLAG = "--allow-unauthenticated-remote-code-execution"
MIN_TOKEN_CHARS = 16


class UnsafeHttpConfig(Exception):
    """The HTTP server would be reachable by others without authentication."""


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(env: dict[str, str], token_file: str | None) -> str | None:
    if token_file:
        token = Path(token_file).read_text(encoding="utf-8").strip()
    else:
        token = env.get(TOKEN_ENV, "").strip()
    if token and len(token) < MIN_TOKEN_CHARS:
        raise UnsafeHttpConfig(
            f"the bearer token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return token or None


@dataclass
class HttpPolicy:
    token: str | None
    allowed_hosts: list[str] | None  # None: the SDK's loopback defaults
    allowed_origins: list[str] | None


def http_policy(
    host: str,
    port: int,
    token: str | None,
    *,
    allowed_hosts: list[str] | None = None,
    allowed_origins: list[str] | None = None,
    allow_unauthenticated: bool = False,
) -> HttpPolicy:
    """What the HTTP server enforces for a bind address, or UnsafeHttpConfig."""
    if is_loopback(host) and not allowed_hosts and not allowed_origins:
        return HttpPolicy(token=token, allowed_hosts=None, allowed_origins=None)
    if not is_loopback(host) and token is None and not allow_unauthenticated:
        raise UnsafeHttpConfig(
            f"refusing to serve streamable HTTP on {host}:{port} without authentication: anyone who can reach "
            "it could run code on your hosts (run_case_remote runs the caller's modules). Set a bearer token "
            f"in ${TOKEN_ENV} (or --auth-token-file), bind to 127.0.0.1, or pass {OPT_OUT_FLAG} if another "
            "layer guards the port."
        )
    names = {"127.0.0.1", "localhost", "[::1]"}
    if host in ("0.0.0.0", "::", ""):
        names |= {socket.gethostname(), socket.getfqdn()}
    else:
        names.add(f"[{host}]" if ":" in host else host)
    hosts = sorted({f"{n}:{port}" for n in names} | set(allowed_hosts or []))
    return HttpPolicy(token=token, allowed_hosts=hosts, allowed_origins=list(allowed_origins or []))


class BearerTokenMiddleware:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self._expected):
            return await self.app(scope, receive, send)
        body = b'{"error":"unauthorized: send Authorization: Bearer <token>"}'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b"Bearer"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def serve_http(server: Any, host: str, port: int, policy: HttpPolicy, log_level: str = "warning") -> None:
    """Run the MCP server over streamable HTTP under ``policy``."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    security = None
    if policy.allowed_hosts is not None:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=policy.allowed_hosts,
            allowed_origins=policy.allowed_origins or [],
        )
    app: Any = server.streamable_http_app(transport_security=security, host=host)
    if policy.token is not None:
        app = BearerTokenMiddleware(app, policy.token)
    sock = listen_socket(host, port)  # bound before it says where it serves: a port in use is an error now
    where = f"[{host}]" if ":" in host else host
    print(
        f"opdebug-mcp: serving MCP over streamable HTTP at http://{where}:{port}/mcp"
        f" ({'bearer token required' if policy.token is not None else 'no token'})",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.Server(uvicorn.Config(app, log_level=log_level.lower())).run(sockets=[sock])


class CannotListen(Exception):
    """The address cannot be listened on (a port in use, an address not of this machine)."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (as uvicorn binds one: SO_REUSEADDR), or
    CannotListen saying why and what to do."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        hint = (
            " (another server listens there: stop it, or choose another --port)"
            if exc.errno == errno.EADDRINUSE
            else ""
        )
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None
    sock.set_inheritable(True)
    return sock
