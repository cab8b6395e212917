"""Experiment specs to evidence: candidates, stages, records."""

from .spec import METRICS, Spec, load_spec
from .sweep import Sweep, SweepResult, run_sweep

__all__ = ["METRICS", "Spec", "load_spec", "Sweep", "SweepResult", "run_sweep"]
