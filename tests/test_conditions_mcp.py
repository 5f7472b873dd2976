"""Conditions the agent states, tested through the real MCP client over stdio.

A planted group normalization is wrong when the channels per group (a dimension divided by
an integer attribute) is above 8 and not a multiple of 8.  The cases run for real on host
``local``; ``analyze_failures`` then answers the conditions stated with it: the right one
agrees with every recorded case, plausible wrong ones are refuted with a named counterexample
(a ratio without its second term; the same ratio read from the wrong end at another rank),
and a misspelt name is a clear error naming the field and listing the run's properties.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp.client import Client
from test_mcp_stdio import error_text, with_server

RUN = "groups"
MODULE = '''\
import torch


def ref(x, groups=1):
    return torch.nn.functional.group_norm(x, groups)


def cand(x, groups=1):
    out = torch.nn.functional.group_norm(x, groups)
    per = x.shape[1] // groups
    if per > 8 and per % 8 != 0:  # the planted bug: a tail of channels per group is mishandled
        out = out + 0.5
    return out
'''
# (channels, groups, rank): channels per group 8, 12, 16, 8, 10, 6, 18, and 12 at rank 4
CASES = [(16, 2, 3), (36, 3, 3), (48, 3, 3), (24, 3, 3), (20, 2, 3), (18, 3, 3), (72, 4, 3), (36, 3, 4)]
RIGHT = "x.shape[1] // attr.groups > 8 and x.shape[1] // attr.groups % 8 != 0"
NO_TAIL = "x.shape[1] // attr.groups > 8"  # 16 per group passes
FROM_THE_BACK = "x.shape[-2] // attr.groups > 8 and x.shape[-2] // attr.groups % 8 != 0"  # rank 4: -2 is H
PAST_THE_RANK = "x.shape[3] > 1"  # rank-3 cases have no dimension 3


def _id(channels: int, groups: int, rank: int) -> str:
    return f"c{channels}-g{groups}-r{rank}"


def _fails(channels: int, groups: int) -> bool:
    per = channels // groups
    return per > 8 and per % 8 != 0


def _plan() -> dict[str, Any]:
    cases = []
    for channels, groups, rank in CASES:
        shape = [2, channels, 4] if rank == 3 else [2, channels, 2, 2]
        cases.append(
            {
                "id": _id(channels, groups, rank),
                "inputs": [{"name": "x", "shape": shape}],
                "attributes": {"groups": groups},
                "seed": 3,
            }
        )
    config = {
        "run_id": RUN,
        "operator": {"name": "group_norm", "candidate": "gn.cand", "reference": "gn.ref", "modules": ["gn.py"]},
        "tolerance": {"atol": 1e-4, "rtol": 1e-4},
    }
    return {"config": config, "cases": cases, "module_sources": {"gn.py": MODULE}}


def test_stated_conditions_are_tested_on_the_recorded_cases_over_stdio(evidence_root: Path) -> None:
    async def scenario(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["plan"] = await client.call_tool("plan_cases", _plan())
        out["run"] = await client.call_tool("run_case_remote", {"run_id": RUN})
        out["analysis"] = await client.call_tool(
            "analyze_failures", {"run_id": RUN, "conditions": [RIGHT, NO_TAIL, FROM_THE_BACK, PAST_THE_RANK]}
        )
        out["unknown"] = await client.call_tool(
            "analyze_failures", {"run_id": RUN, "conditions": [RIGHT, "x.shape[1] // attr.group > 8"]}
        )
        out["unsafe"] = await client.call_tool("analyze_failures", {"run_id": RUN, "conditions": ["__import__('os')"]})
        out["too_many"] = await client.call_tool("analyze_failures", {"run_id": RUN, "conditions": [RIGHT] * 17})
        return out

    stage = {k: v for k, v in os.environ.items() if k == "OPDEBUG_RUNNER_STAGE"}  # conftest's, per worker
    out = with_server(evidence_root, scenario, env=stage)
    assert not out["plan"].is_error, error_text(out["plan"])
    assert not out["run"].is_error, error_text(out["run"])
    assert not out["analysis"].is_error, error_text(out["analysis"])
    every = [_id(*c) for c in CASES]
    failing = sorted(_id(*c) for c in CASES if _fails(c[0], c[1]))
    analysis = out["analysis"].structured_content
    assert sorted(f["case_id"] for f in analysis["failures"]) == failing  # the planted bug, as run
    right, no_tail, from_back, past = analysis["conditions"]

    assert right["condition"] == RIGHT and right["fate"] == "surviving"
    assert sorted(right["agree"]) == sorted(every) and right["agree_count"] == len(every)
    assert right["contradict"] == [] and right["undefined"] == []

    assert no_tail["fate"] == "refuted" and no_tail["contradict"] == [_id(48, 3, 3)]
    assert no_tail["counterexamples"] == [
        {"case_id": _id(48, 3, 3), "refutes": NO_TAIL, "predicted": "fail", "observed": "pass", "probe": None}
    ]
    assert f"{_id(48, 3, 3)} passed where it is true (attr.groups = 3, x.shape[1] = 48)" in no_tail["text"]

    # x.shape[-2] is the channels at rank 3 but the height at rank 4: the rank-4 failure refutes it
    assert from_back["fate"] == "refuted" and from_back["contradict"] == [_id(36, 3, 4)]
    assert "failed (numerical_mismatch) where it is false" in from_back["text"]

    assert past["undefined_count"] == len(every) - 1 and past["agree"] == [_id(36, 3, 4)]

    # analysis.json keeps the answers of the call
    stored = json.loads((evidence_root / RUN / "analysis.json").read_text())
    assert [c["condition"] for c in stored["conditions"]] == [RIGHT, NO_TAIL, FROM_THE_BACK, PAST_THE_RANK]

    unknown = error_text(out["unknown"])
    assert "conditions[1]" in unknown and "attr.group is not a property of any case of this run" in unknown
    assert "did you mean attr.groups?" in unknown and "this run's cases have: attr.groups" in unknown
    unsafe = error_text(out["unsafe"])
    assert "conditions[0]" in unsafe and "only min(), max(), abs(), pow2() may be called" in unsafe
    assert "conditions" in error_text(out["too_many"]) and "16" in error_text(out["too_many"])
