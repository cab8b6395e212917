"""Writes of the record store, each inside a transaction the caller opened (an ORM
session, or a Core connection on the sweep's batched path), so that a crash or a bad
argument leaves nothing half-written."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy import Connection, bindparam, delete, insert, or_, select, update
from sqlalchemy.orm import Session

from dse.identity import Encoded, candidate_hash, candidate_hash_of_texts, canonical_json, json_text
from dse.records import candidate_runs, latest, packed, provenance, reuse
from dse.records.driver import DriverCursor
from dse.records.checks import METRIC_COLUMNS, Pack, as_id, packs_of
from dse.records.liveness import ABANDONED, finishable, finishable_clause
from dse.records.reads import candidate_not_found, diff_fields, experiment_exists, get, not_found, run_states
from dse.records.schema import (
    CANDIDATE_ORIGINS,
    RUN_STAGES,
    Artifact,
    Calibration,
    Candidate,
    CandidateRun,
    Decision,
    Experiment,
    ExperimentLink,
    LatestFigures,
    Note,
    Run,
    RunMetrics,
    check_choice,
    utcnow,
)
from dse.records.schema import SweepLock


class Unfinishable(Exception):
    """Some run of a batch to finish is missing or finished already: raised inside the
    transaction, so that it rolls back, and explained after (`explain_unfinishable`)."""

    def __init__(self, ids: list[int]):
        super().__init__(ids)
        self.ids = ids


# ---- experiments and candidates, one at a time (a candidate: a batch of one, `add_candidates`) --


def create_experiment(session: Session, name: str, spec_hash: str, links: Sequence[tuple[str, int, str]] = (),
                      **columns: Any) -> int:
    """The id of the experiment `name`, recorded now unless it exists with this spec, with
    its `links` ((relation, other experiment id, reason) each) to earlier experiments."""
    existing = session.scalars(select(Experiment).where(Experiment.name == name)).one_or_none()
    if existing is not None:
        if existing.spec_hash != spec_hash:
            raise ValueError(
                f"experiment name {name!r} is taken by a different spec "
                f"(recorded spec_hash {existing.spec_hash}, this spec {spec_hash}); "
                "rename the experiment to record the changed spec"
            )
        return existing.id
    experiment = Experiment(name=name, spec_hash=spec_hash, **{"status": "proposed", **columns})
    session.add(experiment)
    session.flush()
    for relation, other_id, reason in links:
        get(session, Experiment, other_id)
        session.add(ExperimentLink(experiment_id=experiment.id, other_id=other_id, relation=relation, reason=reason))
    session.flush()
    return experiment.id


def canonical_candidate(config: dict[str, Any], mapping: dict[str, Any]) -> tuple[Any, Any, str]:
    """(config, mapping, hash) as stored: the canonical JSON reads back, so the stored row
    rehashes to the hash."""
    config, mapping = json.loads(canonical_json([config, mapping]))
    return config, mapping, candidate_hash(config, mapping)


def known_candidate(connection: Connection, experiment_id: int, key: str) -> int | None:
    """The id of the experiment's candidate of hash `key`, None if it has none;
    RecordNotFound if the store lacks the experiment."""
    if not experiment_exists(connection, experiment_id):
        raise not_found(connection, "experiment", experiment_id)
    return _candidate_ids(connection, as_id(experiment_id), [key]).get(key)


def diff_from_baseline(connection: Connection, experiment_id: int, config: dict[str, Any],
                       mapping: dict[str, Any]) -> dict[str, list[Any]]:
    """A candidate's fields that differ from the experiment's baseline ({} without one)."""
    baseline_id = connection.scalar(
        select(Experiment.baseline_candidate_id).where(Experiment.id == as_id(experiment_id)))
    if baseline_id is None:
        return {}
    config_text, mapping_text = candidate_texts(connection, [baseline_id])[baseline_id]
    return diff_fields({"config": json.loads(config_text), "mapping": json.loads(mapping_text)},
                       {"config": config, "mapping": mapping})


def candidate_texts(connection: Connection, candidate_ids: Sequence[int]) -> dict[int, tuple[str, str]]:
    """candidate id -> (config text, mapping text), canonical JSON as stored (0018: candidate_text)."""
    out: dict[int, tuple[str, str]] = {}
    ids = [as_id(c) for c in candidate_ids]
    for i in range(0, len(ids), 500):  # stay under the bound-parameter limit
        listed = ", ".join(map(str, ids[i:i + 500]))
        out.update((cid, (config, mapping)) for cid, config, mapping in connection.exec_driver_sql(
            "SELECT c.id, tc.text, tm.text FROM candidate c JOIN candidate_text tc ON tc.id = c.config_id "
            f"JOIN candidate_text tm ON tm.id = c.mapping_id WHERE c.id IN ({listed})"))
    return out


def text_ids(connection: Connection, texts: Iterable[str]) -> dict[str, int]:
    """text -> candidate_text id of each config or mapping text (canonical JSON), stored now
    if the store lacks it (a concurrent writer's copy of the same text is taken: the hash
    is unique)."""
    hashes = {hashlib.sha256(t.encode()).hexdigest(): t for t in dict.fromkeys(texts)}
    if not hashes:
        return {}
    found = _text_ids_of(connection, list(hashes))
    missing = [h for h in hashes if h not in found]
    if missing:
        mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            before = connection.exec_driver_sql("SELECT coalesce(max(id), 0) FROM candidate_text").scalar()
        inserted = connection.exec_driver_sql(
            f"INSERT INTO candidate_text (hash, text) VALUES ({mark}, {mark}) ON CONFLICT (hash) DO NOTHING",
            [(h, hashes[h]) for h in missing]).rowcount
        # SQLite, all inserted and no other writer between (its write lock): ids before + 1, ... in order
        if sqlite and inserted == len(missing) and connection.exec_driver_sql(
                "SELECT max(id) FROM candidate_text").scalar() == before + inserted:
            found.update((h, before + 1 + i) for i, h in enumerate(missing))
        else:
            found.update(_text_ids_of(connection, missing))
    return {hashes[h]: i for h, i in found.items()}


def _text_ids_of(connection: Connection, hashes: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    # PostgreSQL: what is found stays until this transaction ends (`orphaned_texts_deleted`
    # waits for it); SQLite's write lock keeps every other writer out already.
    lock = " FOR KEY SHARE" if connection.dialect.name == "postgresql" else ""
    for i in range(0, len(hashes), 500):  # stay under the bound-parameter limit
        part = hashes[i:i + 500]
        out.update((h, int(i_)) for i_, h in connection.exec_driver_sql(
            f"SELECT id, hash FROM candidate_text WHERE hash IN ({', '.join([mark] * len(part))}){lock}", tuple(part)))
    return out


def set_baseline(session: Session, experiment_id: int, candidate_id: int) -> None:
    experiment = get(session, Experiment, experiment_id)
    candidate = get(session, Candidate, candidate_id)
    if candidate.experiment_id != experiment_id:
        raise ValueError(
            f"candidate {candidate_id} belongs to experiment {candidate.experiment_id}, "
            f"not {experiment_id}"
        )
    experiment.baseline_candidate_id = candidate_id


def set_whys(session: Session, whys: dict[int, str]) -> None:
    for candidate_id, why in whys.items():
        get(session, Candidate, candidate_id).why = why


def set_notes(session: Session, notes: dict[int, str]) -> None:
    for candidate_id, text in notes.items():
        get(session, Candidate, candidate_id).notes = text


def set_status(session: Session, experiment_id: int, status: str) -> None:
    get(session, Experiment, experiment_id).status = status


def set_judged_run(session: Session, experiment_id: int, run_id: int) -> None:
    experiment = get(session, Experiment, experiment_id)
    if experiment.judged_run_id != run_id:  # unchanged: no UPDATE
        experiment.judged_run_id = run_id


# ---- runs, one at a time (started and finished as a batch of one: `insert_runs`, `finish_runs`) --


def heartbeat(session: Session, run_id: int) -> None:
    get(session, Run, run_id).heartbeat_at = utcnow()


# ---- batched writes: one transaction for many rows (the sweep driver's path) --------------


def run_base(stage: str, seed: int | None, command: str | None, model_version: str,
             emulator_version: str | None, started_at: datetime | None = None) -> dict[str, Any]:
    """The columns every run of a batch shares: status, times and provenance (`started_at`:
    when its work started, if before now)."""
    check_choice("run.stage", stage, RUN_STAGES)
    environment = provenance.collect(command)
    now = started_at or utcnow()
    # The same provenance for every row: its JSON encoded once.
    return dict(stage=stage, status="running", started_at=now, heartbeat_at=now, host=environment.host,
                git_commit=environment.git_commit, git_dirty=environment.git_dirty,
                versions=Encoded(canonical_json(environment.versions)), command=environment.command, seed=seed,
                model_version=model_version, emulator_version=emulator_version, pid=environment.pid,
                pid_start=environment.pid_start)


def prepared_candidates(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str, str, dict, str | None]]:
    """Candidate rows checked and encoded before any transaction: (hash, config text,
    mapping text, origin, diff, notes) each (a row's `notes`: what the sweep noticed about
    it, written with it rather than by a transaction of its own; None: none)."""
    prepared = []
    canonical: dict[int, tuple[Any, str]] = {}  # id(value) -> (value kept alive, canonical text)

    def canon(value: Any) -> str:
        # Candidates of a batch often share one config object: encode it once.
        hit = canonical.get(id(value))
        if hit is None:
            hit = canonical[id(value)] = (value, canonical_json(value))
        return hit[1]

    for row in rows:
        check_choice("candidate.origin", row["origin"], CANDIDATE_ORIGINS)
        config_text = row.get("config_json") or canon(row["config"])
        mapping_text = row.get("mapping_json") or canon(row["mapping"])
        notes = row.get("notes")
        # The hash of the two texts, when the row's maker has it (the sweep's builder hashed
        # them with this same function): not again; else made here, each config's head once.
        known = row.get("hash") if row.get("config_json") and row.get("mapping_json") else None
        prepared.append((known or candidate_hash_of_texts(config_text, mapping_text), config_text, mapping_text,
                         row["origin"], row.get("diff") or {}, str(notes) if notes else None))
    return prepared


def add_candidates(connection: Connection, experiment_id: int, prepared: list[tuple], run_base: dict[str, Any] | None,
                   finished: tuple[list, list] = ([], []), baseline: bool = False,
                   finished_notes: Mapping[int, str] | None = None,
                   ended: tuple[list, list] | None = None) -> list[tuple[int, bool, int | None]]:
    """`finish_runs` of `finished` (with `finished_notes`), then the `prepared` candidates
    that are new (a known one's notes, when the row has some, replaced as `set_notes`
    would), a run of each row's candidate (with `run_base`; with `ended`, each run written
    finished: `insert_finished_runs`), and with `baseline` the first row's candidate as the
    experiment's baseline: (candidate id, created, run id) per row."""
    # Core on one connection (no ORM session): this is the sweep's hot path.
    if finished[0] or finished_notes:
        finish_runs(connection, *finished, notes=finished_notes)
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:  # the experiment, and the largest ids before this batch's rows
        cur = DriverCursor(connection)
        exists, last_candidate, last_run = cur.execute(
            "SELECT (SELECT count(*) FROM experiment WHERE id = ?), (SELECT coalesce(max(id), 0) FROM "
            "candidate), (SELECT coalesce(max(id), 0) FROM run)", (as_id(experiment_id),)).fetchone()
    else:
        exists = experiment_exists(connection, experiment_id)
    if not exists:
        raise not_found(connection, "experiment", experiment_id)
    now = utcnow()
    distinct = list({p[0]: p for p in prepared}.values())  # the first row of each hash
    # Each distinct config and mapping text once (0018), as ids the rows name.
    texts = text_ids(connection, itertools.chain.from_iterable((p[1], p[2]) for p in distinct))
    distinct = [(key, texts[config_text], texts[mapping_text], *rest)
                for key, config_text, mapping_text, *rest in distinct]
    if sqlite:
        known, created = _sqlite_insert_candidates(cur, experiment_id, distinct, now, last_candidate)
    else:
        known = _candidate_ids(connection, experiment_id, [p[0] for p in distinct])
        new = [dict(experiment_id=experiment_id, hash=key, config_id=config_id, mapping_id=mapping_id, origin=origin,
                    diff=diff, created_at=now, notes=notes)
               for key, config_id, mapping_id, origin, diff, notes in distinct if key not in known]
        created = {}
        if new:
            table = Candidate.__table__
            ids = connection.execute(insert(table).returning(table.c.id, sort_by_parameter_order=True),
                                     new).scalars().all()
            created = {row["hash"]: cid for row, cid in zip(new, ids)}
    seen: set[str] = set()
    out = []
    for key, *_ in prepared:
        if key in created and key not in seen:
            out.append((created[key], True))
        else:
            out.append((known[key] if key in known else created[key], False))
        seen.add(key)
    # A known candidate's notes: replaced, as `set_notes` does (a created one has them already).
    made_now = set(created.values())
    renoted = {cid: p[5] for p, (cid, _) in zip(prepared, out) if p[5] and cid not in made_now}
    if renoted:
        write_notes(connection, renoted)
    runs: list[int | None] = [None] * len(out)
    if run_base is not None and out and ended is not None:
        runs = insert_finished_runs(connection, [cid for cid, _ in out], run_base, *ended, last_run if sqlite else None)
    elif run_base is not None and out:
        runs = insert_runs(connection, [cid for cid, _ in out], run_base, last_run if sqlite else None)
    if baseline and out:  # a candidate of this very experiment, just looked up or added
        connection.execute(update(Experiment).where(Experiment.id == as_id(experiment_id))
                           .values(baseline_candidate_id=out[0][0]))
    return [(cid, made, run) for (cid, made), run in zip(out, runs)]


def insert_runs(connection: Connection, candidate_ids: list[int], base: dict[str, Any],
                before: int | None = None) -> list[int]:
    """A run of each candidate, all with the columns `base`: their ids, in order (and
    candidate_run brought up to date with them). `before`, on SQLite: the largest run id
    before, when the caller has read it under the write lock."""
    if connection.dialect.name == "sqlite":
        ids = _sqlite_insert_runs(DriverCursor(connection), candidate_ids, base, before)
    else:  # one INSERT .. RETURNING for the batch, ids in the order of the rows
        table = Run.__table__
        ids = list(connection.execute(insert(table).returning(table.c.id, sort_by_parameter_order=True),
                                      [{**base, "candidate_id": cid} for cid in candidate_ids]).scalars().all())
    candidate_runs.added(connection, ids)
    return ids


def insert_finished_runs(connection: Connection, candidate_ids: list[int], base: dict[str, Any],
                         results: list[Mapping[str, Any]], metric_packs: list[Pack],
                         before: int | None = None) -> list[int]:
    """A run of each candidate written finished in one go (a stage whose evaluation ended
    before anything of it was written: no "running" row to update): the columns `base`, and
    each row's result (`results`, one per candidate, checked: status, reason, error,
    traceback; or `reused_run_id`, a link to that earlier run, whose status, reason, error
    and traceback it takes, its figures in latest_figures under the new run, as
    `reuse.link_runs` does), then the metrics of `metric_packs` (their run ids: indexes into
    `results`). Run ids in order; candidate_run brought up to date with them."""
    now = utcnow()
    links = {i: int(r["reused_run_id"]) for i, r in enumerate(results) if r.get("reused_run_id") is not None}
    state = reuse.run_states(connection, sorted(set(links.values()))) if links else {}
    rows = []
    for i, r in enumerate(results):
        source = links.get(i)
        if source is None:
            rows.append((candidate_ids[i], r["status"], r.get("reason"), r.get("error"), r.get("traceback"), None))
        else:
            rows.append((candidate_ids[i], *state[source], source))
    shared = {**base, "finished_at": now, "heartbeat_at": now}
    del shared["status"]
    if connection.dialect.name == "sqlite":
        ids = _sqlite_insert_finished_runs(DriverCursor(connection), rows, shared, before)
    else:  # one INSERT .. RETURNING for the batch, ids in the order of the rows
        table = Run.__table__
        names = ("candidate_id", "status", "reason", "error", "traceback", "reused_run_id")
        ids = list(connection.execute(insert(table).returning(table.c.id, sort_by_parameter_order=True),
                                      [{**shared, **dict(zip(names, row))} for row in rows]).scalars().all())
    candidate_runs.added(connection, ids)
    if metric_packs:
        # the runs' candidates and versions as just written: latest_figures need not read them back
        versions = (base["model_version"], base["emulator_version"])
        insert_metrics(connection, [(ids[i], *rest) for i, *rest in metric_packs],
                       {ids[i]: (candidate_ids[i], *versions) for i, *_ in metric_packs})
    if links:
        reuse.record_linked_figures(connection, {ids[i]: source for i, source in links.items()})
    return ids


def write_notes(connection: Connection, notes: Mapping[int, str]) -> None:
    """Candidates' notes ({candidate id: note}) replaced by one executemany (`set_notes` on
    the sweep's batched path); RecordNotFound for an id the store lacks."""
    ids = [as_id(c) for c in notes]
    done = connection.execute(update(Candidate.__table__).where(Candidate.__table__.c.id == bindparam("cid"))
                              .values(notes=bindparam("text")),
                              [dict(cid=c, text=str(t)) for c, t in zip(ids, notes.values())]).rowcount
    if done != len(ids):
        present = set(connection.execute(select(Candidate.id).where(Candidate.id.in_(ids))).scalars())
        raise candidate_not_found(connection, next(c for c in ids if c not in present))


def finish_runs(connection: Connection, results: list[Mapping[str, Any]], metric_packs: list[Pack],
                notes: Mapping[int, str] | None = None) -> None:
    """Runs' final status and their metrics' packs (both checked already), and candidates'
    `notes` ({candidate id: note}: what the stage noticed beyond its metrics, written with
    its runs); Unfinishable if some run is missing or finished already."""
    if notes:
        write_notes(connection, notes)
    if not results:
        return
    ids = [r["run_id"] for r in results]
    now = utcnow()
    table = Run.__table__
    # Only a running run (or one an open wrongly marked abandoned) may be finished:
    # the condition is part of the UPDATE, and a count short of the batch means some
    # run was not; then the whole transaction is rolled back with the reason.
    if connection.dialect.name == "sqlite":
        done = _sqlite_finish_runs(DriverCursor(connection), results, now)
    else:
        done = connection.execute(
            update(table).where((table.c.id == bindparam("rid")) & finishable_clause(table)).values(
                status=bindparam("new_status"), reason=bindparam("new_reason"), error=bindparam("new_error"),
                traceback=bindparam("new_traceback"), finished_at=now, heartbeat_at=now),
            [dict(rid=r["run_id"], new_status=r["status"], new_reason=r.get("reason"),
                  new_error=r.get("error"), new_traceback=r.get("traceback")) for r in results]).rowcount
    if done != len(set(ids)):
        raise Unfinishable(ids)  # rolls the transaction back; explained once it has
    # A finishable run was running or crashed, never pruned: only a pruned one moves an outcome.
    candidate_runs.changed(connection, ids, [r["run_id"] for r in results if r["status"] == "pruned"])
    if metric_packs:
        insert_metrics(connection, metric_packs)


def explain_missing_candidates(connection: Connection, candidate_ids: list[int]) -> None:
    """Raise RecordNotFound for the first of `candidate_ids` the store lacks (runs of them
    failed their foreign key); return if it has them all."""
    present: set[int] = set()
    for i in range(0, len(candidate_ids), 500):  # stay under the bound-parameter limit
        present.update(connection.execute(select(Candidate.id).where(Candidate.id.in_(candidate_ids[i:i + 500])))
                       .scalars())
    missing = next((c for c in candidate_ids if c not in present), None)
    if missing is not None:
        raise not_found(connection, "candidate", missing)


def explain_unfinishable(connection: Connection, ids: list[int]) -> NoReturn:
    """Raise for the first run of `ids` that is missing or already finished (read after
    the batch was rolled back: its own UPDATE would show runs it finished as finished)."""
    state = run_states(connection, ids)
    for run_id in ids:
        if run_id not in state:
            raise not_found(connection, "run", run_id)
        status, error = state[run_id]
        if not finishable(status, error):
            raise ValueError(f"run {run_id} is already finished (status {status!r})")
    raise ValueError(f"runs {ids} were not all finished")  # a run id given twice


# ---- decisions, artifacts, outside evidence ------------------------------------------------


def add_decision(session: Session, experiment_id: int, verdict: str, rationale: str, author: str,
                 run_ids: list[int], candidate_id: int | None, *, kind: str = "decision",
                 evidence_kinds: list[str] | None = None, override: str | None = None,
                 checks: list[Any] | None = None, status: str | None = None) -> int:
    """A decision on an experiment (or a candidate, of it or of another experiment), with
    runs of either experiment as evidence; `status`, when given, is the hypothesis' status
    it sets, in the same transaction."""
    experiment = get(session, Experiment, experiment_id)
    owners = {experiment_id}
    if candidate_id is not None:
        owners.add(get(session, Candidate, candidate_id).experiment_id)
    if run_ids:
        found = set(
            session.scalars(
                select(Run.id)
                .join(Candidate, Run.candidate_id == Candidate.id)
                .where(Run.id.in_(run_ids), Candidate.experiment_id.in_(owners))
            )
        )
        missing = sorted(set(run_ids) - found)
        if missing:
            raise ValueError(f"evidence: runs {missing} are not runs of experiment {experiment_id}"
                             + (" or of its candidate's" if len(owners) > 1 else ""))
    decision = Decision(
        experiment_id=experiment_id,
        verdict=verdict,
        rationale=rationale,
        author=author,
        evidence=run_ids,
        candidate_id=candidate_id,
        kind=kind,
        evidence_kinds=evidence_kinds,
        override=override,
        checks=checks,
    )
    session.add(decision)
    if status is not None:
        experiment.status = status
    session.flush()
    return decision.id


def add_note(session: Session, experiment_id: int, kind: str, text: str, author: str) -> int:
    """A note added to an experiment after the fact: its id."""
    get(session, Experiment, experiment_id)
    note = Note(experiment_id=experiment_id, kind=kind, text=text, author=author)
    session.add(note)
    session.flush()
    return note.id


def add_lesson(session: Session, experiment_ids: Sequence[int], text: str, author: str) -> int:
    """A lesson linked to each of `experiment_ids` (one note row of kind "lesson" each, one
    time for all): its id, the first row's."""
    when = utcnow()
    ids = []
    for experiment_id in experiment_ids:
        get(session, Experiment, experiment_id)
        note = Note(experiment_id=experiment_id, kind="lesson", text=text, author=author, created_at=when)
        session.add(note)
        session.flush()
        ids.append(note.id)
    return ids[0]


def artifact_owner(connection: Connection, run_id: int | None, experiment_id: int | None) -> int:
    """The experiment an artifact of this run and/or experiment belongs to (checked: the
    run exists, is of that experiment, or the experiment exists)."""
    if run_id is not None:
        owner = connection.scalar(
            select(Candidate.experiment_id).join(Run, Run.candidate_id == Candidate.id).where(Run.id == run_id)
        )
        if owner is None:
            raise not_found(connection, "run", run_id)
        if experiment_id not in (None, owner):
            raise ValueError(f"run {run_id} belongs to experiment {owner}, not {experiment_id}")
        return owner
    if not experiment_exists(connection, experiment_id):
        raise not_found(connection, "experiment", experiment_id)
    return experiment_id  # type: ignore[return-value]


def add_artifact(session: Session, **columns: Any) -> int:
    """An artifact's row (its file stored already): its id."""
    artifact = Artifact(**columns)
    session.add(artifact)
    session.flush()
    return artifact.id


def candidate_experiment(connection: Connection, candidate_id: int) -> int:
    """The experiment of a candidate, or RecordNotFound."""
    experiment_id = connection.scalar(select(Candidate.experiment_id).where(Candidate.id == candidate_id))
    if experiment_id is None:
        raise candidate_not_found(connection, candidate_id)
    return experiment_id


def add_imported_run(session: Session, candidate_id: int, environment: provenance.Provenance,
                     versions: dict[str, Any], rows: list[dict[str, Any]]) -> int:
    """A finished ("ok") run of stage "imported" with its metric rows: its id."""
    now = utcnow()
    run = Run(
        candidate_id=candidate_id,
        stage="imported",
        status="ok",
        started_at=now,
        finished_at=now,
        heartbeat_at=now,
        host=environment.host,
        git_commit=environment.git_commit,
        git_dirty=environment.git_dirty,
        versions=versions,
        command=environment.command,
        model_version="",
        pid=environment.pid,
        pid_start=environment.pid_start,
    )
    session.add(run)
    session.flush()
    candidate_runs.added(session.connection(), [run.id])
    insert_metrics(session.connection(), packs_of([(run.id, *(r[c] for c in METRIC_COLUMNS)) for r in rows]))
    return run.id


# ---- SQLite's raw path ----------------------------------------------------------------------

# SQLite: SQLAlchemy can only keep RETURNING ids in parameter order there by inserting one
# row per statement. Under the write lock every transaction of this store takes (BEGIN
# IMMEDIATE) no other writer can add rows, so a plain executemany followed by reading the
# ids back gives the same ids at a fraction of the cost.


@functools.cache
def _json_each() -> bool:
    """Whether this SQLite has its JSON functions and operators (built in from 3.38 unless left out)."""
    try:
        with contextlib.closing(sqlite3.connect(":memory:")) as db:
            return db.execute("SELECT value ->> 0 FROM json_each('[[7]]')").fetchall() == [(7,)]
    except sqlite3.Error:
        return False



def _db_values(dialect: Any, table: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """Column values as the driver takes them (the columns' own bind processing)."""
    out = {}
    for name, value in values.items():
        process = table.c[name].type._cached_bind_processor(dialect)
        out[name] = process(value) if process is not None and value is not None else value
    return out


def _sqlite_insert_candidates(cur: DriverCursor, experiment_id: int, rows: list[tuple], now: datetime,
                              before: int) -> tuple[dict[str, int], dict[str, int]]:
    """(hash, config text id, mapping text id, origin, diff, notes) rows of distinct hashes
    inserted unless the experiment holds them already: (known, created), each hash -> id. `before`:
    the largest candidate id before the INSERT; under the write lock the rows it inserts
    are exactly those with ids above it, in order when it inserted them all."""
    columns = ("experiment_id", "hash", "config_id", "mapping_id", "origin", "diff", "created_at", "notes")
    stamp = _db_values(cur.dialect, Candidate.__table__, {"created_at": now})["created_at"]
    inserted = cur.executemany(
        f"INSERT INTO candidate ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
        "ON CONFLICT (experiment_id, hash) DO NOTHING",
        [(experiment_id, key, config_id, mapping_id, origin, json_text(diff), stamp, notes)
         for key, config_id, mapping_id, origin, diff, notes in rows]).rowcount
    if inserted == len(rows) and cur.execute("SELECT max(id) FROM candidate").fetchone()[0] == before + inserted:
        return {}, {row[0]: before + 1 + i for i, row in enumerate(rows)}
    known: dict[str, int] = {}
    created: dict[str, int] = {}
    keys = [row[0] for row in rows]
    for i in range(0, len(keys), 500):  # stay under the bound-parameter limit
        part = keys[i:i + 500]
        for key, cid in cur.execute(f"SELECT hash, id FROM candidate WHERE experiment_id = ? AND hash IN "
                                    f"({', '.join('?' * len(part))})", (experiment_id, *part)):
            (created if cid > before else known)[key] = cid
    return known, created


def _candidate_ids(connection: Connection, experiment_id: int, keys: list[str]) -> dict[str, int]:
    """hash -> id of this experiment's candidates among `keys`."""
    table = Candidate.__table__
    ids: dict[str, int] = {}
    for i in range(0, len(keys), 500):  # stay under the bound-parameter limit
        ids.update(connection.execute(select(table.c.hash, table.c.id).where(
            table.c.experiment_id == experiment_id, table.c.hash.in_(keys[i:i + 500]))).all())
    return ids


def _sqlite_finish_runs(cur: DriverCursor, results: list[Mapping[str, Any]], now: datetime) -> int:
    """finish_runs' UPDATE in plain SQL: how many runs it finished. Only a running run, or
    one an open wrongly marked abandoned, may be finished. Runs with the same outcome (a
    batch's ok runs, say) are finished by one statement each; the rest by one executemany."""
    stamp = _db_values(cur.dialect, Run.__table__, {"finished_at": now})["finished_at"]
    pattern = ABANDONED.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"
    # `+status`: not a reference SQLite may serve from the status index, which this very
    # UPDATE changes; with it the UPDATE runs in one pass, about 3x faster.
    head = "UPDATE run SET status = ?, reason = ?, error = ?, traceback = ?, finished_at = ?, heartbeat_at = ? WHERE "
    condition = " AND (+status = 'running' OR (+status = 'crashed' AND error LIKE ? ESCAPE '/'))"
    groups: dict[tuple, list[int]] = {}
    for r in results:
        groups.setdefault((r["status"], r.get("reason"), r.get("error"), r.get("traceback")), []).append(r["run_id"])
    done, single = 0, []
    for outcome, ids in groups.items():
        if len(ids) == 1:
            single.append((*outcome, stamp, stamp, ids[0], pattern))
            continue
        for i in range(0, len(ids), 500):  # stay under the bound-parameter limit
            part = ids[i:i + 500]
            done += cur.execute(f"{head}id IN ({', '.join('?' * len(part))}){condition}",
                                (*outcome, stamp, stamp, *part, pattern)).rowcount
    if single:
        done += cur.executemany(f"{head}id = ?{condition}", single).rowcount
    return done


def _sqlite_insert_runs(cur: DriverCursor, candidate_ids: list[int], base: dict[str, Any],
                        before: int | None = None) -> list[int]:
    """Runs inserted, ids in order. `before`: the largest run id before (read if not given)."""
    shared = _db_values(cur.dialect, Run.__table__, base)
    columns = list(shared) + ["candidate_id"]
    if before is None:
        before = cur.execute("SELECT coalesce(max(id), 0) FROM run").fetchone()[0]
    if _json_each():
        # The columns every row shares bound once, the candidates as one JSON array walked in
        # order: a third of the time of an executemany binding 17 values a row.
        cur.execute(f"INSERT INTO run ({', '.join(columns)}) SELECT {', '.join('?' * len(shared))}, value "
                    "FROM json_each(?) ORDER BY key", (*shared.values(), "[" + ",".join(map(str, candidate_ids)) + "]"))
    else:
        cur.executemany(f"INSERT INTO run ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                        [(*shared.values(), cid) for cid in candidate_ids])
    # Each row took the next id (rowid = max + 1, in insertion order), so n rows above
    # `before` ending at before + n are exactly before + 1 .. before + n.
    after, count = cur.execute("SELECT max(id), count(*) FROM run WHERE id > ?", (before,)).fetchone()
    if count != len(candidate_ids) or after != before + count:
        raise RuntimeError(f"run ids after id {before}: expected {len(candidate_ids)} new rows in a row, "
                           f"found {count} up to id {after}")
    return list(range(before + 1, after + 1))


def _sqlite_insert_finished_runs(cur: DriverCursor, rows: list[tuple], shared: dict[str, Any],
                                 before: int | None = None) -> list[int]:
    """`insert_finished_runs`' rows, (candidate id, status, reason, error, traceback, reused
    run id) each, inserted with the columns `shared`: ids, in order."""
    shared = _db_values(cur.dialect, Run.__table__, shared)
    columns = list(shared) + ["candidate_id", "status", "reason", "error", "traceback", "reused_run_id"]
    if before is None:
        before = cur.execute("SELECT coalesce(max(id), 0) FROM run").fetchone()[0]
    if _json_each():
        # As `_sqlite_insert_runs`: the shared columns bound once, each row's own as one JSON
        # array of arrays walked in order (ensure_ascii off: text as it is, not \u escapes).
        # (`->>`: json_extract's SQL value, without its path parsed again a row: a quarter faster)
        own = ", ".join(f"value ->> {i}" for i in range(6))
        cur.execute(f"INSERT INTO run ({', '.join(columns)}) SELECT {', '.join('?' * len(shared))}, {own} "
                    "FROM json_each(?) ORDER BY key", (*shared.values(), json.dumps(rows, ensure_ascii=False)))
    else:
        cur.executemany(f"INSERT INTO run ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                        [(*shared.values(), *row) for row in rows])
    after, count = cur.execute("SELECT max(id), count(*) FROM run WHERE id > ?", (before,)).fetchone()
    if count != len(rows) or after != before + count:
        raise RuntimeError(f"run ids after id {before}: expected {len(rows)} new rows in a row, "
                           f"found {count} up to id {after}")
    return list(range(before + 1, after + 1))


def insert_metrics(connection: Connection, packs: list[Pack],
                   runs: Mapping[int, tuple[int, str, str | None]] | None = None) -> None:
    """Runs' metrics (`checks.Pack`s, checked already) packed one row a run
    (dse.records.packed), and the candidates' latest figures (latest_figures) brought
    up to date with them, in the caller's transaction (`runs`: `latest.record`'s)."""
    if packs:
        packed.write(connection, packs)
        latest.record(connection, packs, runs)


def delete_experiment(session: Session, experiment_id: int) -> dict[str, int]:
    """Delete an experiment and its records, children first; counts by table."""
    experiment = get(session, Experiment, experiment_id)
    candidates = select(Candidate.id).where(Candidate.experiment_id == experiment_id)
    runs = select(Run.id).where(Run.candidate_id.in_(candidates))
    dependants = session.scalars(select(ExperimentLink.experiment_id).where(
        ExperimentLink.other_id == experiment_id, ExperimentLink.experiment_id != experiment_id)).all()
    if dependants:
        raise ValueError(f"experiment {experiment_id} is followed or reopened by experiment(s) "
                         f"{sorted(set(dependants))}: delete those first")
    named = session.scalars(select(Decision.experiment_id).where(
        Decision.candidate_id.in_(candidates), Decision.experiment_id != experiment_id)).all()
    if named:
        raise ValueError(f"decisions of experiment(s) {sorted(set(named))} name candidates of experiment "
                         f"{experiment_id}: delete those first")
    reusing = session.scalars(select(Candidate.experiment_id).join(Run, Run.candidate_id == Candidate.id).where(
        Run.reused_run_id.in_(runs), Candidate.experiment_id != experiment_id)).all()
    if reusing:
        raise ValueError(f"experiment(s) {sorted(set(reusing))} reuse the evidence of experiment {experiment_id}'s "
                         "runs: delete those first")
    experiment.baseline_candidate_id = None
    session.flush()
    # The config and mapping texts its candidates name (0018): those no other candidate
    # names once they are gone go with them.
    texts = {t for pair in session.execute(select(Candidate.config_id, Candidate.mapping_id).where(
        Candidate.experiment_id == experiment_id)) for t in pair if t is not None}
    counts = {}
    for name, stmt in (
        ("run_metrics", delete(RunMetrics).where(RunMetrics.run_id.in_(runs))),
        ("latest_figures", delete(LatestFigures).where(LatestFigures.candidate_id.in_(candidates))),
        ("candidate_run", delete(CandidateRun).where(CandidateRun.experiment_id == experiment_id)),
        ("artifact", delete(Artifact).where(or_(Artifact.run_id.in_(runs), Artifact.experiment_id == experiment_id))),
        ("decision", delete(Decision).where(Decision.experiment_id == experiment_id)),
        ("run", delete(Run).where(Run.candidate_id.in_(candidates))),
        ("candidate", delete(Candidate).where(Candidate.experiment_id == experiment_id)),
        ("note", delete(Note).where(Note.experiment_id == experiment_id)),
        ("experiment_link", delete(ExperimentLink).where(ExperimentLink.experiment_id == experiment_id)),
        ("sweep_lock", delete(SweepLock).where(SweepLock.experiment_id == experiment_id)),
        ("experiment", delete(Experiment).where(Experiment.id == experiment_id)),
    ):
        counts[name] = session.execute(stmt.execution_options(synchronize_session=False)).rowcount
    counts["candidate_text"] = orphaned_texts_deleted(session.connection(), texts)
    return counts


def orphaned_texts_deleted(connection: Connection, text_ids: Iterable[int]) -> int:
    """Of these candidate_text rows, those no candidate names any more deleted: how many.
    On PostgreSQL they are locked first, so that a writer that has just found one of them
    (`text_ids`, which locks what it finds against deletion) commits before the check,
    and its candidates count; a writer that comes after finds them gone and writes them again."""
    ids = sorted({int(i) for i in text_ids})
    done = 0
    for i in range(0, len(ids), 500):  # ints written into the SQL: no bound-parameter limit to mind
        listed = ", ".join(map(str, ids[i:i + 500]))
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT id FROM candidate_text WHERE id IN ({listed}) FOR UPDATE").all()
        # (uncorrelated: one pass over candidate, which has no index on the text ids)
        done += connection.exec_driver_sql(
            f"DELETE FROM candidate_text WHERE id IN ({listed}) AND id NOT IN (SELECT config_id FROM candidate "
            "WHERE config_id IS NOT NULL UNION SELECT mapping_id FROM candidate WHERE mapping_id IS NOT NULL)").rowcount
    return done


def add_calibration(session: Session, environment: provenance.Provenance, **columns: Any) -> int:
    """A calibration's row (`Store.add_calibration`), with the command and commit that made it: its id."""
    row = Calibration(**columns, command=environment.command, git_commit=environment.git_commit)
    session.add(row)
    session.flush()
    return row.id
