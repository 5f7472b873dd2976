"""Response models of the artefact tools (strict, like tools/schemas.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ..schemas import Strict


class ReproExport(Strict):
    run_id: str = Field(description="The run the reproducer was exported from.")
    case_id: str = Field(description="The case it reproduces.")
    script: str = Field(description="Path of the standalone script (stdlib + torch; torch_npu on npu).")
    files: list[str] = Field(description="Every file written or reused beside the script.")
    device: str = Field(description="Device kind the script runs the candidate on by default.")
    recorded_status: str = Field(description="Status of the recorded result the script reproduces.")
    command: str = Field(description="How to run it.")


class RegressionExport(Strict):
    run_id: str = Field(description="The run the test was exported from.")
    test_file: str = Field(description="Path of the pytest file for the operator's repository.")
    failing_cases: list[str] = Field(description="Failing cases the test expects to pass once fixed.")
    neighbour_cases: list[str] = Field(description="Passing neighbours included to guard against regressions.")
    files: list[str] = Field(description="Every file written or reused beside the test.")
    command: str = Field(description="How to run it.")


class ShrinkStep(Strict):
    case_id: str = Field(description="The planned and recorded case of this step.")
    change: str = Field(description="What this step changed from the smallest failing case so far.")
    numel: int = Field(description="Total input elements of the step's case.")
    state: str = Field(description="Its recorded status (or pending).")
    same_failure: bool = Field(description="Whether it fails the same way as the start case.")


class ShrinkResponse(Strict):
    run_id: str = Field(description="The run the steps were planned and recorded in.")
    start_case: str = Field(description="The failing case shrinking started from.")
    smallest_case: str = Field(description="The smallest case found that fails the same way.")
    start_numel: int = Field(description="Total input elements of the start case.")
    smallest_numel: int = Field(description="Total input elements of the smallest case.")
    smallest_shapes: dict[str, list[int]] = Field(description="Input shapes of the smallest case.")
    cases_run: int = Field(description="Cases planned and run by this shrink.")
    seconds: float = Field(description="Wall time the shrink took.")
    stopped: Literal["done", "case_budget", "time_budget"] = Field(description="Why shrinking stopped.")
    signature: str = Field(description="The failure kept: status and signature or failed outputs.")
    steps: list[ShrinkStep] = Field(description="Every case tried, in order.")


class PicturesResponse(Strict):
    run_id: str = Field(description="The run the pictures are of.")
    pictures: list[str] = Field(description="PNG paths relative to the run directory.")
    skipped: list[str] = Field(description="Failing outputs without a picture, with the reason.")
    available: bool = Field(description="False when matplotlib is missing (pip install '.[pictures]').")
    outputs_from: dict[str, str] = Field(default_factory=dict,
                                         description="Case id -> where its outputs came from (kept, saved, recomputed).")


class VerifyResponse(Strict):
    run_id: str = Field(description="The run verified.")
    verify_index: int = Field(description="n of artifacts/verify/<n>.json, the evidence written.")
    rerun: dict[str, str] = Field(description="Failing case id -> the new case id planned for it.")
    states: dict[str, str] = Field(description="New case id -> its recorded status (or pending).")
    still_failing: list[str] = Field(description="Original case ids whose rerun did not pass.")
    model_command: dict[str, Any] | None = Field(description="The model command's argv, host, exit status and "
                                                             "output tail; None when the config names none.")
    conclusion: str = Field(description="'fixed in isolation', 'fixed in the model', or what still fails.")
    evidence: str = Field(description="Path of the verify evidence file relative to the run directory.")
