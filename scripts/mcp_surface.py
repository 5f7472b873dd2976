#!/usr/bin/env python3
"""Dump the MCP surface an agent sees, as canonical JSON: tools/list, resource
templates, resources, prompts, every tool's two schema resources and the
example request.  Two dumps compared with ``cmp`` say whether a change left
the surface byte-identical (a restructuring must).

    .venv/bin/python scripts/mcp_surface.py OUT.json
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

REPO = Path(__file__).resolve().parent.parent


async def surface() -> dict:
    root = tempfile.mkdtemp(prefix="opdebug-surface-")
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server", "--evidence-root", root],
                                   cwd=str(REPO), env={"PYTHONPATH": str(REPO)})
    async with Client(params, cache=None, read_timeout_seconds=120) as client:
        tools = (await client.list_tools()).tools
        doc: dict = {"tools": [t.model_dump(mode="json", by_alias=True) for t in tools]}
        doc["templates"] = [t.model_dump(mode="json", by_alias=True)
                            for t in (await client.list_resource_templates()).resource_templates]
        doc["resources"] = [r.model_dump(mode="json", by_alias=True) for r in (await client.list_resources()).resources]
        doc["prompts"] = [p.model_dump(mode="json", by_alias=True) for p in (await client.list_prompts()).prompts]
        for tool in tools:
            for suffix in ("", "/input"):
                uri = f"opdebug://schemas/{tool.name}{suffix}"
                doc[uri] = (await client.read_resource(uri)).contents[0].text
        doc["example"] = (await client.read_resource("opdebug://examples/plan-request")).contents[0].text
    return doc


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    Path(sys.argv[1]).write_text(json.dumps(asyncio.run(surface()), indent=1, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
