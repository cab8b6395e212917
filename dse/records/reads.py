"""Reads of the record store, each on a connection the caller opened: pandas DataFrames,
with JSON columns as canonical JSON strings and timestamps as UTC; and the lookups that
resolve an experiment's name or a row's id, or say what would have matched."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy import JSON, Connection, DateTime, String, Text, case, cast, func, select, text
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session, aliased
from sqlalchemy.sql.functions import FunctionElement

from dse.identity import canonical_json
from dse.records import latest, packed, sql_reads
from dse.records.checks import RecordNotFound, as_id
from dse.records.not_found import not_found as not_found_in
from dse.records.liveness import as_utc
from dse.records.reuse import metric_run
from dse.records.schema import (
    METRIC_KINDS,
    RUN_STATUSES,
    Artifact,
    Candidate,
    CandidateRun,
    CandidateText,
    Experiment,
    FiguresLayout,
    LatestFigures,
    Run,
    RunMetrics,
    check_choice,
)

_T = TypeVar("_T")


class _LazyPandas:
    """pandas, imported on first use: `dse history` and a sweep's writes never pay its
    import time (most of a short command's run)."""

    def __getattr__(self, name: str) -> Any:
        import pandas

        return getattr(pandas, name)


pd = _LazyPandas()

# The stage whose runs produce each kind of evidence (metric_table reports that stage's status).
STAGE_OF_KIND = {"source_counts": "analytical", "analytical": "analytical", "emulator_cycles": "emulator",
                 "emulator_host_time": "emulator", "numerics": "emulator", "rtl_cycles": "imported",
                 "fpga_cycles": "imported", "synth_area": "imported", "power": "imported"}

# ---- lookups ------------------------------------------------------------------------


def _shown_url(connection: Connection) -> str:
    return connection.engine.url.render_as_string(hide_password=True)


def get(session: Session, model: type[_T], key: int) -> _T:
    """The row of `model` with id `key`, or RecordNotFound."""
    found = session.get(model, as_id(key))
    if found is None:
        table = model.__tablename__  # type: ignore[attr-defined]
        raise not_found(session.connection(), table, key)
    return found


def not_found(connection: Connection, what: str, value: Any) -> RecordNotFound:
    """The error for a `what` (experiment, candidate, run, ...) named `value` that the
    store lacks, saying what it has (`dse.records.not_found`)."""
    return not_found_in(text_runner(connection), _shown_url(connection), what, value)


def candidate_not_found(connection: Connection, value: Any, experiment_id: int | None = None) -> RecordNotFound:
    """The error for a candidate id the store (or experiment) lacks."""
    return not_found_in(text_runner(connection), _shown_url(connection), "candidate", value, experiment_id)


def experiment_id_of(connection: Connection, name_or_id: str | int) -> int:
    """The id of an experiment named by its name or id (also an id typed as text)."""
    found = sql_reads.experiment_id(text_runner(connection), name_or_id)
    if found is None:
        raise not_found(connection, "experiment", name_or_id)
    return found


def experiment_exists(connection: Connection, experiment_id: Any) -> bool:
    return connection.scalar(select(Experiment.id).where(Experiment.id == as_id(experiment_id))) is not None


def run_states(connection: Connection, run_ids: list[int]) -> dict[int, tuple[str, str | None]]:
    """run id -> (status, error) of those of `run_ids` that exist."""
    state: dict[int, tuple[str, str | None]] = {}
    for i in range(0, len(run_ids), 500):  # stay under the bound-parameter limit
        state.update((row.id, (row.status, row.error)) for row in connection.execute(
            select(Run.id, Run.status, Run.error).where(Run.id.in_(run_ids[i:i + 500]))))
    return state


# ---- experiments, candidates, runs ----------------------------------------------------


def text_runner(connection: Connection) -> sql_reads.Run:
    """`sql_reads`' way to run its SQL on this connection: SQLAlchemy's `text()` (its named
    parameters become the driver's), the driver's rows as they are."""

    def run(sql: str, params: dict[str, Any]) -> tuple[list[str], list[tuple]]:
        result = connection.execute(text(sql), params)
        try:
            return list(result.keys()), result.cursor.fetchall()
        finally:
            result.close()

    return run


def experiment_summaries(connection: Connection) -> list[dict[str, Any]]:
    """What `experiments_frame` holds, as plain dicts: no pandas (a quick `dse history`);
    see `sql_reads.experiment_summaries`."""
    return sql_reads.experiment_summaries(text_runner(connection))


def outcome_counts(connection: Connection, experiment_id: int | None = None) -> dict[tuple[int, str], int]:
    """{(experiment id, status): candidates}, see `sql_reads.outcome_counts`
    (`outcome_counts_from_runs` is the same from the runs themselves)."""
    return sql_reads.outcome_counts(text_runner(connection), experiment_id)


def revision(connection: Connection) -> tuple[int, int, int, int]:
    """A token of the store's runs and candidates that changes with every write a figure, an
    outcome or a judgement reads: a candidate or run added (the largest id), a run finished
    or marked crashed (a run is only ever updated out of "running" or an abandoned
    "crashed": the counts of the two change with every such update). Index reads only."""
    found = connection.exec_driver_sql(
        "SELECT (SELECT max(id) FROM run), (SELECT max(id) FROM candidate), "
        "(SELECT count(*) FROM run WHERE status = 'running'), (SELECT count(*) FROM run WHERE status = 'crashed')"
    ).one()
    return tuple(int(v or 0) for v in found)  # type: ignore[return-value]


def latest_status_counts(connection: Connection, experiment_id: int) -> list[tuple[str, int]]:
    """[(status, candidates)] by latest run, most first: see `sql_reads.latest_status_counts`."""
    return sql_reads.latest_status_counts(text_runner(connection), experiment_id)


def reason_groups(connection: Connection, experiment_id: int) -> list[tuple[str, str, int]]:
    """[(status, reason, candidates)], most first: see `sql_reads.reason_groups`."""
    return sql_reads.reason_groups(text_runner(connection), experiment_id)


def outcome_counts_from_runs(connection: Connection, experiment_id: int | None = None) -> dict[tuple[int, str], int]:
    """`outcome_counts` computed from the runs, as before 0011 (the tests' and benches'
    reference for candidate_run)."""
    outcome_run = (
        select(func.coalesce(func.max(case((Run.status != "pruned", Run.id))), func.max(Run.id)).label("run_id"))
        .group_by(Run.candidate_id)
    )
    if experiment_id is not None:
        outcome_run = outcome_run.join(Candidate, Run.candidate_id == Candidate.id).where(
            Candidate.experiment_id == experiment_id)
    outcome_run = outcome_run.subquery()
    stmt = (select(Candidate.experiment_id, Run.status, func.count())
            .join(outcome_run, Run.id == outcome_run.c.run_id)
            .join(Candidate, Run.candidate_id == Candidate.id))
    return {(e, status): int(n) for e, status, n in
            connection.execute(stmt.group_by(Candidate.experiment_id, Run.status))}


def experiments_frame(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    """`experiment_summaries` as a DataFrame, with its dtypes."""
    columns = [
        "id", "name", "hypothesis", "status", "workload_recipe", "created_at", "n_candidates",
        *(f"n_{s}" for s in RUN_STATUSES), "n_emulated", "n_decisions", "n_notes", "proposed_verdict",
        "latest_verdict", "latest_candidate_id",
    ]  # fmt: skip
    frame = pd.DataFrame(summaries, columns=columns)
    frame["proposed_verdict"] = frame["proposed_verdict"].astype(object)
    counts = ["n_candidates", *(f"n_{s}" for s in RUN_STATUSES), "n_emulated", "n_decisions", "n_notes"]
    frame[counts] = frame[counts].astype("int64")
    frame["id"] = frame["id"].astype("int64")
    frame["latest_verdict"] = frame["latest_verdict"].astype(object)
    frame["latest_candidate_id"] = frame["latest_candidate_id"].astype("Int64")
    return utc(frame, "created_at")


def experiment(connection: Connection, name_or_id: str | int) -> dict[str, Any]:
    """One experiment's row as a dict (JSON columns as Python values)."""
    return sql_reads.experiment(text_runner(connection), experiment_id_of(connection, name_or_id))


def candidate(connection: Connection, candidate_id: int) -> dict[str, Any]:
    """One candidate as a dict: its row (JSON as Python values), experiment name, and
    whether it is the baseline (see `sql_reads.candidate`)."""
    found = sql_reads.candidate(text_runner(connection), as_id(candidate_id))
    if found is None:
        raise candidate_not_found(connection, candidate_id)
    return found


def run_row(connection: Connection, run_id: int) -> dict[str, Any]:
    """One run's row as a dict, with its experiment id (see `sql_reads.run_row`)."""
    found = sql_reads.run_row(text_runner(connection), as_id(run_id))
    if found is None:
        raise not_found(connection, "run", run_id)
    return found


def run(connection: Connection, run_id: int) -> dict[str, Any]:
    """One run as a dict, with its experiment id and its metrics (long form)."""
    record = run_row(connection, run_id)
    columns = ["kind", "name", "value", "unit", "scope", "scope_key"]
    metrics_frame = pd.DataFrame(run_metric_rows(connection, record["id"]), columns=columns)
    metrics_frame["value"] = metrics_frame["value"].astype("float64")
    record["metrics"] = metrics_frame
    return record


def run_metric_rows(connection: Connection, run_id: int) -> list[dict[str, Any]]:
    """A run's metrics in the order recorded, as plain dicts (see `sql_reads.run_metrics`)."""
    return sql_reads.run_metrics(text_runner(connection), run_id)


def candidates(connection: Connection, experiment_id: int, stage: str | None = None, lean: bool = False,
               through_rows: bool = False, limit: int | None = None) -> pd.DataFrame:
    """One row per candidate of an experiment (by id), with the stage, status and reason
    of its latest run (of `stage`, when given). `lean`: without the config, mapping and
    creation time (the bulk of the text a large experiment's rows carry); `limit`: the
    first `limit` candidates only.

    The rows are read as the driver gives them (`plain_frame`: every column is a number,
    text or NULL here); `through_rows`: through SQLAlchemy's rows instead, as before (the
    tests' and benches' reference: both must agree)."""
    if through_rows:
        config, mapping = aliased(CandidateText), aliased(CandidateText)
        columns = (
            Candidate.id, Candidate.hash, Candidate.origin,
            *(() if lean else (config.text.label("config"), mapping.text.label("mapping"))),
            raw(Candidate.diff),
            *(() if lean else (raw(Candidate.created_at),)),
            Candidate.why, Candidate.notes,
        )  # fmt: skip
        # Each candidate's latest run (of `stage`, when given) from the runs, as a grouped
        # derived table joined once (the way before 0011).
        runs_of = select(Run.candidate_id, func.max(Run.id).label("run_id")).join(
            Candidate, Run.candidate_id == Candidate.id).where(Candidate.experiment_id == experiment_id)
        if stage is not None:
            runs_of = runs_of.where(Run.stage == stage)
        latest = runs_of.group_by(Run.candidate_id).subquery()
        stmt = select(*columns, latest.c.run_id, Run.stage, Run.status, Run.reason).select_from(Candidate)
        if not lean:
            stmt = stmt.join(config, config.id == Candidate.config_id).join(mapping, mapping.id == Candidate.mapping_id)
        stmt = (stmt.outerjoin(latest, latest.c.candidate_id == Candidate.id)
                .outerjoin(Run, Run.id == latest.c.run_id))
        stmt = stmt.where(Candidate.experiment_id == experiment_id).order_by(Candidate.id).limit(limit)
        frame = frame_of(connection, stmt)
    else:
        # candidate_run: one key probe a candidate (sql_reads.candidates), the driver's rows.
        columns, rows = sql_reads.candidates(text_runner(connection), experiment_id, stage or "latest", lean, limit)
        frame = pd.DataFrame.from_records(rows, columns=list(columns))
    baseline = connection.scalar(
        select(Experiment.baseline_candidate_id).where(Experiment.id == experiment_id)
    )
    frame.insert(3, "is_baseline", frame["id"] == baseline)
    frame["run_id"] = frame["run_id"].astype("Int64")
    return frame if lean else utc(frame, "created_at")


def candidate_rows(connection: Connection, experiment_id: int, limit: int | None = None) -> list[dict[str, Any]]:
    """`candidates(..., lean=True)` as plain dicts (diff as its JSON text), without is_baseline."""
    columns, rows = sql_reads.candidates(text_runner(connection), experiment_id, "latest", True, limit)
    return [dict(zip(columns, row)) for row in rows]


def runs(connection: Connection, experiment: str | int | None = None, candidate: int | None = None) -> pd.DataFrame:
    """Runs with their provenance, filtered by experiment (name or id) and/or candidate id
    (see `sql_reads.runs`), JSON columns as their text."""
    experiment_id = None if experiment is None else experiment_id_of(connection, experiment)
    candidate_id = None if candidate is None else as_id(candidate)
    columns, rows = sql_reads.runs(text_runner(connection), experiment_id, candidate_id)
    frame = pd.DataFrame.from_records(rows, columns=list(columns))
    frame["seed"] = frame["seed"].astype("Int64")
    frame["pid"] = frame["pid"].astype("Int64")
    for column in ("reused_run_id", "reused_candidate_id", "reused_experiment_id"):  # 0014 (dse.records.reuse)
        frame[column] = frame[column].astype("Int64")
    frame["reused_from"] = [sql_reads.reused_from(dict(zip(columns, row))) for row in rows]
    frame["git_dirty"] = frame["git_dirty"].astype("boolean")  # SQLite's 0/1 (NaN for NULL), PostgreSQL's bools
    return utc(frame, "started_at", "finished_at", "heartbeat_at")


def settled_run_id(connection: Connection, experiment_id: int) -> int | None:
    """See `Store.settled_run_id`."""
    # Runs in flight from run's status index; the newest run as the largest of the candidates'
    # latest (candidate_run): neither reads a run row (half the time of joining the runs).
    running = connection.scalar(select(func.count()).select_from(Run).where(
        Run.status == "running",
        Run.candidate_id.in_(select(Candidate.id).where(Candidate.experiment_id == experiment_id))))
    if running:
        return None
    return connection.scalar(select(func.max(CandidateRun.run_id)).where(
        CandidateRun.experiment_id == experiment_id, CandidateRun.role == "latest"))


def run_rows(connection: Connection, candidate: int) -> list[dict[str, Any]]:
    """A candidate's runs, by id, as plain dicts (`runs(candidate=...)`; see `sql_reads.run_dicts`)."""
    return sql_reads.run_dicts(*sql_reads.runs(text_runner(connection), None, as_id(candidate)))


def total_metric_rows(connection: Connection, candidate: int) -> list[dict[str, Any]]:
    """A candidate's total metrics from its latest run of each kind (see `sql_reads.total_metrics`)."""
    return sql_reads.total_metrics(text_runner(connection), as_id(candidate))


# ---- metrics ----------------------------------------------------------------------------


def metrics(connection: Connection, experiment_id: int, kind: str | None, scope: str | None = None) -> pd.DataFrame:
    """Long form: one row per metric of an experiment (by run, then as recorded), with the
    run's stage and model/emulator versions."""
    if kind is not None:
        check_choice("metric.kind", kind, METRIC_KINDS)
    stmt = (
        select(Run.candidate_id, Run.id.label("run_id"), Run.stage, Run.model_version, Run.emulator_version,
               RunMetrics.layout_id, RunMetrics.figures)
        .select_from(RunMetrics)
        .join(Run, RunMetrics.run_id == metric_run(Run))
        .join(Candidate, Run.candidate_id == Candidate.id)
        .where(Candidate.experiment_id == experiment_id)
    )
    # Sorted here, not in SQL: a sort of the fetched rows is cheaper than the
    # database's temporary B-tree over the joined rows.
    runs = frame_of(connection, stmt).sort_values("run_id", kind="stable").reset_index(drop=True)
    frame = packed.explode(connection, runs, kinds=None if kind is None else [kind], scope=scope)
    columns = ["candidate_id", "run_id", "stage", "kind", "name", "value", "unit", "scope", "scope_key",
               "model_version", "emulator_version"]
    frame = frame[columns]
    frame["value"] = frame["value"].astype("float64")
    return frame


def unpacked_frame(connection: Connection, stmt: Any, kinds: Any = None, scope: str | None = None,
                    names: Any = None, scopes: Any = None) -> pd.DataFrame:
    """The rows of `stmt` (a select of some columns and RunMetrics' layout_id and figures,
    one row a run) in long form: `packed.explode`, the rows read as the driver gives them."""
    return packed.explode(connection, plain_frame(connection, stmt), kinds, scope, names, scopes)


def metric_table(connection: Connection, experiment: str | int, kind: str, scope: str = "total",
                 from_metrics: bool = False) -> pd.DataFrame:
    """Wide form, see `Store.metric_table`. Total figures come from latest_figures
    (`_total_table`); `from_metrics`: from the metric rows instead, as before 0011 (the
    benches' and tests' reference: all must agree).

    Other scopes: two plain reads, each one pass of the database's indexes: the candidates with their
    stage's latest run, and the metrics of `kind` at `scope` in long form; pandas keeps
    each candidate's latest run with such metrics and pivots. The rows are read as the
    driver gives them (`plain_frame`): on 100,000 candidates building SQLAlchemy rows, a
    second pass for the latest run and a GROUP BY in SQL cost more than the pivot."""
    experiment_id = experiment_id_of(connection, experiment)
    stage = STAGE_OF_KIND.get(kind)
    keys = ["candidate_id"] if scope == "total" else ["candidate_id", "scope_key"]
    fixed = [
        "candidate_id", "hash", "origin", "is_baseline", "stage", "status", "reason",
        "metric_run_id", "model_version", "emulator_version", *keys[1:],
    ]  # fmt: skip
    if scope == "total" and not from_metrics:
        return _total_table(connection, experiment_id, kind, stage, fixed)
    runs_of = select(Run.candidate_id, func.max(Run.id).label("run_id")).join(
        Candidate, Run.candidate_id == Candidate.id).where(Candidate.experiment_id == experiment_id)
    if stage is not None:
        runs_of = runs_of.where(Run.stage == stage)
    latest = runs_of.group_by(Run.candidate_id).subquery()
    rows = plain_frame(connection, (
        select(Candidate.id.label("candidate_id"), Candidate.hash, Candidate.origin, Run.stage, Run.status,
               Run.reason)
        .outerjoin(latest, latest.c.candidate_id == Candidate.id)
        .outerjoin(Run, Run.id == latest.c.run_id)
        .where(Candidate.experiment_id == experiment_id)
        .order_by(Candidate.id)
    ))  # fmt: skip
    baseline = connection.scalar(select(Experiment.baseline_candidate_id).where(Experiment.id == experiment_id))
    rows.insert(3, "is_baseline", rows["candidate_id"] == baseline)
    long = unpacked_frame(connection, (
        select(Run.candidate_id, Run.id.label("metric_run_id"), Run.model_version, Run.emulator_version,
               RunMetrics.layout_id, RunMetrics.figures)
        .select_from(RunMetrics).join(Run, RunMetrics.run_id == metric_run(Run))
        .join(Candidate, Run.candidate_id == Candidate.id)
        .where(Candidate.experiment_id == experiment_id)
    ), kinds=[kind], scope=scope)  # fmt: skip
    long = long[["candidate_id", "metric_run_id", "model_version", "emulator_version",
                 *(["scope_key"] if scope != "total" else []), "name", "value"]]
    names = sorted(long["name"].unique())
    clash = sorted(set(names) & set(fixed))
    if clash:
        raise ValueError(f"metric names {clash} clash with metric_table's own columns")
    # A candidate's numbers come from its latest run with such metrics (max, as before, over
    # one name repeated in a run).
    long = long[long["metric_run_id"] == long.groupby("candidate_id")["metric_run_id"].transform("max")]
    values = (long.astype({"value": "float64"}).groupby([*keys, "name"], sort=False)["value"].max()
              .unstack("name").reindex(columns=names))
    values.columns = list(names)  # the columns' own name ("name") goes
    # the run's versions as read (text or None), one row per candidate (and scope_key)
    runs = long[["candidate_id", "metric_run_id", "model_version", "emulator_version", *keys[1:]]].drop_duplicates(keys)
    runs = runs.sort_values(keys, kind="stable")  # per candidate, its scope keys in order (as GROUP BY gave them)
    table = rows.merge(runs.merge(values.reset_index(), on=keys), on="candidate_id", how="left")
    for name in names:
        table[name] = table[name].astype("float64")
    table["metric_run_id"] = table["metric_run_id"].astype("Int64")
    return table[fixed + names]


def _total_table(connection: Connection, experiment_id: int, kind: str, stage: str | None,
                 fixed: list[str]) -> pd.DataFrame:
    """metric_table at scope "total" from latest_figures: one query, one row per candidate
    (its row, its stage's run from candidate_run, its packed figures: three key probes,
    whatever the number of figures); the figures are unpacked by numpy and the versions
    taken from the layout, once per distinct layout (nearly always one). On 100,000 rows
    each column read costs about as much as another: they are as few as the table allows."""
    import numpy as np

    # A stage's candidate_run row is of a run of that stage: its name is not read 100,000 times.
    stmt = (select(Candidate.id.label("candidate_id"), Candidate.hash, Candidate.origin,
                   *([CandidateRun.stage] if stage is None else []),
                   CandidateRun.status, CandidateRun.reason, LatestFigures.run_id.label("metric_run_id"),
                   FiguresLayout.layout, LatestFigures.figures)
            .select_from(Candidate)
            .outerjoin(CandidateRun, (CandidateRun.candidate_id == Candidate.id)
                       & (CandidateRun.role == (stage or "latest")))
            .outerjoin(LatestFigures, (LatestFigures.candidate_id == Candidate.id) & (LatestFigures.kind == kind))
            .outerjoin(FiguresLayout, FiguresLayout.id == LatestFigures.layout_id)
            .where(Candidate.experiment_id == experiment_id).order_by(Candidate.id))
    table = _total_rows_frame(connection, stmt)
    if stage is not None:
        table.insert(3, "stage", np.where(table["status"].notna(), stage, None).astype(object))
    codes, layouts = pd.factorize(table.pop("layout"))  # -1: no figures
    packed = table.pop("figures").to_numpy()
    layouts = [json.loads(t) for t in layouts]  # [model_version, emulator_version, names] each
    names = sorted(set().union(*(names_of for _, _, names_of in layouts)))
    clash = sorted(set(names) & set(fixed))
    if clash:
        raise ValueError(f"metric names {clash} clash with metric_table's own columns")
    column = {name: i for i, name in enumerate(names)}
    values = np.full((len(table), len(names)), np.nan)
    for code, (_, _, names_of) in enumerate(layouts):
        rows = np.flatnonzero(codes == code)
        figures = np.frombuffer(b"".join(packed[rows]), dtype=latest.FIGURES_BYTE_ORDER + "f8")
        values[np.ix_(rows, [column[n] for n in names_of])] = figures.reshape(len(rows), len(names_of))
    baseline = connection.scalar(select(Experiment.baseline_candidate_id).where(Experiment.id == experiment_id))
    table.insert(3, "is_baseline", table["candidate_id"] == baseline)
    table["metric_run_id"] = table["metric_run_id"].astype("Int64")
    # The versions of the figures' run; NaN without figures (as the merge of other scopes).
    for i, version in enumerate(("model_version", "emulator_version")):
        of_layout = np.array([layout[i] for layout in layouts] + [float("nan")], dtype=object)
        table[version] = of_layout[codes]  # (code -1: the last, NaN)
    # The columns are in `fixed` order already (the statement's, is_baseline and stage put
    # in place): the figures go after them as one block, with no reordering copy.
    return pd.concat([table, pd.DataFrame(values, columns=names, index=table.index)], axis=1, copy=False)


def _total_rows_frame(connection: Connection, stmt: Any) -> pd.DataFrame:
    """`_total_table`'s rows as `plain_frame` gives them: candidate_id int64, metric_run_id
    float64 (NaN for NULL), the rest objects as the driver hands them. Built as one 2-D
    object array with those two columns replaced: pandas' pass to infer every column's
    type (from_records) costs 0.13 CPU s on 100,000 rows, this 0.05."""
    import numpy as np

    result = connection.execute(stmt)
    names = list(result.keys())
    try:
        rows = result.cursor.fetchall()
    finally:
        result.close()
    if not rows:
        return pd.DataFrame.from_records(rows, columns=names)  # pandas' dtypes of an empty frame
    values = np.array(rows, dtype=object)
    frame = pd.DataFrame(values, columns=names)  # one object block, no inference, no copy
    frame["candidate_id"] = values[:, names.index("candidate_id")].astype(np.int64)
    frame["metric_run_id"] = values[:, names.index("metric_run_id")].astype(np.float64)  # None: NaN
    return frame


# ---- decisions and artifacts --------------------------------------------------------------


_DECISION_COLUMNS = ["id", "experiment_id", "experiment", "kind", "verdict", "rationale", "author", "created_at",
                     "evidence", "candidate_id", "candidate_experiment_id", "evidence_kinds", "override", "checks"]


def decisions(connection: Connection, experiment: str | int | None = None) -> pd.DataFrame:
    """Decisions (people's) and proposals (a sweep's) in the order made; `kind` tells them
    apart. `candidate_experiment_id` is the experiment of the candidate named, which may
    be another experiment than the one decided."""
    frame = pd.DataFrame(decision_rows(connection, experiment), columns=_DECISION_COLUMNS)
    frame["candidate_id"] = frame["candidate_id"].astype("Int64")
    frame["candidate_experiment_id"] = frame["candidate_experiment_id"].astype("Int64")
    return utc(frame, "created_at")


def decision_rows(connection: Connection, experiment: str | int | None = None) -> list[dict[str, Any]]:
    """`decisions` as plain dicts (JSON columns as their text, created_at an aware UTC
    datetime, a missing candidate None): no pandas (a quick `dse history`)."""
    return sql_reads.decision_rows(text_runner(connection), _experiment_or_all(connection, experiment))


def notes(connection: Connection, experiment: str | int | None = None) -> list[dict[str, Any]]:
    """Notes added to experiments after the fact, oldest first, as plain dicts."""
    return sql_reads.notes(text_runner(connection), _experiment_or_all(connection, experiment))


def _experiment_or_all(connection: Connection, experiment: str | int | None) -> int | None:
    return None if experiment is None else experiment_id_of(connection, experiment)


def decision_evidence(connection: Connection, experiment: str | int, candidate_id: int) -> tuple[int, list[int]]:
    """(experiment id, evidence) for a decision on a candidate (of this experiment or of
    another): every finished run of the candidate and of the experiment's baseline."""
    experiment_id = experiment_id_of(connection, experiment)
    owner = connection.scalar(select(Candidate.experiment_id).where(Candidate.id == candidate_id))
    if owner is None:
        raise candidate_not_found(connection, candidate_id)
    baseline = connection.scalar(
        select(Experiment.baseline_candidate_id).where(Experiment.id == experiment_id)
    )
    evidence = connection.scalars(
        select(Run.id)
        .where(
            Run.candidate_id.in_({candidate_id, baseline} - {None}),
            Run.status != "running",
        )
        .order_by(Run.id)
    ).all()
    return experiment_id, list(evidence)


_ARTIFACT_COLUMNS = ["id", "experiment_id", "candidate_id", "run_id", "role", "media_type", "name", "sha256", "size",
                     "created_at"]


def artifacts(connection: Connection, experiment: str | int | None, run: int | None,
              path_of: Callable[[str], str | None], candidate: int | None = None) -> pd.DataFrame:
    """Evidence files, with the candidate of their run and their path on disk (`path_of`
    a sha256)."""
    frame = pd.DataFrame(artifact_rows(connection, experiment, run, candidate), columns=_ARTIFACT_COLUMNS)
    for column in ("experiment_id", "candidate_id", "run_id"):
        frame[column] = frame[column].astype("Int64")
    frame["path"] = [path_of(sha) for sha in frame["sha256"]]
    return utc(frame, "created_at")


def artifact_rows(connection: Connection, experiment: str | int | None = None, run: int | None = None,
                  candidate: int | None = None) -> list[dict[str, Any]]:
    """`artifacts` as plain dicts (no path): see `sql_reads.artifacts`."""
    return sql_reads.artifacts(text_runner(connection), _experiment_or_all(connection, experiment), run, candidate)


# ---- comparisons ------------------------------------------------------------------------


def compare(connection: Connection, a: int, b: int) -> pd.DataFrame:
    """The fields that differ between candidates a and b, see `Store.compare`."""
    fields_a, fields_b = (_comparable_fields(connection, c) for c in (a, b))
    names = sorted(set(fields_a) | set(fields_b), key=field_order)
    rows = [
        (name, fields_a.get(name), fields_b.get(name))
        for name in names
        if canonical_json(fields_a.get(name)) != canonical_json(fields_b.get(name))
    ]
    return pd.DataFrame(rows, columns=["field", "a", "b"], dtype=object)


def compare_metrics(connection: Connection, a: int, b: int, scope: str = "total") -> pd.DataFrame:
    """Candidates a and b metric by metric, see `Store.compare_metrics`."""
    sides = [_latest_metrics(connection, c, scope) for c in (a, b)]
    keys = ["kind", "name", "unit", "scope", "scope_key"]
    table = sides[0].merge(sides[1], on=keys, how="outer", suffixes=("_a", "_b"))
    table = table.rename(columns={"value_a": "a", "value_b": "b"})
    table["delta"] = table["b"] - table["a"]
    table["ratio"] = table["b"] / table["a"].where(table["a"] != 0)
    kind_order = {k: i for i, k in enumerate(METRIC_KINDS)}
    table = table.sort_values(
        ["kind", "scope", "scope_key", "name"],
        key=lambda col: col.map(kind_order) if col.name == "kind" else col,
    ).reset_index(drop=True)
    side_columns = [
        f"{c}_{s}" for s in ("a", "b") for c in ("run_id", "model_version", "emulator_version")
    ]
    for column in ("run_id_a", "run_id_b"):
        table[column] = table[column].astype("Int64")
    return table[[*keys, "a", "b", "delta", "ratio", *side_columns]]


def _latest_metrics(connection: Connection, candidate_id: int, scope: str) -> pd.DataFrame:
    if connection.scalar(select(Candidate.id).where(Candidate.id == as_id(candidate_id))) is None:
        raise candidate_not_found(connection, candidate_id)
    long = unpacked_frame(connection, (
        select(Run.id.label("run_id"), Run.model_version, Run.emulator_version, RunMetrics.layout_id,
               RunMetrics.figures)
        .select_from(RunMetrics).join(Run, RunMetrics.run_id == metric_run(Run))
        .where(Run.candidate_id == candidate_id)
    ), scope=scope)  # fmt: skip
    # of each kind, the latest run with metrics of this scope
    long = long[long["run_id"] == long.groupby("kind")["run_id"].transform("max")]
    frame = long[["kind", "name", "unit", "scope", "scope_key", "value", "run_id", "model_version",
                  "emulator_version"]].reset_index(drop=True)
    frame["value"] = frame["value"].astype("float64")
    return frame


def _comparable_fields(connection: Connection, candidate_id: int) -> dict[str, Any]:
    config, mapping = aliased(CandidateText), aliased(CandidateText)
    row = connection.execute(
        select(config.text, mapping.text).join(Candidate, Candidate.config_id == config.id)
        .join(mapping, mapping.id == Candidate.mapping_id).where(Candidate.id == as_id(candidate_id))
    ).one_or_none()
    if row is None:
        raise candidate_not_found(connection, candidate_id)
    fields = flatten({"config": json.loads(row[0]), "mapping": json.loads(row[1])})
    # Latest run first, so for each kind:name the newest value wins.
    runs = connection.execute(
        select(Run.id, RunMetrics.layout_id, RunMetrics.figures)
        .join(Run, RunMetrics.run_id == metric_run(Run))
        .where(Run.candidate_id == candidate_id)
        .order_by(Run.id.desc())
    ).all()
    held = packed.layouts(connection, {r.layout_id for r in runs})
    values = [(k, n, v) for r in runs for k, n, v, _, s, _ in packed.unpack(held[r.layout_id], r.figures)
              if s == "total"]
    for kind, name, value in values:
        fields.setdefault(f"{kind}:{name}", value)
    return fields


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as {"dotted.path": leaf}; lists and empty dicts are leaves."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def diff_fields(baseline: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, list[Any]]:
    """{"dotted.path": [baseline_value, other_value]} for the leaves that differ."""
    flat_a, flat_b = flatten(baseline), flatten(other)
    return {
        path: [flat_a.get(path), flat_b.get(path)]
        for path in sorted(set(flat_a) | set(flat_b), key=field_order)
        if canonical_json(flat_a.get(path)) != canonical_json(flat_b.get(path))
    }


def field_order(field: str) -> tuple[int, str]:
    """Config fields first, then mapping, then metrics; by name within each."""
    section = field.split(".", 1)[0]
    return ({"config": 0, "mapping": 1}.get(section, 2), field)


# ---- DataFrames -------------------------------------------------------------------------


def frame_of(connection: Connection, stmt: Any) -> pd.DataFrame:
    result = connection.execute(stmt)
    return pd.DataFrame(result.fetchall(), columns=list(result.keys()))


def plain_frame(connection: Connection, stmt: Any) -> pd.DataFrame:
    """`frame_of` for columns the driver gives as they are (numbers, text, NULL): the rows
    are read from the DBAPI cursor, without making a SQLAlchemy row (and its type
    processing) per row, several times faster on 100,000 rows."""
    result = connection.execute(stmt)
    columns = list(result.keys())
    try:
        return pd.DataFrame.from_records(result.cursor.fetchall(), columns=columns)
    finally:
        result.close()


def raw(column: Any) -> Any:
    """A column as text, for DataFrames: JSON as its stored canonical text, timestamps as
    UTC text that pandas parses in one go (see utc) instead of one object per value."""
    if isinstance(column.type, JSON):
        return cast(column, Text).label(column.name)
    if isinstance(column.type, DateTime):
        return _UtcText(column).label(column.name)
    return column


class _UtcText(FunctionElement):
    """A timestamp column as UTC text "YYYY-MM-DD HH:MM:SS[.ffffff]"."""

    type = String()
    inherit_cache = True
    name = "utc_text"


@compiles(_UtcText)
def _utc_text_as_stored(element: _UtcText, compiler: Any, **kw: Any) -> str:
    # SQLite keeps timestamps as UTC text already.
    return compiler.process(element.clauses, **kw)


@compiles(_UtcText, "postgresql")
def _utc_text_postgresql(element: _UtcText, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"


def utc(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """Timestamp columns as pandas UTC datetimes."""
    # SQLite hands back text or naive datetimes (stored as UTC), PostgreSQL aware ones.
    for column in columns:
        values = frame[column]
        present = values.dropna()
        as_text = len(present) > 0 and isinstance(present.iloc[0], str)
        frame[column] = pd.to_datetime(values, utc=True, format="ISO8601" if as_text else None)
    return frame



def candidate_totals(connection: Connection, candidate_ids: list[int],
                     kinds: tuple[str, ...] | None = None) -> dict[int, dict[str, dict[str, float]]]:
    """{candidate: {kind: {metric: value}}}: each candidate's total metrics of each kind,
    from its latest run that recorded that kind (as metric_table takes them)."""
    ids = [as_id(c) for c in candidate_ids]
    stmt = (
        select(Run.candidate_id, Run.id.label("run_id"), RunMetrics.layout_id, RunMetrics.figures)
        .select_from(RunMetrics).join(Run, RunMetrics.run_id == metric_run(Run))
        .where(Run.candidate_id.in_(ids))
        .order_by(Run.id)
    )
    long = unpacked_frame(connection, stmt, kinds=kinds, scope="total")
    latest: dict[tuple[int, str], int] = {}
    out: dict[int, dict[str, dict[str, float]]] = {c: {} for c in ids}
    for cid, run_id, kind, name, value in zip(long["candidate_id"].tolist(), long["run_id"].tolist(),
                                               long["kind"].tolist(), long["name"].tolist(), long["value"].tolist()):
        if latest.get((cid, kind)) != run_id:  # a later run of this kind replaces the earlier's figures
            latest[(cid, kind)] = run_id
            out[cid][kind] = {}
        out[cid][kind][name] = value
    return out


def links(connection: Connection, experiment: str | int | None = None) -> list[dict[str, Any]]:
    """How experiments build on each other, oldest first (see `sql_reads.links`); with
    `experiment`, the links from it and to it."""
    return sql_reads.links(text_runner(connection), _experiment_or_all(connection, experiment))


def evidence_bytes(connection: Connection) -> int:
    sizes = select(Artifact.sha256, func.max(Artifact.size).label("size")).group_by(Artifact.sha256).subquery()
    return int(connection.scalar(select(func.coalesce(func.sum(sizes.c.size), 0))) or 0)


def artifact_shas(connection: Connection) -> set[str]:
    return set(connection.scalars(select(Artifact.sha256).distinct()))


def artifact(connection: Connection, artifact_id: int) -> dict[str, Any]:
    row = connection.execute(select(Artifact.__table__).where(Artifact.id == as_id(artifact_id))).mappings().one_or_none()
    if row is None:
        raise not_found(connection, "artifact", artifact_id)
    out = dict(row)
    out["created_at"] = as_utc(out["created_at"])
    return out
