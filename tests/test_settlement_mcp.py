"""The agent's conditions through the one settlement, through the real MCP client over stdio.

Planted kinds whose condition needs a derived quantity (each an operator planted here, its cases run
for real on host ``local``):

- ``groups``: wrong when the channels per group (``x.shape[1] // attr.groups``) is above 8 and not a
  multiple of 8;
- ``product``: wrong when batch times heads (``x.shape[0] * x.shape[1]``, a product of two sizes of a
  rank-3 input) is above 64;
- ``dim_rank``: wrong when the reduced dimension is the second one whatever way it is written
  (``attr.dim % x.rank == 1``: an index whose meaning changes with the rank).

For each: (a) the right condition, stated with ``narrow_failure(conditions=[...])``, ends exact in one
call (the plan before it is the other); (b) a plausible wrong one is refuted with a counterexample in
the same call; (c) the tool alone (``narrow_failure`` without conditions, on a twin run) ends on the
condition or on no exact finding - never on a wrong exact one.  Budgets: at most 40 new cases a call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from test_mcp_stdio import error_text, with_server

GROUPS = '''\
import torch


def ref(x, groups=1):
    return torch.nn.functional.group_norm(x.float(), groups).to(x.dtype)


def cand(x, groups=1):
    out = ref(x, groups)
    per = x.shape[1] // groups
    return out + 0.5 if per > 8 and per % 8 != 0 else out
'''
PRODUCT = '''\
import torch


def ref(x):
    return torch.tanh(x)


def cand(x):
    out = torch.tanh(x)
    return out + 0.5 if x.shape[0] * x.shape[1] > 64 else out
'''
DIM_RANK = '''\
import torch


def ref(x, dim=0):
    return torch.cumsum(x, dim)


def cand(x, dim=0):
    out = torch.cumsum(x, dim)
    return out + 0.5 if dim % x.dim() == 1 else out
'''


def _x(shape: list[int]) -> dict:
    return {"name": "x", "shape": shape}


KINDS: dict[str, dict[str, Any]] = {
    "groups": dict(
        module=GROUPS,
        cases=[
            {"inputs": [_x([2, c, 4])], "attributes": {"groups": g}}
            for c, g in ((16, 2), (36, 3), (48, 3), (24, 3), (20, 2), (18, 3), (72, 4))
        ],
        right="x.shape[1] // attr.groups > 8 and x.shape[1] // attr.groups % 8 != 0",
        wrong="x.shape[1] // attr.groups > 8",
        allowed=set(),  # the tool's own space cannot say it: no exact finding is the honest end
    ),
    "product": dict(
        module=PRODUCT,
        cases=[{"inputs": [_x(s)]} for s in ([4, 8, 16], [4, 32, 16], [16, 8, 16], [2, 16, 16], [8, 4, 32])],
        right="x.shape[0] * x.shape[1] > 64",
        wrong="x.shape[1] > 16",
        allowed=set(),
    ),
    "dim_rank": dict(
        module=DIM_RANK,
        cases=[
            {"inputs": [_x(s)], "attributes": {"dim": d}}
            for s, d in (([4, 8], 0), ([4, 8], 1), ([4, 8], -1), ([2, 4, 8], 1), ([2, 4, 8], -1), ([2, 4, 8], -2))
        ],
        right="attr.dim % x.rank == 1",
        wrong="attr.dim == 1",
        allowed=set(),
    ),
}


def _plan(run: str, kind: str) -> dict[str, Any]:
    spec = KINDS[kind]
    cases = [dict(c, id=f"c{i}", seed=3) for i, c in enumerate(spec["cases"])]
    config = {
        "run_id": run,
        "operator": {"name": kind, "candidate": "op.cand", "reference": "op.ref", "modules": ["op.py"]},
        "tolerance": {"atol": 1e-3, "rtol": 1e-3},
    }
    return {"config": config, "cases": cases, "module_sources": {"op.py": spec["module"]}}


def _scenario(kinds: list[str]):
    async def scenario(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kind in kinds:
            spec = KINDS[kind]
            for run in (f"{kind}-stated", f"{kind}-alone"):
                plan = await client.call_tool("plan_cases", _plan(run.replace("_", "-"), kind))
                assert not plan.is_error, error_text(plan)
            stated = await client.call_tool(
                "narrow_failure",
                {"run_id": f"{kind}-stated".replace("_", "-"), "conditions": [spec["right"], spec["wrong"]]},
            )
            alone = await client.call_tool("narrow_failure", {"run_id": f"{kind}-alone".replace("_", "-")})
            for r in (stated, alone):
                assert not r.is_error, error_text(r)
            out[kind] = (stated.structured_content, alone.structured_content)
        return out

    return scenario


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_stated_condition_is_settled_in_one_call_and_the_tool_alone_never_ends_wrong(
    evidence_root: Path, kind: str
) -> None:
    stage = {k: v for k, v in os.environ.items() if k == "OPDEBUG_RUNNER_STAGE"}
    stated, alone = with_server(evidence_root, _scenario([kind]), env=stage)[kind]
    spec = KINDS[kind]
    right, wrong = stated["conditions"]
    # (a) the right condition ends exact, by the settlement's rule, its probes run and held
    assert right["condition"] == spec["right"] and right["fate"] == "exact", (kind, right)
    assert right["validation"]["probes_run"] > 0 and not right["validation"]["open"], right["validation"]
    assert not right["why_not_exact"] and right["contradict_count"] == 0
    # (b) the plausible wrong one is refuted with a counterexample
    assert wrong["fate"] == "refuted" and wrong["counterexamples"], (kind, wrong)
    assert stated["stopped"] in ("conditions_settled", "exact") and stated["new_cases"] <= 40, stated["stopped"]
    # (c) the tool alone: its condition or no exact finding - never a wrong exact one
    assert alone["new_cases"] <= 40
    wrong_exact = [f["predicate"] for f in alone["findings"] if f["exact"] and f["predicate"] not in spec["allowed"]]
    assert not wrong_exact, (kind, wrong_exact, alone["stopped"])
    assert alone["exact"] == (alone["stopped"] == "exact")  # one run-level answer (settlement.run_exact)
    print(
        f"\nKIND {kind}: stated {right['condition']!r} -> {right['fate']} "
        f"({right['validation']['probes_run']} probes, {stated['new_cases']} new cases, stopped {stated['stopped']}); "
        f"wrong {wrong['condition']!r} -> {wrong['fate']} by {wrong['counterexamples'][0]['case_id']}; "
        f"tool alone: {[(f['predicate'], f['exact']) for f in alone['findings']][:2]} stopped {alone['stopped']} "
        f"after {alone['new_cases']} new cases"
    )
