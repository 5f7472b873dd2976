"""Analysis of a run's evidence, read top to bottom: the space (hypotheses.py, space.py), findings with
minimal pairs (findings.py, pairs.py), one settlement (settlement.py: the only place exactness is decided),
then proposals - strategies that each return Proposals (proposal.py): narrowing.py, splitting.py,
crossing.py, explore.py, and the probes built to break an exact lead (requirements.py, sources.py,
probes.py), ranked by disagreement (disagreement.py), ordered as next cases (suggestions.py).  Beside
them: per-case reasons and failure axes (reasons.py), failing groups and several causes (causes.py),
refuted leads (leads.py), the run's verdict and its summary (verdict.py), captured calls against planned
cases (integration_diff.py), and build_analysis (build.py), which calls each stage in turn.  Axes come
from the case library (tools/cases)."""

from .build import EXTRA_STAGES, build_analysis, diagnose

__all__ = ["EXTRA_STAGES", "build_analysis", "diagnose"]
