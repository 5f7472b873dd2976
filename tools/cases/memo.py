"""Values derived from a case or a recorded result, computed once per object the evidence store hands out.

A case never changes once planned, nor a result once recorded (evidence.py), and the store hands out the
same objects while its files say the same (the unchanged cases of a grown matrix included): it *seals*
each one (:func:`seal`).  :func:`once` computes a value of a sealed object once - its axes, its
properties by the condition language's names - and every later analysis of the run reads it again
without computing it.  Each caller gets a copy of a cached dict (one that fills in a key changes no
other caller's).  An object nobody sealed (a case a caller built, a ``model_copy`` of a sealed one,
which is another object) is computed every time, as before: nothing here can serve a value of other
content.

Objects are held by identity, weakly: a value goes when its object does.  :func:`by_content` keeps a value
of a part many cases share (one tensor's spec: a thousand cases of a run often have a few dozen) by the part's
whole content instead, computed once per distinct content.  Nothing here runs anything.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

T = TypeVar("T")

MAX_BY_CONTENT = 50_000  # distinct (kind, name, content) kept; all are forgotten past it (a new run refills them)

_SEALED: dict[int, tuple[weakref.ref, dict[str, Any]]] = {}
_BY_CONTENT: dict[tuple[str, str, str], Any] = {}


def _forget(key: int, ref: weakref.ref) -> None:
    hit = _SEALED.get(key)
    if hit is not None and hit[0] is ref:
        del _SEALED[key]


def seal(obj: object, *parts: object) -> None:
    """Promise that ``obj`` no longer changes: values derived from it may be kept while it lives; so are
    ``parts`` (objects it holds: a case's inputs)."""
    for part in parts:
        seal(part)
    key = id(obj)
    hit = _SEALED.get(key)
    if hit is not None and hit[0]() is obj:
        return
    ref = weakref.ref(obj, functools.partial(_forget, key))
    _SEALED[key] = (ref, {})


def sealed(obj: object) -> bool:
    hit = _SEALED.get(id(obj))
    return hit is not None and hit[0]() is obj


def once(obj: object, name: str, compute: Callable[[], T], *, copy: bool = True) -> T:
    """``compute()``, kept under ``name`` when ``obj`` is sealed (a dict comes back as a copy, unless
    ``copy`` is False: then the kept dict itself, for a caller that only reads it)."""
    hit = _SEALED.get(id(obj))
    if hit is None or hit[0]() is not obj:
        return compute()
    memo = hit[1]
    try:
        value = memo[name]
    except KeyError:
        value = memo[name] = compute()
    return dict(value) if copy and isinstance(value, dict) else value  # type: ignore[return-value]


def by_content(kind: str, name: str, part: BaseModel, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``compute()`` of a model ``part`` (a tensor's spec) named ``name``, kept by the part's whole content (its
    JSON text: every field, floats exact - the schemas refuse a non-finite number), so parts of equal content
    share one value whichever case holds them.  Each caller gets a copy."""
    key = (kind, name, once(part, "content_json", part.model_dump_json))  # once per sealed part
    try:
        value = _BY_CONTENT[key]
    except KeyError:
        if len(_BY_CONTENT) >= MAX_BY_CONTENT:
            _BY_CONTENT.clear()
        value = _BY_CONTENT[key] = compute()
    return dict(value)


def clear() -> None:
    """Forget every kept value (a benchmark's cold start; the objects stay sealed)."""
    _BY_CONTENT.clear()
    for _, memo in list(_SEALED.values()):
        memo.clear()
