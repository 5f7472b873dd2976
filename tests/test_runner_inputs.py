"""Inputs are built exactly as the case says, from the case seed."""

from __future__ import annotations

import math

import pytest
import torch

from tools.runner.inputs import InputError, build_input, build_inputs, special_value, storage_numel


def test_strides_offset_and_storage_are_exact() -> None:
    b = build_input({"name": "x", "shape": [3, 4], "strides": [1, 5], "storage_offset": 7, "dtype": "float16"}, 1)
    v = b.view()
    assert list(v.shape) == [3, 4] and list(v.stride()) == [1, 5] and v.storage_offset() == 7
    assert v.dtype == torch.float16 and not v.is_contiguous()
    assert b.storage.numel() == storage_numel([3, 4], [1, 5], 7) == 7 + 2 * 1 + 3 * 5 + 1
    meta = b.metadata
    assert meta["storage_numel"] == 25 and meta["numel"] == 12 and meta["contiguous"] is False
    assert meta["strides"] == [1, 5] and meta["storage_offset"] == 7 and meta["dtype"] == "float16"


def test_values_are_generated_once_in_float32_then_cast() -> None:
    spec = {"name": "x", "shape": [64], "dtype": "bfloat16", "values": {"kind": "normal", "mean": 1.0, "std": 2.0}}
    b = build_input(spec, 42)
    expected = (torch.randn(64, generator=torch.Generator().manual_seed(42)) * 2.0 + 1.0).to(torch.bfloat16)
    assert torch.equal(b.view(), expected)


def test_same_seed_same_bits_other_seed_other_bits() -> None:
    case = {"id": "c", "seed": 5, "inputs": [{"name": "a", "shape": [16]}, {"name": "b", "shape": [16]}]}
    one, two = build_inputs(case), build_inputs(case)
    assert [i.metadata["sha256"] for i in one] == [i.metadata["sha256"] for i in two]
    assert one[0].metadata["sha256"] != one[1].metadata["sha256"]  # inputs get their own streams
    other = build_inputs(dict(case, seed=6))
    assert other[0].metadata["sha256"] != one[0].metadata["sha256"]
    # without a seed, the case id decides (stable, not random)
    no_seed = {"id": "c", "inputs": [{"name": "a", "shape": [16]}]}
    assert build_inputs(no_seed)[0].metadata["sha256"] == build_inputs(no_seed)[0].metadata["sha256"]


def test_value_kinds() -> None:
    def values(kind, dtype="float32", **kw):
        return build_input({"name": "x", "shape": [200], "dtype": dtype, "values": {"kind": kind, **kw}}, 3).view()

    u = values("uniform", low=-2.0, high=-1.0)
    assert bool((u >= -2).all() and (u < -1).all())
    r = values("randint", "int8", low=-3, high=3)
    assert r.dtype == torch.int8 and int(r.min()) >= -3 and int(r.max()) <= 2
    assert torch.equal(values("arange"), torch.arange(200, dtype=torch.float32))
    assert bool((values("full", "float16", fill=1.5) == 1.5).all())
    assert bool((values("zeros", "int32") == 0).all()) and bool((values("ones", "bool")).all())


def test_special_values_at_positions_and_seeded_counts() -> None:
    specials = [{"value": "nan", "positions": [[0, 0]]}, {"value": "-0", "positions": [[0, 1]]},
                {"value": "denormal", "positions": [[1, 0]]}, {"value": "large", "positions": [[1, 1]]},
                {"value": "-inf", "count": 3}]
    spec = {"name": "x", "shape": [4, 4], "dtype": "float16", "values": {"kind": "normal", "specials": specials}}
    v = build_input(spec, 9).view().float()
    info = torch.finfo(torch.float16)
    assert math.isnan(v[0, 0]) and v[0, 1] == 0 and torch.signbit(v[0, 1])
    assert v[1, 0].item() == info.tiny * info.eps == 2 ** -24  # the smallest float16 subnormal
    assert v[1, 1].item() == info.max / 2
    assert int(torch.isneginf(v).sum()) == 3
    meta = build_input(spec, 9).metadata
    assert [s["value"] for s in meta["specials_at"]] == ["nan", "-0", "denormal", "large", "-inf"]
    assert meta["specials_at"][4]["count"] == 3
    assert meta["specials_at"] == build_input(spec, 9).metadata["specials_at"]  # seeded positions


def test_specials_respect_strides() -> None:
    spec = {"name": "x", "shape": [2, 3], "strides": [1, 2], "storage_offset": 1, "dtype": "float32",
            "values": {"kind": "zeros", "specials": [{"value": "inf", "positions": [[1, 2]]}]}}
    b = build_input(spec, 0)
    assert math.isinf(b.view()[1, 2]) and int(torch.isinf(b.view()).sum()) == 1
    assert math.isinf(b.storage[1 + 1 * 1 + 2 * 2])  # logical [1,2] -> storage offset + 1*1 + 2*2


def test_conversions_are_recorded_never_silent() -> None:
    b = build_input({"name": "x", "shape": [50], "dtype": "int8", "values": {"kind": "normal", "std": 500}}, 1)
    assert "rounded" in b.metadata["conversion"] and "[-128, 127]" in b.metadata["conversion"]
    assert int(b.view().max()) <= 127
    # a randint range is clipped to the dtype's range, and the clipping is recorded (issue 8)
    clipped = build_input({"name": "x", "shape": [64], "dtype": "int8", "values": {"kind": "randint", "low": -1000,
                                                                                  "high": 1000}}, 1)
    assert "clipped to [-128, 128) for int8" in clipped.metadata["conversion"]
    assert clipped.metadata["stats"]["min"] >= -128 and clipped.metadata["stats"]["max"] <= 127
    with pytest.raises(InputError, match="is empty for uint8"):
        build_input({"name": "x", "shape": [5], "dtype": "uint8", "values": {"kind": "randint", "low": -9,
                                                                              "high": 0}}, 1)
    with pytest.raises(InputError, match="outside shape"):
        build_input({"name": "x", "shape": [2], "values": {"specials": [{"value": "nan", "positions": [[2]]}]}}, 1)


def test_captured_inputs_load_exactly_and_refuse_a_dtype_change(tmp_path) -> None:
    saved = torch.arange(6, dtype=torch.float16).reshape(2, 3)
    torch.save(saved, tmp_path / "act0")
    spec = {"name": "x", "shape": [2, 3], "strides": [1, 2], "dtype": "float16",
            "values": {"kind": "captured", "captured": "act0"}}
    v = build_input(spec, 0, str(tmp_path)).view()
    assert torch.equal(v, saved) and list(v.stride()) == [1, 2]
    with pytest.raises(InputError, match="refusing to cast"):
        build_input(dict(spec, dtype="float32"), 0, str(tmp_path))
    with pytest.raises(InputError, match="no captured directory"):
        build_input(spec, 0, None)


def test_special_value_table() -> None:
    assert special_value("denormal", torch.bfloat16) == 2 ** -133
    assert special_value("denormal", torch.float32) == 2 ** -149
    assert special_value("-large", torch.float32) == -torch.finfo(torch.float32).max / 2


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_stats_of_many_large_values_stay_finite_json(dtype) -> None:
    """Three 'large' specials (max/2 each) overflow a float32 (or float64) running sum:
    the metadata must still be valid JSON, else the worker cannot send the case at all."""
    import json

    spec = {"name": "x", "shape": [4, 8], "dtype": dtype,
            "values": {"kind": "normal", "specials": [{"value": "large", "count": 3}]}}
    stats = build_input(spec, 3).metadata["stats"]
    json.dumps(stats, allow_nan=False)
    assert stats["max"] == special_value("large", getattr(torch, dtype))
    assert math.isfinite(stats["mean"]) and stats["mean"] > 0
