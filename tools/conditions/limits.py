"""Dtype limits by name, as a condition reads them (``float16.max``, ``int8.min``).

The figures are torch's (``torch.finfo`` / ``torch.iinfo``), written out so that the
server never imports torch: ``max`` and ``min`` are the largest and the most negative
finite values, ``tiny`` the smallest positive normal and ``eps`` the gap between 1 and
the next value up.  Integer dtypes have ``min`` and ``max`` only.
"""

from __future__ import annotations

import sys

FIELDS = ("max", "min", "tiny", "eps")


def _float(max_: float, tiny: float, eps: float) -> dict[str, float | int]:
    return {"max": max_, "min": -max_, "tiny": tiny, "eps": eps}


def _int(bits: int, signed: bool) -> dict[str, float | int]:
    if signed:
        return {"min": -(2 ** (bits - 1)), "max": 2 ** (bits - 1) - 1}
    return {"min": 0, "max": 2**bits - 1}


# torch.finfo(dtype): max, tiny (smallest_normal), eps
LIMITS: dict[str, dict[str, float | int]] = {
    "float16": _float(65504.0, 2.0**-14, 2.0**-10),
    "bfloat16": _float(3.3895313892515355e38, 2.0**-126, 2.0**-7),
    "float32": _float(3.4028234663852886e38, 2.0**-126, 2.0**-23),
    "float64": _float(sys.float_info.max, sys.float_info.min, sys.float_info.epsilon),
    "float8_e4m3fn": _float(448.0, 2.0**-6, 2.0**-3),
    "float8_e5m2": _float(57344.0, 2.0**-14, 2.0**-2),
    "int4": _int(4, True),
    "int8": _int(8, True),
    "int16": _int(16, True),
    "int32": _int(32, True),
    "int64": _int(64, True),
    "uint8": _int(8, False),
    "uint16": _int(16, False),
    "uint32": _int(32, False),
    "uint64": _int(64, False),
}


def limit(dtype: str, field: str) -> float | int | None:
    """``limit("float16", "max")`` -> 65504.0; None when the dtype has no such limit."""
    return LIMITS.get(dtype, {}).get(field)
