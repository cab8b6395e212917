"""Part of a big report built in a forked child process while the report builds the rest:
its PNGs and some of its interactive figures, at 100,000 candidates two seconds of one core,
and the machine has another.

The child inherits what the jobs need (fork: the laid-out matplotlib figures, the
experiment's view; nothing to pickle or import), runs each, sends the results back through a
pipe and ends without running the parent's exit handlers. It ignores Ctrl-C: the parent
stops it (`Aside.close`) when it is interrupted or fails, so no process is left behind. A
failure in the child is raised in the parent as one `AsideFailed` naming the job and the
error, with the child's traceback attached as a note.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import traceback
from typing import Any, Callable

# Below this many candidates a report is quick and runs its jobs itself: a fork is not worth
# it there, nor its risk in a host running threads of its own (a notebook's kernel).
ASIDE_FROM = 5_000


class AsideFailed(RuntimeError):
    """A part of the report built in the child process failed."""


def can_fork() -> bool:
    # macOS forbids much after a fork (its system frameworks); Windows has no fork.
    return sys.platform.startswith("linux") and hasattr(os, "fork")


class Aside:
    """`jobs` ({what: a function of nothing}) run in a child process from the start when
    `aside`, else in this process, in order, when `results()` is called."""

    def __init__(self, jobs: dict[str, Callable[[], Any]], aside: bool):
        self.jobs = jobs
        self.pid = None
        self._pipe = None
        self._froze = False
        if aside and jobs and can_fork():
            self._start()

    def _start(self) -> None:
        read, write = os.pipe()
        # The collector's passes write to every object they visit: the objects there are
        # frozen until the child ends, so that they leave the pages both processes share
        # alone (fewer copies on write in each).
        self._froze = not gc.get_freeze_count()  # (a host that froze its own: left as it is)
        if self._froze:
            gc.freeze()
        try:
            pid = os.fork()
        except BaseException as exc:
            self._thaw()
            os.close(read)
            os.close(write)
            if isinstance(exc, OSError):  # no process to be had (a limit, memory): all done here
                return
            raise
        if pid == 0:  # the child: run, send, and end here whatever happens
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                os.close(read)
                with os.fdopen(write, "wb") as pipe:
                    pickle.dump(_run(self.jobs), pipe, protocol=pickle.HIGHEST_PROTOCOL)
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self.pid, self._pipe = pid, os.fdopen(read, "rb")

    def results(self) -> dict[str, Any]:
        """{what: its result}, in `jobs` order; raises `AsideFailed` when the child failed."""
        if self.pid is None:
            return {what: job() for what, job in self.jobs.items()}
        try:
            sent = self._pipe.read()
        except BaseException:  # Ctrl-C while waiting
            self.close()
            raise
        status = self._reap(kill=False)
        if not sent:  # it ended before sending: killed (out of memory?) or exited abruptly
            how = f"killed by signal {-status}" if status < 0 else f"exit code {status}"
            raise AsideFailed(f"the process building part of the report ended without it ({how})")
        ok, value = pickle.loads(sent)
        if ok:
            return value
        what, error, trace = value
        failed = AsideFailed(f"building the report's {what} failed: {error}")
        failed.add_note("in the process building part of the report:\n" + trace)
        raise failed

    def close(self) -> None:
        """Stop the child if it is still running (the report was interrupted or failed)."""
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
        self._thaw()
        return os.waitstatus_to_exitcode(status)

    def _thaw(self) -> None:
        if self._froze:
            gc.unfreeze()
            self._froze = False

    def __enter__(self) -> Aside:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _run(jobs: dict[str, Callable[[], Any]]) -> tuple[bool, Any]:
    """(True, {what: result}) or (False, (the failing job's what, error, traceback))."""
    out = {}
    for what, job in jobs.items():
        try:
            out[what] = job()
        except BaseException as exc:  # noqa: BLE001 - sent to the parent, raised there
            return False, (what, f"{type(exc).__name__}: {exc}", traceback.format_exc())
    return True, out
