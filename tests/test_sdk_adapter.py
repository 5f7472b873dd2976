"""The MCP SDK beyond its public API is used in one module only (mcp_server/sdk_adapter.py),
and these tests fail when the SDK changes under it:

- the installed mcp is the version the adapter was written for (an upgrade means
  re-reading the adapter against the new SDK, then moving WRITTEN_FOR);
- each internal the adapter leans on is still there and still does what the adapter
  needs, checked through the SDK's own in-memory client: the handshake advertises
  ``resources.listChanged`` and ``logging``, ``logging/setLevel`` reaches the handler,
  and a client's listing, read, prompt and tool call reach AdaptedServer's overrides;
- no other module of mcp_server/ or tools/ names a private SDK attribute or patches
  an SDK method (a grep, checked against the adapter itself so it can fail).
"""

from __future__ import annotations

import asyncio
import re
from importlib.metadata import version
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types import EmptyResult, SetLevelRequestParams

from conftest import REPO_ROOT
from mcp_server.sdk_adapter import (WRITTEN_FOR, AdaptedServer, add_request_handler,
                                    advertise_resource_list_changes)

ADAPTER = REPO_ROOT / "mcp_server" / "sdk_adapter.py"
# A private attribute of the SDK's objects, an instance method replaced, an attribute set on a session.
PRIVATE_SDK_USE = re.compile(r"\._(lowlevel_server|resource_manager|prompt_manager|tool_manager)\b"
                             r"|ignore\[method-assign\]|\bsession\.\w+\s*=[^=]|setattr\(\s*(ctx|session|server)")


def test_the_installed_sdk_is_the_one_the_adapter_was_written_for() -> None:
    assert version("mcp") == WRITTEN_FOR, (
        f"mcp {version('mcp')} is installed, the adapter was written for {WRITTEN_FOR}: check each workaround in "
        "mcp_server/sdk_adapter.py against the new SDK (some may now be public API), then update WRITTEN_FOR")


def _server(calls: list[str]) -> AdaptedServer:
    server = AdaptedServer("adapter-check", version="0")

    @server.resource("demo://one", name="one")
    def one() -> str:
        return "one"

    @server.prompt(name="p")
    def prompt(x: str) -> str:
        return x

    @server.tool(name="t")
    def tool() -> str:
        return "t"

    async def listing() -> None:
        calls.append("list")

    def reading(uri: str, contents):
        calls.append(f"read {uri}")
        return contents

    async def prompt_check(name, arguments) -> None:
        calls.append(f"prompt {name}")
        if not arguments:
            raise MCPError(code=-32602, message="refused by the check")

    async def tool_check(name: str) -> None:
        calls.append(f"tool {name}")

    async def set_level(ctx, params: SetLevelRequestParams) -> EmptyResult:
        calls.append(f"level {params.level}")
        return EmptyResult()

    server.before_listing.append(listing)
    server.after_reading.append(reading)
    server.prompt_checks.append(prompt_check)
    server.tool_checks.append(tool_check)
    add_request_handler(server, "logging/setLevel", SetLevelRequestParams, set_level)
    advertise_resource_list_changes(server)
    return server


def test_each_internal_the_adapter_leans_on_still_does_what_it_needs() -> None:
    calls: list[str] = []
    server = _server(calls)

    async def session() -> dict:
        out: dict = {}
        async with Client(server, mode="legacy") as client:
            caps = client.server_capabilities
            out["list_changed"] = caps.resources.list_changed
            out["logging"] = caps.logging is not None
            await client.set_logging_level("error")
            await client.list_resources()
            out["read"] = (await client.read_resource("demo://one")).contents[0].text
            await client.get_prompt("p", {"x": "1"})
            with pytest.raises(MCPError) as info:
                await client.get_prompt("p", {})
            out["refused"] = info.value.error.message
            out["tool"] = (await client.call_tool("t", {})).content[0].text
        return out

    out = asyncio.run(session())
    assert out == {"list_changed": True, "logging": True, "read": "one", "refused": "refused by the check",
                   "tool": "t"}, out
    assert calls == ["level error", "list", "read demo://one", "prompt p", "prompt p", "tool t"], calls


def test_a_listed_resource_is_added_once() -> None:
    from mcp.server.mcpserver.resources import FunctionResource

    server = AdaptedServer("once")
    first = FunctionResource(uri="demo://a", name="a", fn=lambda: "a")
    assert server.add_listed_resource(first) is True
    assert server.add_listed_resource(FunctionResource(uri="demo://a", name="a2", fn=lambda: "b")) is False
    assert [str(r.uri) for r in asyncio.run(server.list_resources())] == ["demo://a"]


def _sources() -> list[Path]:
    return [p for pkg in ("mcp_server", "tools") for p in sorted((REPO_ROOT / pkg).rglob("*.py"))
            if "__pycache__" not in p.parts]


def test_no_private_sdk_name_or_patched_sdk_method_outside_the_adapter() -> None:
    assert PRIVATE_SDK_USE.search(ADAPTER.read_text()), "the grep no longer finds what the adapter does"
    found = [f"{p.relative_to(REPO_ROOT)}:{n}: {line.strip()}" for p in _sources() if p != ADAPTER
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if PRIVATE_SDK_USE.search(line)]
    assert found == [], "\n".join(found)
