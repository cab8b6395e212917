"""The driver's writes to the store, in batches: candidates with their runs started, runs
finished (the rows of the chain's record stage). One transaction per batch keeps an
analytical sweep's recording cheap: a batch's results are held and written in the
transaction that starts the next batch."""

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
        self._running: set[int] = set()
        self._held: list = []  # outcomes to write with the next batch (see `hold`)
        self._held_notes: dict[int, str] = {}  # candidates' notes to write with them
        self.seconds = 0.0  # wall time spent writing (the sweep reports it)

    @contextlib.contextmanager
    def _timed(self):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started

    def add_and_start(self, experiment_id: int, rows: list[dict], stage: str, baseline: bool = False,
                      **provenance) -> list[tuple[int, int]]:
        """Candidates recorded and their runs started, in one transaction with the held
        outcomes: (candidate id, run id) per row. `baseline`: the first row is the experiment's.
        A row's `notes` (what the sweep knows of its candidate before evaluating it) go in with it."""
        held, self._held = self._held, []
        notes, self._held_notes = self._held_notes, {}
        try:
            with self._timed():
                out = self.store.add_candidates_and_start_runs(experiment_id, rows, stage, finish=RECORD.run(held),
                                                               finish_notes=notes, baseline=baseline, **provenance)
        except BaseException:
            self._held = held + self._held  # not written: still to be
            self._held_notes = {**notes, **self._held_notes}
            raise
        self._running.difference_update(o.run_id for o in held)
        self._running.update(run for _, _, run in out)
        return [(cid, run) for cid, _, run in out]

    def start_runs(self, candidate_ids: list[int], stage: str, **provenance) -> list[int]:
        self.flush()
        with self._timed():
            runs = self.store.start_runs(candidate_ids, stage, **provenance)
        self._running.update(runs)
        return runs

    def finish_runs(self, outcomes, notes: dict[int, str] | None = None) -> None:
        """Outcomes written now, in a transaction of their own (with any held ones), and
        with them `notes`, {candidate id: note}: what the stage noticed beyond its metrics."""
        outcomes, self._held = self._held + list(outcomes), []
        notes, self._held_notes = {**self._held_notes, **(notes or {})}, {}
        if not outcomes and not notes:
            return
        try:
            with self._timed():
                self.store.finish_runs(RECORD.run(outcomes), notes)
        except BaseException:
            self._held = outcomes + self._held
            self._held_notes = {**notes, **self._held_notes}
            raise
        self._running.difference_update(o.run_id for o in outcomes)

    def link_runs(self, links: dict[int, int]) -> None:
        """Running runs finished now as links to earlier runs' evidence (run id -> earlier run id)."""
        with self._timed():
            self.store.link_runs(links)
        self._running.difference_update(links)

    def hold(self, outcomes, notes: dict[int, str] | None = None) -> None:
        """Outcomes (and their candidates' `notes`) to write with the next batch's start (or
        at `flush`). The sampler may be told of them already; if the driver is killed
        before they are written their runs stay unfinished, and the next run of the sweep
        evaluates those candidates again."""
        self._held += outcomes
        self._held_notes.update(notes or {})

    def flush(self) -> None:
        self.finish_runs([])

    def crash_unfinished(self, why: str) -> None:
        """Write the held outcomes, then mark runs of this driver still unfinished as crashed
        (after Ctrl-C, say). With the sweep taken over by another process, nothing: its
        runs are the other process's to judge."""
        try:
            self.flush()
        except LeaseLost:
            self._held, self._held_notes, self._running = [], {}, set()
            return
        except Exception:  # noqa: BLE001 - what could not be written is marked crashed below
            self._held, self._held_notes = [], {}
        for run in sorted(self._running):
            try:
                self.store.finish_run(run, "crashed", error=why)
            except ValueError:  # the interrupt came after its finish was committed
                pass
            except (LeaseLost, Stopped):  # taken over, or the database gone: the rest would fail alike
                break
        self._running.clear()
