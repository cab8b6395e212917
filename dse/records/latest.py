"""The latest_metric table (0011): each candidate's total metrics of each kind from its
latest run that recorded that kind, kept by every write of metrics in the same
transaction as the metric rows.

"Latest" is the largest run id, as everywhere in the store: a run that finishes after a
newer run of the same candidate and kind leaves the newer run's figures standing; a newer
run replaces all of the older run's figures of that kind (names it lacks go too). Other
scopes (op, core, ...) are read from the metric rows themselves.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from sqlalchemy import Connection

# The columns of a metric row as the writes hand them over: (run_id, kind, name, value,
# unit, scope, scope_key).
_RUN, _KIND, _NAME, _VALUE, _SCOPE = 0, 1, 2, 3, 5
_CHUNK = 500  # ids per IN list: under every driver's bound-parameter limit
_ROWS_PER_INSERT = 100  # 500 parameters a statement


def record(connection: Connection, rows: Sequence[Sequence]) -> None:
    """Bring latest_metric up to date with metric `rows` just inserted in this transaction."""
    totals = [r for r in rows if r[_SCOPE] == "total"]
    if not totals:
        return
    candidate_of = _candidates_of_runs(connection, sorted({r[_RUN] for r in totals}))
    newest: dict[tuple[int, str], int] = {}  # (candidate, kind) -> the batch's newest run of it
    for r in totals:
        pair = (candidate_of[r[_RUN]], r[_KIND])
        if newest.get(pair, -1) < r[_RUN]:
            newest[pair] = r[_RUN]
    held = _held(connection, sorted({c for c, _ in newest}))
    # Pairs a newer run (already recorded) holds keep its figures; older ones are replaced.
    newest = {pair: run for pair, run in newest.items() if held.get(pair, -1) < run}
    stale = [(c, k, run) for (c, k), run in newest.items() if (c, k) in held]
    # (A run names a metric once: the checks refuse a repeat.)
    values = [(*pair, r[_NAME], r[_RUN], r[_VALUE]) for r in totals
              if newest.get(pair := (candidate_of[r[_RUN]], r[_KIND])) == r[_RUN]]
    mark = _mark(connection)
    if stale:
        connection.exec_driver_sql(
            f"DELETE FROM latest_metric WHERE candidate_id = {mark} AND kind = {mark} AND run_id < {mark}", stale)
    # Rows by the hundred per statement: cheaper than an executemany of one row each (the
    # per-row work of the driver and of SQLite's statement loop). PostgreSQL: ON CONFLICT,
    # as a concurrent writer may have put the same figure in since `_held` read (the newer
    # run's stands either way); SQLite's writers hold the write lock (BEGIN IMMEDIATE) from
    # their first statement, so no other writer came in between.
    one = f"({mark}, {mark}, {mark}, {mark}, {mark})"
    conflict = "" if connection.dialect.name == "sqlite" else (
        " ON CONFLICT (candidate_id, kind, name) DO UPDATE SET run_id = excluded.run_id, value = excluded.value"
        " WHERE excluded.run_id > latest_metric.run_id")
    for i in range(0, len(values), _ROWS_PER_INSERT):
        part = values[i:i + _ROWS_PER_INSERT]
        connection.exec_driver_sql(
            "INSERT INTO latest_metric (candidate_id, kind, name, run_id, value) VALUES "
            + ", ".join([one] * len(part)) + conflict, tuple(itertools.chain.from_iterable(part)))


def rebuild(connection: Connection, candidate_ids: Iterable[int] | None = None) -> None:
    """Recompute latest_metric from the metric rows: for every candidate, or for these.
    For stores filled by hand (bulk inserts into metric, as the benches do)."""
    if candidate_ids is None:
        connection.exec_driver_sql("DELETE FROM latest_metric")
        connection.exec_driver_sql(_REBUILD.format(where=""))
        return
    ids = sorted({int(c) for c in candidate_ids})
    for i in range(0, len(ids), _CHUNK):
        listed = ", ".join(map(str, ids[i:i + _CHUNK]))
        connection.exec_driver_sql(f"DELETE FROM latest_metric WHERE candidate_id IN ({listed})")
        connection.exec_driver_sql(_REBUILD.format(where=f"AND r2.candidate_id IN ({listed})"))


_REBUILD = """
INSERT INTO latest_metric (candidate_id, kind, name, run_id, value)
SELECT r.candidate_id, m.kind, m.name, m.run_id, max(m.value)
FROM metric m
JOIN run r ON r.id = m.run_id
JOIN (SELECT r2.candidate_id AS candidate_id, m2.kind AS kind, max(m2.run_id) AS run_id
      FROM metric m2 JOIN run r2 ON r2.id = m2.run_id
      WHERE m2.scope = 'total' {where}
      GROUP BY r2.candidate_id, m2.kind) newest
  ON newest.candidate_id = r.candidate_id AND newest.kind = m.kind AND newest.run_id = m.run_id
WHERE m.scope = 'total'
GROUP BY r.candidate_id, m.kind, m.name, m.run_id
"""


def _candidates_of_runs(connection: Connection, run_ids: list[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for i in range(0, len(run_ids), _CHUNK):
        part = run_ids[i:i + _CHUNK]
        out.update(connection.exec_driver_sql(
            f"SELECT id, candidate_id FROM run WHERE id IN ({', '.join(str(int(r)) for r in part)})").all())
    return out


def _held(connection: Connection, candidate_ids: list[int]) -> dict[tuple[int, str], int]:
    """(candidate, kind) -> the run whose figures latest_metric holds, for these candidates."""
    out: dict[tuple[int, str], int] = {}
    for i in range(0, len(candidate_ids), _CHUNK):
        part = candidate_ids[i:i + _CHUNK]
        for c, k, run in connection.exec_driver_sql(
                "SELECT candidate_id, kind, max(run_id) FROM latest_metric WHERE candidate_id IN "
                f"({', '.join(str(int(c)) for c in part)}) GROUP BY candidate_id, kind"):
            out[(c, k)] = run
    return out


def _mark(connection: Connection) -> str:
    return "?" if connection.dialect.paramstyle == "qmark" else "%s"
