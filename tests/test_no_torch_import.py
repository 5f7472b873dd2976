"""Starting the MCP server (and the CLI) must not import torch: it costs
seconds and the server never runs an operator itself."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO_ROOT

PROBE = """
import json, sys
{imports}
print(json.dumps({{"torch": "torch" in sys.modules,
                   "heavy": sorted(m for m in ("torch", "torch_npu", "numpy") if m in sys.modules)}}))
"""


def imported_after(imports: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(imports=imports)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_mcp_server_leaves_torch_unimported() -> None:
    assert imported_after("import mcp_server") == {"torch": False, "heavy": []}


def test_building_the_server_and_listing_tools_leaves_torch_unimported(tmp_path) -> None:
    imports = f"""
import asyncio
import mcp_server, mcp_server.server, mcp_server.__main__
server = mcp_server.server.build_server({str(tmp_path)!r})
tools = asyncio.run(server.list_tools())
assert len(tools) == 10, [t.name for t in tools]
"""
    assert imported_after(imports)["heavy"] == []


def test_cli_parser_leaves_torch_unimported() -> None:
    assert imported_after("import tools.cli; tools.cli.build_parser()")["heavy"] == []


def test_the_probe_sees_torch_when_it_is_imported() -> None:
    # the check above can fail: importing torch is visible to the probe
    assert imported_after("import torch")["torch"] is True
