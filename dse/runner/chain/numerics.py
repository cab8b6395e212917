"""The numerics stage: the emulated outputs judged against PyTorch's."""

from __future__ import annotations

from ..emulation import Emulated, judge_numerics
from ..stages import Evidence
from .stage import Stage


def numerics(emulated: Emulated) -> Evidence:
    # The comparison itself runs inside the emulation (dse.numerics.run.emulate_graph compares
    # the emulated memory with the reference right after the run); this stage records its
    # verdict and judges the run.
    return judge_numerics(emulated)


NUMERICS = Stage(
    "numerics", numerics,
    "the emulated outputs against PyTorch's: a run whose results differ fails")
