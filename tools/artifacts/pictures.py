"""Pictures of where the error sits (matplotlib: the optional extra ``[pictures]``).

Per failing output of a numerical-mismatch case:

- ``<case>.<output>.error-map.png``: |candidate - reference| over the
  tolerance bound (atol + rtol*|reference|) on a log scale, the output folded
  to 2-D (leading dimensions x last dimension, max-pooled to at most 512 x 512
  cells), the worst and the first mismatch marked;
- ``<case>.<output>.rel-error.png``: a histogram of the relative error
  |candidate - reference| / |reference| with the rtol line.

For the run, ``run-cases.png``: every case by each varying axis value,
coloured by status, with the axis values only failing cases have marked.

The full outputs are not kept by the runner: a case's outputs are read from
``artifacts/outputs/<case>.pt`` (``torch.save({"candidate": ..., "reference":
...})``, e.g. written by the standalone reproducer's ``--save-outputs`` on the
device host) or, when the case ran on a cpu device, recomputed here by
running its standalone reproducer (repro.py) in a child process.  PNGs go to
``artifacts/pictures/`` in the run directory.  torch and matplotlib are
imported only when pictures are drawn.
"""

from __future__ import annotations

import importlib.util
import io
import math
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cases.axes import case_axes
from ..cases.ids import fit_id
from ..errors import ToolError
from ..evidence import ARTIFACTS_DIR, RunStore, file_sha256, unknown_cases
from ..schemas import CaseResult, Comparison, PicturesResponse
from .records import PICTURES_DIR, available, install_hint
from .repro import device_kind, export_repro

MAX_CELLS = 512
STATUS_COLOURS = {
    "passed": "#2e7d32",
    "numerical_mismatch": "#c62828",
    "crash": "#6a1b9a",
    "unsupported": "#9e9e9e",
    "pending": "#f9a825",
}


def _name(*parts: str) -> str:
    """A file name stem (a slug of at most 92 characters, so '.png' fits)."""
    text = fit_id(".".join(parts))
    if len(text) > 92:
        import hashlib

        text = text[:83].rstrip("-.") + "-" + hashlib.sha1(text.encode()).hexdigest()[:8]
    return text


def _outputs_of(
    store: RunStore, case_id: str, result: CaseResult, timeout_s: float
) -> tuple[tuple[Any, Any] | None, str | None, str | None]:
    """((candidate, reference) outputs, None, where from) of a case, or (None, why, None)."""
    import torch

    kept = store.raw_dir(case_id) / "outputs.pt"  # run_case_remote(keep_outputs=True)
    saved = store.path(ARTIFACTS_DIR, "outputs", f"{case_id}.pt")  # a reproducer's --save-outputs
    for path, source in ((kept, "kept by the run (raw-results)"), (saved, "saved by its reproducer")):
        if path.is_file():
            data = torch.load(path, map_location="cpu", weights_only=True)
            return (data["candidate"], data["reference"]), None, source
    if device_kind(result) != "cpu":
        return (
            None,
            (
                f"ran on {device_kind(result)} and its outputs were not kept: run it again with keep_outputs "
                f"(opdebug run --keep-outputs), or run its reproducer there with --save-outputs FILE and give "
                f"FILE as outputs (it goes to {ARTIFACTS_DIR}/outputs/{case_id}.pt)"
            ),
            None,
        )
    with tempfile.TemporaryDirectory(prefix="opdebug-pictures-") as tmp:
        script = export_repro(store.run_id, case_id, tmp, root=store.root).script
        out = Path(tmp) / "outputs.pt"
        proc = subprocess.run(
            [sys.executable, script, "--save-outputs", str(out), "--json"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if not out.is_file():
            return None, f"recomputing it gave no outputs (exit {proc.returncode}): {proc.stderr[-300:]}", None
        data = torch.load(out, map_location="cpu", weights_only=True)
    return (data["candidate"], data["reference"]), None, "recomputed here through its reproducer (cpu)"


def _pick(out, name: str, index: int):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        return out.get(name)
    if isinstance(out, (list, tuple)):
        tensors = [o for o in out if isinstance(o, torch.Tensor)]
        return tensors[index] if index < len(tensors) else None
    return None


def _fold(shape: list[int], index: list[int] | None) -> tuple[int, int] | None:
    if index is None:
        return None
    if not shape:
        return (0, 0)
    row = 0
    for size, i in zip(shape[:-1], index[:-1], strict=True):
        row = row * size + i
    return (row, index[-1])


def error_map_png(cand, ref, comp: Comparison, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    c = cand.detach().to(torch.float64 if ref.dtype == torch.float64 else torch.float32)
    r = ref.detach().to(c.dtype)
    shape = list(r.shape)
    atol, rtol = comp.atol or 0.0, comp.rtol or 0.0
    err = (c - r).abs() / (atol + rtol * r.abs()).clamp_min(1e-30)
    err = torch.nan_to_num(err, nan=1e30, posinf=1e30)
    rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
    cols = shape[-1] if shape else 1
    grid = err.reshape(rows, cols).float()
    fr, fc = max(1, math.ceil(rows / MAX_CELLS)), max(1, math.ceil(cols / MAX_CELLS))
    if fr > 1 or fc > 1:
        grid = torch.nn.functional.max_pool2d(grid[None, None], (fr, fc), ceil_mode=True)[0, 0]
    img = torch.log10(grid.clamp_min(1e-6)).clamp(-6, 6)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    im = ax.imshow(
        img.numpy() if hasattr(img, "numpy") else img.tolist(),
        aspect="auto",
        cmap="RdBu_r",
        vmin=-3,
        vmax=3,
        interpolation="nearest",
        extent=(0, cols, rows, 0),
    )
    fig.colorbar(im, ax=ax, label="log10(|cand-ref| / (atol + rtol|ref|));  > 0 is outside")
    for idx, marker, colour, label in (
        (comp.worst_index, "x", "cyan", "worst"),
        (comp.first_mismatch_index, "o", "lime", "first mismatch"),
    ):
        at = _fold(shape, idx)
        if at is not None:
            style: dict[str, Any] = {"facecolors": "none", "edgecolors": colour} if marker == "o" else {"color": colour}
            ax.scatter([at[1] + 0.5], [at[0] + 0.5], marker=marker, s=90, linewidths=2, label=f"{label} {idx}", **style)
    ax.set_xlabel(f"last dimension ({cols}" + (f"; max of {fc} per cell)" if fc > 1 else ")"))
    ax.set_ylabel(f"leading dims folded ({rows}" + (f"; max of {fr} per cell)" if fr > 1 else ")"))
    ax.set_title(
        f"{title}\n{comp.mismatch_count} of {comp.numel} outside atol {atol:g} + rtol {rtol:g}|ref| "
        f"({comp.mismatch_ratio:.2%}), max_abs {comp.max_abs}",
        fontsize=9,
    )
    if comp.worst_index is not None or comp.first_mismatch_index is not None:
        ax.legend(loc="upper right", fontsize=8)
    return _png(fig)


def histogram_png(cand, ref, comp: Comparison, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    c = cand.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    rel = ((c - r).abs() / r.abs().clamp_min(1e-12)).flatten()
    rel = rel[torch.isfinite(rel)]
    values = torch.log10(rel.clamp_min(1e-12)).float()
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    if values.numel():
        ax.hist(
            values.tolist() if values.numel() <= 200_000 else values[:: values.numel() // 200_000].tolist(),
            bins=80,
            color="#546e7a",
        )
    if comp.rtol:
        ax.axvline(math.log10(comp.rtol), color="#c62828", linestyle="--", label=f"rtol {comp.rtol:g}")
        ax.legend(fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("log10 relative error |cand-ref| / |ref|  (exact = -12)")
    ax.set_ylabel("elements")
    ax.set_title(f"{title}\nmax_rel {comp.max_rel}, cosine {comp.cosine}", fontsize=9)
    return _png(fig)


def run_png(store: RunStore) -> bytes | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = store.read_cases()
    results = store.read_results()
    if not cases:
        return None
    axes = {c.id: case_axes(c) for c in cases}
    keys = [k for k in dict.fromkeys(k for a in axes.values() for k in a) if len({a.get(k) for a in axes.values()}) > 1]
    if not keys:
        keys = ["mode"]
    keys = keys[:12]
    state = {c.id: results[c.id].status if c.id in results else "pending" for c in cases}
    fig, subplots = plt.subplots(len(keys), 1, figsize=(9, 1.2 + 1.1 * len(keys)), dpi=100, squeeze=False)
    for ax, key in zip(subplots[:, 0], keys, strict=True):
        values = sorted({axes[c][key] for c in axes if key in axes[c]}, key=_sort_key)
        failing_only = {
            v
            for v in values
            if all(state[c] in ("numerical_mismatch", "crash") for c in axes if axes[c].get(key) == v)
            and any(state[c] in ("numerical_mismatch", "crash") for c in axes)
        }
        passing_somewhere = any(state[c] == "passed" for c in axes)
        stack: dict[str, int] = {}
        for c in axes:
            v = axes[c].get(key)
            if v is None:
                continue
            x = values.index(v)
            y = stack.get(v, 0)
            stack[v] = y + 1
            ax.scatter([x], [y], color=STATUS_COLOURS.get(state[c], "black"), s=40)
        for v in failing_only if passing_somewhere else ():
            x = values.index(v)
            ax.axvspan(x - 0.45, x + 0.45, color="#ffcdd2", zorder=0)
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels([v if len(v) <= 24 else v[:21] + "..." for v in values], fontsize=7)
        ax.set_xlim(-0.6, len(values) - 0.4)
        ax.set_ylim(-0.7, max(stack.values(), default=1) - 0.3)
        ax.set_yticks([])
        ax.set_ylabel(key, rotation=0, ha="right", fontsize=8)
    handles = [
        plt.Line2D([], [], marker="o", linestyle="", color=col, label=s)
        for s, col in STATUS_COLOURS.items()
        if s in state.values()
    ]
    fig.legend(handles=handles, loc="lower center", ncol=max(len(handles), 1), fontsize=8)
    fig.suptitle(
        f"run {store.run_id}: every case by axis value (shaded: values only failing cases have)", fontsize=9, y=0.995
    )
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    return _png(fig)


def _sort_key(value: str):
    try:
        return (0, float(value.split("x")[0]) if "x" in value else float(value), value)
    except ValueError:
        return (1, 0.0, value)


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def default_cases(store: RunStore, results: dict[str, CaseResult]) -> list[str]:
    """Every mismatching case, except the intermediate steps of a shrink (only
    the smallest failing step of each shrink) and verify reruns."""
    import math as _math

    cases = store.read_cases()
    failing = [c for c in cases if c.id in results and results[c.id].status == "numerical_mismatch"]
    smallest: dict[str, tuple[int, str]] = {}
    wanted = []
    for case in failing:
        if ".verify-" in case.id:
            continue
        if ".shrink-" in case.id:
            start = case.id.split(".shrink-")[0]
            numel = sum(_math.prod(m.shape) for i in case.inputs for m in i.members())
            if start not in smallest or numel < smallest[start][0]:
                smallest[start] = (numel, case.id)
            continue
        wanted.append(case.id)
    keep = {cid for _, cid in smallest.values()}
    return [c.id for c in failing if c.id in wanted or c.id in keep]


def store_outputs(store: RunStore, outputs: dict[str, str]) -> None:
    """Copy saved outputs files (the reproducer's --save-outputs on the device
    host) to artifacts/outputs/<case>.pt; other bytes already there are refused."""
    planned = {c.id for c in store.read_cases()}
    for case_id, given in outputs.items():
        if case_id not in planned:
            raise unknown_cases(store.run_id, [case_id], planned)
        src = Path(given).expanduser()
        if not src.is_file():
            raise ToolError(f"outputs.{case_id}: {given!r} is not a readable file", code="bad_file")
        target = store.path(ARTIFACTS_DIR, "outputs", f"{case_id}.pt")
        if target.is_file():
            if file_sha256(target) != file_sha256(src):
                raise ToolError(
                    f"outputs of case {case_id!r} are already stored with other content; evidence is never overwritten",
                    code="artifact_exists",
                )
            continue
        store.write_artifact(f"outputs/{case_id}.pt", src.read_bytes())


def render_pictures(
    run_id: str,
    *,
    root=None,
    case_ids: list[str] | None = None,
    outputs: dict[str, str] | None = None,
    timeout_s: float = 600.0,
    progress: Callable[[str], None] | None = None,
) -> PicturesResponse:
    """Draw the pictures of a run's failing outputs (``case_ids``, default
    :func:`default_cases`) and of its cases; ``outputs`` (case -> file saved by
    the reproducer's --save-outputs) are stored first.  ``progress(text)`` as each
    step begins (a case's outputs recomputed through its reproducer take seconds)."""
    say = progress or (lambda _text: None)
    store = RunStore(root, run_id)
    store.require()
    if not available():
        return PicturesResponse(
            run_id=store.run_id, pictures=[], skipped=[f"matplotlib is missing: {install_hint()}"], available=False
        )
    if importlib.util.find_spec("torch") is None:
        return PicturesResponse(
            run_id=store.run_id,
            pictures=[],
            available=False,
            skipped=[
                "torch is not installed where pictures are drawn (pip install 'ascend-operator-debug[runner,pictures]')"
            ],
        )
    if outputs:
        store_outputs(store, outputs)
    results = store.read_results()
    order = [c.id for c in store.read_cases()]
    if case_ids:
        unknown = [c for c in case_ids if c not in order]
        if unknown:
            raise unknown_cases(run_id, unknown, order)
        wanted = case_ids
    else:
        wanted = default_cases(store, results)
    pictures: list[str] = []
    skipped: list[str] = []
    outputs_from: dict[str, str] = {}
    for case_id in wanted:
        result = results.get(case_id)
        if result is None or result.status != "numerical_mismatch":
            skipped.append(f"{case_id}: {result.status if result else 'not recorded'} - no outputs to draw")
            continue
        failed = [(i, c) for i, c in enumerate(result.comparisons) if not c.passed]
        if all(c.contract_mismatch for _, c in failed):
            skipped.append(f"{case_id}: contract mismatch only ({failed[0][1].contract_mismatch})")
            continue
        say(f"{case_id}: its outputs ({len(pictures)} picture(s) drawn so far)")
        pair, why, source = _outputs_of(store, case_id, result, timeout_s)
        if pair is None or source is None:
            skipped.append(f"{case_id}: {why}")
            continue
        outputs_from[case_id] = source
        for index, comp in failed:
            cand, ref = _pick(pair[0], comp.output, index), _pick(pair[1], comp.output, index)
            if cand is None or ref is None or list(cand.shape) != list(ref.shape):
                skipped.append(f"{case_id}/{comp.output}: the outputs cannot be drawn side by side")
                continue
            title = f"{store.run_id} / {case_id} / {comp.output}"
            for kind, draw in (("error-map", error_map_png), ("rel-error", histogram_png)):
                name = _name(case_id, comp.output, kind) + ".png"
                store.write_artifact(f"{PICTURES_DIR}/{name}", draw(cand, ref, comp, title))
                pictures.append(f"{ARTIFACTS_DIR}/{PICTURES_DIR}/{name}")
    say("the run's cases")
    png = run_png(store)
    if png is not None:
        store.write_artifact(f"{PICTURES_DIR}/run-cases.png", png)
        pictures.append(f"{ARTIFACTS_DIR}/{PICTURES_DIR}/run-cases.png")
    return PicturesResponse(
        run_id=store.run_id, pictures=pictures, skipped=skipped, available=True, outputs_from=outputs_from
    )
