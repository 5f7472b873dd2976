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
_PATH = re.compile(r"(?:(?<![A-Za-z])[A-Za-z]:)?(?:[\w.+-]*[/\\])+([\w.+-]+)")
# a number that is not part of a word: EZ1001, conv2d and E40021 stay as they are
_NUMBER = re.compile(r"(?<![A-Za-z_\d\ue000])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_QUOTED = re.compile(r"('[^']*'|\"[^\"]*\")")
_PID = re.compile(r"\[PID:\s*\d+\]\s*")
# an ACL error code after the words that announce one: "error code 161002", "ret=561003"
_ACL_CODE = re.compile(
    r"((?:error\s*code|err\s*code|errcode|ret(?:code)?|errno|error|code)\s*(?:is|=|:)?\s*\[?)"
    r"([1-5]\d{5})\b",
    re.IGNORECASE,
)
# dtype names as torch spells them in messages ('Half', Got: Int, torch.bfloat16): one refusal, one group
_DTYPE = re.compile(
    r"\b(?:torch\.)?(?:float8_e4m3fnuz|float8_e4m3fn|float8_e5m2fnuz|float8_e5m2|float16|bfloat16|float32|float64|"
    r"complex32|complex64|complex128|u?int(?:8|16|32|64)|Float8_e4m3fnuz|Float8_e4m3fn|Float8_e5m2fnuz|Float8_e5m2|"
    r"ComplexHalf|ComplexFloat|ComplexDouble|BFloat16|Half|Float|Double|Byte|Char|Short|Int|Long|Bool|"
    r"UInt16|UInt32|UInt64|QInt8|QUInt8|QInt32|DT_[A-Z0-9_]+)\b"
)


def match_unsupported(exc_type: str, message: str, extra_rules=()) -> str | None:
    text = f"{exc_type}: {message}"
    for rule in list(BUILTIN_RULES) + list(extra_rules or ()):
        if re.search(rule, text, re.IGNORECASE):
            return rule
    return None


def normalize(line: str) -> str:
    """Numbers -> <N>, hex addresses -> <ADDR>, paths -> their last part,
    dtype names -> <DTYPE>, ``[PID: n]`` dropped; error codes (``EZ1001``,
    ``error code 161002``) and other quoted names are kept as they are."""
    pieces = _QUOTED.split(_PID.sub("", line))
    out = []
    for i, piece in enumerate(pieces):
        if i % 2 == 1:  # a quoted name
            out.append(_DTYPE.sub("<DTYPE>", piece))
            continue
        piece = _ADDR.sub("<ADDR>", piece)
        piece = _PATH.sub(r"\1", piece)
        piece = _ACL_CODE.sub("\\1\ue000\\2", piece)
        piece = _DTYPE.sub("<DTYPE>", piece)
        piece = _NUMBER.sub("<N>", piece)
        out.append(piece.replace("\ue000", ""))
    return re.sub(r"\s+", " ", "".join(out)).strip()


def message_shape(exc_type: str, message: str) -> str:
    """What two refusals must share to be the same refusal: the type and the
    normalised first line (numbers, paths and dtype names made alike)."""
    first = next((ln for ln in message.splitlines() if ln.strip()), "")[:SIGNATURE_LINE_MAX]
    return f"{exc_type}: {normalize(first)}"


def exception_signature(exc_type: str, message: str) -> str:
    """The type and the normalised first line; for a CANN/ACLNN message, also its error codes and
    reason line (below), which is what tells two failures with the same first line apart."""
    # only the line's head: the signature keeps SIGNATURE_MAX characters, and the
    # path pattern is quadratic on a long unbroken token
    lines = [ln for ln in message.splitlines() if ln.strip()]
    first = lines[0][:SIGNATURE_LINE_MAX] if lines else ""
    sig = f"{exc_type}: {normalize(first)}" if first else exc_type
    if len(sig) > SIGNATURE_MAX:
        sig = sig[: SIGNATURE_MAX - 3] + "..."
    detail = cann_detail(lines)
    if detail:
        sig = f"{sig} | {detail}"
        if len(sig) > CANN_SIGNATURE_MAX:
            sig = sig[: CANN_SIGNATURE_MAX - 3] + "..."
    return sig


# CANN and torch_npu error text (real messages, e.g. vllm-project/vllm-ascend#11092:
#   "RuntimeError: call aclnnCausalConv1d failed, detail:EZ9999: Inner Error!" /
#   "EZ9999[PID: 584] 2026-06-22-11:12:13.398.186 AclNN_Inner_Error(EZ9999):  CausalConv1d do tiling failed,
#   ret is -1." / "TraceBack (most recent call last):" / "Check NnopbaseExecutorDoTiling(executor) failed";
# flash-linear-attention-npu#174: "...OpParamMaker.cpp:287 OPS function error: aclnnRecomputeWUFwd, error
#   code is 561000" / "[ERROR] (PID:360123, Device:6, RankID:6) ERR01100 OPS call acl api failed." /
#   "AclNN_Runtime_Error(EZ9903): InitTilingParseCtx failed";
# Ascend/pytorch#90: "call aclnnInplaceCopy failed, error code is 561103"):
# the codes are CANN's E<letter/digit><4 digits> (EZ9999, EE1001, E40021) and ACL's 6-digit statuses
# (1xxxxx-5xxxxx: 161002, 561103); the reason is the first line that is neither boilerplate nor a
# traceback step, with its code / PID / timestamp prefix stripped.
CANN_SIGNATURE_MAX = 280  # the schema allows 300; the backward prefix takes a few
_CANN_CODE = re.compile(r"\b(E[A-Z0-9]\d{4})\b")
_ACL_STATUS = re.compile(
    r"(?:error\s*code(?:\s*is)?|ret(?:code)?(?:\s*is)?|errno|aclnnStatus)\s*[=:]?\s*\[?([1-5]\d{5})\b"
    r"|\b([1-5]\d{5}):\s",
    re.IGNORECASE,
)
_BOILERPLATE = re.compile(
    r"^(?:TraceBack \(most recent call last\)|\[ERROR\]|\[Error\]|Rectify the fault|"
    r"Check \w+\(.*\) failed|(?:E[A-Z0-9]\d{4}:?\s*)?Inner Error!?$)",
    re.IGNORECASE,
)
_REASON_PREFIX = re.compile(
    r"^(?:E[A-Z0-9]\d{4}\s*:?\s*)?(?:\[PID:\s*\d+\]\s*)?:?\s*(?:\d{4}-\d\d-\d\d-[\d:.]+\s*)?"
    r"(?:\w*Error\s*\(E[A-Z0-9]\d{4}\)\s*:\s*|\(E[A-Z0-9]\d{4}\)\s*:\s*)?"
)


def cann_detail(lines: list[str]) -> str:
    """``EZ9999 561103: <reason>`` for a CANN/ACLNN-style message (codes anywhere in it, the reason
    line after the first); "" for any other message."""
    text = "\n".join(lines[:40])
    codes = list(dict.fromkeys(_CANN_CODE.findall(text)))
    statuses = list(dict.fromkeys(a or b for a, b in _ACL_STATUS.findall(text)))
    if not codes and not statuses:
        return ""
    reason = ""
    for line in lines[1:40]:
        line = line.strip()
        if _BOILERPLATE.search(line):
            continue
        line = _REASON_PREFIX.sub("", line).strip()
        if re.search(r"[A-Za-z]{3}", line):
            reason = normalize(line[:SIGNATURE_LINE_MAX])
            break
    head = " ".join(codes + statuses)
    return f"{head}: {reason}" if reason else head


def signal_name(returncode: int) -> str | None:
    """The signal that killed a process (negative returncode), e.g. SIGSEGV."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
