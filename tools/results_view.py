"""results.json: the run's results as one JSON document a person opens, kept
current as cases are recorded, at a cost that does not grow with the run.

The record is ``results.jsonl`` (append-only, one result per line, the index
every read uses); ``results.json`` is its view, written so that recording a
case appends to it in place instead of rewriting it::

    {"schema_version": 1, "run_id": "r", "result_count": 2           , "record_index": "results.jsonl",
     "note": "...", "results": {
    "a": {...},
    "b": {...}
    }, "result_count_at_end": 2           }

``result_count`` sits at a fixed place, padded with spaces (JSON allows them),
so it is rewritten in place too, and so is its copy at the end.  Appending
writes the new entries over the closing part with a new closing part after
them (its count already the new one), then the count in the header: two small
writes under the run's lock, whatever the number of results already there.
The view is derived: when it is not in this form (an older run) or a writer
was killed in the middle of an append (a torn end, or the two counts differ),
the next append rewrites it whole from the index (atomically, by the caller).  A reader in the middle of
an append may see it torn for the microseconds it takes; results.jsonl and the
``opdebug://runs/{run_id}/results`` resource are always whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

COUNT_WIDTH = 12
_TAIL_START = b'\n}, "result_count_at_end": '
TAIL_LEN = len(_TAIL_START) + COUNT_WIDTH + 2
NOTE = (
    "every recorded result, in recording order, current after every call that records; the record itself is "
    "record_index (one result per line); result_count says how many this file holds"
)


def _head(run_id: str, count: int, index_name: str) -> bytes:
    prefix = _prefix(run_id)
    return (
        prefix
        + _count(count)
        + f', "record_index": {json.dumps(index_name)}, "note": {json.dumps(NOTE)}, "results": {{'.encode()
    )


def _count(n: int) -> bytes:
    return f"{n:<{COUNT_WIDTH}d}".encode()


def _tail(count: int) -> bytes:
    return _TAIL_START + _count(count) + b"}\n"


def _prefix(run_id: str) -> bytes:
    return f'{{"schema_version": 1, "run_id": {json.dumps(run_id)}, "result_count": '.encode()


def _entries(docs: list[dict], first: bool, encoded: dict[str, str] | None = None) -> bytes:
    parts = []
    for i, doc in enumerate(docs):
        sep = "\n" if first and i == 0 else ",\n"
        text = (encoded or {}).get(doc["case_id"]) or json.dumps(doc, separators=(",", ":"))
        parts.append(f"{sep}{json.dumps(doc['case_id'])}: {text}")
    return "".join(parts).encode("utf-8")


def view_bytes(run_id: str, docs: list[dict], index_name: str) -> bytes:
    """The whole view of ``docs`` (in recording order)."""
    return _head(run_id, len(docs), index_name) + _entries(docs, first=True) + _tail(len(docs))


def _count_of(fd: int, run_id: str) -> tuple[int | None, int]:
    """(how many results the open view holds, or None when it is not in the
    appendable form; its size)."""
    prefix = _prefix(run_id)
    size = os.fstat(fd).st_size
    head = os.pread(fd, len(prefix) + COUNT_WIDTH, 0)
    tail = os.pread(fd, TAIL_LEN, max(0, size - TAIL_LEN))
    if not head.startswith(prefix) or not tail.startswith(_TAIL_START) or not tail.endswith(b"}\n"):
        return None, size
    try:
        count = int(head[len(prefix) :].decode("ascii").strip())
        at_end = int(tail[len(_TAIL_START) : -2].decode("ascii").strip())
    except ValueError:
        return None, size
    return (count if count == at_end else None), size


def append_view(path: Path, run_id: str, docs: list[dict], encoded: dict[str, str] | None = None) -> bool:
    """Bring the view up to ``docs`` (every recorded result, in recording order) by
    appending the ones it lacks in place (``encoded``: case id -> its compact JSON
    when the caller has it).  False when it must be rewritten whole (not in the
    appendable form, or holding more than ``docs``): the caller does."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        count, size = _count_of(fd, run_id)
        if count is None or count > len(docs):
            return False
        if count == len(docs):
            return True
        os.pwrite(fd, _entries(docs[count:], first=count == 0, encoded=encoded) + _tail(len(docs)), size - TAIL_LEN)
        os.pwrite(fd, _count(len(docs)), len(_prefix(run_id)))
        return True
    finally:
        os.close(fd)
