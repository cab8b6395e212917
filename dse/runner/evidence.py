"""What an evaluation stage found for a candidate (`Evidence`) and a run's result as the
driver records it (`Outcome`): shared by the analytical and emulator stages and the
driver, and importing none of them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Evidence:
    """What an evaluation stage found for one candidate: its run's status and metric rows."""

    status: str  # ok | infeasible | failed
    reason: str = ""
    totals: dict[str, float] = field(default_factory=dict)
    metrics: list = field(default_factory=list)  # MetricRow or dicts, as Store.finish_runs takes them
    error: str = ""
    # Raw evidence to keep as content-addressed artifacts: (role, name, bytes) each.
    artifacts: list = field(default_factory=list)


@dataclass
class Outcome:
    """A run's result as the driver records it: the evidence, keyed by the run."""

    run_id: int
    status: str  # ok | infeasible | failed | pruned
    reason: str = ""
    totals: dict[str, float] = field(default_factory=dict)
    metrics: list = field(default_factory=list)  # MetricRow or dicts, as Store.finish_runs takes them
    error: str = ""
    traceback: str = ""
    artifacts: list = field(default_factory=list)  # (role, name, bytes): raw evidence, written before the run
    notes: str = ""  # what the stage noticed beyond its metrics (a placement's pick, its hand-offs): candidate notes
