"""MCP wiring for ascend-operator-debug (protocol only; the logic lives in tools/).

Importing this package is cheap: it imports neither torch nor the MCP SDK.
Build the server with ``mcp_server.server.build_server`` or run it with
``python -m mcp_server`` / ``opdebug-mcp``.
"""

SERVER_NAME = "ascend-operator-debug"
