"""Tables of the record store, as SQLAlchemy 2.0 declarative models.

The alembic migrations in `migrations/versions/` create exactly these tables; a test
compares the two, so a change here needs a new migration.

Enumerated columns are plain strings (portable, and a new value needs no schema
change), checked in Python against the module constants below.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, validates

from dse.records.choices import (  # noqa: F401 - the schema's vocabulary, named here as before
    EXPERIMENT_STATUSES,
    CANDIDATE_ORIGINS,
    RUN_STAGES,
    RUN_STATUSES,
    METRIC_KINDS,
    METRIC_SCOPES,
    IMPORTED_METRIC_KINDS,
    DECISION_KINDS,
    NOTE_KINDS,
    LINK_RELATIONS,
    ARTIFACT_ROLES,
    CYCLE_CALIBRATION_SOURCES,
    PPA_CALIBRATION_SOURCES,
    CALIBRATION_SOURCES,
)

# Named constraints let alembic's SQLite batch mode and autogenerate find them again.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def check_choice(field: str, value: Any, allowed: tuple[str, ...]) -> str:
    """Return `value` if it is one of `allowed`, else raise ValueError naming the set."""
    if value not in allowed:
        raise ValueError(f"{field}: got {value!r}; allowed: {', '.join(allowed)}")
    return value


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        datetime: DateTime(timezone=True),
    }


class Experiment(Base):
    __tablename__ = "experiment"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String, unique=True)
    hypothesis: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    acceptance: Mapped[list[Any]]  # [{"expr": str, "prose": str}, ...]
    workload_recipe: Mapped[str] = mapped_column(String)
    workload_hash: Mapped[str] = mapped_column(String(64))
    # use_alter: experiment and candidate reference each other.
    baseline_candidate_id: Mapped[int | None] = mapped_column(
        ForeignKey("candidate.id", use_alter=True)
    )
    spec_text: Mapped[str] = mapped_column(Text)
    spec_hash: Mapped[str] = mapped_column(String(64))
    limitations: Mapped[str] = mapped_column(Text, default="")
    open_questions: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # 0009: what workload_hash identifies (dse.identity.workload_identity): the recipe's
    # source hash, its full params, its frontend steps and the torch version.
    workload: Mapped[dict[str, Any] | None]
    # 0013: the newest run of its candidates when its sweep last judged the evidence
    # (propose), whether or not that wrote a new proposal: the latest proposal stands for
    # every run up to it (the recorded rerun's shortcut reads it). No foreign key: a mark.
    judged_run_id: Mapped[int | None] = mapped_column(Integer)

    @validates("status")
    def _check_status(self, _key: str, value: str) -> str:
        return check_choice("experiment.status", value, EXPERIMENT_STATUSES)


class SweepLock(Base):
    """0006: the process sweeping an experiment (one at a time), with its heartbeat."""

    __tablename__ = "sweep_lock"

    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiment.id"), primary_key=True)
    host: Mapped[str | None] = mapped_column(String)
    pid: Mapped[int | None] = mapped_column(Integer)
    pid_start: Mapped[str | None] = mapped_column(String(64))
    command: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)


class Candidate(Base):
    __tablename__ = "candidate"
    __table_args__ = (UniqueConstraint("experiment_id", "hash"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # 0002: index, so an experiment's candidates come in id order without a sort
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiment.id"), index=True)
    hash: Mapped[str] = mapped_column(String(64))
    # 0018: the config and the mapping as canonical JSON, each a candidate_text row shared
    # by every candidate with that text (a sweep's 2,320 candidates have ~150 configs of
    # ~1.7 kB: three quarters of its bytes written once per candidate before). Always set by
    # the writes; no foreign key, so SQLite adds and drops the columns in place.
    config_id: Mapped[int | None] = mapped_column(Integer)
    mapping_id: Mapped[int | None] = mapped_column(Integer)
    origin: Mapped[str] = mapped_column(String(16))
    diff: Mapped[dict[str, Any]]  # {"config.path": [baseline_value, candidate_value]}
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # 0009: why a hand-picked candidate (origin "hand") is in the experiment, from its spec.
    why: Mapped[str | None] = mapped_column(Text)
    # 0010: what the sweep noticed about the candidate that is not a metric (e.g. bank rows
    # past the ISA's row-address field), one sentence a line.
    notes: Mapped[str | None] = mapped_column(Text)

    @validates("origin")
    def _check_origin(self, _key: str, value: str) -> str:
        return check_choice("candidate.origin", value, CANDIDATE_ORIGINS)


class CandidateText(Base):
    """0018: a candidate's config or mapping, canonical JSON text (`dse.identity.canonical_json`),
    stored once per distinct text (found again by the sha256 of the text) and named by
    candidate.config_id and candidate.mapping_id."""

    __tablename__ = "candidate_text"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    text: Mapped[str] = mapped_column(Text)


class Run(Base):
    __tablename__ = "run"
    # 0011: the index on candidate_id also holds the stage, so "a candidate's latest run of
    # a stage" (every candidate table, the UI's pages) is answered from the index alone.
    # 0013: the index on status (0002) also holds the stage and candidate, so the candidates
    # with an ok run of a stage are found in the index alone (still one index on status).
    __table_args__ = (Index("ix_run_candidate_id_stage", "candidate_id", "stage"),
                      Index("ix_run_status_stage_candidate_id", "status", "stage", "candidate_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidate.id"))
    stage: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))  # 0002: indexed (0013: with stage, candidate_id)
    reason: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    traceback: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    host: Mapped[str | None] = mapped_column(String)
    git_commit: Mapped[str | None] = mapped_column(String(40))
    git_dirty: Mapped[bool | None]
    versions: Mapped[dict[str, Any]]
    command: Mapped[str] = mapped_column(Text)
    seed: Mapped[int | None] = mapped_column(Integer)
    model_version: Mapped[str] = mapped_column(String)
    emulator_version: Mapped[str | None] = mapped_column(String)
    # 0002: which process runs it (with `host`), so a run left "running" by a process
    # that died is told apart from one still at work. pid_start identifies the process
    # beyond its pid (which the OS reuses): on Linux "<boot id>:<start time in ticks>".
    pid: Mapped[int | None] = mapped_column(Integer)
    pid_start: Mapped[str | None] = mapped_column(String(64))
    # 0014: the earlier run (of the same candidate hash and workload, in another experiment)
    # whose evidence this run stands on instead of evaluating again: its status and reason
    # are that run's, its metrics and raw evidence are read through the link, not copied
    # (dse.records.reuse). No foreign key: SQLite adds the column in place, its triggers kept.
    reused_run_id: Mapped[int | None] = mapped_column(Integer)

    @validates("stage")
    def _check_stage(self, _key: str, value: str) -> str:
        return check_choice("run.stage", value, RUN_STAGES)

    @validates("status")
    def _check_status(self, _key: str, value: str) -> str:
        return check_choice("run.status", value, RUN_STATUSES)


class MetricLayout(Base):
    """0015: what a packed run's values are (dse.records.packed): `layout`, the JSON list of
    [kind, name, unit, scope, scope_key] entries in recorded order, stored once per
    distinct layout (found again by the hash of its text)."""

    __tablename__ = "metric_layout"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    layout: Mapped[str] = mapped_column(Text)


class RunMetrics(Base):
    """0015: a run's metrics, the record (before 0015 one metric row each): its layout and
    `figures`, the values in the layout's order as little-endian float64 bytes (exact).
    A run has none or one row; a linking run (reused_run_id) has none and shows its
    source's. Checked on the way in as the metric rows were (dse.records.checks)."""

    __tablename__ = "run_metrics"

    run_id: Mapped[int] = mapped_column(ForeignKey("run.id"), primary_key=True)
    layout_id: Mapped[int] = mapped_column(ForeignKey("metric_layout.id"))
    figures: Mapped[bytes] = mapped_column(LargeBinary)


class FiguresLayout(Base):
    """0019: what a latest_figures row's values are: `layout`, the JSON list
    [model_version, emulator_version, [names, sorted]] of the run they are from, stored
    once per distinct layout (found again by the hash of its text; a sweep's rows share one)."""

    __tablename__ = "figures_layout"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    layout: Mapped[str] = mapped_column(Text)


class LatestFigures(Base):
    """0012: each candidate's total metrics of each kind from its latest run that recorded
    that kind (the figures `metric_table`, the UI and the report show), packed one row per
    candidate and kind: `layout_id`, its FiguresLayout (0019; before, the layout's text in
    every row), and `figures`, the values in the layout's names' order as little-endian
    float64 bytes (dse.records.latest.pack). metric_table's wide rows of
    100,000 candidates read one row each here. Kept by every write of metrics in the same
    transaction (dse.records.latest); derived data: the packed run metrics stay the
    record. (latest_metric, the same figures one row each, went in 0016.)"""

    __tablename__ = "latest_figures"
    __table_args__ = {"sqlite_with_rowid": False}

    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidate.id"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id"))
    # (no foreign key: 0019 added the column in place, as 0018 candidate.config_id)
    layout_id: Mapped[int | None] = mapped_column(Integer)
    figures: Mapped[bytes] = mapped_column(LargeBinary)


class CandidateRun(Base):
    """0011: the runs a candidate's reads show, by role: "latest" (of any stage), a stage's
    name (its latest run of that stage) and "outcome" (its latest run, unless that was
    "pruned": then its latest other run, if any), with that run's stage, status and
    reason. Kept by every write of runs in its transaction (dse.records.candidate_runs;
    0011-0016: by triggers on run), so a table of 100,000 candidates reads
    these narrow rows instead of probing the runs, and an experiment's candidates by
    outcome are counted from the (experiment_id, role, status) index alone. Derived data:
    the runs stay the record; a candidate without runs has no rows."""

    __tablename__ = "candidate_run"
    __table_args__ = (Index("ix_candidate_run_experiment_id_role_status", "experiment_id", "role", "status"),
                      {"sqlite_with_rowid": False})

    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidate.id"), primary_key=True)
    role: Mapped[str] = mapped_column(String(16), primary_key=True)
    experiment_id: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id"))
    stage: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)


class Artifact(Base):
    """A content-addressed evidence file beside the database (`<db>.evidence/ab/<sha256>`)."""

    __tablename__ = "artifact"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("run.id"), index=True)  # 0002: index
    sha256: Mapped[str] = mapped_column(String(64), index=True)  # 0002: index
    size: Mapped[int] = mapped_column(BigInteger)
    media_type: Mapped[str] = mapped_column(String)
    role: Mapped[str] = mapped_column(String)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # 0002: an artifact of a whole experiment (a graph dump, a report) has no run; and
    # the name the file had where it came from (a raw evidence path).
    experiment_id: Mapped[int | None] = mapped_column(ForeignKey("experiment.id"), index=True)
    name: Mapped[str | None] = mapped_column(Text)

    @validates("role")
    def _check_role(self, _key: str, value: str) -> str:
        return check_choice("artifact.role", value, ARTIFACT_ROLES)


class Decision(Base):
    __tablename__ = "decision"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiment.id"), index=True)  # 0002
    verdict: Mapped[str] = mapped_column(Text)
    rationale: Mapped[str] = mapped_column(Text)
    author: Mapped[str] = mapped_column(String)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    evidence: Mapped[list[Any]]  # run ids
    # 0002: the candidate a decision accepts or rejects (`dse decide`); None for a
    # verdict on the hypothesis as a whole.
    candidate_id: Mapped[int | None] = mapped_column(ForeignKey("candidate.id"), index=True)
    # 0007: a person's decision or the sweep's proposal; the evidence kinds it rests on
    # (metric kinds); the reason given for overriding a failed acceptance test; and the
    # acceptance clauses as evaluated when it was made, with their values.
    kind: Mapped[str] = mapped_column(String(16), default="decision", server_default="decision")
    evidence_kinds: Mapped[list[Any] | None]
    override: Mapped[str | None] = mapped_column(Text)
    checks: Mapped[list[Any] | None]

    @validates("kind")
    def _check_kind(self, _key: str, value: str) -> str:
        return check_choice("decision.kind", value, DECISION_KINDS)


class Note(Base):
    """0007: a limitation, open question or free note added to an experiment after the
    fact (`dse note`); the spec's own text is never edited."""

    __tablename__ = "note"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiment.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
    author: Mapped[str] = mapped_column(String)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    @validates("kind")
    def _check_kind(self, _key: str, value: str) -> str:
        return check_choice("note.kind", value, NOTE_KINDS)


class ExperimentLink(Base):
    """0008: an experiment that follows or reopens an earlier one, with the reason its spec
    gives (written with the experiment, never changed)."""

    __tablename__ = "experiment_link"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiment.id"), index=True)
    other_id: Mapped[int] = mapped_column(ForeignKey("experiment.id"), index=True)
    relation: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    @validates("relation")
    def _check_relation(self, _key: str, value: str) -> str:
        return check_choice("experiment_link.relation", value, LINK_RELATIONS)




class Calibration(Base):
    """A fit of the analytical model's free constants for one chip (0003): the constants,
    the evidence it was fitted to, and the model's error on that evidence before and after.
    A PPA calibration (source synth_area or power) has a factor per component as its
    constants, and a point per candidate and component."""

    __tablename__ = "calibration"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    chip: Mapped[str] = mapped_column(String, index=True)  # the chip config's name
    chip_hash: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(32))  # the evidence kind fitted to
    model_version: Mapped[str] = mapped_column(String)
    emulator_version: Mapped[str | None] = mapped_column(String)
    constants: Mapped[dict[str, Any]]
    error_before: Mapped[dict[str, Any]]  # {"mape": %, "max": %, "points": n}
    error_after: Mapped[dict[str, Any]]
    points: Mapped[list[Any]]  # [{"label", "measured", "before", "after"}, ...]
    command: Mapped[str | None] = mapped_column(Text)
    git_commit: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    @validates("source")
    def _check_source(self, _key: str, value: str) -> str:
        return check_choice("calibration.source", value, CALIBRATION_SOURCES)
