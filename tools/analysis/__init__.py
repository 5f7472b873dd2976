"""Analysis of a run's evidence: structured axes (axes.py), findings with
minimal pairs (findings.py), next cases that narrow (suggestions.py), the
per-case reasons and verdict text (verdict.py), and build_analysis (build.py)."""

from .build import EXTRA_STAGES, build_analysis, diagnose

__all__ = ["EXTRA_STAGES", "build_analysis", "diagnose"]
