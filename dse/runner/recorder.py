"""The driver's writes to the store, in batches: candidates with their runs started, runs
finished. One transaction per batch keeps an analytical sweep's recording cheap."""

from __future__ import annotations

import contextlib
import time

from ..records import Store


class Recorder:
    def __init__(self, store: Store):
        self.store = store
        self._running: set[int] = set()
        self.seconds = 0.0  # wall time spent writing (the sweep reports it)

    @contextlib.contextmanager
    def _timed(self):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started

    def add_and_start(self, experiment_id: int, rows: list[dict], stage: str, **provenance) -> list[tuple[int, int]]:
        """Candidates recorded and their runs started, in one transaction: (candidate id, run id) per row."""
        with self._timed():
            out = self.store.add_candidates_and_start_runs(experiment_id, rows, stage, **provenance)
        self._running.update(run for _, _, run in out)
        return [(cid, run) for cid, _, run in out]

    def start_runs(self, candidate_ids: list[int], stage: str, **provenance) -> list[int]:
        with self._timed():
            runs = self.store.start_runs(candidate_ids, stage, **provenance)
        self._running.update(runs)
        return runs

    def finish_runs(self, outcomes) -> None:
        with self._timed():
            self.store.finish_runs([dict(run_id=o.key, status=o.status, metrics=o.metrics, reason=o.reason or None,
                                         error=o.error or None, traceback=o.traceback or None) for o in outcomes])
        self._running.difference_update(o.key for o in outcomes)

    def crash_unfinished(self, why: str) -> None:
        """Mark runs of this driver still unfinished as crashed (after Ctrl-C, say)."""
        for run in sorted(self._running):
            try:
                self.store.finish_run(run, "crashed", error=why)
            except ValueError:  # the interrupt came after its finish was committed
                pass
        self._running.clear()
