"""record_result: accept one result for a planned, pending case.

The result is validated against the result contract (crash and unsupported
need an error, metrics are finite, timing is non-negative), recorded once
(a second result for the same case is refused), and kept as it came: for a
result submitted by hand or by another tool, the submitted JSON is stored
verbatim next to the normalized one under ``raw-results/<case>/``.
run_case_remote records through this same function.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import ValidationError

from .errors import ToolError
from .evidence import RunStore
from .schemas import PENDING_LIST_LIMIT, CaseResult, RecordResponse

SUBMITTED_FILE = "submitted.json"


def record_result(
    run_id: str,
    result: dict | CaseResult,
    *,
    root=None,
    raw_files: dict[str, str | bytes] | None = None,
    input_metadata: dict | None = None,
    source_kind: Literal["record_result", "run_case_remote"] = "record_result",
    lazy_manifest: bool = False,
    pending: bool = True,
    store: RunStore | None = None,
) -> RecordResponse:
    """Validate and record one result; return what remains pending (``pending=False``:
    not computed, for a caller that answers for a batch).  ``lazy_manifest``: see
    RunStore.record.  ``store``: the run's store when the caller has one (e.g. with
    a lock timeout of its own), else one is opened for ``run_id`` under ``root``."""
    if store is None:
        store = RunStore(root, run_id)
    submitted: Any = result.model_dump(mode="json") if isinstance(result, CaseResult) else result
    if isinstance(result, CaseResult):
        parsed = result
    else:
        if not isinstance(result, dict):
            raise ToolError(
                f"invalid result: expected a JSON object, got {type(result).__name__}", code="validation_error"
            )
        try:
            parsed = CaseResult.model_validate(result)
        except ValidationError as exc:
            raise ToolError.from_validation(exc, "result") from None
    store.require()

    parsed = parsed.model_copy(update={"source": parsed.source.model_copy(update={"kind": source_kind})})
    files: dict[str, str | bytes] = dict(raw_files or {})
    if source_kind == "record_result":
        files.setdefault(SUBMITTED_FILE, json.dumps(submitted, indent=2, default=str) + "\n")
    recorded = store.record(parsed, raw_files=files, input_metadata=input_metadata, lazy_manifest=lazy_manifest)
    assert recorded.recorded_at is not None and recorded.source.raw_path is not None
    return RecordResponse(
        run_id=store.run_id,
        case_id=recorded.case_id,
        status=recorded.status,
        recorded_at=recorded.recorded_at,
        raw_path=recorded.source.raw_path,
        pending=store.pending_case_ids(limit=PENDING_LIST_LIMIT) if pending else [],
        pending_count=store.pending_count() if pending else 0,
    )
