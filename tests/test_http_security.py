"""Streamable HTTP off loopback: no start without a bearer token (or the loud
opt-out), and with one, requests without the token, with a foreign Host or a
foreign browser Origin are refused.  Real server processes, the real MCP client."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import REPO_ROOT

TOKEN = "t0ken-for-tests-0123456789abcdef"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(evidence_root: Path, host: str, port: int, env: dict[str, str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mcp_server", "--transport", "streamable-http", "--host", host,
                             "--port", str(port), "--evidence-root", str(evidence_root), *extra],
                            cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_off_loopback_without_a_token_the_server_refuses_to_start(evidence_root: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPDEBUG_HTTP_TOKEN"}
    proc = subprocess.run([sys.executable, "-m", "mcp_server", "--transport", "streamable-http", "--host", "0.0.0.0",
                           "--port", str(_port()), "--evidence-root", str(evidence_root)],
                          cwd=REPO_ROOT, env={**env, "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "OPDEBUG_HTTP_TOKEN" in proc.stderr and "--allow-unauthenticated-remote-code-execution" in proc.stderr
    short = subprocess.run([sys.executable, "-m", "mcp_server", "--transport", "streamable-http", "--host", "0.0.0.0",
                            "--port", str(_port())], cwd=REPO_ROOT,
                           env={**env, "PYTHONPATH": str(REPO_ROOT), "OPDEBUG_HTTP_TOKEN": "short"},
                           capture_output=True, text=True, timeout=60)
    assert short.returncode == 2 and "at least 16" in short.stderr


def test_off_loopback_the_token_host_and_origin_are_checked(evidence_root: Path) -> None:
    port = _port()
    proc = _server(evidence_root, "0.0.0.0", port, {"OPDEBUG_HTTP_TOKEN": TOKEN})
    url = f"http://127.0.0.1:{port}/mcp"
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}

    async def scenario() -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
                await asyncio.sleep(0.1)
        out: dict[str, Any] = {}
        async with httpx2.AsyncClient() as raw:
            body = json.dumps(INIT)
            out["no_token"] = (await raw.post(url, content=body, headers=headers)).status_code
            out["bad_token"] = (await raw.post(url, content=body, headers={
                **headers, "authorization": "Bearer " + "x" * len(TOKEN)})).status_code
            auth = {**headers, "authorization": f"Bearer {TOKEN}"}
            out["foreign_host"] = (await raw.post(url, content=body, headers={**auth, "host": "evil.example"}))\
                .status_code
            out["foreign_origin"] = (await raw.post(url, content=body, headers={
                **auth, "origin": "http://evil.example"})).status_code
        http = create_mcp_http_client(headers={"authorization": f"Bearer {TOKEN}"})
        async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
            out["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
        return out

    try:
        out = asyncio.run(scenario())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert out["no_token"] == 401 and out["bad_token"] == 401
    assert out["foreign_host"] in (400, 421) and out["foreign_origin"] == 403
    assert "plan_cases" in out["tools"] and "run_case_remote" in out["tools"]
