"""Unsupported rules and crash signatures."""

from __future__ import annotations

import signal

from tools.runner.classify import exception_signature, match_unsupported, normalize, signal_name


def test_builtin_unsupported_rules() -> None:
    assert match_unsupported("RuntimeError", "\"addmm_impl_cpu_\" not implemented for 'Half'") == "not implemented for"
    assert match_unsupported("RuntimeError", "dtype Int8 is Not Supported on this SoC") == "not supported"
    assert match_unsupported("ValueError", "NPU does not support strided output") == "does not support"
    assert match_unsupported("RuntimeError",
                             "aclnnRmsNorm failed: check param dtype failed, x is DT_INT8") is not None
    assert match_unsupported("RuntimeError", "EZ1001: [PID: 123] invalid parameter") == "EZ1001"
    assert match_unsupported("RuntimeError", "call aclnnFoo failed, error code 161002") == r"\b161002\b"
    assert match_unsupported("RuntimeError", "CUDA error: an illegal memory access was encountered") is None


def test_config_rules_add_to_the_builtin_ones() -> None:
    assert match_unsupported("RuntimeError", "kernel missing for shape", ["kernel missing"]) == "kernel missing"
    assert match_unsupported("RuntimeError", "kernel missing for shape", []) is None


def test_signatures_are_short_and_stable() -> None:
    a = exception_signature("RuntimeError", "index 17 out of range at 0x7f3a2b10 in /opt/x/kernels/gather.cpp:88\n"
                                            "second line")
    b = exception_signature("RuntimeError", "index 4 out of range at 0x55aa00ff in /home/y/kernels/gather.cpp:12")
    assert a == b == "RuntimeError: index <N> out of range at <ADDR> in gather.cpp:<N>"
    assert exception_signature("KeyError", "") == "KeyError"
    long = exception_signature("RuntimeError", "x" * 1000)
    assert len(long) <= 160 and long.endswith("...")


def test_quoted_names_are_kept() -> None:
    assert normalize("'Char' and \"add_3\" at 12") == "'Char' and \"add_3\" at <N>"


def test_signal_names() -> None:
    assert signal_name(-signal.SIGSEGV) == "SIGSEGV"
    assert signal_name(-signal.SIGABRT) == "SIGABRT"
    assert signal_name(3) is None and signal_name(0) is None



def test_a_huge_first_line_is_signed_quickly() -> None:
    # a 100k-character first line (a dumped blob, a long token) took 40 s of the case's timeout
    import time

    t0 = time.monotonic()
    sig = exception_signature("RuntimeError", "E" * 100_000 + "\nsecond line")
    assert time.monotonic() - t0 < 1.0
    assert sig.startswith("RuntimeError: EEE") and len(sig) <= 160
