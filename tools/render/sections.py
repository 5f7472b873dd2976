"""The report's artefact sections: verification after a fix, and pictures.
Reads only what the artefact tools wrote (artifacts/records.py); imports
neither torch nor matplotlib, and runs nothing."""

from __future__ import annotations

from pathlib import Path

from ..artifacts.records import available, install_hint, picture_paths, verify_records
from ..evidence import RunStore
from .markdown import fenced, table


def _store(run_dir: Path) -> RunStore | None:
    try:
        store = RunStore(run_dir.parent, run_dir.name)
    except Exception:  # a run dir that is not a slug: no sections
        return None
    return store if store.exists() else None


def latest_verify_line(run_dir: str | Path) -> list[str]:
    """One line for the top of the report: the latest verify's conclusion."""
    store = _store(Path(run_dir))
    records = verify_records(store) if store else []
    if not records:
        return []
    last = records[-1]
    return [f"**After the fix (verify {last['index']}):** {last['conclusion']}", ""]


def artifact_sections(run_dir: str | Path) -> list[str]:
    store = _store(Path(run_dir))
    if store is None:
        return []
    out: list[str] = []
    records = verify_records(store)
    if records:
        out += ["## Verification after a fix", ""]
        for rec in records:
            out += [
                f"### verify {rec['index']} ({rec.get('at', '')}) on {', '.join(rec.get('hosts') or [])}",
                "",
                rec["conclusion"],
                "",
            ]
            out += [
                table(
                    ["case", "rerun as", "state"],
                    [[f"`{c}`", f"`{n}`", rec["states"].get(n, "pending")] for c, n in rec["rerun"].items()],
                ),
                "",
            ]
            model = rec.get("model_command")
            if model:
                status = model.get("error") or f"exit status {model.get('exit_status')}"
                out += [
                    f"Model command on `{model.get('host')}` ({status}, {model.get('seconds')} s):",
                    "",
                    *fenced(model.get("command", "")),
                    "",
                ]
                if model.get("output_tail"):
                    out += ["Output tail:", "", *fenced(model["output_tail"].rstrip()[-2000:]), ""]
    out += ["## Pictures", ""]
    pngs = picture_paths(store)
    if pngs:
        for png in pngs:
            rel = png.relative_to(store.dir).as_posix()
            out += [f"![{png.stem}]({rel})", ""]
    elif not available():
        out += [f"No pictures: matplotlib is not installed. {install_hint()}", ""]
    else:
        out += [
            f"No pictures drawn yet: `opdebug pictures {store.run_id}` draws an error map and a relative-error "
            "histogram per failing output, and every case by axis value.",
            "",
        ]
    return out
