"""The record store: every experiment, candidate, run, metric, artifact and decision in one
database. `Store` is the public face; the work is split by concern:

    engine.py    engine creation and SQLite/PostgreSQL setup, migrations, busy retries
    snapshot.py  a new store's schema made in one go from the migrated schema frozen per
                 dialect (migrations/snapshot/*.sql), stamped at the head
    schema.py    the tables
    checks.py    argument checks before any transaction (metrics, acceptance, ids)
    writes.py    writes inside a transaction (one path for SQLite and PostgreSQL; a run
                 started or finished alone is a batch of one of the sweep's batched writes)
    packed.py    a run's metrics packed into one row (run_metrics, with its layout in
                 metric_layout, 0015) and unpacked for every reader
    reads.py     reads as DataFrames; lookups and their "not found" errors
    latest.py    each candidate's latest total figures, packed per candidate and kind
                 in latest_figures, kept by the writes
    candidate_runs.py each candidate's latest, per-stage and outcome run with its
                 status (candidate_run), kept by the writes of runs
    liveness.py  heartbeats of running runs, crashed-run detection on open
    blobs.py     content-addressed evidence files (temp -> fsync -> rename)

SQLite (`records.db`, the default) and PostgreSQL (a URL) are one code path; only the
connection setup differs. Each write is one transaction, so a crash or a bad argument
leaves nothing half-written; a write that meets a busy database (another writer holds
SQLite's lock, a PostgreSQL serialization failure) is retried, so "database is locked"
does not reach the user. Reads return pandas DataFrames, with JSON columns as canonical
JSON strings and timestamps as UTC.

A run is written as "running" before its work starts; while it runs, a daemon thread
refreshes its heartbeat. Opening a store marks "crashed" the runs whose process is gone
(see liveness.py).

Large raw evidence lives in content-addressed files beside the database
(`<db>.evidence/ab/<sha256>`), written temp -> fsync -> rename before the row naming it.

Open one Store per process: an engine's pooled connections must not cross a fork.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from sqlalchemy import Connection
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dse.errors import InputError
from dse.identity import canonical_json, content_hash
from dse.records import blobs, opening, provenance, reads, reuse, snapshot, sql_reads, writes
from dse.records.blobs import Collected, EvidenceCheck, blob_path, check_evidence, default_evidence_dir, writing_blob
from dse.records.checks import (
    FINAL_RUN_STATUSES,
    METRIC_COLUMNS,
    MetricIn,
    MetricRow,
    RecordNotFound,
    as_id,
    checked_acceptance,
    checked_notes,
    checked_results,
    metric_rows,
)
from dse.records.engine import (
    MIGRATIONS_DIR,
    RETRY_BUSY_FOR_S,
    SCHEMA_HEAD,
    SQLITE_BUSY_TIMEOUT_MS,
    SQLITE_MMAP_BYTES,
    StoreBusy,
    alembic_config,
    database_url,
    make_engine,
    retry_once_on_conflict,
    retrying,
    schema_is_current,
    upgrade_schema,
    write_session,
    writer_engine,
)
from dse.records.liveness import (
    ABANDONED,
    HEARTBEAT_INTERVAL_S,
    STALE_AFTER_S,
    Heartbeats,
    LeaseLost,
    SweepLocked,
    acquire_sweep_lock,
    check_lease,
    liveness_settings,
    reap_crashed,
    release_sweep_lock,
    sweep_holder,
)
from dse.records.reads import STAGE_OF_KIND, diff_fields, flatten, pd
from dse.records.page_reads import PageReads
from dse.records.report_reads import ReportReads
from dse.records.revisions import known_revisions
from dse.records.schema import (
    ARTIFACT_ROLES,
    CALIBRATION_SOURCES,
    CANDIDATE_ORIGINS,
    DECISION_KINDS,
    EXPERIMENT_STATUSES,
    LINK_RELATIONS,
    NOTE_KINDS,
    IMPORTED_METRIC_KINDS,
    METRIC_KINDS,
    METRIC_SCOPES,
    RUN_STAGES,
    check_choice,
)

from .lessons import lessons, lessons_of

__all__ = [
    "ABANDONED", "FINAL_RUN_STATUSES", "HEARTBEAT_INTERVAL_S", "METRIC_COLUMNS", "MIGRATIONS_DIR",
    "RETRY_BUSY_FOR_S", "SCHEMA_HEAD", "SQLITE_BUSY_TIMEOUT_MS", "SQLITE_MMAP_BYTES", "STAGE_OF_KIND",
    "STALE_AFTER_S", "ArtifactRef", "ImportedEvidence", "MetricIn", "MetricRow", "RecordNotFound", "Store",
    "StoreBusy", "SweepLocked", "LeaseLost", "alembic_config", "canonical_json", "content_hash", "database_url", "diff_fields", "flatten",
]  # fmt: skip

_T = TypeVar("_T")


@dataclass(frozen=True)
class ArtifactRef:
    """An evidence file stored beside the database, and its row."""

    id: int
    sha256: str
    size: int
    path: Path


@dataclass(frozen=True)
class ImportedEvidence:
    """What `Store.import_evidence` recorded."""

    run_id: int
    candidate_id: int
    experiment_id: int
    kind: str
    format: str
    n_metrics: int
    artifact: ArtifactRef
    summary: dict[str, Any]


class Store(PageReads, ReportReads):
    """Experiments, candidates, runs, metrics, artifacts and decisions; see the module
    docstring.

    `evidence_dir` holds the artifact files; by default the folder the URL's
    `?evidence_dir=` names, else `<db>.evidence` beside a SQLite file, else
    $DSE_EVIDENCE_DIR, else a folder per database under
    ~/.local/share/dse/evidence. `heartbeat_interval` (seconds, 0 for none) is how often
    this store's running runs say they are alive; `stale_after` is how old a heartbeat
    from another host may be before its run is marked crashed on open, and its sweep lock
    (a lease) taken over. Unnamed, both come from $DSE_HEARTBEAT_S and $DSE_LEASE_S, else
    30 s and 600 s (`liveness.liveness_settings`).

    While this store holds an experiment's sweep lock (`acquire_sweep`), every write
    transaction first checks that it still does, and raises `LeaseLost` (writing nothing)
    once another process has taken it over.
    """

    def __init__(
        self,
        url_or_path: str | os.PathLike[str] = "records.db",
        *,
        evidence_dir: str | os.PathLike[str] | None = None,
        heartbeat_interval: float | None = None,
        stale_after: float | None = None,
    ):
        if heartbeat_interval is None or stale_after is None:
            from_env = liveness_settings()
            heartbeat_interval = from_env[0] if heartbeat_interval is None else heartbeat_interval
            stale_after = from_env[1] if stale_after is None else stale_after
        # A bad --db is the user's mistake, one line and nothing created (opening.py).
        url = opening.checked_url(url_or_path)
        # The evidence folder the URL names (`?evidence_dir=`), stripped before SQLAlchemy.
        url, named_evidence_dir = opening.split_evidence_dir(url)
        if evidence_dir is None:
            evidence_dir = named_evidence_dir
        sa_url = make_url(url)
        sqlite_file = sa_url.get_backend_name() == "sqlite" and sa_url.database not in (None, "", ":memory:")
        leftovers = opening.Leftovers(sa_url.database if sqlite_file else None)
        if sqlite_file:
            try:
                Path(sa_url.database).parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise opening.bad(sa_url.database, f"a path dse can create ({error.strerror or error})") from None
        try:
            self.engine = make_engine(url, idle_in_transaction_s=stale_after)
        except Exception as error:  # noqa: BLE001 - a dialect or driver that will not load
            raise opening.bad(url_or_path, f"{opening.SUPPORTED} ({type(error).__name__}: {error})") from None
        self._writer = writer_engine(self.engine)
        in_memory = self.engine.url.get_backend_name() == "sqlite" and self.engine.url.database in (None, "", ":memory:")
        self.evidence_dir = (Path(evidence_dir).expanduser().resolve() if evidence_dir is not None
                             else default_evidence_dir(self.engine.url))
        self.stale_after = stale_after
        self._leases: set[int] = set()  # experiments whose sweep lock this store holds
        # The runs this store started and has not finished; no beats in memory, where no
        # other process could see them.
        self._heartbeats = Heartbeats(self._writer, heartbeat_interval, enabled=not in_memory)
        self.reached = False
        try:
            if sqlite_file:
                opening.quick_check(self.engine, sa_url)
            if not self._schema_is_current():
                opening.check_revision(self.engine, known_revisions(MIGRATIONS_DIR), SCHEMA_HEAD)
                self._upgrade_schema()
            self.reap_crashed()
            # Reached once: a connection lost from now on is retried (engine.retrying); one
            # never made at the open is the --db's error, said at once.
            self.reached = True
        except BaseException as error:
            self.engine.dispose()
            converted = opening.as_bad_store(error, sa_url, None if sqlite_file else opening.shown(os.fspath(url_or_path)))
            if converted is not None:
                leftovers.remove()  # a bad store gets nothing new beside it (SQLite's -wal, -shm)
                raise converted from None
            raise

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @property
    def heartbeat_interval(self) -> float:
        return self._heartbeats.interval

    @heartbeat_interval.setter
    def heartbeat_interval(self, seconds: float) -> None:
        self._heartbeats.interval = seconds

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._heartbeats.stop()
        self.engine.dispose()

    # ---- schema and transactions ---------------------------------------------------------

    @retrying
    def _schema_is_current(self) -> bool:
        return schema_is_current(self.engine)

    @retrying
    def _upgrade_schema(self) -> None:
        upgrade_schema(self._writer, snapshot.create)

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with write_session(self._writer) as session:
            if self._leases:
                check_lease(session.connection(), sorted(self._leases), self.stale_after)
            yield session

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        """A write transaction on a Core connection (the batched writes), lease checked as in `_write`."""
        with self._writer.begin() as connection:
            if self._leases:
                check_lease(connection, sorted(self._leases), self.stale_after)
            yield connection

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as connection:
            yield connection

    # ---- runs whose process died ---------------------------------------------------------

    @retrying
    def reap_crashed(self) -> list[int]:
        """Mark "crashed" the running runs whose process is gone; return their ids.

        Called on every open. Same host: the recorded process (pid and start time) no
        longer exists. Another host, or no process recorded: no heartbeat for
        `stale_after` seconds.
        """
        return reap_crashed(self.engine, self._writer, self.stale_after)

    # ---- one sweep of an experiment at a time ---------------------------------------------

    @retrying
    def acquire_sweep(self, experiment_id: int, where: str = "") -> None:
        """Make this process the one sweeping the experiment (its heartbeat kept while the
        store is open), or raise SweepLocked (an InputError) naming the live process that
        is sweeping it: its pid, host and start time. A dead holder's lock is taken over."""
        acquire_sweep_lock(self._writer, experiment_id, where or self.url, self.stale_after)
        self._heartbeats.track_sweep(experiment_id)
        self._leases.add(experiment_id)

    @contextmanager
    def between_heartbeats(self) -> Iterator[None]:
        """Hold off this store's heartbeats: inside, none is in the middle of its write."""
        with self._heartbeats.writing:
            yield

    @retrying
    def release_sweep(self, experiment_id: int) -> None:
        self._leases.discard(experiment_id)
        self._heartbeats.untrack_sweep(experiment_id)
        release_sweep_lock(self._writer, experiment_id)

    # ---- writes --------------------------------------------------------------------------

    @retrying
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
        links: Iterable[tuple[str, int, str]] = (),
        workload: dict[str, Any] | None = None,
        status: str = "proposed",
    ) -> int:
        """Record a new experiment, or resume the one of that name and spec; return its id.

        `links`: (relation, earlier experiment id, reason) each, relation "follows" or
        "reopens"; written with a new experiment only (a resumed one keeps its own), as is
        `status` (a sweep's new experiment is "testing" at once).
        `workload`: what `workload_hash` identifies (dse.identity.workload_identity's parts)."""
        acceptance = checked_acceptance(acceptance)
        check_choice("experiment.status", status, EXPERIMENT_STATUSES)
        links = [(check_choice("experiment_link.relation", r, LINK_RELATIONS), operator.index(o), str(why))
                 for r, o, why in links]

        def create() -> int:
            with self._write() as session:
                return writes.create_experiment(
                    session, name, spec_hash, hypothesis=hypothesis, acceptance=acceptance,
                    workload_recipe=workload_recipe, workload_hash=workload_hash, spec_text=spec_text,
                    limitations=limitations, open_questions=open_questions, links=links, workload=workload,
                    status=status,
                )  # fmt: skip

        return retry_once_on_conflict(create)

    @retrying
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
        config, mapping, key = writes.canonical_candidate(config, mapping)

        def add() -> tuple[int, bool]:
            # A batch of one (`add_candidates`, the one write path of candidates), its diff
            # read in the same transaction; a known hash keeps its row (and its diff).
            with self._begin() as connection:
                found = writes.known_candidate(connection, experiment_id, key)
                if found is not None:
                    return found, False
                changes = diff if diff is not None else writes.diff_from_baseline(connection, experiment_id, config,
                                                                                   mapping)
                prepared = writes.prepared_candidates([dict(config=config, mapping=mapping, origin=origin,
                                                            diff=changes)])
                ((cid, created, _),) = writes.add_candidates(connection, experiment_id, prepared, None)
                return cid, created

        return retry_once_on_conflict(add)

    @retrying
    def set_baseline(self, experiment_id: int, candidate_id: int) -> None:
        with self._write() as session:
            writes.set_baseline(session, experiment_id, candidate_id)

    @retrying
    def set_whys(self, whys: Mapping[int, str]) -> None:
        """Record why each hand-picked candidate ({candidate id: why}) is in its experiment."""
        if not whys:
            return
        with self._write() as session:
            writes.set_whys(session, {operator.index(c): str(w) for c, w in whys.items()})

    @retrying
    def set_candidate_notes(self, notes: Mapping[int, str]) -> None:
        """Record what a sweep noticed about candidates ({candidate id: note}) that is not a
        metric (e.g. SRAM the ISA cannot address); shown by `dse show`."""
        if not notes:
            return
        with self._write() as session:
            writes.set_notes(session, checked_notes(notes))

    @retrying
    def set_status(self, experiment_id: int, status: str) -> None:
        with self._write() as session:
            writes.set_status(session, experiment_id, status)

    @retrying
    def settled_run_id(self, experiment_id: int) -> int | None:
        """The newest run of the experiment's candidates when none of them is running (what
        a judgement of the evidence read now covers); None with a run in flight or none."""
        with self._read() as connection:
            return reads.settled_run_id(connection, operator.index(experiment_id))

    @retrying
    def set_judged_run(self, experiment_id: int, run_id: int) -> None:
        """Mark that the sweep judged the evidence of every run of the experiment's candidates
        up to `run_id` and the latest proposal is that judgement (experiment.judged_run_id);
        written only when it changes, so a rerun with nothing new writes nothing."""
        with self._write() as session:
            writes.set_judged_run(session, experiment_id, operator.index(run_id))

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
        """Record a run as "running", with its provenance, before its work starts.

        Until `finish_run`, a daemon thread refreshes the run's heartbeat. (A batch of one:
        `start_runs`, the one write path of runs.)"""
        (run_id,) = self.start_runs([candidate_id], stage, seed=seed, command=command, model_version=model_version,
                                    emulator_version=emulator_version)
        return run_id

    @retrying
    def heartbeat(self, run_id: int) -> None:
        """Say a running run is still alive, so a stale "running" row can be told apart."""
        with self._write() as session:
            writes.heartbeat(session, run_id)

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
        """Write a run's metrics and final status together, or neither.

        The metrics go in as one batched insert. A run that an open marked crashed
        because it saw no sign of its process may still be finished by that process.
        (A batch of one: `finish_runs`, the one write path of finished runs.)"""
        self.finish_runs([dict(run_id=as_id(run_id), status=status, metrics=list(metrics), reason=reason, error=error,
                               traceback=traceback)])

    # ---- batched writes: one transaction for many rows (the sweep driver's path) ----------

    def add_candidates(self, experiment_id: int, rows: Iterable[Mapping[str, Any]]) -> list[tuple[int, bool]]:
        """Record many candidates at once; each row has config, mapping, origin and diff.
        Returns (id, created) per row, in order; known hashes (also repeats within `rows`)
        return the existing id.

        A row may also carry `config_json` / `mapping_json`: its config / mapping already
        as canonical JSON (`dse.identity.canonical_json`), written as is, and with both,
        `hash`: `dse.identity.candidate_hash_of_texts` of them, not made again. The rows go in
        as one multi-row INSERT of pre-encoded JSON text, in one transaction."""
        return [(cid, created) for cid, created, _ in self._add_candidates(experiment_id, rows, None)]

    def add_candidates_and_start_runs(
        self,
        experiment_id: int,
        rows: Iterable[Mapping[str, Any]],
        stage: str,
        *,
        seed: int | None = None,
        command: str | None = None,
        model_version: str = "",
        emulator_version: str | None = None,
        finish: Iterable[Mapping[str, Any]] = (),
        finish_notes: Mapping[int, str] | None = None,
        baseline: bool = False,
    ) -> list[tuple[int, bool, int]]:
        """`add_candidates`, then `start_runs` for each row's candidate, in one transaction:
        (candidate id, created, run id) per row (the sweep driver's batch).

        In the same transaction, first: `finish`, results of earlier runs as `finish_runs`
        takes them (the driver's previous batch: one transaction per batch, not two); and
        last, with `baseline`, the first row's candidate becomes the experiment's baseline.
        `finish_notes`: candidates' notes to write with `finish` (`set_candidate_notes`); a
        row's own `notes` are written with it."""
        base = writes.run_base(stage, seed, command, model_version, emulator_version)
        finished = checked_results(finish)
        out = self._add_candidates(experiment_id, rows, base, finished, baseline, checked_notes(finish_notes))
        self._heartbeats.untrack(r["run_id"] for r in finished[0])
        self._heartbeats.track(run_id for _, _, run_id in out)
        return out

    def add_candidates_with_finished_runs(
        self,
        experiment_id: int,
        rows: Iterable[Mapping[str, Any]],
        stage: str,
        results: Iterable[Mapping[str, Any]],
        *,
        started_at: datetime | None = None,
        seed: int | None = None,
        command: str | None = None,
        model_version: str = "",
        emulator_version: str | None = None,
        baseline: bool = False,
    ) -> list[tuple[int, bool, int]]:
        """`add_candidates`, each row's candidate with a run of `stage` written finished, in
        one transaction: (candidate id, created, run id) per row (the sweep driver's
        analytical batch, evaluated before any of it is written: all of it recorded, or
        none). `results`, one per row: as `finish_runs` takes them (status, metrics, reason,
        error, traceback; a `run_id` in them is ignored: the runs are new), or with
        `reused_run_id`, a link to that earlier run's evidence (as `link_runs` makes it).
        `started_at`: when the batch's evaluation started (its runs' start); with
        `baseline`, the first row's candidate becomes the experiment's baseline."""
        base = writes.run_base(stage, seed, command, model_version, emulator_version, started_at)
        results = list(results)
        # Checked as finish_runs checks them, the row's index standing for its run id.
        at = [i for i, r in enumerate(results) if r.get("reused_run_id") is None]
        ended = checked_results([results[i] for i in at], at)
        return self._add_candidates(experiment_id, rows, base, baseline=baseline, ended=(results, ended[1]))

    @retrying
    def _add_candidates(self, experiment_id: int, rows: Iterable[Mapping[str, Any]], run_base: dict[str, Any] | None,
                        finished: tuple[list, list] = ([], []), baseline: bool = False,
                        finished_notes: dict[int, str] | None = None,
                        ended: tuple[list, list] | None = None) -> list[tuple[int, bool, int | None]]:
        prepared = writes.prepared_candidates(rows)
        if ended is not None and len(ended[0]) != len(prepared):
            raise ValueError(f"results: one per candidate row, got {len(ended[0])} for {len(prepared)} rows")

        def add() -> list[tuple[int, bool, int | None]]:
            with self._begin() as connection:
                return writes.add_candidates(connection, experiment_id, prepared, run_base, finished, baseline,
                                             finished_notes, ended)

        try:
            return retry_once_on_conflict(add)
        except writes.Unfinishable as short:
            unfinishable = short.ids
        self._explain_unfinishable(unfinishable)

    @retrying
    def start_runs(
        self,
        candidate_ids: Iterable[int],
        stage: str,
        *,
        seed: int | None = None,
        command: str | None = None,
        model_version: str = "",
        emulator_version: str | None = None,
    ) -> list[int]:
        """`start_run` for many candidates in one transaction; run ids in order."""
        candidate_ids = [as_id(c) for c in candidate_ids]
        base = writes.run_base(stage, seed, command, model_version, emulator_version)  # (outside: it may run git)
        try:
            with self._begin() as connection:
                run_ids = writes.insert_runs(connection, candidate_ids, base) if candidate_ids else []
        except IntegrityError:  # a candidate the store lacks (its foreign key): which, said after the rollback
            with self._read() as connection:
                writes.explain_missing_candidates(connection, candidate_ids)
            raise
        self._heartbeats.track(run_ids)
        return run_ids

    @retrying
    def finish_runs(self, results: Iterable[Mapping[str, Any]], notes: Mapping[int, str] | None = None) -> None:
        """`finish_run` for many runs in one transaction: each result has run_id, status and
        optionally metrics, reason, error, traceback; with `notes`, candidates' notes
        (`set_candidate_notes`) in the same transaction. All are written, or none."""
        checked = checked_results(results)
        notes = checked_notes(notes)
        try:
            with self._begin() as connection:
                writes.finish_runs(connection, *checked, notes=notes)
        except writes.Unfinishable as short:
            unfinishable = short.ids
        else:
            self._heartbeats.untrack(r["run_id"] for r in checked[0])
            return
        self._explain_unfinishable(unfinishable)

    # ---- evidence reused across experiments (dse.records.reuse) ---------------------------

    @retrying
    def reusable(self, hashes: Sequence[str], **key: Any) -> dict[str, reuse.Source]:
        """Per candidate hash, the earlier run whose evidence a follow-up reuses (`reuse.reusable`)."""
        with self._read() as connection:
            return reuse.reusable(connection, hashes, **key)

    @retrying
    def link_runs(self, links: Mapping[int, int]) -> None:
        """Finish running runs as links to earlier runs (run id -> earlier run id), in one transaction."""
        links = dict(links)
        with self._begin() as connection:
            reuse.link_runs(connection, links)
        self._heartbeats.untrack(links)

    @retrying
    def source_totals(self, run_id: int) -> dict[str, float]:
        with self._read() as connection:
            return reuse.source_totals(connection, run_id)

    def _explain_unfinishable(self, ids: list[int]) -> NoReturn:
        with self._read() as connection:
            writes.explain_unfinishable(connection, ids)

    @retrying
    def add_decision(
        self,
        experiment_id: int,
        verdict: str,
        rationale: str,
        author: str,
        evidence: Iterable[int] = (),
        candidate_id: int | None = None,
        *,
        kind: str = "decision",
        evidence_kinds: Iterable[str] | None = None,
        override: str | None = None,
        checks: list[Any] | None = None,
        status: str | None = None,
    ) -> int:
        """Record a decision (`kind` "decision", a person's) or a sweep's proposal
        ("proposal"); `evidence` are ids of runs that support it (of this experiment, or of
        the candidate's), `candidate_id` the candidate it names (None: the hypothesis as a
        whole), `status` the hypothesis' status it sets (None: unchanged), in the same
        transaction. The rules of who may decide what are `dse.runner.decisions.decide`'s."""
        check_choice("decision.kind", kind, DECISION_KINDS)
        if status is not None:
            check_choice("experiment.status", status, EXPERIMENT_STATUSES)
        run_ids = [operator.index(r) for r in evidence]
        kinds = None if evidence_kinds is None else [check_choice("evidence kind", k, METRIC_KINDS) for k in evidence_kinds]
        with self._write() as session:
            return writes.add_decision(session, experiment_id, verdict, rationale, author, run_ids, candidate_id,
                                       kind=kind, evidence_kinds=kinds, override=override, checks=checks,
                                       status=status)

    @retrying
    def decision_evidence(self, experiment: str | int, candidate_id: int) -> tuple[int, list[int]]:
        """(experiment id, run ids): the finished runs of the candidate and of the
        experiment's baseline, the evidence a decision on that candidate rests on."""
        with self._read() as connection:
            return reads.decision_evidence(connection, experiment, candidate_id)

    @retrying
    def links(self, experiment: str | int | None = None) -> list[dict[str, Any]]:
        """How experiments follow or reopen earlier ones (all, or those from and to one
        experiment), oldest first, as plain dicts."""
        with self._read() as connection:
            return reads.links(connection, experiment)

    # ---- notes ---------------------------------------------------------------------------

    @retrying
    def add_note(self, experiment: str | int, kind: str, text: str, author: str) -> int:
        """Add a limitation, open question or free note to an experiment; its id. The
        experiment's spec text is left as it was."""
        check_choice("note.kind", kind, NOTE_KINDS)
        if not text.strip():
            raise InputError("dse note", "text", text, "a non-empty note")
        if not author.strip():
            raise InputError("dse note", "--author", author, "a non-empty name")
        with self._read() as connection:
            experiment_id = reads.experiment_id_of(connection, experiment)
        with self._write() as session:
            return writes.add_note(session, experiment_id, kind, text.strip(), author)

    @retrying
    def add_calibration(self, *, chip: str, chip_hash: str, source: str, model_version: str,
                        emulator_version: str | None, constants: dict[str, float], error_before: dict[str, Any],
                        error_after: dict[str, Any], points: list[dict[str, Any]], command: str | None = None) -> int:
        """Record a calibration of a chip's model (`dse calibrate`), all of it in one
        transaction, with the command and commit that made it; its id."""
        check_choice("calibration.source", source, CALIBRATION_SOURCES)
        environment = provenance.collect(command)
        with self._write() as session:
            return writes.add_calibration(session, environment, chip=chip, chip_hash=chip_hash, source=source,
                                          model_version=model_version, emulator_version=emulator_version,
                                          constants=constants, error_before=error_before, error_after=error_after,
                                          points=points)

    def add_lesson(self, text: str, experiments: Sequence[str | int], author: str) -> int:
        """Record a lesson or reusable method linked to the experiments it came from (names
        or ids, each once); its id. An unknown experiment: RecordNotFound, nothing written."""
        if not text.strip():
            raise InputError("dse lesson", "TEXT", text, "a non-empty lesson")
        if not author.strip():
            raise InputError("dse lesson", "--author", author, "a non-empty name")
        if not experiments:
            raise InputError("dse lesson", "--from", None, "at least one experiment the lesson came from")
        with self._read() as connection:
            ids = list(dict.fromkeys(reads.experiment_id_of(connection, e) for e in experiments))
        with self._write() as session:
            return writes.add_lesson(session, ids, text.strip(), author)

    def lessons(self, experiment: str | int | None = None) -> list[dict[str, Any]]:
        """The lessons (`dse.records.lessons.lessons`) of every experiment, or those one of
        them came from, oldest first."""
        if experiment is None:
            return lessons(self.notes())
        with self._read() as connection:
            ident = reads.experiment_id_of(connection, experiment)
        return lessons_of(self.notes(), ident)

    @retrying
    def notes(self, experiment: str | int | None = None) -> list[dict[str, Any]]:
        """The notes of an experiment (or of all), oldest first: id, experiment_id,
        experiment, kind, text, author, created_at."""
        with self._read() as connection:
            return reads.notes(connection, experiment)

    # ---- artifacts -----------------------------------------------------------------------

    def artifact_path(self, sha256: str) -> Path:
        """Where the evidence file of this content lives."""
        return blob_path(self._evidence_root(), sha256)

    def _evidence_root(self) -> Path:
        if self.evidence_dir is None:
            raise RuntimeError(f"{self.url} has no evidence folder (pass evidence_dir=)")
        return self.evidence_dir

    @retrying
    def put_artifact(
        self,
        source: str | os.PathLike[str] | bytes,
        *,
        role: str,
        media_type: str | None = None,
        run_id: int | None = None,
        experiment_id: int | None = None,
        name: str | None = None,
    ) -> ArtifactRef:
        """Store a file (or bytes) as content-addressed evidence of a run or experiment.

        The file is written (fsynced) under a temporary name, then its row, then it is
        renamed to its digest's name (`blobs.writing_blob`)."""
        check_choice("artifact.role", role, ARTIFACT_ROLES)
        if run_id is None and experiment_id is None:
            raise ValueError("an artifact belongs to a run or an experiment: give run_id or experiment_id")
        if name is None and not isinstance(source, bytes):
            name = os.fspath(source)
        if media_type is None:
            media_type = blobs.media_type(name)
        with self._read() as connection:  # check before the file is written
            experiment_id = writes.artifact_owner(connection, run_id, experiment_id)
        # file (pending) -> row -> rename, under the evidence folder's shared lock: a
        # collection never sees the file without its row
        with writing_blob(self._evidence_root(), source) as blob:
            with self._write() as session:
                artifact_id = writes.add_artifact(session, run_id=run_id, experiment_id=experiment_id,
                                                  sha256=blob.sha256, size=blob.size, media_type=media_type,
                                                  role=role, name=name)
        return ArtifactRef(artifact_id, blob.sha256, blob.size, blob.path)

    @retrying
    def put_artifacts(
        self,
        items: Sequence[tuple[bytes, str | None]],
        *,
        role: str,
        run_id: int | None = None,
        experiment_id: int | None = None,
    ) -> list[ArtifactRef]:
        """`put_artifact` of many (bytes, name) of one owner and role at once: the files
        written, their rows in one transaction, then the files placed (`blobs.writing_blobs`)."""
        check_choice("artifact.role", role, ARTIFACT_ROLES)
        if run_id is None and experiment_id is None:
            raise ValueError("an artifact belongs to a run or an experiment: give run_id or experiment_id")
        if not items:
            return []
        with self._read() as connection:  # check before the files are written
            experiment_id = writes.artifact_owner(connection, run_id, experiment_id)
        with blobs.writing_blobs(self._evidence_root(), [data for data, _ in items]) as written:
            with self._write() as session:
                ids = [writes.add_artifact(session, run_id=run_id, experiment_id=experiment_id, sha256=blob.sha256,
                                           size=blob.size, media_type=blobs.media_type(name), role=role, name=name)
                       for blob, (_, name) in zip(written, items)]
        return [ArtifactRef(i, blob.sha256, blob.size, blob.path) for i, blob in zip(ids, written)]

    @retrying
    def evidence_bytes(self) -> int:
        """The size of the evidence files the store's rows name (each content once)."""
        with self._read() as connection:
            return reads.evidence_bytes(connection)

    @retrying
    def artifact(self, artifact_id: int) -> dict[str, Any]:
        """One artifact's row as a dict, with `path`, where its file lives."""
        with self._read() as connection:
            row = reads.artifact(connection, artifact_id)
        row["path"] = self.artifact_path(row["sha256"])
        return row

    @retrying
    def delete_experiment(self, experiment: str | int) -> dict[str, int]:
        """Delete an experiment and everything recorded of it (candidates, runs, metrics,
        artifact rows, decisions, notes, links); counts by table. Its evidence files stay
        until `collect_evidence_garbage`. Refused (ValueError) while another experiment
        follows it, reopens it, or a decision elsewhere names one of its candidates."""
        with self._read() as connection:
            experiment_id = reads.experiment_id_of(connection, experiment)
        with self._write() as session:
            return writes.delete_experiment(session, experiment_id)

    def collect_evidence_garbage(self, dry_run: bool = False) -> Collected:
        """Remove evidence files no artifact row names (those of deleted experiments, or
        left by a crash between file and row), with the evidence folder locked against
        writes in flight; only files named by their digest are touched (`blobs.collect_garbage`)."""
        root = self.evidence_dir
        if root is None:
            return Collected()

        def named() -> set[str]:
            with self._read() as connection:
                return reads.artifact_shas(connection)

        return blobs.collect_garbage(root, named, dry_run=dry_run)

    def check_evidence(self, experiment: str | int | None = None, run: int | None = None,
                       candidate: int | None = None) -> EvidenceCheck:
        """Re-hash the evidence files of the artifact rows (all, an experiment's, a run's or
        a candidate's): ok, missing, altered or refused, one judgement for every view."""
        return check_evidence(self.evidence_dir, self.artifact_rows(experiment, run=run, candidate=candidate))

    # ---- outside evidence ----------------------------------------------------------------

    @retrying
    def import_evidence(
        self,
        candidate_id: int,
        kind: str,
        path: str | os.PathLike[str],
        *,
        fmt: str = "auto",
        note: str | None = None,
        command: str | None = None,
    ) -> ImportedEvidence:
        """Record measurements made outside dse (RTL simulation, FPGA, synthesis, power
        analysis) for a candidate.

        `path` is the framework's pmctrace NDJSON or a CSV of measurements, or for
        synth_area and power a component table (CSV or JSON; see dse.records.evidence).
        The figures keep `kind` (`IMPORTED_METRIC_KINDS`), never merged with dse's own;
        they become one run of stage "imported", status "ok", with the raw file as its
        artifact. A bad file, kind or candidate raises
        InputError and writes nothing."""
        from dse.records.evidence import parse_evidence

        if kind not in IMPORTED_METRIC_KINDS:
            raise InputError(
                path, "--kind", kind,
                f"{', '.join(IMPORTED_METRIC_KINDS)} (evidence from outside dse; "
                "analytical and emulator figures are recorded by dse itself)",
            )  # fmt: skip
        with self._read() as connection:
            experiment_id = writes.candidate_experiment(connection, candidate_id)
        parsed = parse_evidence(path, kind, fmt)
        environment = provenance.collect(command)
        versions = dict(environment.versions)
        if note:
            versions["evidence_source"] = note
        with writing_blob(self._evidence_root(), path) as blob, self._write() as session:  # file, rows, rename
            rows = metric_rows(parsed.metrics, f"{path}")
            run_id = writes.add_imported_run(session, candidate_id, environment, versions, rows)
            sha, size, stored = blob.sha256, blob.size, blob.path
            artifact_id = writes.add_artifact(session, run_id=run_id, experiment_id=experiment_id, sha256=sha,
                                              size=size, media_type=parsed.media_type, role=parsed.role,
                                              name=os.fspath(path))
            imported = ImportedEvidence(
                run_id=run_id,
                candidate_id=candidate_id,
                experiment_id=experiment_id,
                kind=kind,
                format=parsed.format,
                n_metrics=len(rows),
                artifact=ArtifactRef(artifact_id, sha, size, stored),
                summary=parsed.summary,
            )
        return imported

    # ---- reads ---------------------------------------------------------------------------

    @retrying
    def revision(self) -> tuple[int, int, int, int]:
        """A token that changes whenever a candidate or run is added or a run's status
        changes (`reads.revision`): what a view computed from the records at one token
        (a judgement of 100,000 candidates) stands while the token does."""
        with self._read() as connection:
            return reads.revision(connection)

    @retrying
    def sweep_holder(self, experiment_id: int) -> dict | None:
        """The live process sweeping the experiment (host, pid, command, start, last
        heartbeat), or None: no lock, or one a dead process left (`liveness.sweep_holder`)."""
        with self._read() as connection:
            return sweep_holder(connection, int(experiment_id), self.stale_after)

    @retrying
    def experiment_summaries(self) -> list[dict[str, Any]]:
        """What `experiments()` holds, as plain dicts: no pandas (a quick `dse history`)."""
        with self._read() as connection:
            return reads.experiment_summaries(connection)

    def experiments(self) -> pd.DataFrame:
        """One row per experiment: candidates by outcome (n_<status>: the status of each
        candidate's latest run, a "pruned" run leaving the earlier outcome standing),
        n_emulated (candidates with an ok emulator run), n_decisions (people's), n_notes,
        the sweep's latest proposed verdict, and the latest person's decision (its
        verdict, and the candidate it names, if any)."""
        return reads.experiments_frame(self.experiment_summaries())

    @retrying
    def experiment_id(self, name_or_id: str | int) -> int:
        """The id of the experiment of this name or id."""
        with self._read() as connection:
            return reads.experiment_id_of(connection, name_or_id)

    @retrying
    def experiment(self, name_or_id: str | int) -> dict[str, Any]:
        """One experiment's row as a dict (JSON columns as Python values)."""
        with self._read() as connection:
            return reads.experiment(connection, name_or_id)

    @retrying
    def candidate(self, candidate_id: int) -> dict[str, Any]:
        """One candidate as a dict: its row (JSON as Python values), experiment name, and
        whether it is the baseline."""
        with self._read() as connection:
            return reads.candidate(connection, candidate_id)

    @retrying
    def run(self, run_id: int) -> dict[str, Any]:
        """One run as a dict, with its experiment id and its metrics (long form)."""
        with self._read() as connection:
            return reads.run(connection, run_id)

    @retrying
    def run_row(self, run_id: int) -> dict[str, Any]:
        """`run` without its metrics: no pandas (a quick `dse show r<ID>`)."""
        with self._read() as connection:
            return reads.run_row(connection, run_id)

    @retrying
    def run_metric_rows(self, run_id: int) -> list[dict[str, Any]]:
        """`run(run_id)["metrics"]` as plain dicts: no pandas (a quick `dse show r<ID>`)."""
        with self._read() as connection:
            return reads.run_metric_rows(connection, run_id)

    @retrying
    def candidates(self, experiment: str | int, stage: str | None = None, lean: bool = False,
                   limit: int | None = None) -> pd.DataFrame:
        """One row per candidate, with the stage, status and reason of its latest run (of
        `stage`, when given). `lean`: without the config, mapping and created_at columns
        (a listing of a large experiment reads in a fraction of the time); `limit`: the
        first `limit` candidates (by id) only."""
        if stage is not None:
            check_choice("run.stage", stage, RUN_STAGES)
        with self._read() as connection:
            return reads.candidates(connection, reads.experiment_id_of(connection, experiment), stage, lean,
                                    limit=limit)

    @retrying
    def candidate_rows(self, experiment: str | int, limit: int | None = None) -> list[dict[str, Any]]:
        """`candidates(experiment, lean=True, limit=limit)` as plain dicts (without
        is_baseline): no pandas (a quick `dse show`)."""
        with self._read() as connection:
            return reads.candidate_rows(connection, reads.experiment_id_of(connection, experiment), limit)

    @retrying
    def latest_status_counts(self, experiment: str | int) -> list[tuple[str, int]]:
        """[(status, candidates)]: the experiment's candidates by their latest run's status
        ("not run" without one), most first: `candidates()["status"].value_counts()`
        without reading every candidate."""
        with self._read() as connection:
            return reads.latest_status_counts(connection, reads.experiment_id_of(connection, experiment))

    @retrying
    def reason_groups(self, experiment: str | int) -> list[tuple[str, str, int]]:
        """[(status, reason, candidates)]: the infeasible, pruned, failed and crashed
        candidates grouped by reason, most first (`sql_reads.reason_groups`)."""
        with self._read() as connection:
            return reads.reason_groups(connection, reads.experiment_id_of(connection, experiment))

    @retrying
    def runs(
        self, experiment: str | int | None = None, candidate: int | None = None
    ) -> pd.DataFrame:
        """Runs with their provenance, filtered by experiment (name or id) and/or candidate id."""
        with self._read() as connection:
            return reads.runs(connection, experiment, candidate)

    @retrying
    def run_rows(self, candidate: int) -> list[dict[str, Any]]:
        """`runs(candidate=candidate)` as plain dicts (timestamps aware UTC, versions as its
        JSON text): no pandas (a quick `dse show c<ID>`)."""
        with self._read() as connection:
            return reads.run_rows(connection, candidate)

    @retrying
    def reused_run_rows(self, experiment_id: int) -> list[dict[str, Any]]:
        """The experiment's runs that link to an earlier run's evidence, as `run_rows` gives
        them (`sql_reads.reused_runs`)."""
        with self._read() as connection:
            return sql_reads.reused_runs(reads.text_runner(connection), int(experiment_id))

    # ---- what an acceptance judgement reads (`dse.runner.acceptance.judge_experiment`;
    # the light read has the same methods, running the same SQL) ----------------------------

    @retrying
    def analytical_statuses(self, experiment_id: int | None = None, candidate_ids: Iterable[int] | None = None
                            ) -> list[tuple[int, str | None]]:
        """[(candidate id, status of its latest analytical run or None)] of an experiment's
        candidates, or of the candidates named, by id."""
        with self._read() as connection:
            return sql_reads.analytical_statuses(reads.text_runner(connection), experiment_id,
                                                 None if candidate_ids is None else list(candidate_ids))

    @retrying
    def figure_columns(self, kinds: Iterable[str], names: Iterable[str], experiment_id: int | None = None,
                       candidate_ids: Iterable[int] | None = None, with_runs: bool = False
                       ) -> dict[str, tuple[Any, ...]]:
        """{kind: (candidate ids, {name: values})}: the latest total figures of these kinds
        and names of an experiment's candidates, or of the candidates named, as numpy arrays
        (`with_runs`: and the run ids they are of, `sql_reads.figure_columns`)."""
        with self._read() as connection:
            return sql_reads.figure_columns(reads.text_runner(connection), list(kinds), list(names), experiment_id,
                                            None if candidate_ids is None else list(candidate_ids), with_runs)

    @retrying
    def _page_read(self, read: Callable[[sql_reads.Run], _T]) -> _T:
        """`read(run)` in one read of the database: the workbench's and the report's reads
        (`PageReads`, `ReportReads`)."""
        with self._read() as connection:
            return read(reads.text_runner(connection))

    @retrying
    def workload_points(self, experiment_id: int) -> list[tuple[int, str, dict]]:
        """[(candidate id, hash, workload point)] of the experiment's candidates at a workload point."""
        with self._read() as connection:
            return sql_reads.workload_points(reads.text_runner(connection), experiment_id)

    # ---- calibrations (the model's, per chip: `dse.records.calibrations`) ---------------------

    @retrying
    def calibrations(self, chip: str | None = None, sources: Sequence[str] | None = None,
                     ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Every calibration (of one chip, of these sources, with these ids, when given),
        newest first (`sql_reads.calibrations`)."""
        with self._read() as connection:
            return sql_reads.calibrations(reads.text_runner(connection), chip, sources, ids)

    @retrying
    def latest_calibration(self, chip: str) -> dict[str, Any] | None:
        """The newest cycles calibration of `chip` (by name), or None."""
        with self._read() as connection:
            return sql_reads.latest_calibration(reads.text_runner(connection), chip)

    @retrying
    def latest_ppa_records(self, chip: str) -> list[dict[str, Any]]:
        """The newest calibration of `chip` of each PPA source (synth_area, power) it has."""
        with self._read() as connection:
            return sql_reads.latest_ppa_records(reads.text_runner(connection), chip)

    @retrying
    def total_metric_rows(self, candidate: int) -> list[dict[str, Any]]:
        """The candidate's total metrics (kind, name, value, unit, run_id), each kind's from
        its latest run that recorded that kind: plain dicts (a quick `dse show c<ID>`)."""
        with self._read() as connection:
            return reads.total_metric_rows(connection, candidate)

    @retrying
    def metrics(self, experiment: str | int, kind: str | None = None) -> pd.DataFrame:
        """Long form: one row per metric, with the run's stage and model/emulator versions."""
        with self._read() as connection:
            return reads.metrics(connection, reads.experiment_id_of(connection, experiment), kind)

    @retrying
    def metric_table(self, experiment: str | int, kind: str, scope: str = "total") -> pd.DataFrame:
        """Wide form: one row per candidate (and scope_key unless scope is "total"), one
        column per metric name of the figures shown, beside the candidate's status and reason in the stage that
        produces that kind of evidence (an emulator run pruned later does not hide an
        analytical "ok").

        A candidate's numbers come from its latest run that recorded `kind` at `scope`;
        `metric_run_id`, `model_version` and `emulator_version` name that run. Candidates
        without such metrics (infeasible, failed) keep their row, with NaN numbers.
        """
        check_choice("metric.kind", kind, METRIC_KINDS)
        check_choice("metric.scope", scope, METRIC_SCOPES)
        with self._read() as connection:
            return reads.metric_table(connection, experiment, kind, scope)

    @retrying
    def totals(self, candidate_ids: Iterable[int], kinds: Iterable[str] | None = None
               ) -> dict[int, dict[str, dict[str, float]]]:
        """{candidate: {kind: {metric: value}}}: total metrics of each kind, from each
        candidate's latest run recording that kind (a kind it lacks is absent)."""
        kinds = None if kinds is None else tuple(check_choice("metric.kind", k, METRIC_KINDS) for k in kinds)
        with self._read() as connection:
            return reads.candidate_totals(connection, list(candidate_ids), kinds)

    @retrying
    def decisions(self, experiment: str | int | None = None) -> pd.DataFrame:
        with self._read() as connection:
            return reads.decisions(connection, experiment)

    @retrying
    def decision_rows(self, experiment: str | int | None = None) -> list[dict[str, Any]]:
        """What `decisions()` holds, as plain dicts: no pandas (a quick `dse history`)."""
        with self._read() as connection:
            return reads.decision_rows(connection, experiment)

    @retrying
    def artifacts(
        self, experiment: str | int | None = None, run: int | None = None, candidate: int | None = None
    ) -> pd.DataFrame:
        """Evidence files (all, or an experiment's, a run's and/or those of a candidate's runs;
        a run that reuses another's evidence: that run's), with the candidate of their run
        and their path on disk."""

        def path_of(sha: str) -> str | None:
            return str(self.artifact_path(sha)) if self.evidence_dir is not None else None

        with self._read() as connection:
            return reads.artifacts(connection, experiment, run, path_of, candidate)

    @retrying
    def artifact_rows(self, experiment: str | int | None = None, run: int | None = None,
                      candidate: int | None = None) -> list[dict[str, Any]]:
        """The evidence files' rows (all, or an experiment's, a run's and/or those of a
        candidate's runs) as plain dicts, without their paths: no pandas (a quick `dse show`)."""
        with self._read() as connection:
            return reads.artifact_rows(connection, experiment, run, candidate)

    @retrying
    def compare(self, a: int, b: int) -> pd.DataFrame:
        """The fields that differ between candidates a and b: config and mapping as dotted
        paths ("config.banks.count"), then total metrics as "kind:name"."""
        with self._read() as connection:
            return reads.compare(connection, a, b)

    @retrying
    def compare_metrics(self, a: int, b: int, scope: str = "total") -> pd.DataFrame:
        """Metric by metric, candidates a and b side by side, each kind kept apart.

        For each evidence kind, a candidate's figures come from its latest run that
        recorded that kind. Columns: kind, name, unit, scope, scope_key, a, b,
        delta (b - a), ratio (b / a), then the run id and model/emulator versions each
        side's figure came from. A metric only one side has keeps a NaN on the other."""
        check_choice("metric.scope", scope, METRIC_SCOPES)
        with self._read() as connection:
            return reads.compare_metrics(connection, a, b, scope)

