"""The life of one case, as one ordered table of phases.

Every process of the runner reads this table: the worker (execute.py) enters
the phases in this order and posts each on its board, the supervisor bounds
each with its budget and tells the client; the client (and the server, which
may import this stdlib-only module) reads the same names.  For each phase:

- ``budget``: which clock bounds it (see ``budget_s``); ``None``: it runs on
  the clock of the phase before it;
- ``blame``: whom a failure there blames - the ``operator`` (the case's crash,
  recorded) or the ``harness`` (a ``harness_error``, the case stays pending);
- ``tells``: the client is told when it begins (the protocol event ``phase``,
  references/runner-protocol.md), or it runs unannounced on the clock before it;
- ``text``: what a person reads ("while <text>");
- ``posts``: what the worker's board step carries (JSON fields), or ``None``
  when the worker does not post the phase (it runs under the clock before it).

The kill decision (``killed_from_outside``), the harness-error builder and the
tails of texts and files live here too: the supervisor, the worker, the
client side and the server each used to write their own, and they drifted.
Standard library only (the runner is shipped alone).
"""

from __future__ import annotations

import os
import traceback as _traceback
from dataclasses import dataclass

OPERATOR, HARNESS = "operator", "harness"
TAIL = 4000  # characters of a traceback, stderr or stdout kept with a case
IMPORT_TIMEOUT_S = 300.0  # a user module may JIT-build a custom op; operator.import_timeout_s overrides it
COMPILE_TIMEOUT_S = 600.0  # compile/graph modes; the case's compile_timeout_s, else the config's, override it
HEALTH_TIMEOUT_S = 60.0
# Signals the supervisor never sends on its own outside a timeout: when one
# kills the worker, someone else (the OOM killer, a person, the scheduler) did.
EXTERNAL_SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


@dataclass(frozen=True)
class Phase:
    name: str
    budget: str | None
    blame: str
    tells: bool
    text: str
    posts: tuple[str, ...] | None = ()

    @property
    def prepares(self) -> bool:
        """A phase before the candidate, on a clock of its own (the case's has not started)."""
        return self.budget in PREPARATION_CLOCKS


# The clocks of the phases before the candidate (the client waits their budget alone, not the case's).
PREPARATION_CLOCKS = ("health", "worker_start", "import")

# Every name of a phase, in the order a case lives them.  The worker's board, the supervisor's watch,
# the client's ``phase`` events and a ``harness_error``'s ``where`` name these and nothing else.
PHASES: tuple[Phase, ...] = (
    Phase("health_check", "health", HARNESS, True, "checking the device's health", None),
    Phase("worker_start", "worker_start", HARNESS, True, "starting the worker", None),
    Phase("resolve", "import", HARNESS, True, "importing the user modules and resolving the callables", None),
    Phase("inputs", "worker_start", HARNESS, True, "building the inputs"),
    Phase("compile", "compile", OPERATOR, True, "compiling or capturing the candidate", ("input_metadata",)),
    Phase("candidate", "case", OPERATOR, True, "running the candidate", ("input_metadata",)),
    Phase("backward", "case", OPERATOR, True, "running the candidate's backward", ("grad_outputs",)),
    Phase("reference", "case", HARNESS, True, "running the reference and the comparison on CPU"),
    Phase("baseline", None, HARNESS, False, "running the same-precision baseline on CPU", None),
    Phase("judge", None, HARNESS, False, "comparing and judging the outputs", None),
    Phase(
        "consistency",
        "case",
        OPERATOR,
        False,
        "running the candidate again on the same inputs (consistency checks)",
        ("step",),
    ),
)
PHASE: dict[str, Phase] = {p.name: p for p in PHASES}
# The protocol event that says a phase began (supervisor to client, as worker to supervisor).
PHASE_EVENT = "phase"


STEP_FIELDS = {"input_metadata": dict, "grad_outputs": list, "step": str}


@dataclass(frozen=True)
class Step:
    """One phase begun, as the worker posts it on its board (or sends it when the post does not fit)."""

    phase: str
    at: float  # time.monotonic() in the worker: the supervisor's clock too (one host)
    input_metadata: dict | None = None
    grad_outputs: list | None = None
    step: str | None = None  # consistency: repeat1, repeat2..., batch

    @classmethod
    def parse(cls, doc, now: float) -> Step | None:
        """The step of a post or message, or None when it names no phase the worker posts."""
        name = doc.get("phase") if isinstance(doc, dict) else None
        phase = PHASE.get(name) if isinstance(name, str) else None
        if phase is None or phase.posts is None:
            return None
        at = doc.get("at")
        fields = {k: doc.get(k) for k in phase.posts if isinstance(doc.get(k), STEP_FIELDS[k])}
        return cls(phase.name, float(at) if isinstance(at, (int, float)) else now, **fields)

    def doc(self) -> dict:
        return {
            "phase": self.phase,
            "at": self.at,
            **{k: getattr(self, k) for k in PHASE[self.phase].posts or () if getattr(self, k) is not None},
        }

    @property
    def key(self) -> tuple:
        return self.phase, self.step


def grad_names(config: dict, case: dict) -> list[str]:
    """The inputs whose gradients the case compares: the case's grad_inputs, else the config's."""
    names = case.get("grad_inputs")
    if names is None:
        names = config.get("grad_inputs")
    return list(names or [])


def wants_gradients(config: dict, case: dict) -> bool:
    """The case has a backward phase."""
    return bool(grad_names(config, case))


# -- budgets ------------------------------------------------------------------


def compile_budget(config: dict, case: dict) -> float | None:
    """Seconds for compiling/capturing a compile or graph case (None for eager):
    the case's compile_timeout_s, else the config's, else COMPILE_TIMEOUT_S."""
    if case.get("mode") not in ("compile", "graph"):
        return None
    try:
        return float(case.get("compile_timeout_s") or config.get("compile_timeout_s") or COMPILE_TIMEOUT_S)
    except (TypeError, ValueError):
        return COMPILE_TIMEOUT_S


def import_budget(config: dict) -> float:
    """Seconds for importing the user modules and resolving the callables."""
    op = config.get("operator") or {}
    try:
        return float(op.get("import_timeout_s") or IMPORT_TIMEOUT_S)
    except (TypeError, ValueError):
        return IMPORT_TIMEOUT_S


# What a person raises when a phase's budget is too short.
BUDGET_KNOBS = {
    "health": "the health check's fixed budget",
    "worker_start": "the worker start timeout",
    "import": "operator.import_timeout_s",
    "compile": "compile_timeout_s",
    "case": "the case's timeout_s",
}


def budgets(config: dict, case: dict, timeout_s: float, worker_start_s: float) -> dict[str, float | None]:
    """Every clock of one case, by the table's budget names."""
    return {
        "health": HEALTH_TIMEOUT_S,
        "worker_start": worker_start_s,
        "import": import_budget(config),
        "compile": compile_budget(config, case),
        "case": timeout_s,
    }


def budget_s(name: str, clocks: dict[str, float | None]) -> float | None:
    """The seconds phase ``name`` may take; None: it runs on the clock before it."""
    rule = PHASE[name].budget
    return None if rule is None else clocks[rule]


# -- failures -------------------------------------------------------------------


class HarnessFailure(Exception):
    """A failure of the harness in a phase: nothing about the operator, the case stays pending."""

    def __init__(self, where: str, exc: BaseException):
        super().__init__(f"{where}: {exc}")
        self.where, self.exc = where, exc

    def error(self) -> dict:
        return harness_error(
            self.where, type(self.exc).__name__, tail(exception_text(self.exc)), traceback_tail(self.exc)
        )


class OperatorFailure(Exception):
    """The operator's failure in a phase: a result with this status (crash, unsupported) and error."""

    def __init__(self, status: str, error: dict):
        super().__init__(f"{status}: {error.get('signature')}")
        self.status, self.error = status, error


def harness_error(where: str, type_: str, message: str, traceback: str = "") -> dict:
    """The one ``harness_error`` body (its contract: tools/remote/envelopes.py ``HarnessError``)."""
    return {"where": where, "type": type_, "message": message, "traceback": traceback}


def timed_out(error: dict | None) -> bool:
    """A crash error of a phase that ran past its budget (``timeout``, ``timeout during compile``,
    ``backward: timeout``): the supervisor killed the worker."""
    signature = str((error or {}).get("signature") or "").removeprefix("backward: ")
    return signature.startswith("timeout")


def killed_from_outside(error: dict | None) -> bool:
    """A crash error whose worker died of a signal the harness did not send (no
    phase's timeout, a backward's included, is such a kill)."""
    return (error or {}).get("signal") in EXTERNAL_SIGNALS and not timed_out(error)


# -- tails ----------------------------------------------------------------------


def tail(text: str, limit: int = TAIL) -> str:
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]


def file_tail(path: str, limit: int = TAIL) -> str:
    """The last ``limit`` bytes of a file as text ("..." first when cut), "" when unreadable."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return ("..." + text) if size > limit else text


def exception_text(exc: BaseException) -> str:
    try:
        return str(exc) or repr(exc)
    except Exception as inner:  # the candidate's exception cannot say what it is
        return f"<{type(exc).__name__}: str() failed with {type(inner).__name__}>"


def traceback_tail(exc: BaseException, limit: int = TAIL) -> str:
    return tail("".join(_traceback.format_exception(type(exc), exc, exc.__traceback__)), limit)
