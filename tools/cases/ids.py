"""Case ids and case content: ids derived from a change squeezed into the slug
alphabet (shortened with a hash, so they stay unique), the id a case is
re-planned under, and a case's content without its id (to tell a new case
from one already planned)."""

from __future__ import annotations

import hashlib
import json
import re

MAX_ID_LEN = 96

_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def slugify(text: str) -> str:
    """Text squeezed into the slug alphabet ('.', '_', '-', letters, digits)."""
    slug = _SLUG_BAD.sub("-", text)
    slug = re.sub(r"\.{2,}", ".", slug)
    slug = re.sub(r"-{2,}", "-", slug)
    return slug.strip("-.") or "x"


def fit_id(candidate: str) -> str:
    """A derived id as a valid slug: sanitized, and if longer than 96
    characters truncated with a short hash of the full text so it stays unique."""
    slug = slugify(candidate)
    if len(slug) > MAX_ID_LEN:
        digest = hashlib.sha1(candidate.encode("utf-8")).hexdigest()[:8]
        slug = slug[: MAX_ID_LEN - 9].rstrip("-.") + "-" + digest
    return slug


def case_content(doc: dict) -> str:
    """A case's content as canonical JSON, without its id and description."""
    body = {k: v for k, v in doc.items() if k not in ("id", "description", "origin")}
    return json.dumps(body, sort_keys=True)


def rerun_id(case_id: str) -> str:
    """The id a case is planned again under (a case killed from outside, a verify run)."""
    return fit_id(f"{case_id}.rerun")
