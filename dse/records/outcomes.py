"""A candidate's outcome, named as it is: the one classification of a candidate's latest
run that the sweep's summary, `dse show` (its counts and its status column) and the rerun
shortcut all print. No SQLAlchemy or pandas: the light reads use it.

A run's status says what the stage did; the outcome says why, where the status alone
misleads: a candidate a spec's constraint rejects is recorded "infeasible" without
evaluation (and its emulator-stage run "pruned"), yet nothing about it was infeasible;
it is "rejected by constraint". A candidate the emulator stage skips because the model
found it infeasible stays "infeasible", not "pruned" (pruned: feasible, but not taken
further).
"""

from __future__ import annotations

# What the reasons of these runs begin with (`Space.violated`, `chain.prune`); the
# classification reads nothing else of a reason.
CONSTRAINT_REJECTED = "rejected by constraint"
NOT_EMULATED = "not emulated: "
ANALYTICALLY_INFEASIBLE = "analytically infeasible"
# Constraint reasons as recorded before the outcome was named ("constraint 'x' does not hold").
_OLD_CONSTRAINT = "constraint '"
REASON_PREFIXES = (CONSTRAINT_REJECTED, _OLD_CONSTRAINT, NOT_EMULATED + CONSTRAINT_REJECTED,
                   NOT_EMULATED + ANALYTICALLY_INFEASIBLE)


def outcome(status: str | None, reason: str | None) -> str:
    """The outcome of a candidate whose latest run has `status` and `reason` (no run:
    "not run"): the run's status, except "rejected by constraint" for a candidate a
    constraint rejected and "infeasible" for one pruned as infeasible."""
    if status is None:
        return "not run"
    why = (reason or "").removeprefix(NOT_EMULATED)
    if status in ("infeasible", "pruned") and why.startswith((CONSTRAINT_REJECTED, _OLD_CONSTRAINT)):
        return CONSTRAINT_REJECTED
    if status == "pruned" and why.startswith(ANALYTICALLY_INFEASIBLE):
        return "infeasible"
    return status


def reason_group_sql(column: str = "reason") -> tuple[str, dict[str, str]]:
    """(SQL expression, its parameters) that groups runs by which of `REASON_PREFIXES`
    their reason begins with: counting by (status, this group) and naming each group by
    `outcome` of one of its reasons counts by outcome, without reading every reason."""
    cases = " ".join(f"WHEN {column} LIKE :reason_prefix_{i} THEN {i + 1}" for i in range(len(REASON_PREFIXES)))
    return (f"CASE {cases} ELSE 0 END",
            {f"reason_prefix_{i}": prefix + "%" for i, prefix in enumerate(REASON_PREFIXES)})


def spelled_counts(counts: list[tuple[str, int]]) -> str:
    """Outcome counts as every view prints them: "3 ok, 1 rejected by constraint"."""
    return ", ".join(f"{n} {name}" for name, n in counts)


# An experiment `dse propose` recorded and no sweep has run yet: its hypothesis stands
# untested. Every view (`dse history`, `dse show`, the report, the UI) says it so.
NOT_RUN_YET = "not run yet"


def not_run_yet(status: str | None, n_candidates: int) -> bool:
    """An untested hypothesis: status "proposed" and no candidate recorded (a sweep's
    first batch records candidates before it moves the status to "testing")."""
    return status == "proposed" and not n_candidates


def experiment_status(status: str | None, n_candidates: int) -> str:
    """The hypothesis' status as the views print it: "proposed, not run yet" for an
    untested one (`not_run_yet`), else the status."""
    return f"{status}, {NOT_RUN_YET}" if not_run_yet(status, n_candidates) else str(status)
