"""analyze_failures: turn the recorded evidence of a run into a verdict.

Everything is read from the evidence directory (so a run recorded by other
processes analyzes the same).  Semantics:

- ``diagnosed``: an isolated case crashes or mismatches numerically;
- ``inconclusive``: nothing failed, but planned evidence is missing or a
  combination is unsupported;
- ``passed``: every planned case passed (with a source model failure given,
  the failure is then likely at the integration boundary: say so).

The verdict is decided in analysis/verdict.py; findings (predicates with
minimal pairs) and next cases come from the ``tools.analysis`` package; this module is the entry point that reads the
evidence and writes analysis.json, report.md, reproduction.md and run.html, and sets
the manifest status (diagnosed -> failed, inconclusive -> inconclusive,
passed -> passed).
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from .analysis import build_analysis
from .cases.axes import case_axes
from .conditions.predict import parse_conditions
from .errors import ToolError
from .evidence import ANALYSIS, PAGE, REPORT, REPRODUCTION, RunStore, atomic_write_text, read_json
from .render.page import page_data
from .render.page_html import render_page
from .render.report import render_report, render_reproduction
from .schemas import Analysis, Case, CaseResult, OperatorConfig

MANIFEST_STATUS = {"diagnosed": "diagnosed", "inconclusive": "inconclusive", "passed": "passed"}

_PAUSE = threading.Lock()
_pausing = [0, False]  # analyses running now; whether the collector was on when the first began


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while an analysis runs (on again when the last running one
    ends, as it was before the first began).  An analysis builds a few hundred thousand short-lived
    objects that reference counting frees; each full collection the allocations trigger walks every
    object the process holds (about 0.2 s of an analysis of 1,000 cases, seconds at 10,000) and finds
    next to nothing.  What cyclic garbage an analysis leaves is collected once the collector is back."""
    with _PAUSE:
        if _pausing[0] == 0:
            _pausing[1] = gc.isenabled()
            gc.disable()
        _pausing[0] += 1
    try:
        yield
    finally:
        with _PAUSE:
            _pausing[0] -= 1
            if _pausing[0] == 0 and _pausing[1]:
                gc.enable()


def previous_analysis(store: RunStore) -> Analysis | None:
    """The run's last analysis.json (what its findings were), None when there is none or it is unreadable
    (an older contract): the refuted leads are then those of this analysis on."""
    try:
        return Analysis.model_validate(read_json(store.dir / ANALYSIS))
    except (OSError, ValueError, ValidationError):
        return None


def analyze_failures(
    run_id: str, *, root=None, modes: set[str] | None = None, conditions: list[str] | None = None
) -> Analysis:
    """Analyze the run from its evidence on disk; write analysis.json,
    report.md, reproduction.md and run.html; set the manifest status.  ``modes``: the
    modes the hosts of the call can run (narrow_failure's hosts,
    tools/host_modes.py); None: as the recorded results say (the next cases
    may be run anywhere and recorded).  ``conditions``: conditions the caller
    states (references/conditions.md), each answered against the recorded
    cases in ``Analysis.conditions``; a text that does not parse or names what
    no case has is refused before anything is written."""
    parse_conditions(conditions or [])  # a bad text is refused before the run is read
    store = RunStore(root, run_id)
    store.require()
    # Read, analyze and write under the run's lock: a result recorded meanwhile
    # must not be missing from an analysis that then sets the run's status.
    with store.locked(), collector_paused():
        try:
            config = store.read_config()
            cases = store.read_cases()
            results = store.read_results()
        except (ValidationError, json.JSONDecodeError, KeyError) as exc:
            raise ToolError(
                f"the evidence of run {store.run_id!r} is unreadable: {exc}", code="corrupt_evidence"
            ) from None
        labels = {c.id: case_axes(c) for c in cases}  # once per case, for the analysis and the report
        analysis = build_analysis(
            store.run_id,
            config,
            cases,
            results,
            labels,
            previous=previous_analysis(store),
            modes=modes,
            refusals=store.read_refusals(),
            conditions=conditions,
        )
        files = {
            ANALYSIS: json.dumps(analysis.model_dump(mode="json"), indent=2) + "\n",
            REPORT: render_report(analysis, config, cases, results, run_dir=str(store.dir), labels=labels),
            REPRODUCTION: render_reproduction(analysis, config, cases, results, run_dir=str(store.dir)),
            PAGE: page_text(analysis, config, cases, results, store, labels),
        }
        store.write_outputs(files, MANIFEST_STATUS[analysis.verdict])
    return analysis


def page_text(
    analysis: Analysis,
    config: OperatorConfig,
    cases: list[Case],
    results: dict[str, CaseResult],
    store: RunStore,
    labels: dict[str, dict[str, str]],
) -> str:
    """run.html of the run: its analysis and its evidence as they are on disk now."""
    data = page_data(analysis, config, cases, results, run_dir=store.dir, labels=labels)
    return render_page(data, title=f"{config.operator.name} (run {store.run_id})")


def write_page(run_id: str, *, root=None) -> Path:
    """Write run.html again from the run's last analysis and its evidence as it is now (after a verify
    run, whose cases and conclusion it then shows; or on request: ``opdebug report RUN --html``), without
    analyzing again.  A run never analyzed is refused: its page needs a verdict."""
    store = RunStore(root, run_id)
    store.require()
    with store.locked():
        analysis = previous_analysis(store)
        if analysis is None:
            raise ToolError(
                f"run {store.run_id!r} has no analysis yet (or an unreadable analysis.json): analyze it first "
                f"(analyze_failures, or opdebug analyze --root ... --run-id {store.run_id}), which writes run.html",
                code="not_analyzed",
            )
        cases = store.read_cases()
        text = page_text(
            analysis, store.read_config(), cases, store.read_results(), store, {c.id: case_axes(c) for c in cases}
        )
        atomic_write_text(store.path(PAGE), text)
    return store.path(PAGE)
