"""Close the loop after a fix: the failing cases again, and the model command.

``verify_run`` plans every failing case of the run again under a new id
``<case>.verify-<n>`` (a recorded case is never overwritten), shuts down the
idle warm workers of the hosts (a warm worker still holds the operator it
imported before the fix), runs the new cases on the same hosts, then runs the
model-level ``command`` of the config on the first host - local: a subprocess
with argv from ``shlex.split`` and no shell; SSH: the same argv, each word
quoted, through the transport's command building (environment scripts and
container included).  Exit status and output tail go with the new cases'
states into ``artifacts/verify/<n>.json``; the report then says "fixed in
isolation", "fixed in the model", or what still fails, and run.html says it at
once (written again from the last analysis).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from ..analyze_failures import write_page
from ..cases.ids import fit_id
from ..errors import ToolError
from ..evidence import RunStore
from ..plan_cases import plan_cases
from ..remote import pool
from ..remote.inventory import as_inventory
from ..run_case_remote import Candidate, Progress, run_case_remote
from ..schemas import VerifyArgs, VerifyResponse, format_validation_error, now_utc
from .common import case_seed, failing_ids
from .records import VERIFY_DIR, verify_records

OUTPUT_TAIL = 4000
VERIFY_MARK = ".verify-"


def _tail(text: str) -> str:
    return text if len(text) <= OUTPUT_TAIL else "..." + text[-(OUTPUT_TAIL - 3) :]


async def run_model_command(command: str, host, *, timeout_s: float) -> dict[str, Any]:
    """Run the config's model command on ``host`` (any host kind) without a shell
    on our side; returns argv, host, exit status, timing and the output tail."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ToolError(f"config.command cannot be split into words: {exc}", code="validation_error") from None
    if not argv:
        raise ToolError("config.command is empty", code="validation_error")
    t0 = time.monotonic()
    record: dict[str, Any] = {"command": command, "argv": argv, "host": host.name, "transport": host.transport}
    # the host's kind runs it: a local subprocess (no shell), or each word quoted under the host's
    # environment scripts and container
    code, out, why = await pool.REGISTRY.host(host).run_command(argv, timeout_s, merge_stderr=True)
    record.update(exit_status=code, output_tail=_tail(out))
    if code is None:
        record["error"] = why
    record["seconds"] = round(time.monotonic() - t0, 3)
    return record


def conclusion(still: list[str], total: int, model: dict | None) -> str:
    if still:
        text = f"still failing in isolation: {len(still)} of {total} case(s) ({', '.join(still)})"
    else:
        text = f"fixed in isolation ({total} case(s) pass under new ids)"
    if model is None:
        return text + "; no model command in the config, the model-level symptom is not checked"
    if model.get("exit_status") == 0:
        return text + (
            "; fixed in the model (the model command exits 0)"
            if not still
            else "; the model command exits 0 nonetheless"
        )
    why = model.get("error") or f"exit status {model.get('exit_status')}"
    return text + f"; the model command still fails ({why})"


async def verify_run(
    run_id: str,
    *,
    hosts: list[str] | None = None,
    root=None,
    inventory=None,
    run_command: bool = True,
    command_timeout_s: float = 600.0,
    progress: Progress | None = None,
    on_start: Callable[[str], Awaitable[None]] | None = None,
    candidate: str | None = None,
    candidate_sources: dict[str, str] | None = None,
) -> VerifyResponse:
    """``candidate``: a module-qualified name run in place of the config's candidate (the fix
    under another name, as the reproducer's ``--candidate`` and the regression test's
    ``OPDEBUG_CANDIDATE``), importable on the host or from ``candidate_sources`` (module file
    name -> source, shipped with the rerun and kept under ``artifacts/verify/<n>/modules/``)."""
    _check_candidate(run_id, candidate, candidate_sources)
    store = RunStore(root, run_id)
    store.require()
    config = store.read_config()
    cases = store.read_cases()
    results = store.read_results()
    originals = [cid for cid in failing_ids(results, [c.id for c in cases]) if VERIFY_MARK not in cid]
    if not originals:
        raise ToolError(
            f"run {run_id!r} has no failing case to verify (crash or numerical_mismatch)", code="nothing_to_verify"
        )
    index = len(verify_records(store)) + 1
    planned = {c.id for c in cases}
    while any(fit_id(f"{cid}{VERIFY_MARK}{index}") in planned for cid in originals):
        index += 1
    rerun, docs = _rerun_cases({c.id: c for c in cases}, originals, index, candidate)
    plan_cases({"run_id": store.run_id, "append": True, "cases": docs}, root=root)
    host_names = [h.name for h in as_inventory(inventory).resolve(hosts)]
    swap = _stage_candidate(store, index, candidate, candidate_sources or {}) if candidate else None
    await pool.REGISTRY.close_idle(host_names)
    response = await run_case_remote(
        store.run_id,
        case_ids=list(rerun.values()),
        hosts=hosts,
        root=root,
        inventory=inventory,
        progress=progress,
        on_start=on_start,
        candidate=swap,
    )
    states = {o.case_id: o.state for o in response.outcomes}
    still = [cid for cid, new in rerun.items() if states.get(new) != "passed"]
    model = None
    if run_command and config.command:
        host = as_inventory(inventory).resolve(host_names[:1])[0]
        model = await run_model_command(config.command, host, timeout_s=command_timeout_s)
    text = conclusion(still, len(rerun), model)
    evidence = {
        "schema_version": 1,
        "index": index,
        "run_id": store.run_id,
        "at": now_utc().isoformat(),
        "hosts": host_names,
        "candidate": candidate or config.operator.candidate,
        "candidate_modules": sorted(candidate_sources or {}),
        "rerun": rerun,
        "states": states,
        "still_failing": still,
        "model_command": model,
        "conclusion": text,
    }
    path = store.write_artifact(f"{VERIFY_DIR}/{index}.json", json.dumps(evidence, indent=2) + "\n")
    try:  # run.html shows the verify's cases and conclusion at once
        write_page(store.run_id, root=root)
    except ToolError:  # never analyzed (or an older analysis.json): the next analysis writes the page
        pass
    return VerifyResponse(
        run_id=store.run_id,
        verify_index=index,
        rerun=rerun,
        states=states,
        still_failing=still,
        model_command=model,
        conclusion=text,
        evidence=str(path.relative_to(store.dir)),
        candidate=candidate or config.operator.candidate,
    )


def _check_candidate(run_id: str, candidate: str | None, sources: dict[str, str] | None) -> None:
    """The candidate and its module files as the tool's schema checks them (the CLI's too)."""
    if sources and not candidate:
        raise ToolError("candidate_sources without a candidate: name the fixed operator too", code="validation_error")
    if candidate:
        try:
            VerifyArgs.model_validate({"run_id": run_id, "candidate": candidate, "candidate_sources": sources or {}})
        except ValidationError as exc:
            raise ToolError(format_validation_error(exc), code="validation_error") from None


def _rerun_cases(by_id: dict, originals: list[str], index: int, candidate: str | None) -> tuple[dict[str, str], list]:
    """Each failing case again under ``<case>.verify-<index>``, with its inputs (its seed): the
    new ids by original id, and the cases to plan."""
    rerun: dict[str, str] = {}
    docs = []
    for cid in originals:
        new_id = fit_id(f"{cid}{VERIFY_MARK}{index}")
        doc = by_id[cid].model_dump(mode="json")
        doc["id"] = new_id
        doc["description"] = f"verify {index}: case {cid!r} again after a fix" + (
            f", candidate {candidate}" if candidate else ""
        )
        # the same inputs: keep the original's seed (a derived seed would come from the new id)
        doc["seed"] = case_seed(doc | {"id": cid})
        docs.append(doc)
        rerun[cid] = new_id
    return rerun, docs


def _stage_candidate(store: RunStore, index: int, candidate: str, sources: dict[str, str]) -> Candidate:
    """The candidate's module files beside the run's own in ``artifacts/verify/<index>/modules/``
    (a file of the candidate's replaces the run's file of that name there, never in the run)."""
    config = store.read_config()
    run_modules = store.dir / "artifacts" / "modules"
    files = {name: (run_modules / name).read_bytes() for name in config.operator.modules}
    files.update({name: source.encode("utf-8") for name, source in sources.items()})
    for name, data in files.items():
        store.write_artifact(f"{VERIFY_DIR}/{index}/modules/{name}", data)
    return Candidate(
        name=candidate, modules_dir=store.dir / "artifacts" / VERIFY_DIR / str(index) / "modules", modules=sorted(files)
    )
