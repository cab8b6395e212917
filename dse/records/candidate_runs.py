"""candidate_run (0011): the runs a candidate's reads show, by role ("latest", each stage's
name, "outcome"), kept by the writes of runs in their own transaction (0017; before, by
triggers on run, which cost a sweep three upserts a run, one at a time: about a third of
its store writes). Every writer of a run calls here: `added` after inserting runs,
`changed` after changing runs' status or reason, `rebuild` for a store filled by hand.

Each is one set-based statement a batch (per chunk of ids), on SQLite and PostgreSQL
alike, with the triggers' guards: "latest" is the largest run id (a row is replaced only
by a larger run, so two PostgreSQL writers committing out of order keep the larger), the
outcome the latest run unless that is "pruned" while another is not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Connection

from dse.records.driver import executor

_CHUNK = 500  # ids per IN list: under every driver's bound-parameter limit
_COLUMNS = "candidate_run (candidate_id, role, experiment_id, run_id, stage, status, reason)"
_SET = "run_id = excluded.run_id, stage = excluded.stage, status = excluded.status, reason = excluded.reason"
# The roles of the runs `{where}` picks (on run), one row per candidate and role: a
# candidate's largest of them, of each stage, and its outcome among them. (One row per key:
# PostgreSQL's upsert may not touch a row twice in one statement.)
_ROLES = """
SELECT r.candidate_id, roles.role, c.experiment_id, r.id, r.stage, r.status, r.reason
FROM (SELECT candidate_id, 'latest' AS role, max(id) AS run_id FROM run WHERE {where} GROUP BY candidate_id
      UNION ALL
      SELECT candidate_id, stage, max(id) FROM run WHERE {where} GROUP BY candidate_id, stage
      UNION ALL
      SELECT candidate_id, 'outcome', coalesce(max(CASE WHEN status != 'pruned' THEN id END), max(id))
      FROM run WHERE {where} GROUP BY candidate_id) roles
JOIN run r ON r.id = roles.run_id JOIN candidate c ON c.id = r.candidate_id"""
# Newer runs replace older ones; a pruned run is the outcome only over a pruned one.
# (`WHERE true`: SQLite's parser needs a WHERE before ON CONFLICT after a SELECT with a join.)
ADDED = f"""INSERT INTO {_COLUMNS} {_ROLES} WHERE true
ON CONFLICT (candidate_id, role) DO UPDATE SET {_SET} WHERE excluded.run_id > candidate_run.run_id
    AND (candidate_run.role != 'outcome' OR excluded.status != 'pruned' OR candidate_run.status = 'pruned')"""
# SQLite, runs just inserted: each run's three rows (latest, its stage's, outcome) offered in
# run id order, the upsert's guard keeping the right one where a candidate has several (SQLite
# upserts row by row: a larger run replaces a smaller, a pruned one only a pruned one) -- what
# ADDED picks by grouping, without its three GROUP BYs (a third of a sweep's candidate_run
# writes). PostgreSQL refuses to upsert one row twice in a statement: ADDED there.
ADDED_IN_ORDER = f"""INSERT INTO {_COLUMNS}
SELECT r.candidate_id, coalesce(roles.role, r.stage), c.experiment_id, r.id, r.stage, r.status, r.reason
FROM run r JOIN candidate c ON c.id = r.candidate_id
CROSS JOIN (SELECT 'latest' AS role UNION ALL SELECT NULL UNION ALL SELECT 'outcome') roles
WHERE {{where}} ORDER BY r.id
ON CONFLICT (candidate_id, role) DO UPDATE SET {_SET} WHERE excluded.run_id > candidate_run.run_id
    AND (candidate_run.role != 'outcome' OR excluded.status != 'pruned' OR candidate_run.status = 'pruned')"""
# The rows that name a changed run take its status and reason (found by the candidate: the
# primary key's prefix; candidate_run has no index on run_id).
STATUS = """UPDATE candidate_run SET status = r.status, reason = r.reason FROM run r
WHERE r.id IN ({ids}) AND candidate_run.candidate_id = r.candidate_id AND candidate_run.run_id = r.id"""
# A candidate's outcome again from all its runs: its latest not pruned, else its latest.
OUTCOME = f"""INSERT INTO {_COLUMNS}
SELECT c.id, 'outcome', c.experiment_id, r.id, r.stage, r.status, r.reason FROM candidate c JOIN run r ON r.id = coalesce(
    (SELECT max(o.id) FROM run o WHERE o.candidate_id = c.id AND o.status != 'pruned'),
    (SELECT max(o.id) FROM run o WHERE o.candidate_id = c.id))
WHERE c.id IN (SELECT candidate_id FROM run WHERE id IN ({{ids}}))
ON CONFLICT (candidate_id, role) DO UPDATE SET {_SET}"""


def added(connection: Connection, run_ids: Sequence[int]) -> None:
    """candidate_run brought up to date with runs just inserted (any status)."""
    if not run_ids:
        return
    sqlite = connection.dialect.name == "sqlite"
    low, high = min(run_ids), max(run_ids)
    if high - low + 1 == len(set(run_ids)):  # a batch's ids in a row (SQLite's path): one range
        where = f"id BETWEEN {int(low)} AND {int(high)}"
        _execute(connection, ADDED_IN_ORDER.format(where="r." + where) if sqlite else ADDED.format(where=where))
        return
    for part in _chunks(run_ids):
        where = f"id IN ({part})"
        _execute(connection, ADDED_IN_ORDER.format(where="r." + where) if sqlite else ADDED.format(where=where))


def changed(connection: Connection, run_ids: Sequence[int], outcome_of: Iterable[int] = ()) -> None:
    """candidate_run brought up to date with runs whose status or reason just changed;
    `outcome_of`: those of them that became or stopped being "pruned" (their candidates'
    outcomes are found again)."""
    for part in _chunks(run_ids):
        _execute(connection, STATUS.format(ids=part))
    for part in _chunks(outcome_of):
        _execute(connection, OUTCOME.format(ids=part))


def rebuild(connection: Connection, candidate_ids: Iterable[int] | None = None) -> None:
    """Recompute candidate_run from the runs: for every candidate, or for these. For
    stores whose runs were written by plain SQL (the benches, some tests)."""
    if candidate_ids is None:
        connection.exec_driver_sql("DELETE FROM candidate_run")
        _execute(connection, ADDED.format(where="true"))
        return
    for part in _chunks(candidate_ids):
        connection.exec_driver_sql(f"DELETE FROM candidate_run WHERE candidate_id IN ({part})")
        _execute(connection, ADDED.format(where=f"candidate_id IN ({part})"))


def _chunks(ids: Iterable[int]) -> Iterable[str]:
    """`ids` (distinct, sorted) as comma-separated integer lists of up to _CHUNK each."""
    ordered = sorted({int(i) for i in ids})
    for i in range(0, len(ordered), _CHUNK):
        yield ", ".join(map(str, ordered[i:i + _CHUNK]))


def _execute(connection: Connection, sql: str) -> None:
    # Ids are inlined as integers (int() above): no parameters, so no paramstyle to mind
    # and no bound-parameter limit.
    executor(connection)(sql)
