"""The emulator stage: one candidate lowered and emulated."""

from __future__ import annotations

from ...mapping import Candidate
from ..emulation import Emulated, EmulationWorkload, emulate
from .stage import Stage


def emulator(work: EmulationWorkload, cand: Candidate) -> Emulated:
    return emulate(work, cand)


EMULATOR = Stage(
    "emulator", emulator,
    "one candidate lowered and emulated: cycles, counters, host time")
