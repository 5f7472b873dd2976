"""The phase table (tools/runner/phases.py) and the decisions kept with it, as every side reads them."""

from __future__ import annotations

import typing

from tools.remote.envelopes import HARNESS_WHERE_TEXT, HarnessWhere
from tools.remote.supervisor_client import Event, CaseWait
from tools.runner import phases
from tools.runner.supervisor import Supervisor


def test_a_backward_timeout_is_a_timeout_and_not_a_kill_from_outside() -> None:
    killed = phases.killed_from_outside
    assert not killed({"signature": "backward: timeout", "signal": "SIGKILL"})
    assert not killed({"signature": "timeout", "signal": "SIGKILL"})
    assert not killed({"signature": "timeout during compile", "signal": "SIGKILL"})
    assert killed({"signature": "SIGTERM", "signal": "SIGTERM"})
    assert killed({"signature": "backward: SIGKILL", "signal": "SIGKILL"})  # the backward killed by someone else
    assert not killed({"signature": "SIGSEGV", "signal": "SIGSEGV"})  # a fault of the operator's own
    assert not killed({"signature": "exit 3", "signal": None}) and not killed(None)
    assert phases.timed_out({"signature": "backward: timeout"}) and not phases.timed_out({"signature": "SIGTERM"})


def test_every_side_reads_the_same_phases() -> None:
    names = [p.name for p in phases.PHASES]
    assert len(names) == len(set(names))
    assert names.index("resolve") < names.index("inputs") < names.index("candidate") < names.index("backward") \
        < names.index("reference") < names.index("judge") < names.index("consistency")
    clocks = phases.budgets({}, {"mode": "compile"}, 7.0, 11.0)
    wheres = set(typing.get_args(HarnessWhere))
    # the phase table's names are the only names of phases: a harness error's where, the client's events
    assert wheres == set(names) == set(HARNESS_WHERE_TEXT)  # the server's contract knows each, and no other
    assert callable(getattr(CaseWait, f"on_{phases.PHASE_EVENT}"))  # one event kind, named by its phase
    for phase in phases.PHASES:
        assert phase.blame in (phases.OPERATOR, phases.HARNESS) and phase.text
        assert phase.budget is None or phase.budget in clocks
        if phase.posts is not None and phase.name != "resolve":  # the worker posts it: the supervisor handles it
            assert callable(getattr(Supervisor, f"phase_{phase.name}", None)), phase.name
    assert [p.name for p in phases.PHASES if p.prepares] == ["health_check", "worker_start", "resolve", "inputs"]


def test_the_budget_rules() -> None:
    assert phases.compile_budget({}, {"mode": "eager"}) is None
    assert phases.compile_budget({"compile_timeout_s": 50}, {"mode": "graph"}) == 50.0
    assert phases.compile_budget({"compile_timeout_s": 50}, {"mode": "compile", "compile_timeout_s": 5}) == 5.0
    assert phases.compile_budget({}, {"mode": "compile"}) == phases.COMPILE_TIMEOUT_S
    assert phases.import_budget({"operator": {"import_timeout_s": 9}}) == 9.0
    clocks = phases.budgets({}, {"mode": "compile"}, 7.0, 11.0)
    assert phases.budget_s("compile", clocks) == phases.COMPILE_TIMEOUT_S and phases.budget_s("candidate", clocks) == 7
    assert phases.budget_s("inputs", clocks) == 11.0 and phases.budget_s("judge", clocks) is None
    assert phases.PHASE["candidate"].tells and not phases.PHASE["judge"].tells


def test_a_step_is_read_once_and_typed() -> None:
    step = phases.Step("candidate", 1.5, input_metadata={"case_id": "c"})
    assert phases.Step.parse(step.doc(), 9.0) == step
    assert phases.Step.parse({"phase": "nonsense", "at": 1.0}, 9.0) is None
    assert phases.Step.parse({"phase": "judge", "at": 1.0}, 9.0) is None  # not posted: on the clock before it
    odd = phases.Step.parse({"phase": "backward", "at": "soon", "grad_outputs": "x"}, 9.0)
    assert odd == phases.Step("backward", 9.0)  # a malformed field is dropped, a missing time is now


def test_the_client_waits_each_phase_its_budget() -> None:
    wait = CaseWait("the case start", 600.0, case_timeout_s=10.0, start_timeout_s=600.0, grace_s=60.0)
    wait.on_phase(Event.parse({"event": "phase", "phase": "compile", "budget_s": 120.0}))
    assert wait.timeout == 180.0 and wait.waiting == "the case result"
    wait.on_phase(Event.parse({"event": "phase", "phase": "candidate", "budget_s": 10.0}))
    assert wait.timeout == 70.0
    wait.on_phase(Event.parse({"event": "phase", "phase": "inputs", "budget_s": 30.0}))
    assert wait.timeout == 90.0 and "inputs" in wait.waiting
    wait.on_phase(Event.parse({"event": "phase", "phase": "reference", "budget_s": "NaN"}))
    assert wait.timeout == 70.0  # no usable budget: the case timeout
