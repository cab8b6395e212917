"""Which timing pass `emulator.run` uses: the compiled one (`emulator._timing_core`,
Cython to C++, built by ``make install``) or, with ``DSE_EMULATOR_CORE=python``, the Python
model of `emulator.timing` (the reference the tests compare the compiled pass with, cycle for
cycle; also for debugging). The install builds the extension, so a missing one is an error
that says so, not a silent fall back to a pass ten times slower."""

from __future__ import annotations

import importlib
import os

from .errors import EmulatorError
from .machine import BALL, BARRIER, CORE, FENCE, MSET, MVIN, MVOUT, SHARED_KEY
from .timing import CoreTimes, run_overlapped as run_overlapped_python, run_serial as run_serial_python

ENV = "DSE_EMULATOR_CORE"
CORES = ("compiled", "python")


class CoreNotBuilt(EmulatorError, ImportError):
    """The compiled core is not built (or built for another Python)."""


def selected() -> str:
    """The core ``DSE_EMULATOR_CORE`` asks for (unset or empty: compiled)."""
    name = os.environ.get(ENV, "").strip().lower() or "compiled"
    if name not in CORES:
        raise EmulatorError(f"environment variable {ENV}={os.environ[ENV]!r}: allowed {', '.join(CORES)} "
                            f"(unset: compiled)")
    return name


_compiled = None


def compiled():
    """The compiled module, imported once and checked against the record kinds it reads."""
    global _compiled
    if _compiled is None:
        try:
            _timing_core = importlib.import_module(f"{__package__}._timing_core")
        except ImportError as exc:
            raise CoreNotBuilt(f"the emulator's compiled core (emulator._timing_core) is not built ({exc}): run "
                               f"`make install`, or set {ENV}=python for the Python timing model") from None
        if _timing_core.KINDS != (MSET, MVIN, MVOUT, BALL, FENCE, BARRIER, CORE) or \
                _timing_core.SHARED_KEY != SHARED_KEY:
            raise CoreNotBuilt("emulator._timing_core was built from other record kinds than emulator.machine's: "
                               "run `make install` again")
        _compiled = _timing_core
    return _compiled


def run_overlapped(records, chip, trace=None, op_names=None) -> tuple[list[CoreTimes], int]:
    """`emulator.timing.run_overlapped` on the selected core: per-core times and the system
    bus's busy cycles."""
    if selected() == "python":
        return run_overlapped_python(records, chip, trace, op_names)
    times = [CoreTimes(len(chip.balls)) for _ in range(len(records))]
    busy = compiled().run_overlapped(records, chip, times, trace, op_names)
    return times, busy


def run_serial(records, chip, trace=None, op_names=None) -> list[CoreTimes]:
    """`emulator.timing.run_serial` on the selected core: per-core times."""
    if selected() == "python":
        return run_serial_python(records, chip, trace, op_names)
    times = [CoreTimes(len(chip.balls)) for _ in range(len(records))]
    compiled().run_serial(records, chip, times, trace, op_names)
    return times
