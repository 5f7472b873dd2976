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


def test_cann_messages_keep_their_codes_and_reason_line() -> None:
    # real torch_npu/CANN text (vllm-project/vllm-ascend#11092, flash-linear-attention-npu#174)
    conv = exception_signature("RuntimeError", (
        "call aclnnCausalConv1d failed, detail:EZ9999: Inner Error!\n"
        "EZ9999[PID: 584] 2026-06-22-11:12:13.398.186 AclNN_Inner_Error(EZ9999):  CausalConv1d do tiling failed, "
        "ret is -1.\n        TraceBack (most recent call last):\n       Check NnopbaseExecutorDoTiling(executor) failed"))
    assert conv == ("RuntimeError: call aclnnCausalConv1d failed, detail:EZ9999: Inner Error! | EZ9999: "
                    "CausalConv1d do tiling failed, ret is <N>.")
    rt = exception_signature("RuntimeError", (
        "InnerRunOpApi:../torch_npu/csrc/framework/OpParamMaker.cpp:287 OPS function error: aclnnRecomputeWUFwd, "
        "error code is 561000\n[ERROR] (PID:360123, Device:6, RankID:6) ERR01100 OPS call acl api failed.\n"
        "AclNN_Runtime_Error(EZ9903): InitTilingParseCtx failed"))
    assert rt.endswith("error code is 561000 | EZ9903 561000: InitTilingParseCtx failed")
    assert rt.startswith("RuntimeError: InnerRunOpApi:OpParamMaker.cpp:<N> OPS function error")
    # a PID or a time stamp does not split a group; a Python message has no CANN part
    assert conv == exception_signature("RuntimeError", (
        "call aclnnCausalConv1d failed, detail:EZ9999: Inner Error!\n"
        "EZ9999[PID: 77] 2027-01-02-03:04:05.000.001 AclNN_Inner_Error(EZ9999):  CausalConv1d do tiling failed, "
        "ret is -1."))
    assert "|" not in exception_signature("RuntimeError", "index 3 out of range\nat line 2")


def test_two_aclnn_failures_with_one_first_line_get_two_signatures(tmp_path) -> None:
    """End to end: a buggy operator (tests/operators/aclnn_errors.py) raising two different
    ACLNN errors behind the same "EZ9999: Inner Error!" line, run on the local host, analysed."""
    import asyncio
    from pathlib import Path

    from tools.analyze_failures import analyze_failures
    from tools.plan_cases import plan_cases
    from tools.remote.pool import REGISTRY
    from tools.run_case_remote import run_case_remote

    source = (Path(__file__).parent / "operators" / "aclnn_errors.py").read_text()

    def mm(cid, a_shape, b_shape, strides=None):
        a = {"name": "a", "shape": a_shape, "dtype": "float32", **({"strides": strides} if strides else {})}
        return {"id": cid, "inputs": [a, {"name": "b", "shape": b_shape, "dtype": "float32"}]}

    cases = [mm("ok", [8, 32], [32, 4]), mm("transposed", [8, 32], [32, 4], strides=[1, 8]),
             mm("transposed-2", [16, 32], [32, 4], strides=[1, 16]), mm("wide", [8, 128], [128, 4]),
             mm("wide-2", [4, 96], [96, 4])]
    plan_cases({"config": {"run_id": "aclnn", "operator": {"name": "mm", "candidate": "aclnn_errors.cand",
                                                           "reference": "aclnn_errors.ref",
                                                           "modules": ["aclnn_errors.py"]}},
                "cases": cases, "module_sources": {"aclnn_errors.py": source}}, root=tmp_path)

    async def run() -> None:
        try:
            await run_case_remote("aclnn", root=tmp_path)
        finally:
            await REGISTRY.close_all()

    asyncio.run(run())
    analysis = analyze_failures("aclnn", root=tmp_path)
    groups = {sig: sorted(ids) for sig, ids in analysis.crash_groups.items()}
    assert sorted(groups.values()) == [["transposed", "transposed-2"], ["wide", "wide-2"]], groups
    tiling = next(s for s, ids in groups.items() if "transposed" in ids)
    workspace = next(s for s, ids in groups.items() if "wide" in ids)
    assert tiling.startswith("RuntimeError: EZ9999: Inner Error! | EZ9999 561103: ")
    assert tiling.endswith("the tiling of the transposed operand is invalid")
    assert "561002" in workspace and "workspace of <N> bytes is too small" in workspace
