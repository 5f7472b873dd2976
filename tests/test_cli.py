"""The ``opdebug`` CLI in subprocesses: the seed's plan -> record -> analyze
recipes, list/show, JSON output, and user errors (exit 2, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEMO_MODULE, REPO_ROOT, minimal_plan_request, mismatch_result, passed_result


def opdebug(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def user_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert "error" in proc.stderr
    return proc.stderr


@pytest.fixture
def workspace(tmp_path: Path, subprocess_env: dict[str, str]) -> dict:
    """A config file with its module beside it (module_sources omitted, as a
    person writes it) and two result files."""
    files = tmp_path / "inputs"
    files.mkdir()
    request = minimal_plan_request("cli-run", ("eager-f32", "graph-f32"))
    del request["module_sources"]
    (files / "plan.json").write_text(json.dumps(request, indent=2))
    (files / "scaled_add_mod.py").write_text(DEMO_MODULE)
    (files / "pass.json").write_text(json.dumps(passed_result("eager-f32")))
    (files / "mismatch.json").write_text(json.dumps(mismatch_result("graph-f32")))
    root = Path(subprocess_env["OPDEBUG_EVIDENCE_ROOT"])
    return {"dir": files, "root": root, "run_dir": root / "cli-run", "env": subprocess_env, "cwd": tmp_path}


def test_seed_recipes_plan_record_analyze(workspace: dict) -> None:
    f, run_dir, env, cwd = workspace["dir"], workspace["run_dir"], workspace["env"], workspace["cwd"]

    out = ok(opdebug("plan", "--config", str(f / "plan.json"), "--output-dir", str(run_dir), env=env, cwd=cwd))
    assert "created run cli-run" in out and "eager-f32" in out and "graph-f32" in out
    # the module named in the config was read from beside it and stored with the run
    assert (run_dir / "artifacts" / "modules" / "scaled_add_mod.py").read_text() == DEMO_MODULE

    out = ok(opdebug("record", "--output-dir", str(run_dir), "--result", str(f / "pass.json"), env=env, cwd=cwd))
    assert "recorded eager-f32 as passed" in out and "pending: 1 (graph-f32)" in out
    ok(opdebug("record", "--output-dir", str(run_dir), "--result", str(f / "mismatch.json"), env=env, cwd=cwd))

    out = ok(opdebug("analyze", "--output-dir", str(run_dir), env=env, cwd=cwd))
    assert "verdict: diagnosed" in out
    # the explaining axis itself (a bare "graph" would be satisfied by the case id graph-f32)
    assert "the failures follow mode=graph" in out
    assert f"report: {run_dir / 'report.md'}" in out
    for name in ("manifest.json", "case-matrix.json", "results.json", "analysis.json", "report.md"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "analysis.json").read_text())["verdict"] == "diagnosed"


def test_json_output_list_and_show(workspace: dict) -> None:
    f, root, run_dir, env, cwd = (workspace[k] for k in ("dir", "root", "run_dir", "env", "cwd"))

    plan = json.loads(ok(opdebug("plan", "--config", str(f / "plan.json"), "--root", str(root), "--json",
                                 env=env, cwd=cwd)))
    assert plan["run_id"] == "cli-run" and plan["run_dir"] == str(run_dir)
    assert [c["id"] for c in plan["cases"]] == ["eager-f32", "graph-f32"]
    rec = json.loads(ok(opdebug("record", "--root", str(root), "--run-id", "cli-run",
                                "--result", str(f / "pass.json"), "--json", env=env, cwd=cwd)))
    assert rec["case_id"] == "eager-f32" and rec["pending"] == ["graph-f32"]

    listed = json.loads(ok(opdebug("list", "--json", env=env, cwd=cwd)))  # root from the environment
    assert [(r["run_id"], r["operator"], r["case_count"], r["recorded_count"]) for r in listed] == \
        [("cli-run", "scaled_add", 2, 1)]
    out = ok(opdebug("list", env=env, cwd=cwd))
    assert "cli-run" in out and "scaled_add" in out and "running" in out

    out = ok(opdebug("show", "--output-dir", str(run_dir), env=env, cwd=cwd))
    assert "eager-f32" in out and "passed" in out and "pending" in out and "not analyzed yet" in out

    ok(opdebug("record", "--output-dir", str(run_dir), "--result", str(f / "mismatch.json"), env=env, cwd=cwd))
    analysis = json.loads(ok(opdebug("analyze", "--output-dir", str(run_dir), "--json", env=env, cwd=cwd)))
    assert analysis["verdict"] == "diagnosed"
    shown = json.loads(ok(opdebug("show", "--output-dir", str(run_dir), "--json", env=env, cwd=cwd)))
    assert {c["id"]: c["state"] for c in shown["cases"]} == {"eager-f32": "passed", "graph-f32": "numerical_mismatch"}
    assert shown["cases"][1]["axes"]["mode"] == "graph"
    assert shown["analysis"]["verdict"] == "diagnosed"
    out = ok(opdebug("show", "--output-dir", str(run_dir), env=env, cwd=cwd))
    assert "verdict: diagnosed" in out and "numerical_mismatch" in out


def test_append_adds_cases_and_keeps_results(workspace: dict) -> None:
    f, run_dir, env, cwd = workspace["dir"], workspace["run_dir"], workspace["env"], workspace["cwd"]
    ok(opdebug("plan", "--config", str(f / "plan.json"), "--output-dir", str(run_dir), env=env, cwd=cwd))
    ok(opdebug("record", "--output-dir", str(run_dir), "--result", str(f / "pass.json"), env=env, cwd=cwd))
    extra = minimal_plan_request("cli-run", ("compile-f32",), modes=("compile",))["cases"]
    (f / "more.json").write_text(json.dumps(extra))

    plan = json.loads(ok(opdebug("plan", "--append", "--cases", str(f / "more.json"), "--output-dir", str(run_dir),
                                 "--json", env=env, cwd=cwd)))
    assert plan["created"] is False and plan["added"] == ["compile-f32"]
    states = {c["id"]: c["state"] for c in plan["cases"]}
    assert states == {"compile-f32": "pending"}
    assert (plan["case_count"], plan["recorded_count"]) == (3, 1)
    # appending the same case again is refused
    err = user_error(opdebug("plan", "--append", "--cases", str(f / "more.json"), "--output-dir", str(run_dir),
                             env=env, cwd=cwd))
    assert "compile-f32" in err


def test_user_errors_exit_2_with_a_clear_message(workspace: dict) -> None:
    f, root, run_dir, env, cwd = (workspace[k] for k in ("dir", "root", "run_dir", "env", "cwd"))

    err = user_error(opdebug("plan", "--config", str(f / "plan.json"), "--output-dir", str(root / "other-name"),
                             env=env, cwd=cwd))
    assert "other-name" in err and "cli-run" in err
    assert not (root / "other-name").exists() and not run_dir.exists()

    err = user_error(opdebug("plan", "--config", str(f / "missing.json"), "--output-dir", str(run_dir),
                             env=env, cwd=cwd))
    assert "missing.json" in err
    (f / "broken.json").write_text("{not json")
    err = user_error(opdebug("plan", "--config", str(f / "broken.json"), "--output-dir", str(run_dir),
                             env=env, cwd=cwd))
    assert "not valid JSON" in err

    bad = minimal_plan_request("cli-run", ("../x",))
    bad["config"]["tolerance"]["rtol"] = -1
    (f / "bad.json").write_text(json.dumps(bad))
    err = user_error(opdebug("plan", "--config", str(f / "bad.json"), "--output-dir", str(run_dir), env=env, cwd=cwd))
    assert "cases.0.id" in err and "config.tolerance.rtol" in err

    no_module = minimal_plan_request("cli-run")
    del no_module["module_sources"]
    (f / "elsewhere").mkdir()
    (f / "elsewhere" / "plan.json").write_text(json.dumps(no_module))
    err = user_error(opdebug("plan", "--config", str(f / "elsewhere" / "plan.json"), "--output-dir", str(run_dir),
                             env=env, cwd=cwd))
    assert "scaled_add_mod.py" in err

    ok(opdebug("plan", "--config", str(f / "plan.json"), "--output-dir", str(run_dir), env=env, cwd=cwd))
    err = user_error(opdebug("plan", "--config", str(f / "plan.json"), "--output-dir", str(run_dir), env=env, cwd=cwd))
    assert "already exists" in err
    ok(opdebug("record", "--output-dir", str(run_dir), "--result", str(f / "pass.json"), env=env, cwd=cwd))
    err = user_error(opdebug("record", "--output-dir", str(run_dir), "--result", str(f / "pass.json"),
                             env=env, cwd=cwd))
    assert "already has a result" in err
    err = user_error(opdebug("analyze", "--output-dir", str(root / "never-planned"), env=env, cwd=cwd))
    assert "never-planned" in err and "does not exist" in err
    err = user_error(opdebug("show", "--root", str(root), "--run-id", "../etc", env=env, cwd=cwd))
    assert "safe slug" in err


def test_show_says_when_the_stored_analysis_is_out_of_date(workspace: dict) -> None:
    f, run_dir, env, cwd = workspace["dir"], workspace["run_dir"], workspace["env"], workspace["cwd"]
    ok(opdebug("plan", "--config", str(f / "plan.json"), "--output-dir", str(run_dir), env=env, cwd=cwd))
    ok(opdebug("record", "--output-dir", str(run_dir), "--result", str(f / "pass.json"), env=env, cwd=cwd))
    ok(opdebug("analyze", "--output-dir", str(run_dir), env=env, cwd=cwd))  # inconclusive: graph-f32 missing
    out = ok(opdebug("show", "--output-dir", str(run_dir), env=env, cwd=cwd))
    assert "out of date" not in out
    ok(opdebug("record", "--output-dir", str(run_dir), "--result", str(f / "mismatch.json"), env=env, cwd=cwd))
    out = ok(opdebug("show", "--output-dir", str(run_dir), env=env, cwd=cwd))
    # the old verdict ("graph-f32 missing") is not shown as if it were current
    assert "out of date" in out and "opdebug analyze" in out
    shown = json.loads(ok(opdebug("show", "--output-dir", str(run_dir), "--json", env=env, cwd=cwd)))
    assert shown["analysis_stale"] is True
    ok(opdebug("analyze", "--output-dir", str(run_dir), env=env, cwd=cwd))
    shown = json.loads(ok(opdebug("show", "--output-dir", str(run_dir), "--json", env=env, cwd=cwd)))
    assert shown["analysis_stale"] is False and shown["analysis"]["verdict"] == "diagnosed"


def test_plan_append_without_a_named_run_says_how_to_name_it(workspace: dict) -> None:
    f, root, run_dir, env, cwd = (workspace[k] for k in ("dir", "root", "run_dir", "env", "cwd"))
    ok(opdebug("plan", "--config", str(f / "plan.json"), "--output-dir", str(run_dir), env=env, cwd=cwd))
    (f / "more.json").write_text(json.dumps(minimal_plan_request("cli-run", ("compile-f32",))["cases"]))
    err = user_error(opdebug("plan", "--root", str(root), "--append", "--cases", str(f / "more.json"),
                             env=env, cwd=cwd))
    # the CLI user is told a flag to use, not a JSON field of the request
    assert "--output-dir" in err and "(root)" not in err


def test_text_from_evidence_is_printed_literally(workspace: dict) -> None:
    """Messages, signatures and ids are shown as they are, never read as markup."""
    f, run_dir, env, cwd = workspace["dir"], workspace["run_dir"], workspace["env"], workspace["cwd"]
    ok(opdebug("plan", "--config", str(f / "plan.json"), "--output-dir", str(run_dir), env=env, cwd=cwd))
    signature = "RuntimeError: [bold]boom[/bold] at [red]x[/red"
    crash = {"case_id": "graph-f32", "status": "crash",
             "error": {"type": "RuntimeError", "message": "[bold]boom[/bold]", "signature": signature}}
    (f / "crash.json").write_text(json.dumps(crash))
    ok(opdebug("record", "--output-dir", str(run_dir), "--result", str(f / "crash.json"), env=env, cwd=cwd))
    ok(opdebug("analyze", "--output-dir", str(run_dir), env=env, cwd=cwd))
    out = ok(opdebug("show", "--output-dir", str(run_dir), env=env, cwd=cwd))
    assert signature in out


def test_hosts_check(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    report = json.loads(ok(opdebug("hosts", "check", "local", "--json", env=subprocess_env, cwd=tmp_path)))
    import torch

    assert report["host"] == "local" and report["ok"] is True
    assert report["torch"] == torch.__version__ and report["missing"] == []
    out = ok(opdebug("hosts", "check", "local", env=subprocess_env, cwd=tmp_path))
    assert "torch" in out and "local" in out
    err = user_error(opdebug("hosts", "check", "no-such-host", env=subprocess_env, cwd=tmp_path))
    assert "no-such-host" in err and "local" in err


def test_run_executes_pending_cases_locally(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    root = Path(subprocess_env["OPDEBUG_EVIDENCE_ROOT"])
    case = {"inputs": [{"name": "input", "shape": [8, 8]}, {"name": "other", "shape": [8, 8]}], "seed": 1}
    request = {"config": {"run_id": "cli-exec", "operator": {"name": "add", "candidate": "torch.add",
                                                             "reference": "torch.add"}},
               "cases": [dict(case, id="add-a"), dict(case, id="add-b", seed=2)]}
    (tmp_path / "plan.json").write_text(json.dumps(request))
    run_dir = root / "cli-exec"
    env, cwd = subprocess_env, tmp_path
    ok(opdebug("plan", "--config", str(tmp_path / "plan.json"), "--output-dir", str(run_dir), env=env, cwd=cwd))

    out = ok(opdebug("run", "--output-dir", str(run_dir), "--case", "add-a", env=env, cwd=cwd))
    assert "[1/1] add-a: passed" in out and "recorded 1, pending 1" in out
    response = json.loads(ok(opdebug("run", "--output-dir", str(run_dir), "--json", env=env, cwd=cwd)))
    assert [(o["case_id"], o["state"], o["recorded"]) for o in response["outcomes"]] == [("add-b", "passed", True)]
    assert response["pending"] == []
    assert (run_dir / "raw-results" / "add-b").is_dir()
    again = json.loads(ok(opdebug("run", "--output-dir", str(run_dir), "--case", "add-a", "--json",
                                  env=env, cwd=cwd)))
    assert again["refused"] == ["add-a"] and again["outcomes"] == []
    err = user_error(opdebug("run", "--output-dir", str(run_dir), "--host", "nowhere", env=env, cwd=cwd))
    assert "nowhere" in err


def test_demo_runs_the_builtin_example(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    root = tmp_path / "demo-root"
    out = json.loads(ok(opdebug("demo", "--root", str(root), "--json", env=subprocess_env, cwd=tmp_path,
                                timeout=240)))
    assert out["run_id"].startswith("demo-")
    assert Path(out["report"]).is_file()
    analysis = out["analysis"]
    assert analysis["verdict"] == "diagnosed"
    # bfloat16 and nothing else explains the failure: the passing cases share every other axis value
    explaining = [(a["axis"], a["value"]) for a in analysis["failure_axes"] if a["explains_all"]]
    assert explaining == [("dtype", "bfloat16")], analysis["failure_axes"]
    # the verdict sentence names the bfloat16 failure and no bias: the passing float32 case's errors lean
    # as float32 arithmetic against a float64 truth does, and a lean is judged only against a same-dtype baseline
    assert "bfloat16" in analysis["summary"], analysis["summary"]
    assert analysis["consistency"]["bias"] == [] and "away from zero" not in analysis["summary"], analysis["summary"]
    assert analysis["status_counts"] == {"passed": 4, "numerical_mismatch": 1, "crash": 0, "unsupported": 0,
                                         "missing": 0}
    assert not out["run"]["pending"]
    # issue 25: with matplotlib there (the test extra has it), the demo draws its pictures and
    # report.md embeds each of them
    report = Path(out["report"]).read_text()
    assert "rms.dtype-bfloat16.out.error-map.png" in " ".join(out["pictures"]) and "No pictures" not in report
    for rel in out["pictures"]:
        assert (Path(out["run_dir"]) / rel).is_file() and f"]({rel})" in report, rel


def test_analyze_tests_stated_conditions_and_refuses_a_bad_one(workspace: dict) -> None:
    f, run_dir, env, cwd = workspace["dir"], workspace["run_dir"], workspace["env"], workspace["cwd"]
    ok(opdebug("plan", "--config", str(f / "plan.json"), "--output-dir", str(run_dir), env=env, cwd=cwd))
    for name in ("pass.json", "mismatch.json"):
        ok(opdebug("record", "--output-dir", str(run_dir), "--result", str(f / name), env=env, cwd=cwd))
    out = ok(opdebug("analyze", "--output-dir", str(run_dir), "--condition", "mode == graph",
                     "--condition", "x.shape[-1] % 8 == 0", env=env, cwd=cwd))
    assert "condition mode == graph: surviving - agrees with all 2 recorded cases" in out
    assert "condition x.shape[-1] % 8 == 0: refuted - refuted by 1 recorded case: eager-f32 passed" in out
    err = user_error(opdebug("analyze", "--output-dir", str(run_dir), "--condition", "mode = graph",
                             env=env, cwd=cwd))
    assert "conditions[0]" in err and "not valid syntax" in err
