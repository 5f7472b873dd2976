"""stdio that answers every line: a line the SDK cannot parse gets a JSON-RPC error.

The SDK's stdio reader (mcp 2.x, ``mcp/server/stdio.py``) turns a line it
cannot validate - JSON nested deeper than pydantic's limit (~200), a lone
surrogate escape, a truncated line - into an exception on the read stream,
and its dispatcher only logs it (``jsonrpc_dispatcher._dispatch``): the
client never hears back and waits for ever.  Here the SDK's stdio transport is
kept as it is (it owns fd 0/1); between it and the server sits a filter that
answers such an item with ``-32700 Parse error`` (or ``-32600 Invalid
Request`` for valid JSON that is not a JSON-RPC message), under the request's
own id when it can be read from the raw line, so the waiting call resolves.
"""

from __future__ import annotations

import re

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from .sdk_adapter import serve_streams

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
_ID_RE = re.compile(r'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,18})')


def parse_error_reply(exc: Exception) -> types.JSONRPCError:
    """The JSON-RPC error for a line the SDK could not turn into a message."""
    errors = exc.errors() if hasattr(exc, "errors") else []  # pydantic ValidationError
    raw = next((e.get("input") for e in errors if isinstance(e.get("input"), str)), "")
    json_broken = any(e.get("type") == "json_invalid" for e in errors) or not errors
    request_id = None
    match = _ID_RE.search(raw[:4096])
    if match:
        token = match.group(1)
        request_id = token[1:-1] if token.startswith('"') else int(token)
    what = "Parse error" if json_broken else "Invalid Request"
    detail = str(errors[0].get("msg")) if errors else f"{type(exc).__name__}: {exc}"
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=types.ErrorData(
            code=PARSE_ERROR if json_broken else INVALID_REQUEST,
            message=f"{what}: the line could not be read as a JSON-RPC message ({detail[:300]}); JSON must be complete "
            "on one line, valid UTF-8 without lone surrogates, and nested at most ~200 levels",
        ),
    )


async def run_stdio(server) -> None:
    """``server.run("stdio")``, with every unreadable line answered."""
    async with stdio_server() as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream[SessionMessage](0)

        async def pump() -> None:
            async with send:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        await write_stream.send(SessionMessage(parse_error_reply(item)))
                        continue
                    await send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            await serve_streams(server, receive, write_stream)
            tg.cancel_scope.cancel()
