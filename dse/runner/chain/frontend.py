"""The frontend stage: the recipe's frontend steps, the graph costed and the emulation workloads."""

from __future__ import annotations

from typing import Sequence

from ..stages import Workload, frontend_workload
from .stage import Stage


def frontend(recipe: str, params: dict, emulated: Sequence[str | None] = ()) -> Workload:
    """`emulated`: the quantization granularities to prepare emulation workloads for (none
    without the emulator stage). Other granularities' graphs are made on first use, by the
    workload itself, with the same steps."""
    return frontend_workload(recipe, params, emulated)


FRONTEND = Stage(
    "frontend", frontend,
    "the recipe's frontend steps: the graph the analytical model costs and, with the emulator stage, "
    "the emulation workload (inputs, references) per quantization granularity")
