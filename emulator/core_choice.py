"""Which emulator core the environment asks for (``DSE_EMULATOR_CORE``: the compiled one,
or the Python model) and the compiled modules, loaded once; a missing build is an error
that says how to build it. Imports nothing of the emulator's passes, so that both the
functional pass (`machine`) and the timing chooser (`compiled`) can ask it."""

from __future__ import annotations

import importlib
import os

from .errors import EmulatorError

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


_functional = None


def load_compiled(name: str):
    """The compiled module `emulator.<name>`, or CoreNotBuilt."""
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError as exc:
        raise CoreNotBuilt(f"the emulator's compiled core (emulator.{name}) is not built ({exc}): run "
                           f"`make install`, or set {ENV}=python for the Python model") from None


def functional_core():
    """`emulator._functional_core` (its `cores(machine)`: `Machine.run`'s check and loop
    compiled), or None for the Python loop."""
    global _functional
    if selected() == "python":
        return None
    if _functional is None:
        _functional = load_compiled("_functional_core")
    return _functional
