"""Classify a candidate exception: ``unsupported`` (a rule matched) or ``crash``.

Built-in rules (Python regexes, case-insensitive, searched in
``"<type>: <message>"``) plus the config's ``operator.unsupported_rules``.
Any other exception is a crash with a short, stable signature: the exception
type and its first message line with numbers, addresses and paths
normalized, so identical crashes group together.  Stdlib only.
"""

from __future__ import annotations

import re
import signal

BUILTIN_RULES = (
    r"not implemented for",
    r"not supported",
    r"does not support",
    r"unsupported",
    r"aclnn\w*.*(param|dtype|check).*fail",
    r"EZ1001",
    r"\b161002\b",
)

SIGNATURE_MAX = 160
SIGNATURE_LINE_MAX = 1000

_ADDR = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.+-]*[/\\])+([\w.+-]+)")
_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_QUOTED = re.compile(r"('[^']*'|\"[^\"]*\")")


def match_unsupported(exc_type: str, message: str, extra_rules=()) -> str | None:
    text = f"{exc_type}: {message}"
    for rule in list(BUILTIN_RULES) + list(extra_rules or ()):
        if re.search(rule, text, re.IGNORECASE):
            return rule
    return None


def normalize(line: str) -> str:
    """Numbers -> <N>, hex addresses -> <ADDR>, paths -> their last part;
    quoted names are kept as they are."""
    pieces = _QUOTED.split(line)
    out = []
    for i, piece in enumerate(pieces):
        if i % 2 == 1:  # a quoted name
            out.append(piece)
            continue
        piece = _ADDR.sub("<ADDR>", piece)
        piece = _PATH.sub(r"\1", piece)
        piece = _NUMBER.sub("<N>", piece)
        out.append(piece)
    return re.sub(r"\s+", " ", "".join(out)).strip()


def exception_signature(exc_type: str, message: str) -> str:
    # only the line's head: the signature keeps SIGNATURE_MAX characters, and the
    # path pattern is quadratic on a long unbroken token
    first = next((ln for ln in message.splitlines() if ln.strip()), "")[:SIGNATURE_LINE_MAX]
    sig = f"{exc_type}: {normalize(first)}" if first else exc_type
    return sig if len(sig) <= SIGNATURE_MAX else sig[: SIGNATURE_MAX - 3] + "..."


def signal_name(returncode: int) -> str | None:
    """The signal that killed a process (negative returncode), e.g. SIGSEGV."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
