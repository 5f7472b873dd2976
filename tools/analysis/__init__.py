"""Analysis of a run's evidence: findings with minimal pairs (findings.py),
next cases that narrow (suggestions.py), per-case reasons and failure axes
(reasons.py), failing groups and several causes (causes.py), refuted leads
(leads.py), the run's verdict and its summary (verdict.py), captured calls
against planned cases (integration_diff.py), and build_analysis (build.py),
which calls each stage in turn.  Axes come from the case library (tools/cases)."""

from .build import EXTRA_STAGES, build_analysis, diagnose

__all__ = ["EXTRA_STAGES", "build_analysis", "diagnose"]
