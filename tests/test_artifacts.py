"""From verdict to artefact (tools/artifacts): standalone reproducers run in a
virtual environment that has only torch, exported pytest files, shrinking a
shape threshold, verifying a fix, and pictures - on the demo and on planted
operators of several kinds (tests/operators/), through the real local
transport (one warm worker shared by the module's tests).
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from artifacts_util import clean_env, make_torch_only_venv

from tools.analyze_failures import analyze_failures
from tools.artifacts.pictures import render_pictures
from tools.artifacts.regression import export_regression
from tools.artifacts.repro import export_repro
from tools.artifacts.shrink import shrink_case
from tools.artifacts.verify import verify_run
from tools.evidence import RunStore
from tools.examples import demo_request
from tools.plan_cases import plan_cases
from tools.remote.pool import REGISTRY
from tools.run_case_remote import run_case_remote

OPERATORS = Path(__file__).resolve().parent / "operators"


@pytest.fixture(scope="module")
def torch_only(tmp_path_factory) -> Path:
    """A python with torch (and what torch requires) and nothing else of ours."""
    python = make_torch_only_venv(tmp_path_factory.mktemp("venv") / "torch-only")
    probe = tmp_path_factory.mktemp("probe")
    for module, importable in (("torch", True), ("tools", False), ("pydantic", False), ("mcp", False)):
        proc = subprocess.run([str(python), "-c", f"import {module}"], cwd=probe, env=clean_env(),
                              capture_output=True, text=True)
        assert (proc.returncode == 0) is importable, (module, proc.stderr[-500:])
    return python


@pytest.fixture(scope="module")
def demo(loop, tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("demo-root")
    plan_cases(demo_request("demo"), root=root)
    loop.run_until_complete(run_case_remote("demo", root=root, case_ids=["rms", "rms.dtype-bfloat16"]))
    return root, "demo"


def planted(loop, root: Path, run_id: str, module: str, cases: list[dict], **config) -> None:
    stem = module[:-3]
    plan_cases({"config": {"run_id": run_id,
                           "operator": {"name": stem, "candidate": f"{stem}.cand", "reference": f"{stem}.ref",
                                        "modules": [module]},
                           "tolerance": {"atol": 1e-5, "rtol": 1e-5, "per_dtype": {"bfloat16": {"atol": 8e-3,
                                                                                                "rtol": 8e-3}}},
                           **config},
                "cases": cases, "module_sources": {module: (OPERATORS / module).read_text()}}, root=root)
    loop.run_until_complete(run_case_remote(run_id, root=root))


def run_script(python: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), script, *args], cwd=Path(script).parent, env=clean_env(),
                          capture_output=True, text=True, timeout=300)


def printed_metric(stdout: str, name: str) -> str:
    match = re.search(rf"^  {name} = (\S+)", stdout, re.M)
    assert match, stdout
    return match.group(1)


def printed_hashes(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^input (\w+) sha256 ([0-9a-f]{64})", stdout, re.M))


def recorded_hashes(store: RunStore, case_id: str) -> dict[str, str]:
    meta = json.loads(store.input_meta_path(case_id).read_text())
    return {i["name"]: i["sha256"] for i in meta["inputs"]}


def run_pytest(test_file: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file],
                          cwd=Path(test_file).parent, env=clean_env(), capture_output=True, text=True, timeout=300)


def test_demo_reproducer_runs_with_torch_alone_and_passes_once_fixed(demo, torch_only, tmp_path) -> None:
    root, run_id = demo
    store = RunStore(root, run_id)
    recorded = store.read_results()["rms.dtype-bfloat16"].comparisons[0]
    exported = export_repro(run_id, "rms.dtype-bfloat16", tmp_path / "repro", root=root)
    script = Path(exported.script)
    header = script.read_text()[:3000]
    assert f"torch {store.read_results()['rms.dtype-bfloat16'].environment['torch']}" in header
    assert "CANN not recorded" in header and "model command: opdebug demo" in header

    proc = run_script(torch_only, exported.script)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert printed_metric(proc.stdout, "max_abs") == repr(recorded.max_abs)
    assert printed_metric(proc.stdout, "mismatch_count") == str(recorded.mismatch_count)
    assert printed_hashes(proc.stdout) == recorded_hashes(store, "rms.dtype-bfloat16")
    assert "status: numerical_mismatch" in proc.stdout

    # the fix (accumulate bfloat16 in float32 too), made in the module shipped beside the script
    module = script.parent / "rmsnorm_demo.py"
    module.write_text(module.read_text().replace("return torch.float32 if dtype == torch.float16 else dtype",
                                                 "return torch.float32"))
    fixed = run_script(torch_only, exported.script)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "PASSED" in fixed.stdout and printed_hashes(fixed.stdout) == recorded_hashes(store, "rms.dtype-bfloat16")


# (module, case inputs, failing case id): a dtype bug, a stride bug, a segfault, a shape threshold
PLANTED = {
    "dtype": ("bf16_only.py", [{"id": "f32", "inputs": [{"name": "x", "shape": [4, 8]}]},
                               {"id": "bf16", "inputs": [{"name": "x", "shape": [4, 8], "dtype": "bfloat16"}]}],
              "bf16"),
    "stride": ("contiguous_only.py", [{"id": "rowmajor", "inputs": [{"name": "x", "shape": [4, 6]}]},
                                      {"id": "colmajor", "inputs": [{"name": "x", "shape": [4, 6],
                                                                      "strides": [1, 4]}]}], "colmajor"),
    "segfault": ("segfault_large.py", [{"id": "small", "inputs": [{"name": "x", "shape": [10]}]},
                                       {"id": "large", "inputs": [{"name": "x", "shape": [2000]}]}], "large"),
    "threshold": ("tail_past_tile.py", [{"id": "w256", "inputs": [{"name": "x", "shape": [3, 256]}]},
                                        {"id": "w300", "inputs": [{"name": "x", "shape": [3, 300]}]}], "w300"),
}


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_planted_reproducer_and_regression_test(kind, loop, torch_only, tmp_path) -> None:
    module, cases, failing = PLANTED[kind]
    planted(loop, tmp_path / "root", kind, module, cases)
    store = RunStore(tmp_path / "root", kind)
    result = store.read_results()[failing]
    assert result.status == ("crash" if kind == "segfault" else "numerical_mismatch")

    exported = export_repro(kind, failing, tmp_path / "out", root=tmp_path / "root")
    proc = run_script(torch_only, exported.script)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert printed_hashes(proc.stdout) == recorded_hashes(store, failing)
    if kind == "segfault":
        assert result.error.signature == "SIGSEGV"
        assert "error signature: SIGSEGV   (recorded SIGSEGV)" in proc.stdout
    else:
        assert printed_metric(proc.stdout, "max_abs") == repr(result.comparisons[0].max_abs)

    # the candidate replaced by the reference: the failure is gone
    fixed = run_script(torch_only, exported.script, "--candidate", f"{module[:-3]}.ref")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr

    # the pytest file for the operator's repository fails for the failing case, and only for it
    # (for the dtype bug with its passing neighbour, and for the crash; the others keep the suite lean)
    if kind not in ("dtype", "segfault"):
        return
    neighbours = kind == "dtype"
    reg = export_regression(kind, tmp_path / "out", root=tmp_path / "root", neighbours=neighbours)
    assert reg.failing_cases == [failing]
    assert reg.neighbour_cases == ([c["id"] for c in cases if c["id"] != failing] if neighbours else [])
    tested = run_pytest(reg.test_file)
    assert tested.returncode == 1, tested.stdout
    assert f"FAILED {Path(reg.test_file).name}::test_case_passes[{failing}]" in tested.stdout
    assert ("1 failed, 1 passed" if neighbours else "1 failed in") in tested.stdout


def test_shrink_reaches_the_smallest_failing_shape_of_a_threshold_within_20_cases(loop, tmp_path) -> None:
    root = tmp_path / "root"
    # strided on purpose: the failure does not need the strides, shrinking drops them
    planted(loop, root, "thr", "tail_past_tile.py",
            [{"id": "big", "inputs": [{"name": "x", "shape": [48, 1000], "strides": [1, 48]}]}])
    seen = []

    async def progress(done, total, text):
        seen.append(text)

    response = loop.run_until_complete(shrink_case("thr", "big", root=root, max_cases=20, progress=progress))
    assert response.smallest_shapes == {"x": [257]}
    assert response.cases_run <= 20 and response.stopped == "done"
    assert response.signature == "numerical_mismatch on ['out']"
    results = RunStore(root, "thr").read_results()
    cases = {c.id: c for c in RunStore(root, "thr").read_cases()}
    # every step is an ordinary planned and recorded case; accepted ones fail the same way
    assert [s.case_id for s in response.steps] == [c for c in cases if c != "big"]
    for step in response.steps:
        assert results[step.case_id].status == step.state
        assert step.same_failure == (step.state == "numerical_mismatch")
    smallest = cases[response.smallest_case]
    assert smallest.inputs[0].strides is None and results[response.smallest_case].status == "numerical_mismatch"
    assert {s.state for s in response.steps if s.numel in (256, 250)} <= {"passed"}
    assert len(seen) == response.cases_run


def test_shrink_rejects_an_invalid_call_as_another_failure(loop, tmp_path) -> None:
    root = tmp_path / "root"
    # x [rows, hidden] and weight [hidden] share a dimension: they shrink together
    plan_cases(demo_request("rms") | {"stars": []} | {"cases": [{
        "id": "bf", "inputs": [{"name": "x", "shape": [2, 4096], "dtype": "bfloat16"},
                               {"name": "weight", "shape": [4096], "dtype": "bfloat16",
                                "values": {"kind": "uniform", "low": 0.5, "high": 1.5}}],
        "attributes": {"eps": 1e-6}, "seed": 1234}]}, root=root)
    loop.run_until_complete(run_case_remote("rms", root=root))
    response = loop.run_until_complete(shrink_case("rms", "bf", root=root, max_cases=6))
    results = RunStore(root, "rms").read_results()
    kept = [s for s in response.steps if s.same_failure]
    assert response.stopped == "case_budget" and response.cases_run == 6
    assert all(results[s.case_id].status == "numerical_mismatch" for s in kept)
    # the hidden size moved in x and weight together: no step was an invalid call
    for step in response.steps:
        case = next(c for c in RunStore(root, "rms").read_cases() if c.id == step.case_id)
        assert case.inputs[0].shape[-1] == case.inputs[1].shape[-1]
    assert response.smallest_numel < response.start_numel


def test_verify_records_the_fix_in_isolation_and_in_the_model(loop, tmp_path, monkeypatch, capsys) -> None:
    from tools.cli import main

    package = tmp_path / "pkg"
    package.mkdir()
    source = (OPERATORS / "tail_past_tile.py").read_text()
    (package / "fixable_tail.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(package))
    loop.run_until_complete(REGISTRY.close_idle(["local"]))  # the next worker starts with this PYTHONPATH
    root = tmp_path / "root"
    model = [sys.executable, "-c", "import sys, torch, fixable_tail as f; x = torch.ones(2, 300); "
             "ok = bool((f.cand(x) == x * 2).all()); print('model ok' if ok else 'model wrong'); sys.exit(0 if ok else 3)"]
    plan_cases({"config": {"run_id": "fix", "command": shlex.join(model),
                           "operator": {"name": "tail", "candidate": "fixable_tail.cand",
                                        "reference": "fixable_tail.ref"}},
                "cases": [{"id": "w300", "inputs": [{"name": "x", "shape": [2, 300]}]},
                          {"id": "w100", "inputs": [{"name": "x", "shape": [2, 100]}]}]}, root=root)
    loop.run_until_complete(run_case_remote("fix", root=root))

    before = loop.run_until_complete(verify_run("fix", root=root, command_timeout_s=120))
    assert before.rerun == {"w300": "w300.verify-1"} and before.still_failing == ["w300"]
    assert before.model_command["exit_status"] == 3 and "model wrong" in before.model_command["output_tail"]
    assert before.conclusion.startswith("still failing in isolation")

    (package / "fixable_tail.py").write_text(source.replace("y[..., TILE:] = 0", "pass"))
    after = loop.run_until_complete(verify_run("fix", root=root, command_timeout_s=120))
    assert after.verify_index == 2 and after.states == {"w300.verify-2": "passed"} and after.still_failing == []
    assert after.model_command["exit_status"] == 0 and after.model_command["argv"] == model
    assert "fixed in isolation" in after.conclusion and "fixed in the model" in after.conclusion
    store = RunStore(root, "fix")
    results = store.read_results()
    assert results["w300"].status == "numerical_mismatch"  # the original evidence stays
    assert results["w300.verify-2"].status == "passed"
    # the same inputs as the original case, under the new id
    assert recorded_hashes(store, "w300.verify-2") == recorded_hashes(store, "w300")
    evidence = json.loads(store.path("artifacts", "verify", "2.json").read_text())
    assert evidence["model_command"]["exit_status"] == 0 and evidence["conclusion"] == after.conclusion
    analyze_failures("fix", root=root)
    report = store.path("report.md").read_text()
    assert f"**After the fix (verify 2):** {after.conclusion}" in report
    assert "## Verification after a fix" in report and "model wrong" in report
    assert main(["show", "--output-dir", str(store.dir)]) == 0
    assert f"after the fix (verify 2): {after.conclusion}" in capsys.readouterr().out


def test_verify_fix_takes_the_fix_under_another_name_with_its_module_files(tmp_path) -> None:
    # The fix lives in another module than the run's (an installed build, a patched copy): verify_fix
    # is pointed at it, as the reproducer's --candidate and the regression test's OPDEBUG_CANDIDATE
    # are - through the real MCP client; no shim module, and the run's config is unchanged.
    from test_mcp_stdio import error_text, with_server

    source = (OPERATORS / "tail_past_tile.py").read_text()
    fixed = source.replace("y[..., TILE:] = 0", "pass")
    plan = {"config": {"run_id": "named-fix", "operator": {"name": "tail", "candidate": "tail.cand",
                                                           "reference": "tail.ref", "modules": ["tail.py"]}},
            "module_sources": {"tail.py": source},
            "cases": [{"id": "w300", "inputs": [{"name": "x", "shape": [2, 300]}]},
                      {"id": "w100", "inputs": [{"name": "x", "shape": [2, 100]}]}]}

    async def scenario(client):
        assert not (await client.call_tool("plan_cases", plan)).is_error
        assert not (await client.call_tool("run_case_remote", {"run_id": "named-fix"})).is_error
        unfixed = await client.call_tool("verify_fix", {"run_id": "named-fix", "candidate": "tail.cand"})
        fix = await client.call_tool("verify_fix", {"run_id": "named-fix", "candidate": "fixed_tail.cand",
                                                    "candidate_sources": {"fixed_tail.py": fixed}})
        bad = await client.call_tool("verify_fix", {"run_id": "named-fix", "candidate_sources": {"x.py": fixed}})
        bad_name = await client.call_tool("verify_fix", {"run_id": "named-fix", "candidate": "fixed_tail.cand",
                                                         "candidate_sources": {"../x.py": fixed}})
        return unfixed, fix, bad, bad_name

    unfixed, fix, bad, bad_name = with_server(tmp_path, scenario)
    assert not unfixed.is_error and unfixed.structured_content["still_failing"] == ["w300"]
    assert not fix.is_error, error_text(fix)
    doc = fix.structured_content
    assert doc["still_failing"] == [] and doc["candidate"] == "fixed_tail.cand", doc
    assert doc["conclusion"].startswith("fixed in isolation")
    store = RunStore(tmp_path, "named-fix")
    assert store.read_config().operator.candidate == "tail.cand"  # the run's config is unchanged
    evidence = json.loads(store.path(doc["evidence"]).read_text())
    assert evidence["candidate"] == "fixed_tail.cand" and evidence["candidate_modules"] == ["fixed_tail.py"]
    assert store.path("artifacts", "verify", "2", "modules", "fixed_tail.py").read_text() == fixed
    assert "candidate_sources without a candidate" in error_text(bad)
    assert "module file must be NAME.py" in error_text(bad_name)


def test_pictures_for_each_failing_output_in_the_report_and_as_resources(demo, tmp_path) -> None:
    from test_mcp_stdio import with_server

    root, run_id = demo
    response = render_pictures(run_id, root=root)
    expected = {"artifacts/pictures/rms.dtype-bfloat16.out.error-map.png",
                "artifacts/pictures/rms.dtype-bfloat16.out.rel-error.png", "artifacts/pictures/run-cases.png"}
    assert set(response.pictures) == expected and response.skipped == []
    assert response.outputs_from == {"rms.dtype-bfloat16": "recomputed here through its reproducer (cpu)"}
    store = RunStore(root, run_id)
    for rel in expected:
        data = store.path(rel).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert width >= 600 and height >= 300
    analyze_failures(run_id, root=root)
    report = store.path("report.md").read_text()
    for rel in expected:
        assert f"]({rel})" in report

    async def scenario(client):
        listed = (await client.list_resources()).resources
        uri = f"opdebug://runs/{run_id}/pictures/rms.dtype-bfloat16.out.error-map.png"
        read = await client.read_resource(uri)
        return listed, read

    listed, read = with_server(root, scenario)
    pictures = {str(r.uri): r.mime_type for r in listed if "/pictures/" in str(r.uri)}
    assert pictures == {f"opdebug://runs/{run_id}/pictures/{Path(rel).name}": "image/png" for rel in expected}
    blob = read.contents[0]
    assert blob.mime_type == "image/png"
    assert base64.b64decode(blob.blob) == store.path("artifacts/pictures/rms.dtype-bfloat16.out.error-map.png") \
        .read_bytes()


def test_the_report_renders_without_matplotlib_and_says_how_to_get_pictures(loop, tmp_path, monkeypatch) -> None:
    planted(loop, tmp_path / "root", "nompl", "bf16_only.py", PLANTED["dtype"][1])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    response = render_pictures("nompl", root=tmp_path / "root")
    assert response.available is False and response.pictures == []
    analysis = analyze_failures("nompl", root=tmp_path / "root")
    assert analysis.verdict == "diagnosed"
    report = RunStore(tmp_path / "root", "nompl").path("report.md").read_text()
    assert "No pictures: matplotlib is not installed" in report and "[pictures]" in report
    assert "## Failure axes" in report


def test_cli_repro_and_regression_commands(demo, tmp_path, capsys) -> None:
    from tools.cli import main

    root, run_id = demo
    assert main(["repro", run_id, "rms.dtype-bfloat16", "--root", str(root), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "rms.dtype-bfloat16.py").is_file()
    assert (tmp_path / "r" / "opdebug_runner" / "inputs.py").is_file()
    capsys.readouterr()
    assert main(["regression", str(root / run_id), "--out", str(tmp_path / "r"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["failing_cases"] == ["rms.dtype-bfloat16"]
    assert out["test_file"] == str(tmp_path / "r" / "test_rms_norm_regression.py")
    assert main(["repro", run_id, "no-such-case", "--root", str(root), "--out", str(tmp_path / "r")]) == 2
    assert "no-such-case" in capsys.readouterr().err

    # opdebug show prints the picture paths (drawn by the pictures test above)
    store = RunStore(root, run_id)
    assert main(["show", "--output-dir", str(store.dir)]) == 0
    shown = capsys.readouterr().out
    assert str(store.path("artifacts/pictures/rms.dtype-bfloat16.out.error-map.png")) in shown
    assert str(store.path("artifacts/pictures/run-cases.png")) in shown


def test_a_case_recorded_on_npu_exports_a_torch_npu_reproducer_and_a_test_that_skips_here(tmp_path) -> None:
    from tools.record_result import record_result

    root = tmp_path / "root"
    plan_cases({"config": {"run_id": "onnpu", "environment": {"cann": "8.0.RC3"},
                           "command": "python train.py --bf16",
                           "operator": {"name": "rms_norm", "candidate": "torch_npu.npu_rms_norm",
                                        "reference": "bf16_only.ref", "modules": ["bf16_only.py"]}},
                "cases": [{"id": "bf16", "inputs": [{"name": "x", "shape": [4, 8], "dtype": "bfloat16"}]}],
                "module_sources": {"bf16_only.py": (OPERATORS / "bf16_only.py").read_text()}}, root=root)
    record_result("onnpu", {"case_id": "bf16", "status": "crash",
                            "error": {"type": "RuntimeError", "message": "EZ9999: aclnnRmsNorm failed",
                                      "signature": "RuntimeError: EZ9999: aclnnRmsNorm failed"},
                            "environment": {"device": "npu:0", "device_kind": "npu", "torch": "2.5.1",
                                            "torch_npu": "2.5.1.post1", "hostname": "npu-host-3"}}, root=root)
    exported = export_repro("onnpu", "bf16", tmp_path / "out", root=root)
    header = Path(exported.script).read_text()[:3000]
    assert exported.device == "npu"
    assert "torch 2.5.1, torch_npu 2.5.1.post1, CANN 8.0.RC3" in header and "host npu-host-3" in header
    assert "and torch_npu (device npu)" in header and "model command: python train.py --bf16" in header
    reg = export_regression("onnpu", tmp_path / "out", root=root)
    tested = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", reg.test_file],
                            cwd=tmp_path / "out", env=clean_env(), capture_output=True, text=True, timeout=300)
    assert tested.returncode == 0 and "1 skipped" in tested.stdout, tested.stdout
    assert "device npu: torch_npu is not installed" in tested.stdout


def test_pictures_of_a_case_run_on_npu_come_from_the_outputs_its_reproducer_saved(tmp_path) -> None:
    from tools.record_result import record_result

    root = tmp_path / "root"
    plan_cases({"config": {"run_id": "npupic",
                           "operator": {"name": "x2", "candidate": "bf16_only.cand", "reference": "bf16_only.ref",
                                        "modules": ["bf16_only.py"]},
                           "tolerance": {"atol": 1e-3, "rtol": 1e-3}},
                "cases": [{"id": "bf16", "inputs": [{"name": "x", "shape": [4, 8], "dtype": "bfloat16"}]}],
                "module_sources": {"bf16_only.py": (OPERATORS / "bf16_only.py").read_text()}}, root=root)
    record_result("npupic", {"case_id": "bf16", "status": "numerical_mismatch",
                             "comparisons": [{"output": "out", "passed": False, "numel": 32, "max_abs": 0.25,
                                              "atol": 1e-3, "rtol": 1e-3, "mismatch_count": 32,
                                              "mismatch_ratio": 1.0, "worst_index": [0, 0],
                                              "first_mismatch_index": [0, 0]}],
                             "environment": {"device": "npu:0", "device_kind": "npu"}}, root=root)
    skipped = render_pictures("npupic", root=root)
    assert skipped.pictures == ["artifacts/pictures/run-cases.png"]
    assert "--save-outputs" in skipped.skipped[0] and "artifacts/outputs/bf16.pt" in skipped.skipped[0]

    # on the host: the reproducer saves both outputs (here on cpu, standing in for the npu)
    exported = export_repro("npupic", "bf16", tmp_path / "out", root=root)
    saved = tmp_path / "bf16-outputs.pt"
    proc = subprocess.run([sys.executable, exported.script, "--device", "cpu", "--save-outputs", str(saved)],
                          capture_output=True, text=True, timeout=300, env=clean_env(), cwd=tmp_path / "out")
    assert proc.returncode == 1 and saved.is_file(), proc.stdout + proc.stderr
    drawn = render_pictures("npupic", root=root, outputs={"bf16": str(saved)})
    assert drawn.outputs_from == {"bf16": "saved by its reproducer"}
    assert drawn.skipped == [] and set(drawn.pictures) == {
        "artifacts/pictures/bf16.out.error-map.png", "artifacts/pictures/bf16.out.rel-error.png",
        "artifacts/pictures/run-cases.png"}
    assert RunStore(root, "npupic").path("artifacts/outputs/bf16.pt").read_bytes() == saved.read_bytes()


def test_shrink_keeps_the_one_special_value_a_nan_bug_needs(loop, tmp_path) -> None:
    root = tmp_path / "root"
    planted(loop, root, "nan", "nan_wrong.py",
            [{"id": "nans", "inputs": [{"name": "x", "shape": [16, 32],
                                        "values": {"kind": "normal", "specials": [{"value": "nan", "count": 8}]}}]}])
    response = loop.run_until_complete(shrink_case("nan", "nans", root=root, max_cases=20))
    steps = {s.change.split(": ", 1)[0]: s for s in response.steps}
    assert steps["no special values"].state == "passed" and not steps["no special values"].same_failure
    assert steps["no special values"].change == "no special values: x specials [nan x8] -> []"  # every change said
    smallest = next(c for c in RunStore(root, "nan").read_cases() if c.id == response.smallest_case)
    assert smallest.inputs[0].values.specials[0].count == 1  # 8 -> 4 -> 2 -> 1, each still failing
    assert response.smallest_numel < 16 * 32
    assert RunStore(root, "nan").read_results()[response.smallest_case].status == "numerical_mismatch"


def test_a_run_keeps_the_outputs_of_its_mismatching_cases_when_asked(loop, tmp_path) -> None:
    import torch

    root = tmp_path / "root"
    module = "bf16_only.py"
    plan_cases({"config": {"run_id": "keep", "operator": {"name": "x2", "candidate": "bf16_only.cand",
                                                          "reference": "bf16_only.ref", "modules": [module]},
                           "tolerance": {"atol": 1e-3, "rtol": 1e-3}},
                "cases": PLANTED["dtype"][1], "module_sources": {module: (OPERATORS / module).read_text()}},
               root=root)
    loop.run_until_complete(run_case_remote("keep", root=root, keep_outputs=True))
    store = RunStore(root, "keep")
    assert not (store.raw_dir("f32") / "outputs.pt").exists()  # a passing case keeps nothing
    kept = torch.load(store.raw_dir("bf16") / "outputs.pt", weights_only=True)
    assert kept["candidate"].dtype == torch.bfloat16 and kept["reference"].dtype == torch.float32
    assert float((kept["candidate"].float() - kept["reference"]).abs().max()) == \
        store.read_results()["bf16"].comparisons[0].max_abs
    worker = json.loads((store.raw_dir("bf16") / "worker-result.json").read_text())
    assert "outputs_b64" not in worker  # the bytes are in outputs.pt only
    assert "keep_outputs_max_bytes" not in store.read_config().model_dump()  # the planned config is unchanged
    drawn = render_pictures("keep", root=root)
    assert drawn.outputs_from == {"bf16": "kept by the run (raw-results)"}
    assert "artifacts/pictures/bf16.out.error-map.png" in drawn.pictures


def test_the_reproducer_shows_the_call_as_made_and_the_full_value_spec(tmp_path) -> None:
    plan_cases({"config": {"run_id": "pos", "operator": {
        "name": "mm", "candidate": "torch.matmul", "reference": "torch.matmul",
        "call": {"style": "positional", "order": ["a", "b"]}}},
        "cases": [{"id": "c", "attributes": {}, "inputs": [
            {"name": "a", "shape": [4, 8], "dtype": "float16", "strides": [1, 4],
             "values": {"kind": "normal", "mean": 90.0, "std": 1.5,
                        "specials": [{"value": "-large", "count": 2}, {"value": "nan", "positions": [[0, 1]]}]}},
            {"name": "b", "shape": [8, 3], "dtype": "float16"}]}]}, root=tmp_path)
    exported = export_repro("pos", "c", tmp_path / "repro", root=tmp_path)
    doc = Path(exported.script).read_text().split('"""')[1]
    assert ("Call (eager): torch.matmul(<float16 [4, 8], strides [1, 4], normal(mean=90.0,std=1.5), specials "
            "-large x2, nan at [[0, 1]]>, <float16 [8, 3], normal>)") in doc
    # what the export ships, as the docstring and SKILL.md say: the runner package beside the script
    assert (tmp_path / "repro" / "opdebug_runner" / "execute.py").is_file()
    assert "Beside it: opdebug_runner/" in doc
    skill = (Path(__file__).resolve().parent.parent / "SKILL.md").read_text()
    assert "`<case>.py` plus, beside it, `opdebug_runner/`" in skill


def test_shrink_steps_are_valid_calls_that_say_every_change(loop, tmp_path) -> None:
    root = tmp_path / "root"
    # a matmul that raises for a transposed `a` before any shape check (tests/operators/aclnn_errors.py):
    # a's batch and k are sizes b shares; every step keeps them equal and keeps `a` transposed
    planted(loop, root, "mm", "aclnn_errors.py", [{"id": "t", "inputs": [
        {"name": "a", "shape": [4, 16, 8], "strides": [128, 1, 16]}, {"name": "b", "shape": [4, 8, 6]}]}])
    response = loop.run_until_complete(shrink_case("mm", "t", root=root, max_cases=16))
    cases = {c.id: c for c in RunStore(root, "mm").read_cases()}
    for step in response.steps:
        a, b = cases[step.case_id].inputs
        assert a.shape[-1] == b.shape[-2] and a.shape[:-2] == b.shape[:-2], (step.change, a.shape, b.shape)
    ranked = [s for s in response.steps if "leading dimension" in s.change]
    assert ranked and "a shape [4, 16, 8] -> [16, 8], strides [128, 1, 16] -> strides [1, 16]" in ranked[0].change
    assert "b shape [4, 8, 6] -> [8, 6]" in ranked[0].change and ranked[0].same_failure
    smallest = cases[response.smallest_case].inputs[0]
    assert not smallest.is_contiguous() and response.smallest_shapes["b"][0] == response.smallest_shapes["a"][-1]

    # a layout check before the shape check: bisecting x's last dimension below 8 still fails the same
    # way, but the reference refuses the call - recorded, not taken
    planted(loop, root, "grp", "layout_first.py",
            [{"id": "t", "inputs": [{"name": "x", "shape": [4, 64], "strides": [1, 4]}]}])
    response = loop.run_until_complete(shrink_case("grp", "t", root=root, max_cases=16))
    rejected = [s for s in response.steps if s.rejected]
    assert rejected and all(s.same_failure and "not a valid call: the reference refuses it (RuntimeError: shape"
                            in s.rejected for s in rejected), [(s.change, s.rejected) for s in response.steps]
    assert response.smallest_shapes == {"x": [2, 8]}, response.steps
    results = RunStore(root, "grp").read_results()
    assert results[response.smallest_case].error.reference_error is None
