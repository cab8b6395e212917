"""`run_sweep`: an experiment spec into the record store, answered from the records when
they hold the whole sweep already (`dse.runner.rerun`), else by the sweep's stages
(`dse.runner.sweep`, imported only then: torch, pandas, SQLAlchemy, the emulator)."""

from __future__ import annotations

from pathlib import Path

from .cluster import CONNECT_TIMEOUT_S, check_cluster
from .rerun import recorded_rerun
from .result import SweepResult
from .size import check_size
from .spec import Spec, load_spec


def run_sweep(spec_path: str | Path | Spec, db: str | Path = "records.db", progress: bool = True,
              workers: int = 1, cluster: str | None = None,
              connect_timeout: float = CONNECT_TIMEOUT_S, yes_large: bool = False, reuse: bool = True) -> SweepResult:
    """Validate the cluster's address (--cluster or $DASK_SCHEDULER_ADDRESS,
    reachable within `connect_timeout` seconds), the spec (a TOML file's path, or a `Spec`
    from `build_spec`) and its size (at most `[search] max_candidates` candidates unless
    `yes_large`); nothing is written if any is refused. Then sweep into the store. `reuse`:
    a candidate an earlier experiment evaluated links to that evidence (dse.records.reuse);
    False evaluates every candidate afresh (then the recorded rerun's shortcut is not taken)."""
    # The address first: checking a spec may capture its recipe (seconds, torch), a
    # mistyped address is known in a fraction of one.
    cluster = check_cluster(cluster, connect_timeout)
    spec = spec_path if isinstance(spec_path, Spec) else load_spec(spec_path)
    check_size(spec, yes_large)  # counted, not built: before the rerun shortcut lists a grid
    result = recorded_rerun(spec, db, workers, cluster) if reuse else None
    if result is not None:
        return result
    from .sweep import sweep_into_store

    return sweep_into_store(spec, db, progress, workers, cluster, connect_timeout, reuse)
