"""Experiment specs to evidence: candidates, stages, records.

The names below are imported on first use (PEP 562), so `dse.runner.metrics` can be read
without importing the spec's recipes, torch and the emulator.
"""

import importlib

_WHERE = {"METRICS": "metrics", "Spec": "spec", "SpecModel": "spec", "load_spec": "spec", "build_spec": "spec",
          "Sweep": "sweep", "SweepResult": "result", "run_sweep": "launch"}

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
