"""What a sweep did: `run_sweep`'s answer, whether it ran the stages or found the sweep
recorded already (`dse.runner.rerun`)."""

from __future__ import annotations

from dataclasses import dataclass, field

DONE = {"ok", "infeasible", "pruned", "failed"}  # a run's final statuses; crashed or running: evaluate again
IDLE_ROUNDS = 20  # asks in a row proposing only candidates already evaluated: the sweep stops

@dataclass
class SweepResult:
    experiment_id: int
    name: str
    status: str
    evaluated: int = 0
    proposed_by_sampler: int = 0  # the sampler's proposals, repeats included (0 from the recorded-rerun shortcut)
    resumed: int = 0
    # runs that link to an earlier experiment's evidence instead of evaluating (dse.records.reuse)
    reused: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # this sweep's runs by stage and status
    # the experiment's candidates by outcome (`dse.records.outcomes`), as `dse show` counts them
    outcomes: list[tuple[str, int]] = field(default_factory=list)
    proposed: str = ""  # the verdict the evidence suggests (confirmed, refuted, waiting); people decide
    decision: str = ""  # the proposal's rationale
    stopped_early: str = ""
    # The infeasible, pruned, failed and crashed candidates by reason (`Store.reason_groups`).
    reasons: list[tuple[str, str, int]] = field(default_factory=list)
    evidence_skipped: int = 0  # raw evidence files not kept: the evidence budget was reached
    # Wall time by the chain's stage names: analytical (the whole analytical phase,
    # sampler and record included), record (the store writes), emulator (prune, emulator and
    # numerics); and sampler, the driver's own (the sampler's asks and tells).
    seconds: dict[str, float] = field(default_factory=dict)
