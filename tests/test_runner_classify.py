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


def test_quoted_names_are_kept_but_dtype_names_are_one() -> None:
    assert normalize("'Char' and \"add_3\" at 12") == "'<DTYPE>' and \"add_3\" at <N>"


def test_one_refusal_kind_is_one_signature_whatever_dtype_it_names() -> None:
    # the messages PyTorch's CPU kernels raise for different dtypes of the same refusal
    sigs = {exception_signature("RuntimeError", f"\"addmm_impl_cpu_\" not implemented for '{d}'")
            for d in ("Half", "BFloat16", "Int", "Long", "Bool", "ComplexFloat")}
    assert sigs == {"RuntimeError: \"addmm_impl_cpu_\" not implemented for '<DTYPE>'"}
    mean = {exception_signature("RuntimeError", "mean(): could not infer output dtype. Input dtype must be either "
                                                f"a floating point or complex dtype. Got: {d}") for d in ("Int", "Byte")}
    assert len(mean) == 1 and next(iter(mean)).endswith("Got: <DTYPE>")
    assert normalize("expected torch.bfloat16 but got float16") == "expected <DTYPE> but got <DTYPE>"


def test_error_codes_stay_readable_in_signatures() -> None:
    msg = ("EZ1001: [PID: 4242] 2024-05-01-10:00:00.123.456 aclnnAdd check param failed, "
           "error code 161002, x is DT_INT8 at /opt/cann/op_api.cpp:88")
    other = msg.replace("4242", "977").replace("10:00:00.123", "11:12:13.999").replace(":88", ":91")
    sig = exception_signature("RuntimeError", msg)
    assert sig == exception_signature("RuntimeError", other)
    assert sig.startswith("RuntimeError: EZ1001: ") and "error code 161002" in sig and "PID" not in sig
    assert sig == exception_signature("RuntimeError", msg.replace("DT_INT8", "DT_BF16"))
    assert "conv2d" in normalize("conv2d of size 3") and normalize("ret=561003 at step 7") == "ret=561003 at step <N>"


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
