"""The driver's writes to the store, in batches: candidates, runs started, runs finished."""

from __future__ import annotations

from ..records import Store


class Recorder:
    def __init__(self, store: Store):
        self.store = store
        self._running: set[int] = set()

    def add_candidates(self, experiment_id: int, rows: list[dict]) -> list[int]:
        return [self.store.add_candidate(experiment_id, r["config"], r["mapping"], r["origin"], r["diff"])[0]
                for r in rows]

    def start_runs(self, candidate_ids: list[int], stage: str, **provenance) -> list[int]:
        runs = []
        for cid in candidate_ids:  # tracked one by one: an interrupt may come between two
            runs.append(self.store.start_run(cid, stage, **provenance))
            self._running.add(runs[-1])
        return runs

    def finish_runs(self, outcomes) -> None:
        for o in outcomes:
            self.store.finish_run(o.key, o.status, o.metrics, reason=o.reason or None, error=o.error or None,
                                  traceback=o.traceback or None)
            self._running.discard(o.key)

    def crash_unfinished(self, why: str) -> None:
        """Mark runs of this driver still unfinished as crashed (after Ctrl-C, say)."""
        for run in sorted(self._running):
            try:
                self.store.finish_run(run, "crashed", error=why)
            except ValueError:  # the interrupt came after its finish was committed
                pass
        self._running.clear()
