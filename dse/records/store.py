"""The record store: every experiment, candidate, run, metric and decision in one database.

SQLite (`records.db`, the default) and PostgreSQL (a URL) are one code path; only the
SQLite connection setup below differs. Each write is one transaction, so a crash or a
bad argument leaves nothing half-written. Reads return pandas DataFrames, with JSON
columns as canonical JSON strings and timestamps as UTC.

Open one Store per process: an engine's pooled connections must not cross a fork.
"""

from __future__ import annotations

import json
import math
import numbers
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, create_engine, event, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from dse.identity import canonical_json, content_hash
from dse.records import provenance
from dse.records.schema import (
    CANDIDATE_ORIGINS,
    METRIC_KINDS,
    METRIC_SCOPES,
    RUN_STATUSES,
    Candidate,
    Decision,
    Experiment,
    Metric,
    Run,
    check_choice,
    utcnow,
)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 10_000
FINAL_RUN_STATUSES = tuple(s for s in RUN_STATUSES if s != "running")

# Execution option read by the SQLite "begin" listener: which BEGIN to emit.
_SQLITE_BEGIN = "dse_sqlite_begin"
_T = TypeVar("_T")


@dataclass(frozen=True)
class MetricIn:
    """One measured or estimated number, as handed to `Store.finish_run`."""

    kind: str
    name: str
    value: float
    unit: str
    scope: str = "total"
    scope_key: str = ""

    def __post_init__(self) -> None:
        check_choice("metric.kind", self.kind, METRIC_KINDS)
        check_choice("metric.scope", self.scope, METRIC_SCOPES)
        if not self.name:
            raise ValueError("metric.name: must not be empty")
        # A total has no key; any other scope must say which op/core/Ball/bank it is.
        if (self.scope == "total") != (self.scope_key == ""):
            raise ValueError(
                f"metric {self.kind}:{self.name}: scope_key {self.scope_key!r} does not suit "
                f"scope {self.scope!r} (empty for 'total', required otherwise)"
            )
        value = float(self.value)
        # SQLite would store NaN as NULL; a missing number is a run status, not a metric.
        if math.isnan(value):
            raise ValueError(f"metric {self.kind}:{self.name}: value is NaN")
        object.__setattr__(self, "value", value)


def database_url(url_or_path: str | os.PathLike[str]) -> str:
    """A SQLAlchemy URL as given, or a filesystem path turned into a SQLite URL."""
    text = os.fspath(url_or_path)
    if "://" in text:
        return text
    if text == ":memory:":
        return "sqlite://"
    path = Path(text).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def alembic_config(url: str) -> Config:
    """An alembic Config for the store's migrations, built in code (no alembic.ini)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    # Config values go through configparser interpolation, where "%" is special.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # The driver's own implicit BEGIN is off so that _sqlite_on_begin decides the kind
    # of transaction (and DDL in migrations is transactional too).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")  # first: WAL may wait
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_on_begin(connection: Connection) -> None:
    # Writers BEGIN IMMEDIATE: a deferred transaction that reads and then writes fails
    # at once (SQLITE_BUSY) if another writer committed in between; busy_timeout only
    # helps transactions that ask for the write lock up front.
    mode = connection.get_execution_options().get(_SQLITE_BEGIN, "DEFERRED")
    connection.exec_driver_sql(f"BEGIN {mode}")


def _make_engine(url: str) -> Engine:
    sa_url = make_url(url)
    if sa_url.get_backend_name() != "sqlite":
        return create_engine(sa_url, pool_pre_ping=True)
    if sa_url.database in (None, "", ":memory:"):
        # An in-memory database lives in one connection; share it.
        engine = create_engine(
            sa_url, poolclass=StaticPool, connect_args={"check_same_thread": False}
        )
    else:
        engine = create_engine(sa_url)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


class Store:
    """Experiments, candidates, runs, metrics and decisions; see the module docstring."""

    def __init__(self, url_or_path: str | os.PathLike[str] = "records.db"):
        self.engine = _make_engine(database_url(url_or_path))
        self._writer = self.engine.execution_options(**{_SQLITE_BEGIN: "IMMEDIATE"})
        try:
            self._upgrade_schema()
        except BaseException:
            self.engine.dispose()
            raise

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def _upgrade_schema(self) -> None:
        # Inside one write transaction: two processes opening a new file at once
        # migrate one after the other instead of both creating tables.
        config = alembic_config(self.engine.url.render_as_string(hide_password=False))
        try:
            with self._writer.begin() as connection:
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        except CommandError as error:
            raise RuntimeError(
                f"cannot bring the record store {self.url} to this dse's schema "
                f"(was it written by a newer dse?): {error}"
            ) from error

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with Session(self._writer, expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as connection:
            yield connection

    # ---- writes -------------------------------------------------------------------

    def create_experiment(
        self,
        name: str,
        hypothesis: str,
        acceptance: list[dict[str, str]],
        workload_recipe: str,
        workload_hash: str,
        spec_text: str,
        spec_hash: str,
        limitations: str = "",
        open_questions: str = "",
    ) -> int:
        """Record a new experiment, or resume the one of that name and spec; return its id."""
        acceptance = _checked_acceptance(acceptance)

        def create() -> int:
            with self._write() as session:
                existing = session.scalars(
                    select(Experiment).where(Experiment.name == name)
                ).one_or_none()
                if existing is not None:
                    if existing.spec_hash != spec_hash:
                        raise ValueError(
                            f"experiment name {name!r} is taken by a different spec "
                            f"(recorded spec_hash {existing.spec_hash}, this spec {spec_hash}); "
                            "rename the experiment to record the changed spec"
                        )
                    return existing.id
                experiment = Experiment(
                    name=name,
                    hypothesis=hypothesis,
                    status="proposed",
                    acceptance=acceptance,
                    workload_recipe=workload_recipe,
                    workload_hash=workload_hash,
                    spec_text=spec_text,
                    spec_hash=spec_hash,
                    limitations=limitations,
                    open_questions=open_questions,
                )
                session.add(experiment)
                session.flush()
                return experiment.id

        return _retry_once_on_conflict(create)

    def add_candidate(
        self,
        experiment_id: int,
        config: dict[str, Any],
        mapping: dict[str, Any],
        origin: str,
        diff: dict[str, Any] | None = None,
    ) -> tuple[int, bool]:
        """Record a candidate; return (id, created). A known hash returns the existing id.

        Without `diff`, the difference from the experiment's baseline is computed here
        ({} when there is no baseline yet).
        """
        check_choice("candidate.origin", origin, CANDIDATE_ORIGINS)
        # Stored as the canonical JSON reads back, so the stored row rehashes to `hash`.
        config, mapping = json.loads(canonical_json([config, mapping]))
        key = content_hash({"config": config, "mapping": mapping})

        def add() -> tuple[int, bool]:
            with self._write() as session:
                experiment = _get(session, Experiment, experiment_id)
                existing = session.scalar(
                    select(Candidate.id).where(
                        Candidate.experiment_id == experiment_id, Candidate.hash == key
                    )
                )
                if existing is not None:
                    return existing, False
                stored_diff = diff
                if stored_diff is None:
                    stored_diff = _diff_from_baseline(session, experiment, config, mapping)
                candidate = Candidate(
                    experiment_id=experiment_id,
                    hash=key,
                    config=config,
                    mapping=mapping,
                    origin=origin,
                    diff=stored_diff,
                )
                session.add(candidate)
                session.flush()
                return candidate.id, True

        return _retry_once_on_conflict(add)

    def set_baseline(self, experiment_id: int, candidate_id: int) -> None:
        with self._write() as session:
            experiment = _get(session, Experiment, experiment_id)
            candidate = _get(session, Candidate, candidate_id)
            if candidate.experiment_id != experiment_id:
                raise ValueError(
                    f"candidate {candidate_id} belongs to experiment {candidate.experiment_id}, "
                    f"not {experiment_id}"
                )
            experiment.baseline_candidate_id = candidate_id

    def set_status(self, experiment_id: int, status: str) -> None:
        with self._write() as session:
            _get(session, Experiment, experiment_id).status = status

    def start_run(
        self,
        candidate_id: int,
        stage: str,
        *,
        seed: int | None = None,
        command: str | None = None,
        model_version: str = "",
        emulator_version: str | None = None,
    ) -> int:
        """Record a run as "running", with its provenance, before its work starts."""
        environment = provenance.collect(command)  # outside the transaction: it may run git
        with self._write() as session:
            _get(session, Candidate, candidate_id)
            now = utcnow()
            run = Run(
                candidate_id=candidate_id,
                stage=stage,
                status="running",
                started_at=now,
                heartbeat_at=now,
                host=environment.host,
                git_commit=environment.git_commit,
                git_dirty=environment.git_dirty,
                versions=environment.versions,
                command=environment.command,
                seed=seed,
                model_version=model_version,
                emulator_version=emulator_version,
            )
            session.add(run)
            session.flush()
            return run.id

    def heartbeat(self, run_id: int) -> None:
        """Say a running run is still alive, so a stale "running" row can be told apart."""
        with self._write() as session:
            _get(session, Run, run_id).heartbeat_at = utcnow()

    def finish_run(
        self,
        run_id: int,
        status: str,
        metrics: Iterable[MetricIn | Mapping[str, Any]] = (),
        *,
        reason: str | None = None,
        error: str | None = None,
        traceback: str | None = None,
    ) -> None:
        """Write a run's metrics and final status together, or neither."""
        check_choice("finish_run status", status, FINAL_RUN_STATUSES)
        rows = [m if isinstance(m, MetricIn) else MetricIn(**m) for m in metrics]
        keys = [(m.kind, m.name, m.scope, m.scope_key) for m in rows]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"run {run_id}: metrics given twice: {duplicates}")
        with self._write() as session:
            run = _get(session, Run, run_id)
            if run.status != "running":
                raise ValueError(f"run {run_id} is already finished (status {run.status!r})")
            now = utcnow()
            run.status = status
            run.reason = reason
            run.error = error
            run.traceback = traceback
            run.finished_at = now
            run.heartbeat_at = now
            session.add_all(Metric(run_id=run_id, **asdict(m)) for m in rows)

    def add_decision(
        self,
        experiment_id: int,
        verdict: str,
        rationale: str,
        author: str,
        evidence: Iterable[int] = (),
    ) -> int:
        """Record a decision; `evidence` are ids of this experiment's runs that support it."""
        run_ids = [operator.index(r) for r in evidence]
        with self._write() as session:
            _get(session, Experiment, experiment_id)
            if run_ids:
                found = set(
                    session.scalars(
                        select(Run.id)
                        .join(Candidate, Run.candidate_id == Candidate.id)
                        .where(Run.id.in_(run_ids), Candidate.experiment_id == experiment_id)
                    )
                )
                missing = sorted(set(run_ids) - found)
                if missing:
                    raise ValueError(
                        f"evidence: runs {missing} are not runs of experiment {experiment_id}"
                    )
            decision = Decision(
                experiment_id=experiment_id,
                verdict=verdict,
                rationale=rationale,
                author=author,
                evidence=run_ids,
            )
            session.add(decision)
            session.flush()
            return decision.id

    # ---- reads --------------------------------------------------------------------

    def experiments(self) -> pd.DataFrame:
        """One row per experiment with candidate and run counts and the latest verdict."""
        run_count_columns = [f"n_{s}" for s in RUN_STATUSES]
        with self._read() as connection:
            frame = _frame(
                connection,
                select(
                    Experiment.id,
                    Experiment.name,
                    Experiment.hypothesis,
                    Experiment.status,
                    Experiment.workload_recipe,
                    Experiment.created_at,
                ).order_by(Experiment.id),
            )
            n_candidates = _frame(
                connection,
                select(Candidate.experiment_id.label("id"), func.count().label("n_candidates"))
                .group_by(Candidate.experiment_id),
            )
            run_counts = _frame(
                connection,
                select(Candidate.experiment_id.label("id"), Run.status, func.count().label("n"))
                .join(Candidate, Run.candidate_id == Candidate.id)
                .group_by(Candidate.experiment_id, Run.status),
            )
            latest = (
                select(func.max(Decision.id).label("decision_id"))
                .group_by(Decision.experiment_id)
                .subquery()
            )
            verdicts = _frame(
                connection,
                select(Decision.experiment_id.label("id"), Decision.verdict.label("latest_verdict"))
                .join(latest, Decision.id == latest.c.decision_id),
            )
        by_status = (
            run_counts.pivot(index="id", columns="status", values="n")
            .reindex(columns=list(RUN_STATUSES))
            .set_axis(run_count_columns, axis=1)
            .reset_index()
        )
        frame = (
            frame.merge(n_candidates, on="id", how="left")
            .merge(by_status, on="id", how="left")
            .merge(verdicts, on="id", how="left")
        )
        counts = ["n_candidates", *run_count_columns]
        frame[counts] = frame[counts].astype("float64").fillna(0).astype("int64")
        verdict = frame["latest_verdict"].astype(object)
        frame["latest_verdict"] = verdict.where(verdict.notna(), None)
        return _utc(frame, "created_at")

    def experiment(self, name_or_id: str | int) -> dict[str, Any]:
        """One experiment's row as a dict (JSON columns as Python values)."""
        with self._read() as connection:
            experiment_id = self._experiment_id(connection, name_or_id)
            row = connection.execute(
                select(Experiment.__table__).where(Experiment.id == experiment_id)
            ).mappings().one()
        record = dict(row)
        record["created_at"] = _as_utc(record["created_at"])
        return record

    def candidates(self, experiment: str | int) -> pd.DataFrame:
        """One row per candidate, with the stage, status and reason of its latest run."""
        with self._read() as connection:
            return self._candidates(connection, self._experiment_id(connection, experiment))

    def runs(
        self, experiment: str | int | None = None, candidate: int | None = None
    ) -> pd.DataFrame:
        """Runs with their provenance, filtered by experiment (name or id) and/or candidate id."""
        stmt = (
            select(
                Run.id,
                Candidate.experiment_id,
                *(column for column in Run.__table__.c if column.name != "id"),
            )
            .join(Candidate, Run.candidate_id == Candidate.id)
            .order_by(Run.id)
        )
        with self._read() as connection:
            if experiment is not None:
                stmt = stmt.where(
                    Candidate.experiment_id == self._experiment_id(connection, experiment)
                )
            if candidate is not None:
                stmt = stmt.where(Run.candidate_id == candidate)
            frame = _frame(connection, stmt)
        frame["versions"] = frame["versions"].map(canonical_json)
        frame["seed"] = frame["seed"].astype("Int64")
        frame["git_dirty"] = frame["git_dirty"].astype("boolean")
        return _utc(frame, "started_at", "finished_at", "heartbeat_at")

    def metrics(self, experiment: str | int, kind: str | None = None) -> pd.DataFrame:
        """Long form: one row per metric, with the run's stage and model/emulator versions."""
        with self._read() as connection:
            return self._metrics(connection, self._experiment_id(connection, experiment), kind)

    def metric_table(self, experiment: str | int, kind: str, scope: str = "total") -> pd.DataFrame:
        """Wide form: one row per candidate (and scope_key unless scope is "total"), one
        column per metric name, beside the candidate's latest status and reason.

        A candidate's numbers come from its latest run that recorded `kind` at `scope`;
        `metric_run_id`, `model_version` and `emulator_version` name that run. Candidates
        without such metrics (infeasible, failed) keep their row, with NaN numbers.
        """
        check_choice("metric.kind", kind, METRIC_KINDS)
        check_choice("metric.scope", scope, METRIC_SCOPES)
        with self._read() as connection:
            experiment_id = self._experiment_id(connection, experiment)
            candidates = self._candidates(connection, experiment_id)
            long = self._metrics(connection, experiment_id, kind)
        long = long[long["scope"] == scope]
        latest_run = long.groupby("candidate_id")["run_id"].transform("max")
        long = long[long["run_id"] == latest_run]
        keys = ["candidate_id"] if scope == "total" else ["candidate_id", "scope_key"]
        wide = long.pivot(index=keys, columns="name", values="value")
        wide.columns.name = None
        source = (
            long.groupby("candidate_id")[["run_id", "model_version", "emulator_version"]]
            .first()
            .rename(columns={"run_id": "metric_run_id"})
            .reset_index()
        )
        fixed = [
            "candidate_id", "hash", "origin", "is_baseline", "stage", "status", "reason",
            "metric_run_id", "model_version", "emulator_version", *keys[1:],
        ]  # fmt: skip
        clash = sorted(set(wide.columns) & set(fixed))
        if clash:
            raise ValueError(f"metric names {clash} clash with metric_table's own columns")
        table = (
            candidates[["id", "hash", "origin", "is_baseline", "stage", "status", "reason"]]
            .rename(columns={"id": "candidate_id"})
            .merge(source, on="candidate_id", how="left")
            .merge(wide.reset_index(), on="candidate_id", how="left")
        )
        table["metric_run_id"] = table["metric_run_id"].astype("Int64")
        return table[fixed + sorted(wide.columns)]

    def decisions(self, experiment: str | int | None = None) -> pd.DataFrame:
        stmt = (
            select(
                Decision.id,
                Decision.experiment_id,
                Experiment.name.label("experiment"),
                Decision.verdict,
                Decision.rationale,
                Decision.author,
                Decision.created_at,
                Decision.evidence,
            )
            .join(Experiment, Decision.experiment_id == Experiment.id)
            .order_by(Decision.id)
        )
        with self._read() as connection:
            if experiment is not None:
                stmt = stmt.where(
                    Decision.experiment_id == self._experiment_id(connection, experiment)
                )
            frame = _frame(connection, stmt)
        frame["evidence"] = frame["evidence"].map(canonical_json)
        return _utc(frame, "created_at")

    def compare(self, a: int, b: int) -> pd.DataFrame:
        """The fields that differ between candidates a and b: config and mapping as dotted
        paths ("config.banks.count"), then total metrics as "kind:name"."""
        with self._read() as connection:
            fields_a, fields_b = (self._comparable_fields(connection, c) for c in (a, b))
        names = sorted(set(fields_a) | set(fields_b), key=_field_order)
        rows = [
            (name, fields_a.get(name), fields_b.get(name))
            for name in names
            if canonical_json(fields_a.get(name)) != canonical_json(fields_b.get(name))
        ]
        return pd.DataFrame(rows, columns=["field", "a", "b"], dtype=object)

    # ---- read helpers -------------------------------------------------------------

    def _experiment_id(self, connection: Connection, name_or_id: str | int) -> int:
        if isinstance(name_or_id, numbers.Integral) and not isinstance(name_or_id, bool):
            found = connection.scalar(select(Experiment.id).where(Experiment.id == int(name_or_id)))
            what = f"id {int(name_or_id)}"
        elif isinstance(name_or_id, str):
            found = connection.scalar(select(Experiment.id).where(Experiment.name == name_or_id))
            what = f"named {name_or_id!r}"
        else:
            raise TypeError(f"an experiment is named by a str or an int id, not {name_or_id!r}")
        if found is None:
            raise KeyError(f"no experiment {what} in {self.url}")
        return found

    def _candidates(self, connection: Connection, experiment_id: int) -> pd.DataFrame:
        latest = (
            select(Run.candidate_id, func.max(Run.id).label("run_id"))
            .join(Candidate, Run.candidate_id == Candidate.id)
            .where(Candidate.experiment_id == experiment_id)
            .group_by(Run.candidate_id)
            .subquery()
        )
        frame = _frame(
            connection,
            select(
                Candidate.id,
                Candidate.hash,
                Candidate.origin,
                Candidate.config,
                Candidate.mapping,
                Candidate.diff,
                Candidate.created_at,
                latest.c.run_id,
                Run.stage,
                Run.status,
                Run.reason,
            )
            .outerjoin(latest, latest.c.candidate_id == Candidate.id)
            .outerjoin(Run, Run.id == latest.c.run_id)
            .where(Candidate.experiment_id == experiment_id)
            .order_by(Candidate.id),
        )
        baseline = connection.scalar(
            select(Experiment.baseline_candidate_id).where(Experiment.id == experiment_id)
        )
        frame.insert(3, "is_baseline", frame["id"] == baseline)
        for column in ("config", "mapping", "diff"):
            frame[column] = frame[column].map(canonical_json)
        frame["run_id"] = frame["run_id"].astype("Int64")
        return _utc(frame, "created_at")

    def _metrics(
        self, connection: Connection, experiment_id: int, kind: str | None
    ) -> pd.DataFrame:
        stmt = (
            select(
                Run.candidate_id,
                Metric.run_id,
                Run.stage,
                Metric.kind,
                Metric.name,
                Metric.value,
                Metric.unit,
                Metric.scope,
                Metric.scope_key,
                Run.model_version,
                Run.emulator_version,
            )
            .join(Run, Metric.run_id == Run.id)
            .join(Candidate, Run.candidate_id == Candidate.id)
            .where(Candidate.experiment_id == experiment_id)
            .order_by(Metric.run_id, Metric.id)
        )
        if kind is not None:
            stmt = stmt.where(Metric.kind == check_choice("metric.kind", kind, METRIC_KINDS))
        frame = _frame(connection, stmt)
        frame["value"] = frame["value"].astype("float64")
        return frame

    def _comparable_fields(self, connection: Connection, candidate_id: int) -> dict[str, Any]:
        row = connection.execute(
            select(Candidate.config, Candidate.mapping).where(Candidate.id == candidate_id)
        ).one_or_none()
        if row is None:
            raise KeyError(f"no candidate id {candidate_id} in {self.url}")
        fields = flatten({"config": row.config, "mapping": row.mapping})
        # Latest run first, so for each kind:name the newest value wins.
        metrics = connection.execute(
            select(Metric.kind, Metric.name, Metric.value)
            .join(Run, Metric.run_id == Run.id)
            .where(Run.candidate_id == candidate_id, Metric.scope == "total")
            .order_by(Run.id.desc())
        )
        for kind, name, value in metrics:
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
        for path in sorted(set(flat_a) | set(flat_b), key=_field_order)
        if canonical_json(flat_a.get(path)) != canonical_json(flat_b.get(path))
    }


def _field_order(field: str) -> tuple[int, str]:
    section = field.split(".", 1)[0]
    return ({"config": 0, "mapping": 1}.get(section, 2), field)


def _diff_from_baseline(
    session: Session, experiment: Experiment, config: dict[str, Any], mapping: dict[str, Any]
) -> dict[str, list[Any]]:
    if experiment.baseline_candidate_id is None:
        return {}
    baseline = session.get(Candidate, experiment.baseline_candidate_id)
    assert baseline is not None  # a foreign key guarantees it
    return diff_fields(
        {"config": baseline.config, "mapping": baseline.mapping},
        {"config": config, "mapping": mapping},
    )


def _checked_acceptance(acceptance: Any) -> list[dict[str, str]]:
    shape = 'a list of {"expr": str, "prose": str}'
    if not isinstance(acceptance, list):
        raise ValueError(f"acceptance: expected {shape}, got {acceptance!r}")
    for item in acceptance:
        if (
            not isinstance(item, dict)
            or set(item) != {"expr", "prose"}
            or not all(isinstance(v, str) for v in item.values())
        ):
            raise ValueError(f"acceptance: expected {shape}, got item {item!r}")
    return [dict(item) for item in acceptance]


def _get(session: Session, model: type[_T], key: int) -> _T:
    found = session.get(model, key)
    if found is None:
        raise KeyError(f"no {model.__tablename__} with id {key}")  # type: ignore[attr-defined]
    return found


def _retry_once_on_conflict(write: Callable[[], _T]) -> _T:
    # SQLite serialises writers (BEGIN IMMEDIATE), but on PostgreSQL two processes can
    # both miss an existing row and insert; the loser's retry then finds the winner's.
    try:
        return write()
    except IntegrityError:
        return write()


def _frame(connection: Connection, stmt: Any) -> pd.DataFrame:
    result = connection.execute(stmt)
    return pd.DataFrame(result.fetchall(), columns=list(result.keys()))


def _utc(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    # SQLite hands back naive datetimes (stored as UTC), PostgreSQL aware ones.
    for column in columns:
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


def _as_utc(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=timezone.utc)
