"""The model's real call: captured inside a (small, CPU) model with the
standalone opdebug_capture module, planned with plan_cases 'captures',
replayed on the local transport; accuracy-checker dumps imported; captures
refused when they are code, too large, truncated or not what the index says.

The runs share one event loop, hence one warm local slot.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from tools.capture import plan as capture_plan
from tools.errors import ToolError
from tools.evidence import RunStore
from tools.plan_cases import plan_cases
from tools.remote.pool import REGISTRY
from tools.run_case_remote import run_case_remote

REPO = Path(__file__).resolve().parent.parent
MODULE = REPO / "tools" / "capture" / "opdebug_capture.py"
OPERATORS = Path(__file__).resolve().parent / "operators"


def load_capture_module():
    spec = importlib.util.spec_from_file_location("opdebug_capture", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


oc = load_capture_module()


def config(run_id: str, module: str = "scaled_mul.py", **tolerance) -> dict:
    stem = module[:-3]
    return {"run_id": run_id, "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref",
                                           "modules": [module]},
            "tolerance": {"atol": 1e-5, "rtol": 1e-5, **tolerance}}


SCALED_MUL = "def cand(x, weight, alpha=1.0):\n    return x * weight + alpha\n\n\nref = cand\n"


def scaled_mul(x, weight, alpha=1.0):
    return x * weight + alpha


class TinyModel(torch.nn.Module):
    """Three layers; the middle one calls the operator on a transposed slice
    (a non-contiguous view with a storage offset)."""

    def __init__(self, op) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin1 = torch.nn.Linear(8, 12)
        self.scale = torch.nn.Parameter(torch.randn(6))
        self.lin2 = torch.nn.Linear(10, 3)
        self.op = op

    def forward(self, h):
        h = self.lin1(h)                      # (10, 12)
        view = h.t()[2:8]                     # (6, 10), strides (1, 12), offset 2
        y = self.op(view.t(), self.scale, alpha=0.5)   # (10, 6): strides (12, 1), offset 2
        return self.lin2(torch.cat([y, h[:, :4]], dim=1))


def test_a_model_call_is_captured_planned_and_replayed_exactly(loop, tmp_path: Path) -> None:
    cap = tmp_path / "cap"
    op = oc.capture_calls(scaled_mul, cap, tensors=1, limit=5)  # tensors of the first call only
    model = TinyModel(op)
    with torch.no_grad():
        model(torch.randn(10, 8))
        model(torch.randn(10, 8))
    assert op.recorded == ["scaled_mul#0", "scaled_mul#1"] and op.errors == []
    index = json.loads((cap / "index.json").read_text())
    first, second = index["calls"]
    x0 = first["args"][0]
    assert (x0["name"], x0["shape"], x0["strides"], x0["storage_offset"], x0["saved"]) == \
        ("x", [10, 6], [12, 1], 2, "region")
    assert first["args"][2] == {"kind": "value", "value": 0.5, "name": "alpha", "positional": False}
    assert any("forward" in frame for frame in first["stack"])
    assert second["args"][0]["saved"] is None and second["args"][0]["stats"]["nan"] == 0

    resp = plan_cases({"config": config("capt"), "module_sources": {"scaled_mul.py": SCALED_MUL},
                       "captures": [{"dir": str(cap), "star": True}]}, root=tmp_path / "ev")
    ids = [c.id for c in resp.cases]
    assert ids == ["cap-scaled_mul-0", "cap-scaled_mul-0.x.values-generated", "cap-scaled_mul-0.x.strides-contiguous",
                   "cap-scaled_mul-0.x.offset-0", "cap-scaled_mul-0.weight.values-generated", "cap-scaled_mul-1",
                   "cap-scaled_mul-1.x.strides-contiguous", "cap-scaled_mul-1.x.offset-0"]
    store = RunStore(tmp_path / "ev", "capt")
    cases = {c.id: c for c in store.read_cases()}
    exact = cases["cap-scaled_mul-0"]
    assert exact.origin.kind == "captured_call" and exact.origin.exact is True and exact.attributes == {"alpha": 0.5}
    x = exact.inputs[0]
    assert (x.strides, x.storage_offset, x.values.kind) == ([12, 1], 2, "captured")
    generated = cases["cap-scaled_mul-1"]
    assert generated.origin.exact is False and generated.inputs[0].values.kind == "uniform"
    assert generated.inputs[0].values.low == second["args"][0]["stats"]["min"]
    assert generated.origin.stats["x"]["max"] == second["args"][0]["stats"]["max"]
    stored = store.path("artifacts", "captured", "cap-scaled_mul-0.x")
    assert stored.read_bytes() == (cap / x0["file"]).read_bytes()

    out = loop.run_until_complete(run_case_remote("capt", root=tmp_path / "ev"))
    assert {o.state for o in out.outcomes} == {"passed"}, [(o.case_id, o.error) for o in out.outcomes]
    meta = json.loads(store.input_meta_path("cap-scaled_mul-0").read_text())
    by_name = {i["name"]: i for i in meta["inputs"]}
    assert by_name["x"]["sha256"] == x0["sha256"]
    assert by_name["weight"]["sha256"] == first["args"][1]["sha256"]
    assert (by_name["x"]["strides"], by_name["x"]["storage_offset"], by_name["x"]["contiguous"]) == ([12, 1], 2, False)
    # the contiguous variation replays the same logical values with other strides
    contig = json.loads(store.input_meta_path("cap-scaled_mul-0.x.strides-contiguous").read_text())
    assert contig["inputs"][0]["sha256"] == x0["sha256"] and contig["inputs"][0]["contiguous"] is True


def test_the_region_keeps_the_values_between_a_views_elements(tmp_path: Path) -> None:
    # the runner rebuilds the storage region, not just the view: a kernel that reads
    # past the view (ignores strides) sees the model's bytes there too
    import importlib

    inputs = importlib.import_module("tools.runner.inputs")
    base = torch.arange(40, dtype=torch.bfloat16).reshape(5, 8)
    view = base.t()[1:5]  # (4, 5), strides (1, 8), offset 1
    oc.capture_inputs("layer", out_dir=tmp_path, x=view, eps=1e-6)
    entry = json.loads((tmp_path / "index.json").read_text())["calls"][0]
    assert entry["id"] == "layer#0" and entry["args"][1]["value"] == 1e-6
    meta = entry["args"][0]
    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "x").write_bytes((tmp_path / meta["file"]).read_bytes())
    built = inputs.build_input({"name": "x", "shape": [4, 5], "strides": [1, 8], "storage_offset": 1,
                                "dtype": "bfloat16", "values": {"kind": "captured", "captured": "x"}},
                               seed=1, captured_dir=str(tmp_path / "cap"))
    assert torch.equal(built.storage[1:], base.reshape(-1)[1:built.storage.numel()])
    assert built.metadata["sha256"] == meta["sha256"] == oc.logical_sha256(view)


def test_capture_calls_from_threads_and_processes_share_one_index(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(f"""
import sys, threading, importlib.util
spec = importlib.util.spec_from_file_location("opdebug_capture", {str(MODULE)!r})
oc = importlib.util.module_from_spec(spec); spec.loader.exec_module(oc)
import torch
op = oc.capture_calls("torch.mul", sys.argv[1], tensors=True, limit=None, budget_bytes=6000)
def work():
    for _ in range(5):
        op(torch.ones(4, 8), 2.0)
threads = [threading.Thread(target=work) for _ in range(3)]
[t.start() for t in threads]; [t.join() for t in threads]
assert not op.errors, op.errors
""")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-W", "ignore", str(script), str(tmp_path / "cap")], env=env)
             for _ in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    index = json.loads((tmp_path / "cap" / "index.json").read_text())
    ids = [c["id"] for c in index["calls"]]
    assert sorted(ids, key=lambda i: int(i.split("#")[1])) == [f"mul#{n}" for n in range(30)]
    assert len({c["pid"] for c in index["calls"]}) == 2
    saved = [a for c in index["calls"] for a in c["args"] if a.get("saved")]
    skipped = [a for c in index["calls"] for a in c["args"] if a.get("not_saved")]
    # the budget holds across processes: what was saved fits, the rest says why not
    assert index["bytes_saved"] == sum(a["file_bytes"] for a in saved) <= 6000
    assert saved and skipped and all("size budget" in a["not_saved"] for a in skipped)
    assert all((tmp_path / "cap" / a["file"]).is_file() for a in saved)
    assert index["calls"][0]["args"][1] == {"kind": "value", "value": 2.0, "name": "arg1", "positional": True}


def write_npy(path: Path, t) -> None:
    """A .npy file (format 1.0) written by hand (numpy is not needed)."""
    descr = {torch.float32: "<f4", torch.float16: "<f2", torch.int64: "<i8"}[t.dtype]
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join(f"{s}," for s in t.shape))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    data = bytes(t.contiguous().view(torch.uint8).reshape(-1).tolist())
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1") + data)


def write_dump(root: Path) -> dict:
    """An accuracy-checker (msprobe) PyTorch dump, as its json_writer and
    pytorch_processor write it: dump.json + dump_tensor_data/<api>.<io>.<i>.pt."""
    data = root / "dump_tensor_data"
    data.mkdir(parents=True)
    x = torch.randn(3, 4, dtype=torch.float16)
    w = torch.randn(5, 4)
    torch.save(x.clone().contiguous(), data / "Functional.linear.0.forward.input.0.pt")
    write_npy(data / "Functional.linear.0.forward.input.1.npy", w)

    def stat(t):
        f = t.float()
        return {"Max": float(f.max()), "Min": float(f.min()), "Mean": float(f.mean()), "Norm": float(f.norm())}

    dump = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": "/npu/host/dump_tensor_data",
            "data": {"Functional.linear.0.forward": {
                "input_args": [
                    {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [3, 4], **stat(x),
                     "requires_grad": False, "data_name": "Functional.linear.0.forward.input.0.pt"},
                    {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [5, 4], **stat(w),
                     "requires_grad": True, "data_name": "Functional.linear.0.forward.input.1.npy"},
                ],
                "input_kwargs": {"alpha": {"type": "float", "value": 2.0}},
                "output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3, 5], "Max": 1.0,
                            "Min": -1.0, "Mean": 0.0, "Norm": 1.0, "requires_grad": True,
                            "data_name": "Functional.linear.0.forward.output.0.pt"}]},
                "Functional.relu.1.forward": {
                    "input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3],
                                    "Max": 3.0, "Min": -2.0, "Mean": 0.1, "Norm": 4.0, "requires_grad": False}],
                    "input_kwargs": {}, "output": []}}}
    (root / "dump.json").write_text(json.dumps(dump, indent=1))
    return {"x": x, "w": w}


LINEAR = ("import torch\n\n\ndef cand(arg0, arg1, alpha=1.0):\n"
          "    return torch.nn.functional.linear(arg0.float(), arg1.float()) * alpha\n\n\nref = cand\n")


def test_an_accuracy_checker_dump_imports_and_replays(loop, tmp_path: Path) -> None:
    from tools.runner.inputs import tensor_sha256

    tensors = write_dump(tmp_path / "msprobe")
    cfg = config("dump", "lin.py", per_dtype={"float16": {"atol": 1e-3, "rtol": 1e-3}})
    cfg["operator"]["call"] = {"style": "positional", "order": ["arg0", "arg1"]}
    resp = plan_cases({"config": cfg, "module_sources": {"lin.py": LINEAR},
                       "captures": [{"dir": str(tmp_path / "msprobe" / "dump.json"),
                                     "calls": ["Functional.linear.0.forward"]}]},
                      root=tmp_path / "ev")
    assert [c.id for c in resp.cases] == ["dump-Functional.linear.0.forward"]
    case = RunStore(tmp_path / "ev", "dump").read_cases()[0]
    assert [(i.name, i.dtype, i.shape, i.values.kind) for i in case.inputs] == \
        [("arg0", "float16", [3, 4], "captured"), ("arg1", "float32", [5, 4], "captured")]  # as dumped, nothing cast
    assert case.attributes == {"alpha": 2.0} and case.origin.kind == "accuracy_dump"
    out = loop.run_until_complete(run_case_remote("dump", root=tmp_path / "ev"))
    assert [o.state for o in out.outcomes] == ["passed"], [o.error for o in out.outcomes]
    meta = json.loads(RunStore(tmp_path / "ev", "dump").input_meta_path(case.id).read_text())
    assert [i["sha256"] for i in meta["inputs"]] == [tensor_sha256(tensors["x"]), tensor_sha256(tensors["w"])]

    # a statistics-only API (no data_name) becomes a case of generated values in the dumped range
    plan_cases({"config": config("relu"), "module_sources": {"scaled_mul.py": SCALED_MUL},
                "captures": [{"dir": str(tmp_path / "msprobe"), "calls": ["Functional.relu.1.forward"]}]},
               root=tmp_path / "ev")
    relu = RunStore(tmp_path / "ev", "relu").read_cases()[-1]
    assert relu.origin.exact is False and (relu.inputs[0].values.low, relu.inputs[0].values.high) == (-2.0, 3.0)


# --------------------------------------------------------------------------
# Captures are data, never code
# --------------------------------------------------------------------------


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def small_capture(tmp_path: Path) -> Path:
    cap = tmp_path / "cap"
    oc.capture_inputs("rms", out_dir=cap, x=torch.randn(4, 6).t(), eps=1e-6)
    return cap


def plan_refused(tmp_path: Path, cap: Path, run_id: str) -> ToolError:
    with pytest.raises(ToolError) as info:
        plan_cases({"config": config(run_id), "module_sources": {"scaled_mul.py": SCALED_MUL},
                    "captures": [{"dir": str(cap)}]}, root=tmp_path / "ev")
    assert not (tmp_path / "ev" / run_id).exists()  # nothing planned
    return info.value


def test_a_pickle_that_runs_code_is_refused_without_running(tmp_path: Path) -> None:
    cap = small_capture(tmp_path)
    index = json.loads((cap / "index.json").read_text())
    name = index["calls"][0]["args"][0]["file"]
    marker = tmp_path / "pwned"
    # the same torch.save archive with its data.pkl replaced by an exploit
    with zipfile.ZipFile(cap / name) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    pkl = next(n for n in entries if n.endswith("data.pkl"))
    entries[pkl] = pickle.dumps(_Exploit(str(marker)), protocol=2)
    with zipfile.ZipFile(cap / name, "w") as zf:
        for n, data in entries.items():
            zf.writestr(n, data)
    err = plan_refused(tmp_path, cap, "evil")
    assert err.code == "bad_capture" and name in err.message and "system" in err.message
    assert not marker.exists()
    # a legacy (non-zip) pickle is refused by name too
    (cap / name).write_bytes(pickle.dumps(_Exploit(str(marker))))
    err = plan_refused(tmp_path, cap, "evil2")
    assert name in err.message and "never code" in err.message and not marker.exists()


def test_an_oversized_truncated_or_mismatched_capture_is_refused_by_name(tmp_path: Path, monkeypatch) -> None:
    cap = small_capture(tmp_path)
    index = json.loads((cap / "index.json").read_text())
    name = index["calls"][0]["args"][0]["file"]
    good = (cap / name).read_bytes()

    monkeypatch.setattr(capture_plan, "MAX_FILE_BYTES", len(good) - 1)
    err = plan_refused(tmp_path, cap, "big")
    assert name in err.message and "limit per captured file" in err.message
    monkeypatch.setattr(capture_plan, "MAX_FILE_BYTES", 1 << 30)
    monkeypatch.setattr(capture_plan, "MAX_CAPTURE_BYTES", len(good) - 1)
    assert "per-capture limit" in plan_refused(tmp_path, cap, "big2").message
    monkeypatch.setattr(capture_plan, "MAX_CAPTURE_BYTES", 1 << 32)

    (cap / name).write_bytes(good[: len(good) // 2])
    err = plan_refused(tmp_path, cap, "cut")
    assert name in err.message and "truncated" in err.message

    (cap / name).write_bytes(good)
    index["calls"][0]["args"][0]["dtype"] = "float16"
    (cap / "index.json").write_text(json.dumps(index))
    err = plan_refused(tmp_path, cap, "mismatch")
    assert name in err.message and "float32" in err.message and "float16" in err.message

    index["calls"][0]["args"][0]["dtype"] = "float32"
    index["calls"][0]["args"][0]["file_sha256"] = "0" * 64
    (cap / "index.json").write_text(json.dumps(index))
    assert "sha256" in plan_refused(tmp_path, cap, "hash").message


def test_a_capture_outside_the_workspace_or_an_object_npy_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(capture_plan.WORKSPACE_ENV, raising=False)
    with pytest.raises(ToolError) as info:
        capture_plan.workspace_path("/etc", "captures[0].dir", tmp_path / "proj" / ".vaws-local" / "operator-debug")
    assert "outside the workspace" in info.value.message and "captures[0].dir" in info.value.message
    npy = tmp_path / "o.npy"
    header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    npy.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\x80\x02N.")
    from tools.capture.files import CaptureFileError, inspect_file

    with pytest.raises(CaptureFileError) as npy_info:
        inspect_file(npy)
    assert "o.npy" in npy_info.value.message and "pickle" in npy_info.value.message


# --------------------------------------------------------------------------
# The integration boundary, through the MCP server
# --------------------------------------------------------------------------


class BoundaryModel(torch.nn.Module):
    """A bfloat16 activation, transposed, beside a float32 weight: what the
    planned contiguous single-dtype cases do not have."""

    def __init__(self, op) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.lin = torch.nn.Linear(6, 8)
        self.weight = torch.nn.Parameter(torch.rand(4) + 0.5)
        self.head = torch.nn.Linear(4, 2)
        self.op = op

    def forward(self, h):
        a = self.lin(h).to(torch.bfloat16)        # (4, 8) bfloat16
        y = self.op(a.t(), self.weight)            # x: (8, 4), strides (1, 8); weight float32
        return self.head(y.float())


def test_the_integration_boundary_names_the_axes_and_bridges_over_mcp(loop, tmp_path: Path) -> None:
    from test_mcp_stdio import error_text, with_server

    # the MCP server below is another process: it needs the cpu:0 lease this process's warm slot holds
    loop.run_until_complete(REGISTRY.close_all())

    evidence = tmp_path / "evidence"
    evidence.mkdir()
    cap = tmp_path / "cap"
    sys.path.insert(0, str(OPERATORS))
    try:
        boundary = importlib.import_module("boundary_wrong")
    finally:
        sys.path.remove(str(OPERATORS))
    op = oc.capture_calls(boundary.cand, cap, tensors=True, stage="boundary")
    with torch.no_grad():
        BoundaryModel(op)(torch.randn(4, 6))
    assert op.recorded == ["boundary#0"]

    def iso(cid: str, dtype: str) -> dict:
        return {"id": cid, "seed": 3, "inputs": [{"name": "x", "shape": [8, 4], "dtype": dtype},
                                                 {"name": "weight", "shape": [4], "dtype": dtype}]}

    cfg = config("boundary", "boundary_wrong.py", per_dtype={"bfloat16": {"atol": 2e-2, "rtol": 2e-2}})
    request = {"config": cfg, "module_sources": {"boundary_wrong.py": (OPERATORS / "boundary_wrong.py").read_text()},
               "cases": [iso("iso-f32", "float32"), iso("iso-bf16", "bfloat16")],
               "captures": [{"dir": str(cap)}]}

    async def scenario(client) -> dict:
        out = {"plan": await client.call_tool("plan_cases", request)}
        out["run"] = await client.call_tool("run_case_remote", {"run_id": "boundary"})
        out["analysis"] = await client.call_tool("analyze_failures", {"run_id": "boundary"})
        if out["analysis"].is_error:
            return out
        bridges = out["analysis"].structured_content["integration_diff"][0]["bridges"]
        out["append"] = await client.call_tool("plan_cases", {"run_id": "boundary", "append": True,
                                                              "stars": [b["star"] for b in bridges]})
        out["run2"] = await client.call_tool("run_case_remote", {"run_id": "boundary"})
        out["report"] = await client.read_resource("opdebug://runs/boundary/report")
        return out

    out = with_server(evidence, scenario)
    for key in ("plan", "run", "analysis"):
        assert not out[key].is_error, error_text(out[key])
    states = {o["case_id"]: o["state"] for o in out["run"].structured_content["outcomes"]}
    assert states == {"iso-f32": "passed", "iso-bf16": "passed", "cap-boundary-0": "numerical_mismatch"}
    (diff,) = out["analysis"].structured_content["integration_diff"]
    assert (diff["direction"], diff["failing_case"], diff["closest_passing"]) == \
        ("captured_fails", "cap-boundary-0", "iso-bf16")
    assert {(f["axis"], f["value"]) for f in diff["features"]} == {("x.strides_class", "permuted(1,0)"),
                                                                  ("dtypes_mixed", "yes")}
    assert [(b["axis"], b["star"]["vary"]) for b in diff["bridges"]] == [
        ("x.strides_class", [{"axis": "strides", "input": "x", "values": [[1, 8]]}]),
        ("dtypes_mixed", [{"axis": "dtype", "input": "weight", "values": ["float32"]}]),
    ]
    # the bridges, appended as planned, each fail on its own: the boundary is found
    assert not out["append"].is_error, error_text(out["append"])
    added = out["append"].structured_content["added"]
    assert added == ["iso-bf16.x.strides-1-8", "iso-bf16.weight.dtype-float32"]
    assert {o["case_id"]: o["state"] for o in out["run2"].structured_content["outcomes"]} == \
        {cid: "numerical_mismatch" for cid in added}
    report = out["report"].contents[0].text
    assert "## Captured calls vs planned cases" in report
    assert "| `cap-boundary-0` | captured_fails | x.strides_class | permuted(1,0) | contiguous |" in report


def test_the_cli_writes_a_standalone_capture_module(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "capture-module", "--out", str(tmp_path / "m")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "m" / "opdebug_capture.py"
    assert written.read_bytes() == MODULE.read_bytes()
    # importable with the standard library and torch alone: nothing of this project, no pydantic
    check = ("import sys, opdebug_capture, torch\n"
             "bad = [m for m in sys.modules if m.split('.')[0] in ('tools', 'pydantic', 'mcp', 'numpy')]\n"
             "assert not bad, bad\n"
             "op = opdebug_capture.capture_calls('torch.add', 'cap')\n"
             "print(op(torch.ones(2), torch.ones(2)).tolist())\n")
    # a python with torch (and what torch requires) only: the test environment also has numpy
    # (matplotlib, the [pictures] extra), which torch imports whenever it is installed
    from artifacts_util import make_torch_only_venv

    torch_only = make_torch_only_venv(tmp_path / "torch-only")
    proc = subprocess.run([str(torch_only), "-E", "-s", "-W", "ignore", "-c", check], cwd=tmp_path / "m",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[2.0, 2.0]", proc.stderr
    index = json.loads((tmp_path / "m" / "cap" / "index.json").read_text())
    assert [c["id"] for c in index["calls"]] == ["add#0"] and index["calls"][0]["args"][0]["saved"] is None


def test_limit_when_and_install_by_dotted_name(tmp_path: Path) -> None:
    import torch.nn.functional as F

    original = F.relu
    op = oc.capture_calls("torch.nn.functional.relu", tmp_path / "c", limit=2, install=True,
                          when=lambda input, *a, **k: input.shape[0] > 1)
    try:
        assert F.relu is op
        outs = [F.relu(torch.full((n,), -1.0)) for n in (1, 3, 4, 5)]
    finally:
        op.uninstall()
    assert F.relu is original and [o.tolist() for o in outs[:2]] == [[0.0], [0.0] * 3]
    assert op.recorded == ["relu#0", "relu#1"] and op.full is True and op.errors == []
    calls = json.loads((tmp_path / "c" / "index.json").read_text())["calls"]
    assert [(c["args"][0]["name"], c["args"][0]["shape"], c["target"]) for c in calls] == \
        [("input", [3], "torch.nn.functional.relu"), ("input", [4], "torch.nn.functional.relu")]
    assert calls[0]["args"][0]["stats"] == {"numel": 3, "nan": 0, "inf": 0, "min": -1.0, "max": -1.0,
                                            "mean": -1.0, "absmax": 1.0}


def test_a_data_file_linked_out_of_the_capture_is_not_followed(tmp_path: Path) -> None:
    cap = small_capture(tmp_path)
    name = json.loads((cap / "index.json").read_text())["calls"][0]["args"][0]["file"]
    secret = tmp_path / "outside.pt"
    (cap / name).rename(secret)
    (cap / name).symlink_to(secret)
    err = plan_refused(tmp_path, cap, "link")
    assert name in err.message and "link out of the capture directory" in err.message


def test_capture_inputs_plans_one_case_per_stage_call(tmp_path: Path) -> None:
    cap = small_capture(tmp_path)
    oc.capture_inputs("rms", out_dir=cap, x=torch.randn(6, 4), eps=1e-5)
    resp = plan_cases({"config": config("stages"), "module_sources": {"scaled_mul.py": SCALED_MUL},
                       "captures": [{"dir": str(cap), "calls": ["rms#1", "rms#0"]}]}, root=tmp_path / "ev")
    assert [c.id for c in resp.cases] == ["cap-rms-1", "cap-rms-0"]
    by_id = {c.id: c for c in RunStore(tmp_path / "ev", "stages").read_cases()}
    assert (by_id["cap-rms-0"].inputs[0].strides, by_id["cap-rms-0"].attributes) == ([1, 6], {"eps": 1e-6})
    assert (by_id["cap-rms-1"].inputs[0].strides, by_id["cap-rms-1"].attributes) == (None, {"eps": 1e-5})
    with pytest.raises(ToolError) as info:
        plan_cases({"run_id": "stages", "append": True, "captures": [{"dir": str(cap), "calls": ["rms#7"]}]},
                   root=tmp_path / "ev")
    assert "'rms#7'" in info.value.message and "rms#0" in info.value.message


def test_float8_complex_and_wide_unsigned_captures_replay(loop, tmp_path: Path) -> None:
    # torch saves these with _rebuild_tensor_v3 and an untyped storage: read as data, replayed exactly
    from tools.runner.inputs import tensor_sha256

    cap = tmp_path / "cap"
    tensors = {"a": torch.randn(3, 4).to(torch.float8_e4m3fn).t(), "b": torch.randn(5, dtype=torch.complex64),
               "c": torch.arange(6, dtype=torch.int32).to(torch.uint16)}
    oc.capture_inputs("odd", out_dir=cap, **tensors)
    ident = "def cand(a, b, c):\n    return a.float() * 1, b * 1, c.to(__import__('torch').int64)\n\n\nref = cand\n"
    plan_cases({"config": config("odd", "ident.py"), "module_sources": {"ident.py": ident},
                "captures": [{"dir": str(cap)}]}, root=tmp_path / "ev")
    case = RunStore(tmp_path / "ev", "odd").read_cases()[0]
    assert [(i.name, i.dtype, i.strides) for i in case.inputs] == \
        [("a", "float8_e4m3fn", [1, 4]), ("b", "complex64", None), ("c", "uint16", None)]
    out = loop.run_until_complete(run_case_remote("odd", root=tmp_path / "ev"))
    assert [o.state for o in out.outcomes] == ["passed"], [(o.summary, o.error) for o in out.outcomes]
    meta = json.loads(RunStore(tmp_path / "ev", "odd").input_meta_path(case.id).read_text())
    assert [i["sha256"] for i in meta["inputs"]] == [tensor_sha256(t) for t in tensors.values()]


EMPTY_CAPTURE_SCRIPT = """
import sys, torch
sys.path.insert(0, {module_dir!r})
import opdebug_capture
never = opdebug_capture.capture_calls("torch.add", {empty!r}, install=True)   # the model calls torch.mul only
failing = opdebug_capture.capture_calls("torch.mul", {failing!r}, install=True, when=lambda *a, **k: 1 / 0)
recorded = opdebug_capture.capture_calls("torch.sub", {ok!r}, install=True)
torch.mul(torch.ones(2), 2.0)
torch.sub(torch.ones(2), 1.0)
print("model done")
"""


def test_an_empty_capture_says_so_at_exit_and_is_refused_by_name(tmp_path: Path, monkeypatch) -> None:
    """Issue 25: a wrapper that saw no call, or whose every call failed to record, is
    named on stderr when the process exits; planning from its directory is refused."""
    dirs = {k: str(tmp_path / k) for k in ("empty", "failing", "ok")}
    script = EMPTY_CAPTURE_SCRIPT.format(module_dir=str(MODULE.parent), **dirs)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "model done", proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "opdebug_capture: WARNING" in line]
    assert len(warnings) == 2, proc.stderr  # the wrapper that recorded is not named
    assert "capture_calls('torch.add')" in warnings[0] and "saw no call" in warnings[0] and dirs["empty"] in warnings[0]
    assert "capture_calls('torch.mul')" in warnings[1] and "every one failed to record" in warnings[1]
    assert "ZeroDivisionError" in warnings[1]
    monkeypatch.chdir(tmp_path)
    for name in ("empty", "failing"):
        with pytest.raises(ToolError) as info:
            capture_plan.plan_from_captures([capture_plan.CaptureSelection(dir=dirs[name])], tmp_path)
        assert info.value.code == "empty_capture" and dirs[name] in info.value.message, info.value.message
    planned = capture_plan.plan_from_captures([capture_plan.CaptureSelection(dir=dirs["ok"])], tmp_path)
    assert [c.id for c in planned.cases] == ["cap-sub-0"]
