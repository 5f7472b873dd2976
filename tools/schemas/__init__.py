"""Pydantic contracts shared by every tool, one module per kind:

- ``base``: the strict base model, slugs, finite numbers, vocabularies, the error formatter;
- ``case``: inputs, values, cases, captures' origins, stars;
- ``config``: the operator config (call, reference, judge, tolerances);
- ``result``: a case's result (comparisons, errors, evidence);
- ``analysis``: the analysis of a run (findings, next cases, verdict);
- ``consistency``: repeats, order, inputs written, batch invariance, bias;
- ``tool_io``: every tool's request and response.

Every model is strict about its shape: unknown fields are rejected, ids are
safe slugs, numbers that must be finite are finite.  The runner (which is
shipped to NPU hosts) never imports this package: it speaks plain JSON whose
shape these models define, and the server validates what comes back.
"""

from __future__ import annotations

from .analysis import (  # noqa: F401
    Analysis,
    BoundaryFeature,
    BridgeCase,
    CaseFailure,
    ConditionAnswer,
    Counterexample,
    FailureAxis,
    FailureGroup,
    Finding,
    HypothesisSpace,
    IdenticalPair,
    IntegrationDiff,
    MinimalPair,
    NextCase,
    OutputSummary,
    RefutedLead,
    Term,
    Validation,
)
from .base import (  # noqa: F401
    ASCEND_ONLY_DTYPES,
    DTYPE_FAMILIES,
    DTYPES,
    FLOAT_DTYPES,
    LAYOUTS,
    MAX_STORAGE_ELEMENTS,
    MODES,
    SCHEMA_VERSION,
    SLUG_PATTERN,
    STATUSES,
    Dotted,
    Dtype,
    ElementValue,
    FiniteFloat,
    FreeJson,
    Ident,
    Layout,
    Mode,
    ModuleFile,
    NonNegFinite,
    Slug,
    Status,
    Strict,
    check_slug,
    drop_titles,
    dtype_family,
    format_validation_error,
    now_utc,
)
from .case import (  # noqa: F401
    AttributeValue,
    CaptureSelection,
    Case,
    CaseOrigin,
    DtypeArg,
    GradOutput,
    InputSpec,
    OutputName,
    SpecialKind,
    SpecialValues,
    StarAxis,
    StarSpec,
    StarValue,
    StarVariation,
    TensorSpec,
    ValueSpec,
    check_grad_inputs,
    contiguous_strides,
    grad_output_captures,
    storage_elements,
)
from .config import CallSpec, OperatorConfig, OperatorSpec, OutputTolerance, Tolerance, ToleranceSpec  # noqa: F401
from .consistency import (  # noqa: F401
    AfterRun,
    AloneRun,
    BatchInvariance,
    BatchSlice,
    BiasWarning,
    ConsistencyEvidence,
    ConsistencyReport,
    Flag,
    FlaggedCase,
    InputWrite,
    RepeatRuns,
)
from .result import CaseResult, Comparison, Element, ErrorInfo, InputValues, PrecisionMetrics, ResultSource, Timing  # noqa: F401
from .tool_io import (  # noqa: F401
    PENDING_LIST_LIMIT,
    PLANNED_LIST_LIMIT,
    AnalyzeFailuresArgs,
    CaseOutcome,
    CheckHostArgs,
    EnvScriptCheck,
    FirstMismatch,
    HostCheck,
    NameArg,
    NarrowRequest,
    NarrowResponse,
    NarrowStep,
    PicturesArgs,
    PicturesResponse,
    PlannedCase,
    PlanRequest,
    PlanResponse,
    RecordResponse,
    RecordResultArgs,
    RegressionArgs,
    RegressionExport,
    ReproArgs,
    ReproExport,
    RunCaseRemoteArgs,
    RunId,
    RunIdArg,
    RunResponse,
    SchedulerCheck,
    SchedulerNode,
    ShrinkArgs,
    ShrinkResponse,
    ShrinkStep,
    VerifyArgs,
    VerifyResponse,
)
