"""A standalone reproducer for one recorded case: ``DIR/<case>.py``.

The script needs the Python standard library and torch (torch_npu when the
device is npu), nothing of this project: beside it go the runner's own
modules as ``opdebug_runner/`` (stdlib + torch, the package the transports
stage on a host), the run's user modules, and its captured tensors under
``captured/``.  It builds the inputs and runs candidate, reference and
comparison with the runner's code itself, so the input hashes and metrics
are the runner's by construction.  The case runs in a child process (a
segfaulting candidate is reported, not fatal); the script prints each
input's sha256 and each output's metrics next to the recorded ones, and
exits 1 while the failure is there, 0 once the case passes, 2 when the
harness (inputs, reference) failed.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from ..cases.axes import values_text
from ..errors import ToolError
from ..evidence import ARTIFACTS_DIR, RunStore, read_json, unknown_cases
from ..schemas import Case, CaseResult, OperatorConfig, ReproExport, grad_output_captures
from .common import GENERATED_MARK, copy_beside, copy_runner, write_text_new

METRICS = (
    "max_abs",
    "max_rel",
    "mean_abs",
    "rmse",
    "cosine",
    "mismatch_count",
    "mismatch_ratio",
    "nan_mismatch",
    "inf_mismatch",
    "worst_index",
    "first_mismatch_index",
)

# The body every exported script shares.  CONFIG, CASE, RECORDED and DEVICE are
# defined above it by the header; nothing below imports anything but the stdlib,
# torch (in the child) and the runner copied beside the script.
DRIVER = r'''
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def _child(answer_path, inputs_path, outputs_path, device_kind, candidate):
    import torch
    from opdebug_runner.devices import make_device
    from opdebug_runner.execute import environment, execute_case

    config = json.loads(json.dumps(CONFIG))
    if candidate:
        config["operator"]["candidate"] = candidate
    device = make_device(device_kind)

    metadata_box = [{}]

    def on_inputs(metadata):
        metadata_box[0] = metadata
        with open(inputs_path, "w") as fh:
            json.dump(metadata, fh)

    def on_phase(name, input_metadata=None, grad_outputs=None, outputs=None, **_):
        if input_metadata is not None:  # the inputs are built: kept in case the candidate kills us
            on_inputs(input_metadata)
        if grad_outputs is not None:  # the backward begins: its upstream gradients too
            on_inputs(dict(metadata_box[0], grad_outputs=grad_outputs))
        if outputs is not None and outputs_path:  # both outputs on CPU, before they are judged
            torch.save({"candidate": outputs[0], "reference": outputs[1]}, outputs_path)

    request = {"config": config, "case": CASE, "modules_dir": HERE,
               "captured_dir": os.path.join(HERE, "captured")}
    answer = execute_case(request, device, environment(device), on_phase=on_phase)
    if answer.get("input_metadata"):  # complete now (a backward's upstream gradients included)
        on_inputs(answer["input_metadata"])
    with open(answer_path, "w") as fh:
        json.dump(answer, fh, default=str)


def _fmt(value):
    return repr(value) if isinstance(value, float) else json.dumps(value)


def save_upstream(path):
    """The upstream gradients of the recorded backward, rebuilt by the runner's own
    input code from their recorded seed and value spec: torch.save({output: tensor}) to ``path``;
    each one's sha256 must equal the recorded one."""
    import torch
    from opdebug_runner.inputs import build_input

    tensors = {}
    for meta in RECORDED.get("grad_outputs") or []:
        spec = {"name": meta["name"], "shape": meta["shape"], "dtype": meta["dtype"], "values": meta["values"]}
        built = build_input(spec, meta["seed"], os.path.join(HERE, "captured"))
        if built.metadata["sha256"] != meta["sha256"]:
            raise SystemExit("upstream gradient of %s: sha256 %s, recorded %s" % (
                meta["output"], built.metadata["sha256"], meta["sha256"]))
        tensors[meta["output"]] = built.view().clone()
    torch.save(tensors, path)


def _crash_result(returncode, timed_out):
    if timed_out:
        return {"status": "crash", "comparisons": [], "error": {"signature": "timeout"}}
    sig = None
    if returncode is not None and returncode < 0:
        try:
            sig = signal.Signals(-returncode).name
        except ValueError:
            sig = "signal %d" % -returncode
    return {"status": "crash", "comparisons": [], "error": {"signature": sig or "exit %s" % returncode}}


def run_case(device_kind=None, candidate=None, outputs_path=None, timeout_s=None, quiet=False):
    """Run the case in a child process; returns (result dict, input metadata dict or None)."""
    device_kind = device_kind or DEVICE
    timeout_s = timeout_s or (CASE.get("timeout_s") or CONFIG.get("default_timeout_s") or 60.0) + 300.0
    with tempfile.TemporaryDirectory() as tmp:
        answer_path = os.path.join(tmp, "answer.json")
        inputs_path = os.path.join(tmp, "inputs.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", answer_path, inputs_path,
               outputs_path or "", "--device", device_kind]
        if candidate:
            cmd += ["--candidate", candidate]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
        timed_out = False
        try:
            proc = subprocess.run(cmd, env=env, timeout=timeout_s,
                                  stdout=subprocess.DEVNULL if quiet else None,
                                  stderr=subprocess.DEVNULL if quiet else None)
            returncode = proc.returncode
        except subprocess.TimeoutExpired:
            returncode, timed_out = None, True
        inputs = None
        if os.path.exists(inputs_path):
            with open(inputs_path) as fh:
                inputs = json.load(fh)
        if returncode == 0 and os.path.exists(answer_path):
            with open(answer_path) as fh:
                answer = json.load(fh)
            if answer.get("outcome") != "result":
                err = answer.get("harness_error") or {}
                return {"status": "harness_error", "comparisons": [],
                        "error": {"signature": "%s (%s): %s" % (err.get("where"), err.get("type"),
                                                                err.get("message"))}}, inputs
            return answer["result"], inputs
        return _crash_result(returncode, timed_out), inputs


def report(result, inputs, out=sys.stdout):
    """Print the input hashes and metrics next to the recorded ones; the exit code."""
    w = out.write
    w("case %s (%s, mode %s)\n" % (CASE["id"], CONFIG["operator"]["name"], CASE.get("mode", "eager")))
    recorded_inputs = RECORDED.get("input_sha256") or {}
    for meta in (inputs or {}).get("inputs", []):
        want = recorded_inputs.get(meta["name"])
        same = "" if want is None else ("  (same as recorded)" if want == meta["sha256"] else
                                        "  (DIFFERS from recorded %s)" % want)
        w("input %s sha256 %s%s\n" % (meta["name"], meta["sha256"], same))
    recorded_up = {m["output"]: m["sha256"] for m in RECORDED.get("grad_outputs") or []}
    for meta in (inputs or {}).get("grad_outputs") or []:
        want = recorded_up.get(meta["output"])
        same = "" if want is None else ("  (same as recorded)" if want == meta["sha256"] else
                                        "  (DIFFERS from recorded %s)" % want)
        w("upstream gradient of %s sha256 %s%s\n" % (meta["output"], meta["sha256"], same))
    recorded_cmp = {c["output"]: c for c in RECORDED.get("comparisons") or []}
    for comp in result.get("comparisons") or []:
        w("output %s: %s\n" % (comp["output"], "passed" if comp.get("passed") else "FAILED"))
        old = recorded_cmp.get(comp["output"], {})
        for key in METRICS:
            if key in comp:
                rec = ("   (recorded %s)" % _fmt(old[key])) if key in old else ""
                w("  %s = %s%s\n" % (key, _fmt(comp[key]), rec))
        if comp.get("contract_mismatch"):
            w("  contract mismatch: %s\n" % comp["contract_mismatch"])
    error = result.get("error") or {}
    if error:
        w("error signature: %s   (recorded %s)\n" % (error.get("signature"), RECORDED.get("signature")))
    status = result["status"]
    w("status: %s   (recorded %s)\n" % (status, RECORDED.get("status")))
    if status == "passed":
        w("PASSED: the failure is gone\n")
        return 0
    if status == "harness_error":
        w("HARNESS ERROR: the inputs or the reference failed; this says nothing about the operator\n")
        return 2
    w("FAILS: %s\n" % status)
    return 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--device", default=DEVICE, help="cpu, cuda or npu (default: the recorded one)")
    parser.add_argument("--candidate", help="another dotted candidate (e.g. the fixed operator, or the reference)")
    parser.add_argument("--save-outputs", metavar="FILE", help="torch.save candidate and reference outputs here")
    parser.add_argument("--timeout", type=float, help="seconds before the child is called hung")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--save-upstream", metavar="FILE",
                        help="torch.save the recorded backward's upstream gradients here, and stop")
    parser.add_argument("--child", nargs=3, metavar=("ANSWER", "INPUTS", "OUTPUTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.save_upstream:
        save_upstream(args.save_upstream)
        return 0
    if args.child:
        _child(args.child[0], args.child[1], args.child[2] or None, args.device, args.candidate)
        return 0
    result, inputs = run_case(args.device, args.candidate, args.save_outputs and os.path.abspath(args.save_outputs),
                              args.timeout)
    if args.json:
        print(json.dumps({"result": result, "input_metadata": inputs}, default=str))
        return 0 if result["status"] == "passed" else (2 if result["status"] == "harness_error" else 1)
    return report(result, inputs)


if __name__ == "__main__":
    sys.exit(main())
'''


def _pyliteral(obj) -> str:
    """A JSON document as a Python expression (json.loads of a raw string)."""
    text = json.dumps(obj, indent=1, sort_keys=True)
    if "'''" in text:
        text = text.replace("'''", "\\u0027\\u0027\\u0027")
    return f"json.loads(r'''{text}''')"


def device_kind(result: CaseResult | None) -> str:
    env = result.environment if result else {}
    kind = env.get("device_kind") or str(env.get("device") or "cpu").split(":")[0]
    return kind if kind in ("cpu", "cuda", "npu") else "cpu"


def recorded_summary(result: CaseResult | None, input_meta: dict | None) -> dict:
    out: dict = {
        "status": result.status if result else None,
        "signature": (result.error.signature if result and result.error else None),
    }
    out["comparisons"] = [
        {k: v for k, v in c.model_dump(mode="json").items() if k == "output" or k in METRICS}
        for c in (result.comparisons if result else [])
    ]
    out["input_sha256"] = {i["name"]: i["sha256"] for i in (input_meta or {}).get("inputs", []) if "sha256" in i}
    # the backward's upstream gradients: how each was made, and its sha256
    out["grad_outputs"] = [
        {k: m.get(k) for k in ("output", "name", "shape", "dtype", "values", "seed", "sha256")}
        for m in (input_meta or {}).get("grad_outputs") or []
        if "sha256" in m
    ]
    return out


def tensor_text(spec) -> str:
    """``<float16 [4, 8], strides [1, 4], normal(mean=90.0,std=1.0), specials nan x3, -inf at [[0, 1]]>``:
    everything the runner builds the tensor from."""
    layout = f", format {spec.layout}" if spec.layout != "ND" else ""
    strides = "" if spec.is_contiguous() else f", strides {spec.strides}"
    offset = f", storage_offset {spec.storage_offset}" if spec.storage_offset else ""
    values = spec.values.model_copy(update={"specials": []})
    specials = ", ".join(
        f"{s.value} x{s.count}" if s.count is not None else f"{s.value} at {s.positions}" for s in spec.values.specials
    )
    return (
        f"<{spec.dtype} {spec.shape}{strides}{offset}{layout}, {values_text(values)}"
        + (f", specials {specials}" if specials else "")
        + ">"
    )


def input_text(spec) -> str:
    if spec.none:
        return "None"
    if spec.tensors is not None:
        return "[" + ", ".join(tensor_text(m) for m in spec.tensors) + "]"
    return tensor_text(spec)


def call_text(config: OperatorConfig, case: Case) -> str:
    """The call as the runner makes it: positional arguments in ``operator.call.order`` when the call
    is positional, the rest as keywords (callables.call_arguments)."""
    named = {spec.name: input_text(spec) for spec in case.inputs}
    named.update({k: repr(v) for k, v in case.attributes.items()})
    parts = []
    if config.operator.call.style == "positional":
        parts = [named.pop(name) for name in config.operator.call.order or [] if name in named]
    parts += [f"{k}={v}" for k, v in named.items()]
    return f"{config.operator.candidate}({', '.join(parts)})"


def backward_lines(config: OperatorConfig, case: Case) -> list[str]:
    """What the reproducer's backward does, or nothing for a forward-only case."""
    names = case.grad_inputs if case.grad_inputs is not None else config.grad_inputs
    if not names:
        return []
    spec = case.grad_output if case.grad_output is not None else config.grad_output
    how = (
        spec
        if isinstance(spec, str)
        else json.dumps(
            spec.model_dump(mode="json", exclude_defaults=True)
            if hasattr(spec, "model_dump")
            else {k: v.model_dump(mode="json", exclude_defaults=True) for k, v in spec.items()}
        )
        if spec
        else "normal"
    )
    return [
        f"Backward: the gradients of {', '.join(names)} (outputs grad.<input>), candidate on the device and "
        f"reference by CPU autograd, from the same upstream gradient ({how}; built from the case seed, its "
        "sha256 printed beside the recorded one; the bytes in <case>.upstream.pt)"
    ]


def header(store: RunStore, config: OperatorConfig, case: Case, result: CaseResult | None, kind: str, what: str) -> str:
    env = result.environment if result else {}
    cann = config.environment.get("cann") or config.environment.get("CANN") or env.get("cann") or "not recorded"
    lines = [
        f"{what} for case {case.id!r} of run {store.run_id!r} ({GENERATED_MARK}).",
        "",
        f"Operator: {config.operator.name}",
        f"Call ({case.mode}): {call_text(config, case)}",
        f"Reference on CPU in {config.operator.reference_dtype}: {config.operator.reference}",
        *backward_lines(config, case),
        f"Recorded: {result.status if result else 'no result'}"
        + (f" ({result.error.signature})" if result and result.error else "")
        + "".join(
            f"; {c.output}: max_abs={c.max_abs!r}, mismatch_ratio={c.mismatch_ratio!r}"
            for c in (result.comparisons if result else [])
            if not c.passed
        ),
        "",
        "Environment of the recorded result:",
        f"  torch {env.get('torch', 'not recorded')}, torch_npu {env.get('torch_npu') or 'none'}, CANN {cann}",
        f"  device {env.get('device', kind)} ({env.get('device_name', kind)}), host {env.get('hostname', '?')}, "
        f"python {env.get('python', '?')}, torch threads {env.get('num_threads', '?')}",
        "Produced by:",
        f"  opdebug run --output-dir {shlex.quote(str(store.dir))} --case {case.id}"
        + (f" --host {result.source.host}" if result and result.source.host else ""),
    ]
    if config.command:
        lines.append(f"  model command: {' '.join(config.command.split())[:300]}")
    lines += [
        "",
        "Needs only the Python standard library and torch" + (" and torch_npu (device npu)." if kind == "npu" else "."),
        "Beside it: opdebug_runner/ (the runner's input building, call and comparison code),"
        + (f" the user modules {config.operator.modules}," if config.operator.modules else "")
        + " captured/ (captured tensors, if any).",
        "Exit status: 1 while the failure is there, 0 once the case passes, 2 if the harness failed.",
        "Try a fixed operator: --candidate package.module.fixed_op",
    ]
    return "\n".join(lines)


def _load(store: RunStore, case_id: str) -> tuple[OperatorConfig, Case, CaseResult | None, dict | None]:
    config = store.read_config()
    cases = {c.id: c for c in store.read_cases()}
    if case_id not in cases:
        raise unknown_cases(store.run_id, [case_id], cases)
    result = store.read_results().get(case_id)
    meta_path = store.input_meta_path(case_id)
    meta = read_json(meta_path) if meta_path.is_file() else None
    return config, cases[case_id], result, meta


def copy_support(store: RunStore, config: OperatorConfig, cases: list[Case], out_dir: Path) -> list[str]:
    """Runner, user modules and the cases' captured tensors beside the artefact."""
    files = [str(copy_runner(out_dir))]
    for name in config.operator.modules:
        src = store.path(ARTIFACTS_DIR, "modules", name)
        copy_beside(src, out_dir / name, f"user module {name}")
        files.append(str(out_dir / name))
    for case in cases:
        refs = [spec.values.captured for spec in case.inputs if spec.values.kind == "captured" and spec.values.captured]
        refs += grad_output_captures(case.grad_output if case.grad_output is not None else config.grad_output)
        for ref in refs:  # captured inputs, and a captured upstream gradient
            src = store.path(ARTIFACTS_DIR, "captured", ref)
            copy_beside(src, out_dir / "captured" / ref, f"captured tensor {src.name}")
            files.append(str(out_dir / "captured" / ref))
    return files


def script_for(
    store: RunStore, config: OperatorConfig, case: Case, result: CaseResult | None, meta: dict | None
) -> str:
    kind = device_kind(result)
    doc = header(store, config, case, result, kind, "Standalone reproducer")
    body = [
        "#!/usr/bin/env python3",
        '"""' + doc.replace('"""', "'''") + '\n"""',
        "import json",
        "",
        f"CONFIG = {_pyliteral(config.model_dump(mode='json'))}",
        f"CASE = {_pyliteral(case.model_dump(mode='json'))}",
        f"RECORDED = {_pyliteral(recorded_summary(result, meta))}",
        f"DEVICE = {kind!r}",
        f"METRICS = {METRICS!r}",
        DRIVER,
    ]
    return "\n".join(body)


def _upstream_file(script: Path, target: Path, meta: dict | None) -> list[str]:
    """The recorded backward's upstream gradients as bytes beside the script (``<case>.upstream.pt``),
    written by the script itself in a child process (torch stays out of this one); none when the
    case has no backward or torch is not installed here (``--save-upstream`` writes it on the host)."""
    import importlib.util
    import subprocess
    import sys

    if not (meta or {}).get("grad_outputs") or importlib.util.find_spec("torch") is None:
        return []
    tmp = target.with_name(f".{target.name}.tmp")
    proc = subprocess.run(
        [sys.executable, str(script), "--save-upstream", str(tmp)], capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise ToolError(
            f"the upstream gradients of {script.stem!r} could not be rebuilt from their recorded seed: "
            f"{(proc.stderr or proc.stdout)[-500:]}",
            code="internal_error",
        )
    if target.exists() and target.read_bytes() != tmp.read_bytes():
        tmp.unlink()
        raise ToolError(f"{target} exists with other content; export into another directory", code="artifact_exists")
    os.replace(tmp, target)
    return [str(target)]


def export_repro(run_id: str, case_id: str, out_dir: str | Path, *, root=None) -> ReproExport:
    """Write ``out_dir/<case>.py`` and what it needs beside it."""
    store = RunStore(root, run_id)
    store.require()
    config, case, result, meta = _load(store, case_id)
    out = Path(out_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    files = copy_support(store, config, [case], out)
    script = out / f"{case.id}.py"
    write_text_new(script, script_for(store, config, case, result, meta))
    script.chmod(0o755)
    files += _upstream_file(script, out / f"{case.id}.upstream.pt", meta)
    return ReproExport(
        run_id=store.run_id,
        case_id=case.id,
        script=str(script),
        files=[str(script), *files],
        device=device_kind(result),
        recorded_status=result.status if result else "pending",
        command=f"python {shlex.quote(str(script))}",
    )
