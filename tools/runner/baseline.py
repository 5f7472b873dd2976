"""The same-precision baseline, refusals the reference shares, and binding checks.

- The **baseline** of a case is a correct computation in the candidate's own
  dtypes: the ``operator.baseline`` callable, or the reference callable, on
  CPU with the inputs as they are (no upcast).  Its error against the trusted
  reference is what the ``baseline`` judge holds the candidate's error to.
- A candidate exception that the baseline raises too (same exception type,
  same message shape once numbers, paths and dtype names are normalised) says
  the combination is outside the operator's contract: ``unsupported``.
- A ``TypeError`` raised while binding the call's arguments says the call
  style does not fit the callable: a harness error (nothing recorded).

Standard library and torch only.
"""

from __future__ import annotations

import inspect
import re

from .classify import message_shape
from .inputs import map_built

BINDING_PATTERNS = (
    r"got an unexpected keyword argument",
    r"missing \d+ required (?:positional|keyword-only) arguments?",
    r"missing a required argument",
    r"takes (?:from \d+ to )?\d+ positional arguments? but \d+ (?:were|was) given",
    r"got multiple values for argument",
    r"takes no keyword arguments",
    r"received an invalid combination of arguments",
    r"missing required (?:positional )?argument",
    r"too many positional arguments",
)
_BINDING = re.compile("|".join(BINDING_PATTERNS), re.IGNORECASE)


class BindingError(Exception):
    """The call's arguments do not bind to a callable's signature (a harness error)."""


def is_binding_message(exc: BaseException) -> bool:
    return isinstance(exc, TypeError) and bool(_BINDING.search(str(exc)))


def binding_hint(op: dict, names: list[str]) -> str:
    call = op.get("call") or {}
    style = call.get("style", "keywords")
    if style == "positional":
        how = f"operator.call is positional with order {call.get('order')}"
    else:
        how = "operator.call passes every input by keyword (style 'keywords')"
    return (
        f"{how}; inputs and attributes named {names}. Change operator.call (style 'positional' with an "
        "'order', or keywords matching the signature) or rename the inputs to the callable's parameter "
        "names; nothing was recorded, the case stays pending"
    )


def check_binding(role: str, dotted: str, fn, args: list, kwargs: dict, op: dict) -> None:
    """Raise BindingError when ``fn``'s signature (if it can be inspected) refuses the call."""
    sig = _signature(fn)
    if sig is None:  # a builtin without a signature: checked when called
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        unknown = [k for k in kwargs if k not in sig.parameters and not takes_any]
        why = str(exc) + (f"; it has no parameter named {', '.join(map(repr, unknown))}" if unknown else "")
        raise BindingError(
            f"the {role} {dotted}{sig} cannot take this call: {why}. "
            f"{binding_hint(op, list(kwargs) + [f'#{i}' for i in range(len(args))])}"
        ) from None


_SIGNATURES: dict = {}  # callable -> its signature (or None): inspected once per warm worker, not per case


def _signature(fn) -> inspect.Signature | None:
    try:
        return _SIGNATURES[fn]
    except (KeyError, TypeError):  # TypeError: an unhashable callable, inspected every time
        pass
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    try:
        if len(_SIGNATURES) > 256:  # a reloaded user module leaves its old functions here: bounded
            _SIGNATURES.clear()
        _SIGNATURES[fn] = sig
    except TypeError:
        pass
    return sig


def raised_at_call(exc: BaseException) -> bool:
    """The exception came from the called function's own argument parsing: no
    Python frame below the frame that made the call (a builtin's parser)."""
    tb = exc.__traceback__
    return tb is not None and tb.tb_next is None


def same_refusal(cand_type: str, cand_message: str, exc: BaseException) -> bool:
    return type(exc).__name__ == cand_type and message_shape(cand_type, cand_message) == message_shape(
        type(exc).__name__, str(exc)
    )


def baseline_inputs(built: list) -> dict:
    """The inputs on CPU in their own dtypes, viewed as the case says (a copy of each storage)."""
    return map_built(built, lambda b: b.view(b.storage.clone()))
