"""Which emulator core runs: the compiled one (Cython to C++, built by ``make install``: the
timing passes, `emulator._timing_core`, and the functional pass's hot instructions,
`emulator._functional_core`) or, with ``DSE_EMULATOR_CORE=python``, the Python model
(`emulator.timing`, `emulator.machine`: the reference the tests compare the compiled core
with, cycle for cycle and byte for byte; also for debugging). The install builds the extension, so a missing one is an error
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
_functional = None


def _load(name: str):
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError as exc:
        raise CoreNotBuilt(f"the emulator's compiled core (emulator.{name}) is not built ({exc}): run "
                           f"`make install`, or set {ENV}=python for the Python model") from None


def compiled():
    """The compiled timing module, imported once and checked against the record kinds it reads."""
    global _compiled
    if _compiled is None:
        _timing_core = _load("_timing_core")
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


def functional_stretch():
    """`emulator._functional_core.run_stretch` (`Machine.run`'s loop over a core's stretch of
    instructions), or None for the Python loop."""
    global _functional
    if selected() == "python":
        return None
    if _functional is None:
        _functional = _load("_functional_core")
    return _functional.run_stretch
