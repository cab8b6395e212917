"""Time limits on the recipe's code (its import, `load()`, `inputs()`, capture and frontend
steps) and a word while it runs: `capture_limit` stops it past `[stages] capture_timeout_s`
with one line naming that field, and says every `[stages] progress_interval_s` that it is
still running. Standard library only: spec checking runs under it too."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from pathlib import Path

from ..errors import InputError


def torch_importing() -> bool:
    """Whether a torch module is being imported now. An exception raised there (a Ctrl-C, a
    time limit's) can unwind through pybind11's C++ (torch runs Python through py::exec) and
    abort the process, or leave torch half imported in it, broken for every later import."""
    return any(name.partition(".")[0] == "torch" and getattr(getattr(module, "__spec__", None), "_initializing", False)
               for name, module in list(sys.modules.items()))


@contextlib.contextmanager
def time_limit(seconds: float, error):
    """Raise `error()` in this (the main) thread once `seconds` have passed (SIGALRM), or
    as soon as torch's import is over if the limit passes inside it; no limit off the main
    thread or where there is no SIGALRM."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    fired = []

    def expired(_signum, _frame):
        if torch_importing():  # the limit, raised once the import is over
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        fired.append(error())
        raise fired[0]

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except BaseException as raised:
        # The alarm can land anywhere, e.g. inside an import's class body, whose machinery
        # wraps it (dataclasses' __set_name__ raises a RuntimeError from it): past the limit,
        # the limit is the error, whatever carried it out.
        if fired and raised is not fired[0]:
            raise fired[0] from None
        raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def still_running(what: str, interval: float, limit: float):
    """Say on stderr every `interval` seconds that `what` still runs, with the time so far."""
    started = time.monotonic()
    done = threading.Event()

    def tell() -> None:
        while not done.wait(interval):
            print(f"dse: {what} still running ({time.monotonic() - started:.0f} s so far; stopped at "
                  f"{limit:g} s: [stages] capture_timeout_s)", file=sys.stderr, flush=True)

    teller = threading.Thread(target=tell, name="dse-still-running", daemon=True)
    teller.start()
    try:
        yield
    finally:
        done.set()
        teller.join(timeout=1)


@contextlib.contextmanager
def capture_limit(path: str | Path, stages, what: str):
    """Run the recipe's code (`what` names it) under the spec's `stages.capture_timeout_s`,
    saying that it still runs every `stages.progress_interval_s`: past the limit, an
    InputError naming the field (nothing was written)."""
    limit = stages.capture_timeout_s
    with still_running(what, stages.progress_interval_s, limit), time_limit(limit, lambda: InputError(
            path, "stages.capture_timeout_s", limit,
            f"a limit {what} finish within (they did not: raise the limit or make the workload smaller); "
            "nothing was written")):
        yield
