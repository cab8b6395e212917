"""The driver's writes to the store, in batches: candidates, runs started, runs finished.
One transaction per batch keeps an analytical sweep's recording cheap."""

from __future__ import annotations

from ..records import Store


class Recorder:
    def __init__(self, store: Store):
        self.store = store
        self._running: set[int] = set()

    def add_candidates(self, experiment_id: int, rows: list[dict]) -> list[int]:
        return [cid for cid, _ in self.store.add_candidates(experiment_id, rows)]

    def start_runs(self, candidate_ids: list[int], stage: str, **provenance) -> list[int]:
        runs = self.store.start_runs(candidate_ids, stage, **provenance)
        self._running.update(runs)
        return runs

    def finish_runs(self, outcomes) -> None:
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
