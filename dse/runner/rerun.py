"""A rerun of a sweep the store holds in full: its result read from the records, with no
stage run, nothing written and none of the stages' imports (torch, pandas, SQLAlchemy, the
emulator machine, optuna).

The sweep's candidates are built by the sweep's own code (`dse.runner.candidates`) and
looked up by hash with a light read (`dse.records.recorded`: sqlite3 for a SQLite file,
psycopg for a PostgreSQL URL; a server it cannot reach is the full sweep's to report). The
shortcut is taken only where the full sweep provably does nothing but read and print:
every candidate it would propose is finished (and emulated or pruned, with the emulator
stage), the store needs no upgrade and holds no run in flight or sweep lock (a row of
sweep_lock, on both backends), the recipe is unchanged, and the latest proposal stands
for every run: it is newer than every run, or the sweep's last judgement (`propose`,
which adds no proposal when it reaches the latest one again) covered every run
(experiment.judged_run_id), so `propose` would reach it again and add none. Else (None)
the full sweep runs, and says whatever it says. Clusters (Dask) always take the full sweep.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path

from ..identity import workload_identity
from .candidates import CandidateBuilder
from ..records.recorded import read_experiment
from .result import DONE, IDLE_ROUNDS, SweepResult
from .samplers import batch_size, make_sampler, sampler_kind
from .spec import Spec, workload_parts


def recorded_rerun(spec: Spec, db: str | os.PathLike[str], workers: int = 1,
                   cluster: str | None = None) -> SweepResult | None:
    """What sweeping `spec` into the store `db` (a SQLite file or a PostgreSQL URL) would
    answer, when the store holds the whole sweep already; None when the sweep has something
    to do (or to report)."""
    text = os.fspath(db)
    if text == ":memory:" or cluster or os.environ.get("DASK_SCHEDULER_ADDRESS"):
        return None  # clusters: the full sweep (its checks and connections)
    # A URL as given (the light read reads PostgreSQL's, and leaves any other to the full sweep).
    store: str | Path = text if "://" in text else Path(text).expanduser()
    m = spec.model
    if m.experiment.links() or m.search.wall_seconds:  # links are resolved, a wall clock is read, by the sweep
        return None
    rec = read_experiment(store, m.experiment.name, DONE)
    if (rec is None or not rec.schema_current or rec.runs_in_flight or rec.locked or not rec.has_frontend_dumps
            or rec.spec_hash != spec.hash or rec.status == "proposed"):
        return None
    if rec.workload_hash != workload_identity(**workload_parts(spec)):
        return None  # the recipe changed: its capture is the full sweep's
    known = {h for h, status in rec.analytical.items() if status in DONE}
    builder = CandidateBuilder(spec)
    base_hash = builder.build({}).hash
    hand = [(builder.build(params).hash, why) for params, why in spec.hand]
    needed = [base_hash] + [h for h, _ in hand]
    if sampler_kind(spec) == "grid":
        if spec.grid_size() > m.search.max_candidates:
            return None  # a grid asked for with --yes-large: the sweep's resume, not a list of it here
        points = list(spec.space.grid())
        # a grid of this many batches of repeats would stop early on IDLE_ROUNDS, and say so
        if math.ceil(len(points) / batch_size(spec, make_sampler(spec), workers)) >= IDLE_ROUNDS:
            return None
        needed += [builder.build(params).hash for params in points]
    elif len(known) - 1 < m.search.trials:  # the sampler has trials left to ask for
        return None
    if not known.issuperset(needed):
        return None
    if any(rec.why.get(h) != why for h, why in dict(hand).items() if h != base_hash):
        return None  # the sweep records the hand-picked candidates' whys
    if m.stages.emulator != "none" and not rec.emulator_done.issuperset(known):
        return None  # candidates neither emulated nor pruned yet
    result = SweepResult(rec.id, spec.name, rec.status, resumed=len(known),
                         counts=dict(Counter(rec.analytical[h] for h in known)), reasons=rec.reasons,
                         outcomes=rec.outcomes)
    if rec.acceptance:
        if rec.proposal is None or rec.newest_run_time is None:
            return None
        # After a resumed sweep whose judgement found the latest proposal again (adding none),
        # runs are newer than the proposal, yet judged: judged_run_id covers them.
        judged = rec.judged_run_id is not None and rec.judged_run_id >= rec.newest_run_id
        if rec.proposal[2] < rec.newest_run_time and not judged:
            return None  # evidence newer than the proposal's judgement: `propose` judges it
        result.proposed, result.decision = rec.proposal[0], rec.proposal[1]
    return result
