"""Evidence reused across experiments: a candidate a follow-up experiment proposes that an
earlier experiment already evaluated (same candidate hash, same workload identity, same
model and emulator versions, same result-affecting stage settings) is not evaluated
again. Its run of the stage is a *link* (run.reused_run_id, 0014) to the earlier run: the
run's status and reason are the earlier run's, and its metrics and raw evidence are read
through the link (`METRIC_RUN`), never copied. latest_figures (derived
data) holds the linked figures under the linking run, so every table, the acceptance test
and `dse decide` judge the candidate on them.

A link always names the run that evaluated (a link of a link is resolved to it). Failed
and infeasible runs are reused too (their reason); a constraint's rejection is not (it is
the earlier spec's, not the candidate's), nor a pruned run (the earlier sweep's choice).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, func, update

from dse.records import candidate_runs, latest, packed
from dse.records.outcomes import CONSTRAINT_REJECTED, outcome
from dse.records.schema import Run, utcnow

# The statuses whose evidence a follow-up reuses: what an evaluation concluded.
REUSED_STATUSES = ("ok", "infeasible", "failed")
_CHUNK = 500


def metric_run(run: Any = Run) -> Any:
    """The run whose metrics `run` shows: its own, or the linked run's (SQLAlchemy
    expression; join `RunMetrics.run_id == metric_run(Run)`)."""
    return func.coalesce(run.reused_run_id, run.id)


# The same in SQL text, for a run aliased `r`.
METRIC_RUN_SQL = "coalesce(r.reused_run_id, r.id)"


@dataclass(frozen=True)
class Source:
    """The earlier run a candidate's evidence is reused from."""

    run_id: int
    candidate_id: int
    experiment_id: int
    experiment: str
    status: str
    reason: str | None


def reusable(connection: Connection, hashes: Sequence[str], *, experiment_id: int, workload_hash: str, stage: str,
             model_version: str, emulator_version: str | None, settings_ok=None) -> dict[str, Source]:
    """Per candidate hash, the newest run of `stage` of another experiment on the same
    workload that evaluated that candidate under these versions (REUSED_STATUSES, not a
    link itself, not a constraint's rejection); `settings_ok(spec_text)`: whether that
    experiment's result-affecting stage settings are this one's."""
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    found: dict[str, Source] = {}
    settings: dict[int, bool] = {}
    # No other experiment on this workload (a first sweep): nothing to look up candidate by candidate.
    if connection.exec_driver_sql(f"SELECT 1 FROM experiment WHERE workload_hash = {mark} AND id <> {mark} LIMIT 1",
                                  (workload_hash, int(experiment_id))).first() is None:
        return found
    hashes = sorted(set(hashes))
    for i in range(0, len(hashes), _CHUNK):
        part = hashes[i:i + _CHUNK]
        rows = connection.exec_driver_sql(
            "SELECT c.hash, r.id, c.id, e.id, e.name, r.status, r.reason, e.spec_text "
            "FROM run r JOIN candidate c ON c.id = r.candidate_id JOIN experiment e ON e.id = c.experiment_id "
            f"WHERE c.hash IN ({', '.join([mark] * len(part))}) AND e.workload_hash = {mark} AND e.id <> {mark} "
            f"AND r.stage = {mark} AND r.reused_run_id IS NULL AND r.model_version = {mark} "
            f"AND r.status IN ({', '.join([mark] * len(REUSED_STATUSES))}) "
            + ("AND r.emulator_version IS NULL " if emulator_version is None else f"AND r.emulator_version = {mark} ")
            + "ORDER BY r.id",
            (*part, workload_hash, int(experiment_id), stage, model_version, *REUSED_STATUSES,
             *(() if emulator_version is None else (emulator_version,)))).all()
        for h, run_id, cid, eid, name, status, reason, spec_text in rows:
            if outcome(status, reason) == CONSTRAINT_REJECTED:
                continue
            if settings_ok is not None:
                if eid not in settings:
                    settings[eid] = bool(settings_ok(spec_text))
                if not settings[eid]:
                    continue
            found[h] = Source(int(run_id), int(cid), int(eid), name, status, reason)  # newest last
    return found


def link_runs(connection: Connection, links: Mapping[int, int]) -> None:
    """Finish each running run of `links` (run id -> the earlier run it reuses) as a link:
    the earlier run's status, reason, error and traceback, its figures in latest_figures
    under the linking run. No metric row is written."""
    if not links:
        return
    state = run_states(connection, sorted(set(links.values())))
    now = utcnow()
    table = Run.__table__
    done = connection.execute(
        update(table).where((table.c.id == bindparam("rid")) & (table.c.status == "running")).values(
            status=bindparam("s_status"), reason=bindparam("s_reason"), error=bindparam("s_error"),
            traceback=bindparam("s_traceback"), finished_at=now, heartbeat_at=now, reused_run_id=bindparam("src")),
        [dict(rid=int(run), src=int(src), **dict(zip(("s_status", "s_reason", "s_error", "s_traceback"), state[src])))
         for run, src in links.items()]).rowcount
    if done != len(links):
        raise ValueError(f"runs {sorted(links)}: not all running, so not linked")
    # A running run took its source's status: a pruned one may move its candidate's outcome.
    candidate_runs.changed(connection, list(links), [run for run, src in links.items() if state[src][0] == "pruned"])
    record_linked_figures(connection, links)


def run_states(connection: Connection, run_ids: Sequence[int]) -> dict[int, tuple]:
    """(status, reason, error, traceback) of each run of `run_ids`: what a link to it takes."""
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    state = {}
    for i in range(0, len(run_ids), _CHUNK):
        part = list(run_ids[i:i + _CHUNK])
        state.update((r[0], tuple(r[1:])) for r in connection.exec_driver_sql(
            "SELECT id, status, reason, error, traceback FROM run WHERE id IN "
            f"({', '.join([mark] * len(part))})", tuple(part)))
    return state


def record_linked_figures(connection: Connection, links: Mapping[int, int]) -> None:
    """The linked runs' figures in latest_figures under the linking runs (run id -> the
    earlier run): latest.record takes them as if just written."""
    of_source = {}
    for row in packed.rows_of(connection, sorted(set(links.values())), scope="total"):
        of_source.setdefault(row[0], []).append(row[1:])
    totals = [(int(run), *m) for run, src in links.items() for m in of_source.get(src, ())]
    latest.record(connection, latest.packs_of(totals))


def source_totals(connection: Connection, run_id: int) -> dict[str, float]:
    """The total figures a run recorded, by name (the sampler's view of a reused candidate)."""
    return {name: float(value) for _, _, name, value, *_ in packed.rows_of(connection, [run_id], scope="total")}
