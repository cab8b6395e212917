"""Which emulator core runs: the compiled one (Cython to C++, built by ``make install``: the
timing passes, `emulator._timing_core`, and the functional pass, `emulator._functional_core`:
the field check and the hot instructions, the rest left to the Python handlers) or, with ``DSE_EMULATOR_CORE=python``, the Python model
(`emulator.timing`, `emulator.machine`: the reference the tests compare the compiled core
with, cycle for cycle and byte for byte; also for debugging). The install builds the extension, so a missing one is an error
that says so, not a silent fall back to a pass ten times slower."""

from __future__ import annotations

from .core_choice import CORES, ENV, CoreNotBuilt, functional_core, load_compiled, selected  # noqa: F401
from .machine import BALL, BARRIER, CORE, FENCE, MSET, MVIN, MVOUT, SHARED_KEY
from .timing import CoreTimes, run_overlapped as run_overlapped_python, run_serial as run_serial_python

_compiled = None


def compiled():
    """The compiled timing module, imported once and checked against the record kinds it reads."""
    global _compiled
    if _compiled is None:
        _timing_core = load_compiled("_timing_core")
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
