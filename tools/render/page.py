"""The data of a run's page (run.html and the MCP App view): what the page shows,
gathered from the analysis and the run's evidence as one JSON-able dict.

Every text a finding carries is the analysis's own (predicate, boundary, minimal
pair, validation, what keeps it from exact), through the renderers of
findings.py that report.md and the tool answers use; nothing is restated here.
The page's look and behaviour are page_html.py and page_assets/ (template, CSS,
JavaScript); this module only reads.

Shape: ``header`` (verdict, counts, operator, reference, tolerances, judge),
``findings`` / ``competing`` / ``accounting`` (several causes, groups without a
finding, refuted leads, counterexamples, crash groups), ``axes`` and ``cases``
(one row per planned case: id, status, its value on each axis, reason),
``details`` (per case: the exact call, metrics per output, error, log tail,
pictures, reproducer), ``pictures`` (name -> data: URI) and ``links``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from ..artifacts.records import picture_paths
from ..cases.memo import by_content, once
from ..evidence import ANALYSIS, ARTIFACTS_DIR, REPORT, REPRODUCTION, RunStore
from ..schemas import Analysis, Case, CaseResult, Comparison, Finding, OperatorConfig
from .findings import accounting_lines, boundary_text, falsification_lines, group_label, pair_text
from .report import tolerance_line
from .sections import latest_verify_line

# always offered as grid and filter axes, even when a run does not vary them
ALWAYS_AXES = ("mode", "dtype")
LOG_TAIL_CHARS = 3000
MESSAGE_CHARS = 2000
METRICS = (
    "max_abs",
    "max_rel",
    "mean_abs",
    "rmse",
    "cosine",
    "max_ulp",
    "mismatch_count",
    "mismatch_ratio",
    "nan_mismatch",
    "inf_mismatch",
    "error_balance",
    "atol",
    "rtol",
    "numel",
)


def page_data(
    analysis: Analysis,
    config: OperatorConfig,
    cases: list[Case],
    results: dict[str, CaseResult],
    *,
    run_dir: str | Path,
    labels: dict[str, dict[str, str]],
) -> dict[str, Any]:
    """Everything the page shows for one analyzed run (JSON-able)."""
    run_dir = Path(run_dir)
    store = RunStore(run_dir.parent, run_dir.name)
    pngs = picture_paths(store)
    by_case = case_pictures([c.id for c in cases], [p.name for p in pngs])
    axes = page_axes(labels)
    repro_dir = store.dir / ARTIFACTS_DIR / "repro"
    repros = {p.stem for p in repro_dir.glob("*.py")} & {c.id for c in cases} if repro_dir.is_dir() else set()
    return {
        "run_id": analysis.run_id,
        "header": header(analysis, config, run_dir),
        "findings": [finding_view(f) for f in analysis.findings],
        "competing": [
            {"predicate": c.predicate, "boundary": boundary_text(c), "pair": pair_text(c.minimal_pair)}
            for c in analysis.competing
        ],
        "accounting": accounting(analysis),
        "axes": axes,
        "cases": case_rows(analysis, cases, results, labels, axes),
        "details": {c.id: case_detail(c, results.get(c.id), store, by_case.get(c.id, []), repros) for c in cases},
        "pictures": {p.name: "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode() for p in pngs},
        "run_pictures": [p.name for p in pngs if not any(p.name in names for names in by_case.values())],
        "links": links(store, sorted(repros)),
    }


def header(analysis: Analysis, config: OperatorConfig, run_dir: Path) -> dict[str, Any]:
    op = config.operator
    verify = latest_verify_line(run_dir)
    return {
        "title": f"{op.name} (run {analysis.run_id})",
        "operator": op.name,
        "verdict": analysis.verdict,
        "summary": analysis.summary,
        "counts": dict(analysis.status_counts),
        "planned": analysis.planned,
        "recorded": analysis.recorded,
        "candidate": op.candidate,
        "reference": f"{op.reference} (CPU, {op.reference_dtype})",
        "judge": config.judge,
        "tolerance": tolerance_line(config).removeprefix("- "),
        "verify": verify[0].replace("**", "") if verify else None,
        "evidence": str(run_dir),
        "analyzed_at": analysis.analyzed_at.isoformat(),
        "integration_hint": analysis.integration_hint,
    }


def finding_view(f: Finding) -> dict[str, Any]:
    """One finding as the answers state it: predicate, exact or what keeps it from exact, boundary,
    minimal pair, statement, validation (probes predicted / run), its counterexamples."""
    v = f.validation
    pair = f.minimal_pair
    return {
        "predicate": f.predicate,
        "label": group_label(f),
        "kind": f.kind,
        "exact": f.exact,
        "why_not_exact": list(f.why_not_exact),
        "boundary": boundary_text(f),
        "pair": pair_text(pair),
        "pair_cases": [pair.passing, pair.failing] if pair else [],
        "terms": [f"{t.predicate}: minimal pair {pair_text(t.minimal_pair)}" for t in f.terms],
        "statement": f.statement,
        "equivalent": list(f.equivalent),
        "necessary_only": f.necessary_only,
        "cases": list(f.cases),
        "failing": f.failing,
        "passing": f.passing,
        "validation": None
        if v is None
        else {
            "text": v.text,
            "probes_run": v.probes_run,
            "probes_held": v.probes_held,
            "probe_ids": list(v.probe_ids),
            "held": list(v.held),
            "open": list(v.open),
            "reads": list(v.not_applicable),
        },
        "counterexamples": [c.model_dump(mode="json") for c in f.counterexamples],
    }


def accounting(a: Analysis) -> dict[str, Any]:
    """Every failing group accounted for, each list as the analysis has it, and the lines the answers say."""
    return {
        "lines": accounting_lines(a, bullet="") + falsification_lines(a.findings, a.counterexamples),
        "causes": a.causes,
        "unexplained": [g.model_dump(mode="json") for g in a.unexplained],
        "refuted": [r.model_dump(mode="json") for r in a.refuted],
        "counterexamples": [c.model_dump(mode="json") for c in a.counterexamples],
        "crash_groups": dict(a.crash_groups),
        "identical": [p.model_dump(mode="json") for p in a.identical_disagree],
        "unsupported": [f.case_id for f in a.unsupported],
        "missing": list(a.missing),
        "failure_axes": [x.model_dump(mode="json") for x in a.failure_axes],
        "next_cases": [{"kind": n.kind, "base": n.base_case, "reason": n.reason} for n in a.next_cases],
        "outputs": [o.model_dump(mode="json") for o in a.outputs],
        "consistency": a.consistency.summary,
    }


def page_axes(labels: dict[str, dict[str, str]]) -> list[str]:
    """The axes a grid or a filter can pick: those whose value differs between cases, plus mode and dtype."""
    order: dict[str, set[str]] = {}
    for axes in labels.values():
        for k, v in axes.items():
            order.setdefault(k, set()).add(v)
    return [k for k, values in order.items() if len(values) > 1 or k in ALWAYS_AXES]


def case_rows(
    analysis: Analysis,
    cases: list[Case],
    results: dict[str, CaseResult],
    labels: dict[str, dict[str, str]],
    axes: list[str],
) -> list[dict[str, Any]]:
    """One row per planned case: id, status (``missing`` without a result), values on ``axes``, reason."""
    why = {f.case_id: f for f in [*analysis.failures, *analysis.unsupported]}
    rows = []
    for c in cases:
        result = results.get(c.id)
        failure = why.get(c.id)
        row: dict[str, Any] = {
            "id": c.id,
            "status": result.status if result else "missing",
            "v": [labels[c.id].get(a, "-") for a in axes],
            "reason": (failure.reason if failure else None) or "",
        }
        if failure and failure.flags:
            row["flags"] = failure.flags
        rows.append(row)
    return rows


def case_detail(
    case: Case, result: CaseResult | None, store: RunStore, pictures: list[str], repros: set[str]
) -> dict[str, Any]:
    """A case opened: its exact call, its metrics per output, its error and log tail, pictures, reproducer."""
    detail: dict[str, Any] = {
        **once(case, "page_call", lambda: call_view(case)),  # a case never changes: once per sealed case
        "pictures": pictures,
        "repro": f"{ARTIFACTS_DIR}/repro/{case.id}.py" if case.id in repros else None,
        "repro_command": f"opdebug repro {store.run_id} {case.id} --out DIR",
    }
    if result is not None:
        detail["outputs"] = once(result, "page_outputs", lambda: [output_metrics(c) for c in result.comparisons])
        detail["source"] = {"host": result.source.host, "device": result.source.device, "raw": result.source.raw_path}
        detail["recorded_at"] = result.recorded_at.isoformat() if result.recorded_at else None
        if result.error is not None:
            err = result.error.model_dump(mode="json", exclude_none=True)
            err["message"] = err.get("message", "")[:MESSAGE_CHARS]
            detail["error"] = err
        if result.error is not None:  # a crash or an unsupported case: what the worker said
            detail["log_tail"] = log_tail(store, result)
    return detail


def call_view(case: Case) -> dict[str, Any]:
    """The call a case makes, as the page shows it: mode, seed, description, attributes, input rows."""
    return {
        "mode": case.mode,
        "seed": case.seed,
        "description": case.description,
        "attributes": json.dumps(case.model_dump(mode="json", include={"attributes"})["attributes"], sort_keys=True)
        if case.attributes
        else "",
        "grad_inputs": case.grad_inputs,
        "inputs": [row for spec in case.inputs for row in input_rows(spec)],  # by content (cases/memo.py)
    }


def input_rows(spec: Any) -> list[dict[str, Any]]:
    """An input as the call builds it: one row per tensor (a list's members as name[i]), or None; once per
    distinct input (memo.by_content)."""
    return by_content("page_input_rows", "", spec, lambda: {"rows": _input_rows(spec)})["rows"]


def _input_rows(spec: Any) -> list[dict[str, Any]]:
    if spec.none:
        return [{"name": spec.name, "none": True}]
    members = spec.tensors if spec.tensors is not None else [spec]
    rows = []
    for i, t in enumerate(members):
        rows.append(
            {
                "name": spec.name if spec.tensors is None else f"{spec.name}[{i}]",
                "shape": t.shape,
                "strides": t.strides,
                "offset": t.storage_offset,
                "dtype": t.dtype,
                "layout": t.layout,
                "values": values_text(t.values),
            }
        )
    return rows


def values_text(values: Any) -> str:
    """How the values are made, as planned: ``normal``, ``uniform(low=0.5, high=1.5)``, ``normal(specials=[...])``."""
    given = {k: v for k, v in values.model_dump(mode="json", exclude_defaults=True).items() if k != "kind"}
    args = ", ".join(f"{k}={v if isinstance(v, (int, float, str)) else json.dumps(v)}" for k, v in given.items())
    return f"{values.kind}({args})" if args else values.kind


def output_metrics(c: Comparison) -> dict[str, Any]:
    doc = c.model_dump(mode="json")
    metrics = {k: doc[k] for k in METRICS if doc.get(k) is not None}
    if c.worst_index is not None:
        metrics["worst"] = f"{c.worst_index}: candidate {c.worst_candidate} vs reference {c.worst_reference}"
    if c.first_mismatch_index is not None:
        metrics["first mismatch"] = (
            f"{c.first_mismatch_index}: candidate {c.first_candidate} vs reference {c.first_reference}"
        )
    return {
        "output": c.output,
        "passed": c.passed,
        "verdict": c.verdict,
        "shape": [c.expected_shape, c.actual_shape],
        "dtype": [c.expected_dtype, c.actual_dtype],
        "contract_mismatch": c.contract_mismatch,
        "metrics": metrics,
    }


def log_tail(store: RunStore, result: CaseResult) -> str | None:
    """The end of the worker's stderr (else its traceback file) kept with the case's raw evidence."""
    if not result.source.raw_path:
        return None
    raw = store.dir / result.source.raw_path
    for name in ("stderr.txt", "traceback.txt"):
        path = raw / name
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace").strip()
            if text:
                return text[-LOG_TAIL_CHARS:]
    return None


def case_pictures(case_ids: list[str], names: list[str]) -> dict[str, list[str]]:
    """The pictures drawn for each case (``<case>.<output>.<kind>.png``: the longest case id the name starts with)."""
    ids = sorted(case_ids, key=len, reverse=True)
    out: dict[str, list[str]] = {}
    for name in names:
        owner = next((cid for cid in ids if name.startswith(cid + ".")), None)
        if owner is not None:
            out.setdefault(owner, []).append(name)
    return out


def links(store: RunStore, repros: list[str]) -> list[dict[str, str]]:
    """The run's documents, the exported reproducers (``repros``: their case ids) and the regression test
    (export_repro's and export_regression's default folders), as paths relative to the run."""
    out = [{"label": name, "href": name} for name in (REPORT, REPRODUCTION, ANALYSIS)]  # written with the page
    out += [{"label": f"reproducer {cid}.py", "href": f"{ARTIFACTS_DIR}/repro/{cid}.py"} for cid in repros]
    folder = store.dir / ARTIFACTS_DIR / "regression"
    for path in sorted(folder.glob("test_*.py")) if folder.is_dir() else []:
        out.append({"label": f"regression test {path.name}", "href": f"{ARTIFACTS_DIR}/regression/{path.name}"})
    return out
