"""The report's consistency section: the cases flagged by the
repeats, the run alone, the input-write check and the batch slice, the
earlier cases that poison an order-dependent case, and the bias warnings."""

from __future__ import annotations

from ..schemas import Analysis
from .markdown import one_line, table

FLAG_TEXT = {
    "nondeterministic": "the same inputs gave different results (repeated on the same worker)",
    "order_dependent": "fails after other cases on a warm worker, passes alone on a fresh one",
    "order_suspect": "fails like an order-dependent case after other cases; not run alone",
    "writes_input": "the candidate changed an input it does not declare written",
    "batch_variant": "a slice of the batch run alone differs from the same rows of the full batch",
}


def consistency_section(analysis: Analysis) -> list[str]:
    """Markdown lines; empty when the checks found nothing and nothing was repeated."""
    c = analysis.consistency
    if not (c.flagged or c.bias or c.repeated or c.alone or c.probes):
        return []
    out = [
        "## Consistency checks",
        "",
        f"Repeated: {c.repeated} case(s) (same worker, same inputs, outputs compared bit for bit); run alone on a "
        f"fresh worker: {c.alone}; probes (run after named earlier cases): {len(c.probes)}. "
        "Nondeterministic and order-dependent cases are evidence of their own kind, never of an axis: "
        f"{len(c.excluded_from_findings)} case(s) are left out of the findings.",
        "",
    ]
    if c.flagged:
        rows = []
        for f in c.flagged:
            extra = ""
            if f.poisoned_by:
                extra = f" Poisoned by: {', '.join(f'`{p}`' for p in f.poisoned_by)}."
            elif f.history:
                extra = f" Ran before it: {', '.join(f'`{h}`' for h in f.history[-5:])}."
            if f.probes:
                extra += " Probes: " + ", ".join(f"`{p}` {s}" for p, s in f.probes.items()) + "."
            rows.append([f"`{f.case_id}`", f.flag, f.status, one_line(f.detail.rstrip(".") + "." + extra)])
        out += [table(["case", "flag", "status", "evidence"], rows), ""]
        out += [f"- `{flag}`: {text}" for flag, text in FLAG_TEXT.items() if flag in c.stats] + [""]
    if c.bias:
        out += ["Errors that lean one way (within the judge; a failure only under the baseline judge):", ""]
        out += [
            f"- {one_line(w.message)} Cases: {', '.join(f'`{x}`' for x in w.cases[:8])}"
            + (" ..." if len(w.cases) > 8 else "")
            for w in c.bias
        ] + [""]
    return out
