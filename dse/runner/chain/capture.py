"""The capture stage: the recipe's PyTorch module traced to a graph."""

from __future__ import annotations

from ...frontend import run_pipeline
from ...workload.graph import Graph
from .stage import Stage


def capture(recipe: str, params: dict, check: bool = False) -> Graph:
    """The recipe's captured graph: the first stage of its frontend pipeline (the recipe's
    own steps; the analytical stage's very pipeline, and with `check` the emulator stage's
    checked one), so a sweep captures once, and not at all when the graph cache
    (dse.workload.cache) has it."""
    return run_pipeline(recipe, params, check=check).graphs[0]


CAPTURE = Stage(
    "capture", capture,
    "the recipe's PyTorch module traced to a graph (the baseline's source-derived counts come from it)")
