"""More planted kinds for the one settlement, through the real MCP client over stdio.

Each an operator planted here (or in tests/operators/), its cases run for real on host ``local``:

- ``sumsq``: a float16 RMS norm wrong when a row's sum of squares, of the values actually built, passes
  float16's largest value (``x.values.sumsq[-1] > float16.max``; tests/operators/half_row_sumsq.py);
- ``row_bytes``: wrong when one row is over 512 bytes across float16 and float32
  (``x.shape[-1] * x.itemsize > 512``);
- ``channels_last``: wrong for 4-d channels_last inputs (``x.memory_format == channels_last``);
- ``last_stride``: wrong when the last dimension is not unit-stride (``x.stride[-1] != 1``);
- ``positions``: a rotary-like op reading an index tensor through a table of 4096 angles, wrong for a
  position past its end (``positions.values.max > 4095``; one generator throughout, the positions placed);
- ``half_cast``: a kernel that computes float32 inputs in float16, wrong where a value passes float16's
  largest (``x.dtype == float32 and x.values.max_abs > float16.max``).

Same shape as tests/test_settlement_mcp.py: (a) the right condition, stated with
``narrow_failure(conditions=[...])``, ends exact in one call (the plan before it is the other); (b) a
plausible wrong one is refuted with a counterexample in that call; (c) the tool alone (``narrow_failure``
without conditions, on a twin run) ends on the condition or on no exact finding - never on a wrong exact
one; where the tool's own space says the condition (``alone_exact``), it ends exact on it.  Budgets: at most
40 new cases a call.  One server for every kind (its start-up paid once).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, server_env
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from test_mcp_stdio import error_text

OPERATORS = Path(__file__).parent / "operators"

ROW_BYTES = '''\
import torch


def ref(x):
    return torch.tanh(x)


def cand(x):
    out = torch.tanh(x)
    return out + 0.5 if x.shape[-1] * x.element_size() > 512 else out
'''
CHANNELS_LAST = '''\
import torch


def ref(x):
    return torch.tanh(x)


def cand(x):
    out = torch.tanh(x)
    cl = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    return out + 0.5 if cl else out
'''
LAST_STRIDE = '''\
import torch


def ref(x):
    return torch.tanh(x)


def cand(x):
    out = torch.tanh(x)
    return out + 0.5 if x.dim() >= 1 and x.stride(-1) != 1 else out
'''

POSITIONS = '''\
import torch


def ref(x, positions):
    return x * torch.cos(positions.to(x.dtype)).unsqueeze(-1)


def cand(x, positions):  # a table of 4096 angles: a position past its end reads the last one
    return x * torch.cos(positions.clamp(max=4095).to(x.dtype)).unsqueeze(-1)
'''
HALF_CAST = '''\
import torch


def ref(x):
    return x / 1000


def cand(x):  # the kernel computes in float16: a float32 value past its largest becomes inf (in every mode)
    out = x / 1000
    if x.dtype != torch.float32:
        return out
    return torch.where(x.abs() > 65504.0, torch.full_like(out, float("inf")), out)
'''


def _x(shape: list[int], dtype: str = "float32", strides: list[int] | None = None, std: float = 1.0) -> dict:
    spec: dict[str, Any] = {"name": "x", "shape": shape, "dtype": dtype, "values": {"kind": "normal", "std": std}}
    if strides is not None:
        spec["strides"] = strides
    return spec


def _positions(placed: list[int]) -> dict:
    """Four positions drawn in [0, 64), the given ones placed at the front."""
    values: dict[str, Any] = {"kind": "randint", "low": 0, "high": 64}
    values["place"] = [{"index": [i], "value": v} for i, v in enumerate(placed)]
    return {"name": "positions", "shape": [4], "dtype": "int64", "values": values}


def _cl(shape: list[int]) -> list[int]:
    """channels_last strides of an [N, C, H, W] shape."""
    n, c, h, w = shape
    return [h * w * c, 1, w * c, c]


KINDS: dict[str, dict[str, Any]] = {
    "sumsq": dict(
        module=(OPERATORS / "half_row_sumsq.py").read_text(),
        tolerance={"atol": 1e-2, "rtol": 1e-2},
        cases=[
            {"inputs": [_x(s, "float16", std=std)]}
            for s, std in (([4, 64], 1.0), ([4, 64], 40.0), ([4, 16], 40.0), ([4, 16], 80.0), ([4, 32], 1.0))
        ],
        right="x.dtype == float16 and x.values.sumsq[-1] > float16.max",
        wrong="x.shape[-1] > 32",  # long rows: [4, 16] at std 80 fails, [4, 64] at std 1 passes
        # without the dtype it is refuted too, rightly: a dtype probe builds the same values in bfloat16,
        # whose sum of squares does not overflow, and that case passes
        also_wrong="x.values.sumsq[-1] > float16.max",
        witness="c0",  # a planned case the wrong condition mispredicts
        # the tool alone: the row statistic against float16's limit, with the dtype its probes showed it needs
        allowed={"x.values.sumsq[-1] > float16.max and dtype == float16"},
        # said, not exact: the passing side of its minimal pair is a planned draw (normal, std 40), whose
        # statistic under another seed is unknown until it ran - that probe is open, and keeps it from exact
        alone_leads="x.values.sumsq[-1] > float16.max and dtype == float16",
    ),
    "row_bytes": dict(
        module=ROW_BYTES,
        tolerance={"atol": 1e-3, "rtol": 1e-3},
        cases=[
            {"inputs": [_x(s, dt)]}
            for s, dt in (
                ([4, 128], "float16"),
                ([4, 384], "float16"),
                ([4, 256], "float16"),
                ([4, 128], "float32"),
                ([4, 192], "float32"),
                ([4, 64], "float32"),
            )
        ],
        right="x.shape[-1] * x.itemsize > 512",
        wrong="x.shape[-1] > 128",  # the element count alone: float16 [4, 256] (512 bytes) passes
        witness="c2",  # a planned case the wrong condition mispredicts
        allowed=set(),
    ),
    "channels_last": dict(
        module=CHANNELS_LAST,
        tolerance={"atol": 1e-3, "rtol": 1e-3},
        cases=[
            {"inputs": [_x(s, strides=st)]}
            for s, st in (
                ([2, 3, 4, 5], None),
                ([2, 3, 4, 5], _cl([2, 3, 4, 5])),
                ([2, 8, 4, 4], _cl([2, 8, 4, 4])),
                ([2, 3, 4, 5], [60, 20, 1, 4]),  # H and W swapped: neither contiguous nor channels_last
                ([2, 8, 4, 4], None),
            )
        ],
        right="x.memory_format == channels_last",
        wrong="not x.contiguous",  # the swapped-H/W view passes
        witness="c3",  # a planned case the wrong condition mispredicts
        allowed={"x.memory_format == channels_last"},
        alone_exact="x.memory_format == channels_last",
    ),
    "last_stride": dict(
        module=LAST_STRIDE,
        tolerance={"atol": 1e-3, "rtol": 1e-3},
        cases=[
            {"inputs": [_x(s, strides=st)]}
            for s, st in (
                ([4, 16], None),
                ([4, 16], [32, 2]),
                ([4, 16], [64, 1]),  # padded rows: not contiguous, unit last stride - passes
                ([4, 16], [1, 4]),
                ([8, 8], [16, 2]),
                ([8, 8], None),
            )
        ],
        right="x.stride[-1] != 1",
        wrong="not x.contiguous",
        witness="c2",  # a planned case the wrong condition mispredicts
        allowed={"x.stride[-1] != 1"},
        alone_exact="x.stride[-1] != 1",
    ),
}


KINDS |= {
    "positions": dict(
        module=POSITIONS,
        tolerance={"atol": 1e-3, "rtol": 1e-3},
        cases=[  # one generator throughout: the positions placed decide
            {"inputs": [_x([4, 8]), _positions(placed)]} for placed in ([], [5000], [4095], [100, 7000], [3000], [9000])
        ],
        right="positions.values.max > 4095",
        wrong="positions.values.max > 5000",  # 9000 fails where 5000 fails too
        witness="c1",
        allowed={"positions.values.max > 4095"},
        alone_exact="positions.values.max > 4095",
    ),
    "half_cast": dict(
        module=HALF_CAST,
        tolerance={"atol": 1e-2, "rtol": 1e-2},
        cases=[
            {"inputs": [_x(s, "float32", std=std)]}
            for s, std in (([4, 16], 1.0), ([4, 16], 1e6), ([4, 16], 1000.0), ([8, 8], 3e5), ([8, 8], 10.0))
        ],
        right="x.dtype == float32 and x.values.max_abs > float16.max",
        wrong="x.values.max_abs > 1000",  # [4, 16] at std 1000 holds values past 1000 and passes
        witness="c2",
        allowed={"x.values.max_abs > float16.max and dtype == float32"},
        alone_leads="x.values.max_abs > float16.max and dtype == float32",  # as sumsq: a draw's other seed open
    ),
}


def _run(kind: str, twin: str) -> str:
    return f"{kind}-{twin}".replace("_", "-")


def _plan(run: str, kind: str) -> dict[str, Any]:
    spec = KINDS[kind]
    cases = [dict(c, id=f"c{i}", seed=3) for i, c in enumerate(spec["cases"])]
    config = {
        "run_id": run,
        "operator": {"name": kind, "candidate": "op.cand", "reference": "op.ref", "modules": ["op.py"]},
        "tolerance": spec["tolerance"],
    }
    return {"config": config, "cases": cases, "module_sources": {"op.py": spec["module"]}}


def _stated(spec: dict[str, Any]) -> list[str]:
    return [spec["right"], spec["wrong"], *([spec["also_wrong"]] if "also_wrong" in spec else [])]


def _scenario(client: Client, kind: str):
    async def one() -> tuple[dict, dict]:
        spec = KINDS[kind]
        for twin in ("stated", "alone"):
            plan = await client.call_tool("plan_cases", _plan(_run(kind, twin), kind))
            assert not plan.is_error, error_text(plan)
        stated = await client.call_tool("narrow_failure", {"run_id": _run(kind, "stated"), "conditions": _stated(spec)})
        alone = await client.call_tool("narrow_failure", {"run_id": _run(kind, "alone")})
        for r in (stated, alone):
            assert not r.is_error, error_text(r)
        return stated.structured_content, alone.structured_content

    return one()


class _Server:
    """One MCP server over stdio for every kind (its start-up paid once), its client on a loop of its own
    thread; each test runs its kind there (so each test keeps its own time limit)."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready: concurrent.futures.Future[Client] = concurrent.futures.Future()
        self.stop: asyncio.Event | None = None
        self.params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mcp_server", "--evidence-root", str(root)],
            cwd=str(REPO_ROOT),
            env=server_env(**env),
        )
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._serve(),), daemon=True)
        self.thread.start()

    async def _serve(self) -> None:
        self.stop = asyncio.Event()
        try:
            async with Client(self.params, cache=None, read_timeout_seconds=120) as client:
                self.ready.set_result(client)
                await self.stop.wait()
        except BaseException as exc:  # the server did not start: the tests say why
            if not self.ready.done():
                self.ready.set_exception(exc)
            raise

    def run(self, kind: str) -> tuple[dict, dict]:
        client = self.ready.result(timeout=120)
        return asyncio.run_coroutine_threadsafe(_scenario(client, kind), self.loop).result()

    def close(self) -> None:
        if self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("kinds") / "evidence"
    root.mkdir()
    srv = _Server(root, {k: v for k, v in os.environ.items() if k == "OPDEBUG_RUNNER_STAGE"})
    yield srv
    srv.close()


def _said(stated: dict, alone: dict) -> str:
    """One line: each stated condition's fate, probes and counterexamples; the tool alone's end."""
    parts = []
    for c in stated["conditions"]:
        probes = (c.get("validation") or {}).get("probe_ids")
        ce = [x.get("case_id") for x in c.get("counterexamples") or []][:3]
        parts.append(f"{c['condition']!r} -> {c['fate']} (probes {probes}, why_not {c.get('why_not_exact')}, ce {ce})")
    parts.append(f"stated call: {stated['new_cases']} new cases, stopped {stated['stopped']}")
    found = [(f["predicate"], f["exact"]) for f in alone["findings"]][:3]
    parts.append(f"alone: {found} stopped {alone['stopped']} after {alone['new_cases']} new cases")
    return "; ".join(parts)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_stated_condition_is_settled_in_one_call_and_the_tool_alone_never_ends_wrong(
    server: _Server, kind: str
) -> None:
    stated, alone = server.run(kind)
    spec = KINDS[kind]
    right, wrong, *also = stated["conditions"]
    print(f"\nKIND {kind}: {_said(stated, alone)}")
    # (a) the right condition ends exact, by the settlement's rule, its probes run and held
    assert right["condition"] == spec["right"] and right["fate"] == "exact", (kind, right)
    assert right["validation"]["probes_run"] > 0 and not right["validation"]["open"], right["validation"]
    assert not right["why_not_exact"] and right["contradict_count"] == 0
    # (b) the plausible wrong one is refuted with a counterexample
    for refuted in (wrong, *also):
        assert refuted["fate"] == "refuted" and refuted["counterexamples"], (kind, refuted)
    assert spec["witness"] in [c["case_id"] for c in wrong["counterexamples"]], wrong["counterexamples"]
    for ce in (c for refuted in also for c in refuted["counterexamples"]):  # a dtype probe: built, passed
        assert ".dtype-" in ce["case_id"] and (ce["predicted"], ce["observed"]) == ("fail", "pass"), ce
    assert stated["stopped"] in ("conditions_settled", "exact") and stated["new_cases"] <= 40, stated["stopped"]
    # (c) the tool alone: its condition or no exact finding - never a wrong exact one
    assert alone["new_cases"] <= 40
    wrong_exact = [f["predicate"] for f in alone["findings"] if f["exact"] and f["predicate"] not in spec["allowed"]]
    assert not wrong_exact, (kind, wrong_exact, alone["stopped"])
    assert alone["exact"] == (alone["stopped"] == "exact")  # one run-level answer (settlement.run_exact)
    if spec.get("alone_exact"):  # the tool's own space says it: it ends exact on that condition
        assert alone["stopped"] == "exact", (kind, alone["stopped"], alone["findings"][:1])
        assert [f["predicate"] for f in alone["findings"]] == [spec["alone_exact"]], alone["findings"]
    elif spec.get("alone_leads"):  # said, not settled: the lead is right, what is open is listed
        lead = alone["findings"][0] if alone["findings"] else {}
        assert lead.get("predicate") == spec["alone_leads"] and lead["why_not_exact"], alone["findings"]
