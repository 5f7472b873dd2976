"""How a value and a boundary read: the one number format and the one boundary sentence of every
finding, probe, verdict and rendered line (analysis/ and render/ both import it; it imports nothing).

A boundary must read exactly: an integer (or a float that is one) prints every digit, a float prints the
shortest text that reads back as the same float (``0.1``, ``1e-05``, ``65504.5``) - never rounded to a
few digits, which would state a boundary the recorded cases do not have.
"""

from __future__ import annotations

from typing import Any

NONE = "-"


def num(value: Any) -> str:
    """A recorded value as text: exact, and as short as exactness allows; None reads ``-``."""
    if value is None:
        return NONE
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        short = f"{value:.6g}"
        return short if float(short) == value else repr(value)
    return str(value)


def boundary(passes_at: Any, fails_at: Any) -> str:
    """The boundary of a threshold as one sentence: where it last passed and first failed."""
    if passes_at is None:
        return f"fails at {num(fails_at)}, no passing value on the other side yet"
    return f"passes at {num(passes_at)}, fails at {num(fails_at)}"
