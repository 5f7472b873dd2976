"""The one place that leans on the MCP SDK beyond its documented API.

Written for mcp 2.3.0 (``WRITTEN_FOR``); tests/test_sdk_adapter.py fails when
the installed SDK is another version or when one of the internals below moved,
so an upgrade is checked here and nowhere else.  What the public ``MCPServer``
API of that version lacks, and the workaround for each:

- ``resources.listChanged: true`` in the handshake-era ``initialize`` answer:
  MCPServer builds its initialization options with empty NotificationOptions on
  every transport (stdio, streamable HTTP).  The low-level server's two methods
  that build them get NotificationOptions(resources_changed=True) by default.
- a ``logging/setLevel`` handler: MCPServer registers none and takes none (the
  low-level constructor's ``on_set_logging_level`` is not passed through), so it
  is added on the low-level server (which also advertises ``logging``).
- serving streams the caller filters (stdio_guard.py): the low-level ``run``.
- refining a listing, a read or a prompt: MCPServer's request handlers call its
  public ``list_resources``, ``read_resource``, ``get_prompt`` and ``call_tool``;
  ``AdaptedServer`` overrides those (no instance is patched) and runs the hooks
  the project registers on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.lowlevel import NotificationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from .paging import paged, split_page

WRITTEN_FOR = "2.3.0"
MAX_URI_CHARS = 4096  # a longer URI names no resource of this server

ListingHook = Callable[[], Awaitable[None]]
ReadHook = Callable[[str, Any], Any]
PromptCheck = Callable[[str, "dict[str, Any] | None"], Awaitable[None]]
ToolCheck = Callable[[str], Awaitable[None]]


class AdaptedServer(MCPServer):
    """MCPServer plus the hooks the project needs around its public request methods."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before_listing: list[ListingHook] = []  # e.g. find new pictures on disk
        self.after_reading: list[ReadHook] = []  # (uri, contents) -> contents, e.g. a MIME type per file
        self.prompt_checks: list[PromptCheck] = []  # raise MCPError on bad prompt arguments
        self.tool_checks: list[ToolCheck] = []  # raise on an unknown tool name, before the SDK's message
        self._listed: set[str] = set()

    async def list_resources(self) -> Any:
        for hook in self.before_listing:
            await hook()
        return await super().list_resources()

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        text = str(uri)
        if len(text) > MAX_URI_CHARS:  # never matched against the templates, never echoed whole
            # raised as the protocol error itself: the SDK would add the whole URI as the error's data
            clipped = text[:200] + "..."
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Unknown resource: {clipped} ({len(text):,} characters; a resource URI here is at most "
                f"{MAX_URI_CHARS:,}; resources/list and resources/templates/list name them)",
                data={"uri": clipped, "uri_chars": len(text)},
            )
        base, page = split_page(text)  # a resource past one transport event is read a page at a time
        contents = await super().read_resource(base if page is not None else uri, context)
        for hook in self.after_reading:
            contents = hook(base, contents)
        return paged(base, page, contents)

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        for check in self.prompt_checks:
            await check(name, arguments)
        return await super().get_prompt(name, arguments, context)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        for check in self.tool_checks:
            await check(name)
        return await super().call_tool(name, arguments, context)

    def add_listed_resource(self, resource: Any) -> bool:
        """Add a concrete resource once (False when its URI is already listed): the URIs
        are remembered here, as MCPServer has no public lookup of a listed resource."""
        uri = str(resource.uri)
        if uri in self._listed:
            return False
        self._listed.add(uri)
        self.add_resource(resource)
        return True


def advertise_resource_list_changes(server: MCPServer) -> None:
    """``resources.listChanged: true`` in the handshake-era initialize answer, on every
    transport.  (At 2026-07-28 and later the SDK derives every listChanged from the
    subscriptions/listen stream it serves, whatever is passed here.)"""
    lowlevel = server._lowlevel_server
    original_options = lowlevel.create_initialization_options
    original_capabilities = lowlevel.get_capabilities

    def create_initialization_options(notification_options: Any = None, *args: Any, **kwargs: Any) -> Any:
        return original_options(notification_options or NotificationOptions(resources_changed=True), *args, **kwargs)

    def get_capabilities(notification_options: Any = None, *args: Any, **kwargs: Any) -> Any:
        return original_capabilities(
            notification_options or NotificationOptions(resources_changed=True), *args, **kwargs
        )

    lowlevel.create_initialization_options = create_initialization_options  # type: ignore[method-assign]
    lowlevel.get_capabilities = get_capabilities  # type: ignore[method-assign]


def add_request_handler(server: MCPServer, method: str, params_type: type, handler: Callable[..., Any]) -> None:
    """A request handler MCPServer does not register (``logging/setLevel``)."""
    server._lowlevel_server.add_request_handler(method, params_type, handler)


async def serve_streams(server: MCPServer, read_stream: Any, write_stream: Any) -> None:
    """Serve one connection over streams the caller made (MCPServer.run_stdio_async, with
    the caller's streams instead of the process's own stdio)."""
    lowlevel = server._lowlevel_server
    await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
