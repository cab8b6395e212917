"""The driver's writes to the store, in batches. An analytical batch is evaluated first, then
written in one transaction: its candidates with their runs already finished (`add_finished`),
so a batch cut by an interrupt or a crash leaves nothing of itself in the store, and each
run is one insert, not a "running" insert and a later update. Runs of the long stages (the
emulator's) are started before their work and finished after (`start_runs`, `finish_runs`),
so a driver killed meanwhile leaves them visibly running (then crashed)."""

from __future__ import annotations

import contextlib
import time

from ..records import Store
from ..errors import Stopped
from ..records.liveness import LeaseLost
from .chain import RECORD


class Recorder:
    def __init__(self, store: Store):
        self.store = store
        self._running: set[int] = set()  # runs started and not finished (the emulator stage's)
        self.seconds = 0.0  # wall time spent writing (the sweep reports it)

    @contextlib.contextmanager
    def _timed(self):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started

    def add_finished(self, experiment_id: int, rows: list[dict], results: list[dict], stage: str,
                     baseline: bool = False, **provenance) -> list[tuple[int, int]]:
        """Candidates recorded with their runs finished, in one transaction: (candidate id, run
        id) per row. `results`: a result per row (`Store.add_candidates_with_finished_runs`);
        `baseline`: the first row is the experiment's. A row's `notes` go in with it."""
        with self._timed():
            out = self.store.add_candidates_with_finished_runs(experiment_id, rows, stage, results, baseline=baseline,
                                                               **provenance)
        return [(cid, run) for cid, _, run in out]

    def start_runs(self, candidate_ids: list[int], stage: str, **provenance) -> list[int]:
        with self._timed():
            runs = self.store.start_runs(candidate_ids, stage, **provenance)
        self._running.update(runs)
        return runs

    def finish_runs(self, outcomes, notes: dict[int, str] | None = None) -> None:
        """Outcomes of started runs written now, in a transaction of their own, and with them
        `notes`, {candidate id: note}: what the stage noticed beyond its metrics."""
        outcomes = list(outcomes)
        if not outcomes and not notes:
            return
        with self._timed():
            self.store.finish_runs(RECORD.run(outcomes), notes)
        self._running.difference_update(o.run_id for o in outcomes)

    def link_runs(self, links: dict[int, int]) -> None:
        """Running runs finished now as links to earlier runs' evidence (run id -> earlier run id)."""
        with self._timed():
            self.store.link_runs(links)
        self._running.difference_update(links)

    def crash_unfinished(self, why: str) -> None:
        """Mark the started runs of this driver still unfinished as crashed (after Ctrl-C,
        say). With the sweep taken over by another process, nothing: its runs are the other
        process's to judge."""
        for run in sorted(self._running):
            try:
                self.store.finish_run(run, "crashed", error=why)
            except ValueError:  # the interrupt came after its finish was committed
                pass
            except (LeaseLost, Stopped):  # taken over, or the database gone: the rest would fail alike
                break
        self._running.clear()
