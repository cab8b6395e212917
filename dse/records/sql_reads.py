"""Reads of the record store written once, as SQL text with named parameters (`:name`),
run by both ways of reading a store: the Store's (SQLAlchemy's `text()`, on SQLite and
PostgreSQL; see reads.py) and the light read's (the standard library's sqlite3 on a SQLite
file, see light.py), which answers `dse history` and `dse show` before SQLAlchemy, its
ORM and pandas are imported. Each function takes `run(sql, params) -> (column names, rows
as tuples)` and turns the rows into what the Store returns, so both ways give the same
values.

The SQL is what both databases read alike: no dialect's functions, JSON columns read as
their text (CAST AS TEXT), timestamps as the driver hands them (SQLite's text, stored as
UTC; PostgreSQL's aware datetimes), made aware datetimes here (`timestamp`).
"""

from __future__ import annotations

import json
import numbers
import struct
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from dse.records.choices import CYCLE_CALIBRATION_SOURCES, PPA_CALIBRATION_SOURCES, RUN_STATUSES
from dse.records.outcomes import outcome, reason_group_sql

Run = Callable[[str, dict[str, Any]], tuple[Sequence[str], list[tuple]]]

EXPERIMENTS = "SELECT id, name, hypothesis, status, workload_recipe, created_at FROM experiment ORDER BY id"
CANDIDATES_PER_EXPERIMENT = "SELECT experiment_id, count(*) FROM candidate GROUP BY experiment_id"
# A candidate's outcome: candidate_run's "outcome" row (0011; kept by the writes of runs, 0017). Every
# experiment's as the experiments' ids named: SQLite then seeks the (experiment_id, role,
# status) index once an experiment, in its order, instead of scanning it all and sorting
# (4x faster on 100,000 candidates).
OUTCOMES = ("SELECT experiment_id, status, count(*) FROM candidate_run WHERE {experiments} AND role = 'outcome' "
            "GROUP BY experiment_id, status")
# Candidates with an ok emulator run: those whose latest emulator run (candidate_run's
# "emulator" row, read from its index in experiment order) is ok, and those of the others
# with an earlier ok one (a probe of run's (status, stage, candidate_id) index, 0013) — not
# every ok run joined to its candidate and counted distinct (6x slower on 100,000).
EMULATED_PER_EXPERIMENT = (
    "SELECT cr.experiment_id, count(*) FROM candidate_run cr WHERE cr.experiment_id IN (SELECT id FROM experiment) "
    "AND cr.role = 'emulator' AND (cr.status = 'ok' OR EXISTS (SELECT 1 FROM run r WHERE r.status = 'ok' "
    "AND r.stage = 'emulator' AND r.candidate_id = cr.candidate_id)) GROUP BY cr.experiment_id")
DECISIONS_PER_EXPERIMENT = "SELECT experiment_id, count(*) FROM decision WHERE kind = 'decision' GROUP BY experiment_id"
NOTES_PER_EXPERIMENT = "SELECT experiment_id, count(*) FROM note GROUP BY experiment_id"
# Each experiment's latest decision of a kind (a person's decision, or a sweep's proposal).
LATEST_DECISIONS = (
    "SELECT d.experiment_id, d.verdict, d.candidate_id FROM decision d JOIN "
    "(SELECT max(id) AS decision_id FROM decision WHERE kind = :kind GROUP BY experiment_id) latest "
    "ON d.id = latest.decision_id")
DECISIONS = (
    "SELECT d.id, d.experiment_id, e.name AS experiment, d.kind, d.verdict, d.rationale, d.author, d.created_at, "
    "CAST(d.evidence AS TEXT) AS evidence, d.candidate_id, c.experiment_id AS candidate_experiment_id, "
    "CAST(d.evidence_kinds AS TEXT) AS evidence_kinds, d.override, CAST(d.checks AS TEXT) AS checks "
    "FROM decision d JOIN experiment e ON d.experiment_id = e.id LEFT OUTER JOIN candidate c ON d.candidate_id = c.id"
    "{where} ORDER BY d.id")
NOTES = ("SELECT n.id, n.experiment_id, e.name AS experiment, n.kind, n.text, n.author, n.created_at "
         "FROM note n JOIN experiment e ON n.experiment_id = e.id{where} ORDER BY n.id")
LINKS = ("SELECT l.id, l.experiment_id, e.name AS experiment, l.relation, l.other_id, o.name AS other, l.reason, "
         "l.created_at FROM experiment_link l JOIN experiment e ON l.experiment_id = e.id "
         "JOIN experiment o ON l.other_id = o.id{where} ORDER BY l.id")


def timestamp(value: Any) -> datetime | None:
    """A stored timestamp as an aware UTC datetime: SQLite's text (UTC, as SQLAlchemy writes
    it and reads it back, with `fromisoformat`), or PostgreSQL's aware datetime as it is."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=timezone.utc)


def _dicts(run: Run, sql: str, params: dict[str, Any] | None = None, *times: str) -> list[dict[str, Any]]:
    columns, rows = run(sql, params or {})
    out = [dict(zip(columns, row)) for row in rows]
    for row in out:
        for column in times:
            row[column] = timestamp(row[column])
    return out


def _counts(run: Run, sql: str, params: dict[str, Any] | None = None) -> dict:
    """{key: count} of rows (key..., count): the key one column, or a tuple of several."""
    return {(row[0] if len(row) == 2 else tuple(row[:-1])): int(row[-1]) for row in run(sql, params or {})[1]}


def experiment_summaries(run: Run) -> list[dict[str, Any]]:
    """One dict per experiment, by id: its row's id, name, hypothesis, status,
    workload_recipe, created_at; n_candidates; n_<status> for every run status (candidates
    by outcome); n_emulated (candidates with an ok emulator run); n_decisions (people's);
    n_notes; proposed_verdict (the sweep's latest); latest_verdict and latest_candidate_id
    (the latest person's decision)."""
    rows = _dicts(run, EXPERIMENTS, None, "created_at")
    n_candidates = _counts(run, CANDIDATES_PER_EXPERIMENT)
    run_counts: dict[int, dict[str, int]] = {}
    for (experiment_id, status), n in outcome_counts(run).items():
        run_counts.setdefault(experiment_id, {})[status] = n
    emulated = _counts(run, EMULATED_PER_EXPERIMENT)
    n_decisions = _counts(run, DECISIONS_PER_EXPERIMENT)
    n_notes = _counts(run, NOTES_PER_EXPERIMENT)
    proposals = {e: verdict for e, verdict, _ in run(LATEST_DECISIONS, {"kind": "proposal"})[1]}
    verdicts = {e: (verdict, candidate) for e, verdict, candidate in run(LATEST_DECISIONS, {"kind": "decision"})[1]}
    for row in rows:
        row["n_candidates"] = n_candidates.get(row["id"], 0)
        counts = run_counts.get(row["id"], {})
        for status in RUN_STATUSES:
            row[f"n_{status}"] = counts.get(status, 0)
        row["n_emulated"] = emulated.get(row["id"], 0)
        row["n_decisions"] = n_decisions.get(row["id"], 0)
        row["n_notes"] = n_notes.get(row["id"], 0)
        row["proposed_verdict"] = proposals.get(row["id"])
        row["latest_verdict"], row["latest_candidate_id"] = verdicts.get(row["id"], (None, None))
    return rows


def outcome_counts(run: Run, experiment_id: int | None = None) -> dict[tuple[int, str], int]:
    """{(experiment id, status): candidates}: candidates (not runs) by outcome, of every
    experiment or of one. A candidate's outcome is the status of its latest run, except
    that a "pruned" run (not taken further) leaves the earlier outcome standing; a
    candidate without runs is not counted. Counted from candidate_run's index alone."""
    if experiment_id is None:
        return _counts(run, OUTCOMES.format(experiments="experiment_id IN (SELECT id FROM experiment)"))
    return _counts(run, OUTCOMES.format(experiments="experiment_id = :experiment_id"), {"experiment_id": experiment_id})


def decision_rows(run: Run, experiment_id: int | None = None) -> list[dict[str, Any]]:
    """Decisions (people's) and proposals (a sweep's) in the order made, of every
    experiment or of one: JSON columns as their text, created_at an aware UTC datetime, a
    missing candidate None; `candidate_experiment_id` is the experiment of the candidate
    named, which may be another than the one decided."""
    return _dicts(run, *_of(DECISIONS, "d.experiment_id = :experiment_id", experiment_id), "created_at")


def notes(run: Run, experiment_id: int | None = None) -> list[dict[str, Any]]:
    """Notes added to experiments after the fact, oldest first: id, experiment_id,
    experiment, kind, text, author, created_at."""
    return _dicts(run, *_of(NOTES, "n.experiment_id = :experiment_id", experiment_id), "created_at")


def links(run: Run, experiment_id: int | None = None) -> list[dict[str, Any]]:
    """How experiments build on each other, oldest first: id, experiment_id, experiment,
    relation (follows / reopens), other_id, other, reason, created_at. With an experiment,
    the links from it and to it."""
    where = "l.experiment_id = :experiment_id OR l.other_id = :experiment_id"
    return _dicts(run, *_of(LINKS, where, experiment_id), "created_at")


def _of(sql: str, condition: str, experiment_id: int | None) -> tuple[str, dict[str, Any]]:
    """`sql` for every experiment, or with `condition` on one."""
    if experiment_id is None:
        return sql.format(where=""), {}
    return sql.format(where=f" WHERE {condition}"), {"experiment_id": int(experiment_id)}


# ---- one experiment -----------------------------------------------------------------------

EXPERIMENT_BY_NAME = "SELECT id FROM experiment WHERE name = :name"
EXPERIMENT_BY_ID = "SELECT id FROM experiment WHERE id = :id"
EXPERIMENT = (
    "SELECT id, name, hypothesis, status, CAST(acceptance AS TEXT) AS acceptance, workload_recipe, workload_hash, "
    "baseline_candidate_id, spec_text, spec_hash, limitations, open_questions, created_at, "
    "CAST(workload AS TEXT) AS workload FROM experiment WHERE id = :id")
_EXPERIMENT_JSON = ("acceptance", "workload")
# The candidates of an experiment, by id, with their latest run (of a stage: candidate_run's
# row of that role) as candidate_run holds it: one key probe a candidate into narrow rows.
CANDIDATES = (
    "SELECT c.id, c.hash, c.origin{full}, CAST(c.diff AS TEXT) AS diff{created}, c.why, c.notes, "
    "cr.run_id, cr.stage, cr.status, cr.reason FROM candidate c{texts} LEFT OUTER JOIN candidate_run cr "
    "ON cr.candidate_id = c.id AND cr.role = :role WHERE c.experiment_id = :experiment_id ORDER BY c.id{limit}")
# A candidate's config and mapping texts (0018: each distinct text once, in candidate_text).
CANDIDATE_TEXTS = (" JOIN candidate_text tc ON tc.id = c.config_id JOIN candidate_text tm ON tm.id = c.mapping_id")
# By status and which outcome-deciding prefix the reason has (`outcomes.reason_group_sql`),
# with one reason of each group for `outcomes.outcome` to name it.
LATEST_STATUSES = ("SELECT status, {group} AS reason_group, count(*), min(candidate_id), min(reason) "
                   "FROM candidate_run WHERE experiment_id = :experiment_id AND role = 'latest' "
                   "GROUP BY status, reason_group")
CANDIDATE_COUNT = "SELECT count(*) FROM candidate WHERE experiment_id = :experiment_id"
FIRST_NOT_RUN = (
    "SELECT min(c.id) FROM candidate c WHERE c.experiment_id = :experiment_id AND NOT EXISTS "
    "(SELECT 1 FROM candidate_run cr WHERE cr.candidate_id = c.id AND cr.role = 'latest')")
ARTIFACTS = ("SELECT a.id, a.experiment_id, r.candidate_id, a.run_id, a.role, a.media_type, a.name, a.sha256, "
             "a.size, a.created_at FROM artifact a LEFT OUTER JOIN run r ON a.run_id = r.id{where} ORDER BY a.id")


def experiment_id(run: Run, name_or_id: str | int) -> int | None:
    """The id of the experiment named by its name or id (also an id typed as text), or None."""
    if isinstance(name_or_id, numbers.Integral) and not isinstance(name_or_id, bool):
        found = run(EXPERIMENT_BY_ID, {"id": int(name_or_id)})[1]
    elif isinstance(name_or_id, str):
        found = run(EXPERIMENT_BY_NAME, {"name": name_or_id})[1]
        if not found and name_or_id.strip().isdigit():  # an id typed on a command line
            found = run(EXPERIMENT_BY_ID, {"id": int(name_or_id)})[1]
    else:
        raise TypeError(f"an experiment is named by a str or an int id, not {name_or_id!r}")
    return found[0][0] if found else None


def experiment(run: Run, experiment_id: int) -> dict[str, Any]:
    """The experiment's row as a dict: JSON columns as Python values, created_at aware UTC."""
    (row,) = _dicts(run, EXPERIMENT, {"id": experiment_id}, "created_at")
    for column in _EXPERIMENT_JSON:
        row[column] = None if row[column] is None else json.loads(row[column])
    return row


def candidates(run: Run, experiment_id: int, role: str = "latest", lean: bool = False,
               limit: int | None = None) -> tuple[Sequence[str], list[tuple]]:
    """(columns, rows): an experiment's candidates by id (the first `limit`), each with
    candidate_run's row of `role` (its latest run, or its latest of a stage): id, hash,
    origin, config, mapping, diff, created_at, why, notes, run_id, stage, status, reason.
    JSON columns as their text; `lean`: without config, mapping and created_at."""
    sql = CANDIDATES.format(
        full="" if lean else ", tc.text AS config, tm.text AS mapping", texts="" if lean else CANDIDATE_TEXTS,
        created="" if lean else ", c.created_at", limit="" if limit is None else " LIMIT :limit")
    params: dict[str, Any] = {"role": role, "experiment_id": experiment_id}
    if limit is not None:
        params["limit"] = int(limit)
    return run(sql, params)


# An experiment's candidates not evaluated to the end, grouped by their latest run's status
# and reason (one row a distinct reason), with their count and lowest ids.
REASON_GROUPS = ("SELECT status, reason, count(*), min(candidate_id) FROM candidate_run "
                 "WHERE experiment_id = :experiment_id AND role = 'latest' AND status IN "
                 "('infeasible', 'pruned', 'failed', 'crashed') GROUP BY status, reason")


def reason_groups(run: Run, experiment_id: int) -> list[tuple[str, str, int]]:
    """[(status, reason, candidates)]: the experiment's infeasible, pruned, failed and crashed
    candidates by their latest run's status and reason, one entry a distinct reason, most
    first (ties by first candidate): what every view prints once, with its count."""
    rows = run(REASON_GROUPS, {"experiment_id": experiment_id})[1]
    return [(status, reason or "(no reason recorded)", int(n))
            for status, reason, n, _ in sorted(rows, key=lambda r: (-int(r[2]), r[3]))]


def latest_status_counts(run: Run, experiment_id: int) -> list[tuple[str, int]]:
    """[(outcome, candidates)]: an experiment's candidates by the outcome of their latest
    run (`outcomes.outcome`: its status, a constraint's rejection and a pruned infeasible
    one named as such; "not run" for those without one), most first, a tie in the order
    each outcome first occurs by candidate id. From candidate_run alone, without reading
    the candidates."""
    params = {"experiment_id": experiment_id}
    group, group_params = reason_group_sql()
    by_outcome: dict[str, list[int]] = {}
    for status, _, n, first, reason in run(LATEST_STATUSES.format(group=group), {**params, **group_params})[1]:
        counted = by_outcome.setdefault(outcome(status, reason), [0, first])
        counted[0], counted[1] = counted[0] + int(n), min(counted[1], first)
    not_run = int(run(CANDIDATE_COUNT, params)[1][0][0]) - sum(n for n, _ in by_outcome.values())
    if not_run:
        by_outcome["not run"] = [not_run, run(FIRST_NOT_RUN, params)[1][0][0]]
    return [(name, n) for name, (n, _) in sorted(by_outcome.items(), key=lambda c: (-c[1][0], c[1][1]))]


def artifacts(run: Run, experiment_id: int | None = None, run_id: int | None = None,
              candidate_id: int | None = None) -> list[dict[str, Any]]:
    """Evidence files' rows, by id, with the candidate of their run: of every experiment, of
    one, of one run and/or of one candidate's runs (a run that reuses another's evidence:
    that run's files); created_at aware UTC."""
    # A run's (or candidate's runs') files are those of the runs whose evidence they stand on:
    # a linking run's are the earlier run's it reuses (dse.records.reuse), not copied.
    conditions = {"experiment_id": "a.experiment_id = :experiment_id",
                  "run_id": f"a.run_id = (SELECT {_LINKED} FROM run WHERE id = :run_id)",
                  "candidate_id": f"a.run_id IN (SELECT {_LINKED} FROM run WHERE candidate_id = :candidate_id)"}
    params = {k: int(v) for k, v in (("experiment_id", experiment_id), ("run_id", run_id),
                                     ("candidate_id", candidate_id)) if v is not None}
    where = " WHERE " + " AND ".join(conditions[k] for k in params) if params else ""
    return _dicts(run, ARTIFACTS.format(where=where), params, "created_at")


_LINKED = "coalesce(reused_run_id, id)"  # the run whose evidence a run shows (0014)


def _equal(**ids: int | None) -> tuple[str, dict[str, Any]]:
    """(" WHERE t.column = :column AND ...", params) for the ids given (not None), each
    named table__column; ("", {}) for none."""
    conditions, params = [], {}
    for key, value in ids.items():
        if value is not None:
            table, column = key.split("__")
            conditions.append(f"{table}.{column} = :{column}")
            params[column] = int(value)
    return (" WHERE " + " AND ".join(conditions) if conditions else ""), params


# ---- one candidate, one run -----------------------------------------------------------------

CANDIDATE = (
    "SELECT c.id, c.experiment_id, c.hash, tc.text AS config, tm.text AS mapping, "
    "c.origin, CAST(c.diff AS TEXT) AS diff, c.created_at, c.why, c.notes, e.name AS experiment, "
    "e.baseline_candidate_id FROM candidate c JOIN experiment e ON c.experiment_id = e.id" + CANDIDATE_TEXTS +
    " WHERE c.id = :id")
_CANDIDATE_JSON = ("config", "mapping", "diff")
# A run's row, in the run table's column order after its id and its candidate's experiment
# (`runs`' columns); JSON as its text.
RUNS = (
    "SELECT r.id, c.experiment_id, r.candidate_id, r.stage, r.status, r.reason, r.error, r.traceback, r.started_at, "
    "r.finished_at, r.heartbeat_at, r.host, r.git_commit, r.git_dirty, CAST(r.versions AS TEXT) AS versions, "
    "r.command, r.seed, r.model_version, r.emulator_version, r.pid, r.pid_start, r.reused_run_id, "
    "rc.id AS reused_candidate_id, rc.experiment_id AS reused_experiment_id, re.name AS reused_experiment "
    "FROM run r JOIN candidate c ON r.candidate_id = c.id "
    # 0014: the earlier run a linking run reuses, its candidate and experiment (dse.records.reuse)
    "LEFT OUTER JOIN run rr ON rr.id = r.reused_run_id LEFT OUTER JOIN candidate rc ON rc.id = rr.candidate_id "
    "LEFT OUTER JOIN experiment re ON re.id = rc.experiment_id{where} ORDER BY r.id")
RUN_TIMES = ("started_at", "finished_at", "heartbeat_at")
# A linking run's metrics are the run's it reuses (run.reused_run_id, dse.records.reuse);
# a run's metrics are one packed row (run_metrics, 0015) with its layout (`unpacked`).
RUN_METRICS = ("SELECT l.layout, p.figures FROM run_metrics p JOIN metric_layout l ON l.id = p.layout_id "
               "WHERE p.run_id = (SELECT coalesce(reused_run_id, id) FROM run WHERE id = :run_id)")
# A candidate's runs with metrics, by id, each with its packed metrics.
TOTAL_METRICS = (
    "SELECT r.id AS run_id, l.layout, p.figures FROM run r JOIN run_metrics p ON p.run_id = coalesce(r.reused_run_id, r.id) "
    "JOIN metric_layout l ON l.id = p.layout_id WHERE r.candidate_id = :candidate_id ORDER BY r.id")
METRIC_FIELDS = ("kind", "name", "value", "unit", "scope", "scope_key")


def layout_entries(text: str) -> list[tuple]:
    """A metric_layout's entries: (kind, name, unit, scope, scope_key) each, in recorded order."""
    return [tuple(entry) for entry in json.loads(text)]


def unpacked(layout: str, figures: bytes) -> list[tuple]:
    """A run's packed metrics (run_metrics.figures with its layout's text) as metric rows:
    (kind, name, value, unit, scope, scope_key) each, in recorded order."""
    return unpack_entries(layout_entries(layout), figures)


def unpack_entries(entries: Sequence[tuple], figures: bytes) -> list[tuple]:
    """`unpacked` of a layout already read into its entries (kind, name, unit, scope, scope_key)."""
    figures = bytes(figures)
    values = struct.unpack(f"{FIGURES_BYTE_ORDER}{len(figures) // 8}d", figures)
    return [(k, n, v, u, s, key) for (k, n, u, s, key), v in zip(entries, values)]


def candidate(run: Run, candidate_id: int) -> dict[str, Any] | None:
    """One candidate as a dict, or None: its row (config, mapping and diff as Python
    values, created_at aware UTC), its experiment's name (`experiment`), and `is_baseline`."""
    found = _dicts(run, CANDIDATE, {"id": int(candidate_id)}, "created_at")
    if not found:
        return None
    (row,) = found
    for column in _CANDIDATE_JSON:
        row[column] = json.loads(row[column])
    row["is_baseline"] = row.pop("baseline_candidate_id") == row["id"]
    return row


def runs(run: Run, experiment_id: int | None = None, candidate_id: int | None = None
         ) -> tuple[Sequence[str], list[tuple]]:
    """(columns, rows): runs by id with their provenance (`RUNS`' columns), of every
    experiment, of one and/or of one candidate, as the driver gives them (see `run_dicts`)."""
    where, params = _equal(c__experiment_id=experiment_id, r__candidate_id=candidate_id)
    return run(RUNS.format(where=where), params)


def reused_runs(run: Run, experiment_id: int) -> list[dict[str, Any]]:
    """The experiment's linking runs (those reusing an earlier run's evidence), by id, as
    `run_dicts` gives them: the report's list, without reading every run of a big sweep."""
    where, params = _equal(c__experiment_id=experiment_id)
    return run_dicts(*run(RUNS.format(where=where + " AND r.reused_run_id IS NOT NULL"), params))


def run_dicts(columns: Sequence[str], rows: list[tuple]) -> list[dict[str, Any]]:
    """`runs`' rows as dicts: timestamps aware UTC, git_dirty a bool (SQLite's 0/1) or None,
    versions as its JSON text; `reused_from`, the sentence naming the evidence a linking run
    reuses ("" for a run that evaluated)."""
    out = [dict(zip(columns, row)) for row in rows]
    for row in out:
        row["reused_from"] = reused_from(row)
        for column in RUN_TIMES:
            row[column] = timestamp(row[column])
        row["git_dirty"] = None if row["git_dirty"] is None else bool(row["git_dirty"])
    return out


def reused_from(row: dict[str, Any]) -> str:
    """How every view names the evidence a run reuses (a `runs` row): "reused from experiment
    'E' (3), candidate c12 (run r40)"; "" for a run that evaluated its candidate."""
    if row.get("reused_run_id") is None:
        return ""
    return (f"reused from experiment '{row['reused_experiment']}' ({row['reused_experiment_id']}), "
            f"candidate c{row['reused_candidate_id']} (run r{row['reused_run_id']})")


def run_row(run: Run, run_id: int) -> dict[str, Any] | None:
    """One run's row as a dict (versions as a Python value, see `run_dicts`), or None."""
    where, params = _equal(r__id=run_id)
    found = run_dicts(*run(RUNS.format(where=where), params))
    if not found:
        return None
    (row,) = found
    row["versions"] = json.loads(row["versions"])
    return row


def run_metrics(run: Run, run_id: int) -> list[dict[str, Any]]:
    """A run's metrics in the order recorded: kind, name, value, unit, scope, scope_key."""
    found = run(RUN_METRICS, {"run_id": int(run_id)})[1]
    return [dict(zip(METRIC_FIELDS, row)) for layout, figures in found for row in unpacked(layout, figures)]


def total_metrics(run: Run, candidate_id: int) -> list[dict[str, Any]]:
    """A candidate's total metrics (kind, name, value, unit, run_id), of each kind those of
    its latest run that recorded that kind, by run and then as recorded."""
    rows = [{"kind": k, "name": n, "value": v, "unit": u, "run_id": run_id}
            for run_id, layout, figures in run(TOTAL_METRICS, {"candidate_id": int(candidate_id)})[1]
            for k, n, v, u, s, _ in unpacked(layout, figures) if s == "total"]
    latest: dict[str, int] = {}
    for row in rows:
        latest[row["kind"]] = max(latest.get(row["kind"], row["run_id"]), row["run_id"])
    return [row for row in rows if row["run_id"] == latest[row["kind"]]]


# ---- what an acceptance judgement reads (dse.runner.acceptance.judge_experiment) --------------

# Each candidate of an experiment, by id, with the status of its latest analytical run (the
# model's feasibility: None when it has none).
ANALYTICAL_STATUSES = (
    "SELECT c.id, cr.status FROM candidate c LEFT OUTER JOIN candidate_run cr ON cr.candidate_id = c.id "
    "AND cr.role = 'analytical' WHERE {which} ORDER BY c.id")
# Candidates' latest total figures of some kinds (latest_figures: of each kind, those of the
# candidate's latest run that recorded it, packed one row a candidate and kind), of an
# experiment's candidates or of some.
# (Each row's layout text by its id, 0019: figures_layout has a handful of rows.)
FIGURES = ("SELECT lf.candidate_id, lf.kind, fl.layout, lf.figures, lf.run_id FROM latest_figures lf "
           "JOIN figures_layout fl ON fl.id = lf.layout_id{join} "
           "WHERE {which} AND lf.kind IN ({kinds}) ORDER BY lf.candidate_id")
# latest_figures.figures: the values as little-endian float64 in the layout's names' order
# (dse.records.latest packs them).
FIGURES_BYTE_ORDER = "<"
# The candidates at a workload point (`mapping.workload`): those whose mapping's text names
# one (read as JSON and checked after), with their hash.
# (0018: each distinct mapping text once: the pattern is matched once a text, not a candidate.)
WORKLOAD_POINTS = ("SELECT c.id, c.hash, tm.text AS mapping FROM candidate c JOIN candidate_text tm ON tm.id = c.mapping_id "
                   "WHERE c.experiment_id = :experiment_id AND tm.text LIKE :pattern ORDER BY c.id")


def _listed(prefix: str, values: Sequence[Any], params: dict[str, Any]) -> str:
    """":prefix0, :prefix1, ...", the values added to `params` (an IN list both drivers read)."""
    for i, value in enumerate(values):
        params[f"{prefix}{i}"] = value
    return ", ".join(f":{prefix}{i}" for i in range(len(values)))


def analytical_statuses(run: Run, experiment_id: int | None = None, candidate_ids: Sequence[int] | None = None
                        ) -> list[tuple[int, str | None]]:
    """[(candidate id, status of its latest analytical run or None)] of an experiment's
    candidates, or of the candidates named (any experiment's), by id."""
    params: dict[str, Any] = {}
    if candidate_ids is not None:
        if not candidate_ids:
            return []
        which = f"c.id IN ({_listed('c', [int(c) for c in candidate_ids], params)})"
    else:
        which, params["experiment_id"] = "c.experiment_id = :experiment_id", int(experiment_id)
    return [(int(c), s) for c, s in run(ANALYTICAL_STATUSES.format(which=which), params)[1]]


def figure_columns(run: Run, kinds: Sequence[str], names: Sequence[str], experiment_id: int | None = None,
                   candidate_ids: Sequence[int] | None = None, with_runs: bool = False
                   ) -> dict[str, tuple[Any, ...]]:
    """{kind: (candidate ids, {name: values})}: the latest total figures of these kinds and
    names (NaN where a candidate's run lacks one) of an experiment's candidates, or of the
    candidates named (any experiment's), ids ascending; numpy arrays, unpacked one layout at
    a time (100,000 candidates' figures without a Python step each). `with_runs`: each
    kind's tuple also holds the run ids the figures are of."""
    import numpy as np

    if not kinds or (experiment_id is None and not candidate_ids):
        return {}
    params: dict[str, Any] = {}
    if candidate_ids is not None:
        join, which = "", f"lf.candidate_id IN ({_listed('c', [int(c) for c in candidate_ids], params)})"
    else:
        join, which = " JOIN candidate c ON lf.candidate_id = c.id", "c.experiment_id = :experiment_id"
        params["experiment_id"] = int(experiment_id)
    rows = run(FIGURES.format(join=join, which=which, kinds=_listed("k", list(kinds), params)), params)[1]
    out = {}
    wanted = list(names)
    for kind in kinds:
        mine = [r for r in rows if r[1] == kind]
        ids = np.fromiter((r[0] for r in mine), dtype=np.int64, count=len(mine))
        columns = {name: np.full(len(mine), np.nan) for name in wanted}
        layouts: dict[str, list[int]] = {}
        for i, row in enumerate(mine):
            layouts.setdefault(row[2], []).append(i)
        for layout, at in layouts.items():
            held = json.loads(layout)[2]
            values = np.frombuffer(b"".join(bytes(mine[i][3]) for i in at), dtype=FIGURES_BYTE_ORDER + "f8")
            values = values.reshape(len(at), len(held))
            for j, name in enumerate(held):
                if name in columns:
                    columns[name][at] = values[:, j]
        out[kind] = (ids, columns)
        if with_runs:
            out[kind] += (np.fromiter((r[4] for r in mine), dtype=np.int64, count=len(mine)),)
    return out


def workload_points(run: Run, experiment_id: int) -> list[tuple[int, str, dict]]:
    """[(candidate id, hash, workload point)] of an experiment's candidates run at a workload
    point (`mapping.workload` set), by id."""
    rows = run(WORKLOAD_POINTS, {"experiment_id": int(experiment_id), "pattern": '%"workload"%'})[1]
    out = []
    for ident, digest, mapping in rows:
        point = (json.loads(mapping) or {}).get("workload") if mapping else None
        if point:
            out.append((int(ident), digest, point))
    return out


# ---- the store's state, and what a rerun's shortcut reads (dse.records.recorded) --------------

# The schema revision the store is at (one row at a store's head), and its runs in flight: a
# light reader answers only a store at the head with none (a Store's open would upgrade it, or
# reap the dead ones).
SCHEMA_VERSIONS = "SELECT version_num FROM alembic_version"
RUNS_IN_FLIGHT = "SELECT count(*) FROM run WHERE status = 'running'"
# An experiment by name, with what a rerun compares (its spec, workload, status, criteria and
# the newest run its sweep's last judgement covered, experiment.judged_run_id, 0013).
RERUN_EXPERIMENT = ("SELECT id, spec_hash, workload_hash, status, CAST(acceptance AS TEXT) AS acceptance, "
                    "judged_run_id FROM experiment WHERE name = :name")
SWEEP_LOCKS = "SELECT count(*) FROM sweep_lock WHERE experiment_id = :experiment_id"
GRAPH_DUMPS = "SELECT count(*) FROM artifact WHERE experiment_id = :experiment_id AND role = 'graph_dump'"
# Each candidate's hash and why, with the status of its latest analytical run (None without
# one), from the runs themselves: what the sweep's resume reads (`Store.candidates(...,
# stage="analytical")`), whatever candidate_run holds of a store edited by hand.
ANALYTICAL_BY_HASH = (
    "SELECT c.hash, c.why, r.status FROM candidate c LEFT OUTER JOIN (SELECT candidate_id, max(id) AS run_id "
    "FROM run WHERE stage = 'analytical' GROUP BY candidate_id) l ON l.candidate_id = c.id "
    "LEFT OUTER JOIN run r ON r.id = l.run_id WHERE c.experiment_id = :experiment_id")
# Candidates with an emulator run of one of some statuses.
EMULATOR_DONE = ("SELECT DISTINCT c.hash FROM candidate c JOIN run r ON r.candidate_id = c.id "
                 "WHERE c.experiment_id = :experiment_id AND r.stage = 'emulator' AND r.status IN ({statuses})")
LATEST_PROPOSAL = ("SELECT verdict, rationale, created_at FROM decision WHERE experiment_id = :experiment_id "
                   "AND kind = 'proposal' ORDER BY id DESC LIMIT 1")
# The newest start, the newest finish (or start of a run not finished) and the newest id of the
# experiment's runs (SQLite's two-argument max is PostgreSQL's greatest: the larger is taken after).
NEWEST_RUN = ("SELECT max(r.started_at), max(coalesce(r.finished_at, r.started_at)), max(r.id) FROM run r "
              "JOIN candidate c ON c.id = r.candidate_id WHERE c.experiment_id = :experiment_id")


def schema_versions(run: Run) -> list[str]:
    return [row[0] for row in run(SCHEMA_VERSIONS, {})[1]]


def runs_in_flight(run: Run) -> int:
    return int(run(RUNS_IN_FLIGHT, {})[1][0][0])


def rerun_experiment(run: Run, name: str) -> dict[str, Any] | None:
    """The experiment `name`'s id, spec_hash, workload_hash, status, acceptance (a list) and
    judged_run_id, or None."""
    found = _dicts(run, RERUN_EXPERIMENT, {"name": name})
    if not found:
        return None
    (row,) = found
    row["acceptance"] = json.loads(row["acceptance"]) if row["acceptance"] else []
    return row


def count(run: Run, sql: str, experiment_id: int) -> int:
    """A `SELECT count(*)` of one experiment's rows (`SWEEP_LOCKS`, `GRAPH_DUMPS`)."""
    return int(run(sql, {"experiment_id": int(experiment_id)})[1][0][0])


def analytical_by_hash(run: Run, experiment_id: int) -> list[tuple[str, str | None, str | None]]:
    """[(hash, why, status of its latest analytical run or None)] of an experiment's candidates."""
    return [tuple(r) for r in run(ANALYTICAL_BY_HASH, {"experiment_id": int(experiment_id)})[1]]


def emulator_done(run: Run, experiment_id: int, statuses: Sequence[str]) -> set[str]:
    """The hashes of an experiment's candidates with an emulator run of one of `statuses`."""
    params: dict[str, Any] = {"experiment_id": int(experiment_id)}
    listed = _listed("s", sorted(statuses), params)
    if not listed:
        return set()
    return {h for (h,) in run(EMULATOR_DONE.format(statuses=listed), params)[1]}


def latest_proposal(run: Run, experiment_id: int) -> tuple[str, str, Any] | None:
    """The experiment's latest proposal (verdict, rationale, created_at as the driver gives it:
    SQLite's text, PostgreSQL's aware datetime), or None."""
    found = run(LATEST_PROPOSAL, {"experiment_id": int(experiment_id)})[1]
    return tuple(found[0]) if found else None


def newest_run(run: Run, experiment_id: int) -> tuple[Any, int | None]:
    """(the newest start or finish of the experiment's runs, as the driver gives it; the newest
    run id), (None, None) without runs."""
    started, finished, newest_id = run(NEWEST_RUN, {"experiment_id": int(experiment_id)})[1][0]
    return (None if started is None else max(started, finished)), newest_id


# ---- calibrations (dse.records.calibrations: which one the model uses) ------------------------

# Calibrations, newest first (of a chip, of some sources, with some ids: `{where}`).
CALIBRATIONS = (
    "SELECT id, chip, chip_hash, source, model_version, emulator_version, CAST(constants AS TEXT) AS constants, "
    "CAST(error_before AS TEXT) AS error_before, CAST(error_after AS TEXT) AS error_after, "
    "CAST(points AS TEXT) AS points, command, git_commit, created_at FROM calibration{where} "
    "ORDER BY created_at DESC, id DESC")
_CALIBRATION_JSON = ("constants", "error_before", "error_after", "points")


def calibrations(run: Run, chip: str | None = None, sources: Sequence[str] | None = None,
                 ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Every calibration (of one chip, of these sources, with these ids, when given), newest
    first: JSON columns as Python values, created_at aware UTC."""
    params: dict[str, Any] = {}
    conditions = []
    if chip is not None:
        conditions.append("chip = :chip")
        params["chip"] = chip
    for column, values, prefix in (("source", sources, "s"), ("id", ids, "i")):
        if values is not None:
            if not values:
                return []
            conditions.append(f"{column} IN ({_listed(prefix, list(values), params)})")
    where = " WHERE " + " AND ".join(conditions) if conditions else ""
    rows = _dicts(run, CALIBRATIONS.format(where=where), params, "created_at")
    for row in rows:
        for column in _CALIBRATION_JSON:
            row[column] = json.loads(row[column])
    return rows


def latest_calibration(run: Run, chip: str) -> dict[str, Any] | None:
    """The newest cycles calibration of `chip` (by name: fitted to emulator, RTL or FPGA
    cycles), or None."""
    found = calibrations(run, chip, CYCLE_CALIBRATION_SOURCES)
    return found[0] if found else None


def latest_ppa_records(run: Run, chip: str) -> list[dict[str, Any]]:
    """The newest calibration of `chip` of each PPA source (synth_area, power) it has, in
    `PPA_CALIBRATION_SOURCES` order."""
    newest: dict[str, dict[str, Any]] = {}
    for cal in calibrations(run, chip, PPA_CALIBRATION_SOURCES):
        newest.setdefault(cal["source"], cal)
    return [newest[s] for s in PPA_CALIBRATION_SOURCES if s in newest]
