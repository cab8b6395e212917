"""A report's PNGs drawn in a forked child process while the report builds the rest (its
interactive figures, tables and pages): at 100,000 candidates drawing them is a second of
one core, and the machine has another.

The child inherits the laid-out matplotlib figures (fork: nothing to pickle or import), draws
each, sends the PNGs back through a pipe and ends without running the parent's exit
handlers. It ignores Ctrl-C: the parent stops it (`Drawing.close`) when it is interrupted or
fails, so no process is left behind. A failure in the child is raised in the parent as one
`DrawingFailed` naming what failed, with the child's traceback attached as a note.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback

# Below this many candidates a report is quick and draws its PNGs itself: a fork is not worth
# it there, nor its risk in a host running threads of its own (a notebook's kernel).
ASIDE_FROM = 5_000


class DrawingFailed(RuntimeError):
    """Drawing the report's images in the child process failed."""


def can_fork() -> bool:
    # macOS forbids much after a fork (its system frameworks); Windows has no fork.
    return sys.platform.startswith("linux") and hasattr(os, "fork")


class Drawing:
    """The PNGs of `figures` ({name: `dse.report.figures.Figure`}): drawn in a child process
    from the start when `aside`, else in this process when `pngs()` is called."""

    def __init__(self, figures: dict, aside: bool):
        self.figures = figures
        self.pid = None
        self._pipe = None
        if aside and figures and can_fork():
            self._start()

    def _start(self) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: draw, send, and end here whatever happens
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                os.close(read)
                with os.fdopen(write, "wb") as pipe:
                    pickle.dump(_drawn(self.figures), pipe, protocol=pickle.HIGHEST_PROTOCOL)
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self.pid, self._pipe = pid, os.fdopen(read, "rb")

    def pngs(self) -> dict[str, bytes]:
        """{name: PNG bytes}, in `figures` order; raises `DrawingFailed` when the child failed."""
        if self.pid is None:
            return {name: fig.png_bytes() for name, fig in self.figures.items()}
        try:
            sent = self._pipe.read()
        except BaseException:  # Ctrl-C while waiting
            self.close()
            raise
        status = self._reap(kill=False)
        if not sent:  # it ended before sending: killed (out of memory?) or exited abruptly
            how = (f"killed by signal {-status}" if status < 0 else f"exit code {status}")
            raise DrawingFailed(f"the process drawing the report's images ended without them ({how})")
        ok, value = pickle.loads(sent)
        if ok:
            return value
        name, error, trace = value
        failed = DrawingFailed(f"drawing the report's image {name!r} failed: {error}")
        failed.add_note("in the process drawing the report's images:\n" + trace)
        raise failed

    def close(self) -> None:
        """Stop the child if it is still drawing (the report was interrupted or failed)."""
        if self.pid is not None:
            self._reap(kill=True)

    def _reap(self, kill: bool) -> int:
        """Wait for the child (killed first when `kill`); its exit code, or minus its signal."""
        pid, self.pid = self.pid, None
        if kill:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._pipe.close()
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    def __enter__(self) -> Drawing:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _drawn(figures: dict) -> tuple[bool, object]:
    """(True, {name: PNG bytes}) or (False, (the failing figure's name, error, traceback))."""
    pngs = {}
    for name, fig in figures.items():
        try:
            pngs[name] = fig.png_bytes()
        except BaseException as exc:  # noqa: BLE001 - sent to the parent, raised there
            return False, (name, f"{type(exc).__name__}: {exc}", traceback.format_exc())
    return True, pngs
