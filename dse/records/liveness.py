"""Whether a "running" run is still alive: heartbeats from the process that runs it, and
crashed-run detection when a store opens.

A run is written as "running" before its work starts; while it runs, a daemon thread
refreshes its heartbeat (`Heartbeats`). Opening a store marks "crashed" the runs whose
process is gone (`reap_crashed`): on the same host, a process that no longer exists (pid
and start time, so a reused pid does not fool it); from another host, a heartbeat older
than `stale_after` seconds.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from datetime import datetime, timezone

from sqlalchemy import Engine, delete, insert, select, update

from dse.errors import InputError, Stopped
from dse.records import candidate_runs, provenance
from dse.records.schema import Candidate, Experiment, Run, SweepLock, utcnow

HEARTBEAT_INTERVAL_S = 30.0
STALE_AFTER_S = 600.0
# The same two settings from the environment (seconds), for every store a process opens
# without naming them: how often it beats, and how long another host's silence lasts
# before its runs count as crashed and its sweep lock (its lease) may be taken over.
HEARTBEAT_ENV = "DSE_HEARTBEAT_S"
LEASE_ENV = "DSE_LEASE_S"
# The error text of a run marked crashed because its process was gone. finish_run
# accepts such a run after all (the process was alive, only unseen), so a late finish
# is never lost.
ABANDONED = "abandoned: "


def _seconds_from_env(name: str, default: float) -> float:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InputError("(environment)", name, text, "a positive number of seconds")
    return value


def liveness_settings() -> tuple[float, float]:
    """(heartbeat interval, stale after) in seconds: $DSE_HEARTBEAT_S and $DSE_LEASE_S when
    set, else HEARTBEAT_INTERVAL_S and STALE_AFTER_S. A lease no longer than the interval
    would be lost between two beats of a live process."""
    interval = _seconds_from_env(HEARTBEAT_ENV, HEARTBEAT_INTERVAL_S)
    stale = _seconds_from_env(LEASE_ENV, STALE_AFTER_S)
    if stale <= interval:
        raise InputError("(environment)", LEASE_ENV, stale,
                         f"more seconds than the heartbeat interval ({interval:g} s, ${HEARTBEAT_ENV})")
    return interval, stale


def as_utc(moment: datetime | None) -> datetime | None:
    """A timestamp as an aware UTC datetime (SQLite hands back naive ones, stored as UTC)."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=timezone.utc)


def finishable(status: str, error: str | None) -> bool:
    """Whether a run of this status and error may be finished: a running run, or one an
    open marked crashed for want of a sign of its process."""
    return status == "running" or (status == "crashed" and (error or "").startswith(ABANDONED))


def finishable_clause(table: object) -> object:
    """`finishable` as a SQL condition on the run table's columns."""
    c = table.c  # type: ignore[attr-defined]
    return (c.status == "running") | ((c.status == "crashed") & c.error.startswith(ABANDONED, autoescape=True))


def reap_crashed(engine: Engine, writer: Engine, stale_after: float) -> list[int]:
    """Mark "crashed" the running runs whose process is gone; return their ids.

    Same host: the recorded process (pid and start time) no longer exists. Another host,
    or no process recorded: no heartbeat for `stale_after` seconds."""
    host = provenance.hostname()
    now = utcnow()
    with engine.connect() as connection:
        running = connection.execute(
            select(Run.id, Run.host, Run.pid, Run.pid_start, Run.started_at, Run.heartbeat_at)
            .where(Run.status == "running")
        ).all()
    lost: list[tuple[int, datetime, str]] = []
    for run in running:
        last = as_utc(run.heartbeat_at or run.started_at)
        if run.host == host and run.pid is not None:
            if provenance.process_alive(run.pid, run.pid_start):
                continue
            why = f"process {run.pid} on {host} ended without finishing the run"
        else:
            age = (now - last).total_seconds()
            if age < stale_after:
                continue
            why = (
                f"no heartbeat from process {run.pid} on {run.host} for {age:.0f} s "
                f"(more than {stale_after:.0f} s)"
            )
        lost.append((run.id, last, why))
    if not lost:
        return []
    reaped = []
    with writer.begin() as connection:
        for run_id, last, why in lost:
            done = connection.execute(
                update(Run)
                .where(Run.id == run_id, Run.status == "running")
                .values(
                    status="crashed",
                    finished_at=last,
                    error=f"{ABANDONED}{why}; found at {now.isoformat(timespec='seconds')} "
                    f"by process {os.getpid()} on {host}",
                )
            )
            if done.rowcount:
                reaped.append(run_id)
        candidate_runs.changed(connection, reaped)  # running -> crashed: no outcome moves
    return reaped


class SweepLocked(InputError):
    """Another live process is sweeping this experiment (exit code 2, nothing written)."""


def _holder_alive(lock, host: str | None, now: datetime, stale_after: float) -> bool:
    if lock.host == host and lock.pid is not None:
        return provenance.process_alive(lock.pid, lock.pid_start)
    return (now - as_utc(lock.heartbeat_at)).total_seconds() < stale_after


def acquire_sweep_lock(writer: Engine, experiment_id: int, where: str, stale_after: float) -> None:
    """Make this process the one sweeping the experiment, or raise SweepLocked naming the
    live process that is. A lock left by a dead process (same host: its pid and start time
    are gone; another host: no heartbeat for `stale_after` seconds) is taken over.

    One write transaction: SQLite's BEGIN IMMEDIATE and, on PostgreSQL, a row lock on the
    experiment serialise two sweeps reaching here at once."""
    me = provenance.collect()
    now = utcnow()
    with writer.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(select(Experiment.id).where(Experiment.id == experiment_id).with_for_update())
        lock = connection.execute(select(SweepLock).where(SweepLock.experiment_id == experiment_id)).first()
        if lock is not None:
            mine = lock.host == me.host and lock.pid == me.pid and lock.pid_start == me.pid_start
            if not mine and _holder_alive(lock, me.host, now, stale_after):
                name = connection.execute(select(Experiment.name).where(Experiment.id == experiment_id)).scalar()
                since = as_utc(lock.started_at).isoformat(timespec="seconds")
                raise SweepLocked(
                    where, "experiment.name", name,
                    f"an experiment no other sweep is running: process {lock.pid} on host {lock.host} has been "
                    f"sweeping it since {since} (last heartbeat {as_utc(lock.heartbeat_at).isoformat(timespec='seconds')}; "
                    f"command: {lock.command}); wait for it to finish (then rerun to resume), or stop it",
                )
            connection.execute(delete(SweepLock).where(SweepLock.experiment_id == experiment_id))
        connection.execute(insert(SweepLock).values(
            experiment_id=experiment_id, host=me.host, pid=me.pid, pid_start=me.pid_start, command=me.command,
            started_at=now, heartbeat_at=now))


def _mine(me: provenance.Provenance):
    """The sweep locks this process holds, as a SQL condition (host, pid and start time:
    another host's process of the same pid is not this one)."""
    return (SweepLock.host == me.host) & (SweepLock.pid == me.pid) & (SweepLock.pid_start == me.pid_start)


def release_sweep_lock(writer: Engine, experiment_id: int) -> None:
    """Give up this process's sweep lock on the experiment (another process's stays)."""
    me = provenance.collect()
    with writer.begin() as connection:
        connection.execute(delete(SweepLock).where(SweepLock.experiment_id == experiment_id, _mine(me)))


class LeaseLost(Stopped):
    """This process's sweep lock was taken over by another process (this one was paused
    or cut off past the lease): it stops, recording nothing more."""


def check_lease(connection, experiment_ids: Iterable[int], stale_after: float) -> None:
    """Raise LeaseLost unless this process still holds the sweep lock of every experiment
    named; called inside each write transaction of the holder, before it writes. SQLite's
    writer holds the database's write lock from BEGIN, and on PostgreSQL the lock row is
    read FOR SHARE, so no takeover can commit between this check and the write."""
    me = provenance.collect()
    for experiment_id in experiment_ids:
        query = select(SweepLock).where(SweepLock.experiment_id == experiment_id)
        if connection.dialect.name == "postgresql":
            query = query.with_for_update(read=True)
        lock = connection.execute(query).first()
        if lock is not None and (lock.host, lock.pid, lock.pid_start) == (me.host, me.pid, me.pid_start):
            continue
        raise LeaseLost(_lost_message(connection, experiment_id, lock, me, stale_after))


def _lost_message(connection, experiment_id: int, lock, me: provenance.Provenance, stale_after: float) -> str:
    name = connection.execute(select(Experiment.name).where(Experiment.id == experiment_id)).scalar()
    if lock is not None:
        taker = f"process {lock.pid} on host {lock.host} took it over at " \
                f"{as_utc(lock.started_at).isoformat(timespec='seconds')} and holds it"
    else:  # taken over and since given up: the newest run of another process names the taker
        other = connection.execute(
            select(Run.pid, Run.host, Run.started_at).join(Candidate, Candidate.id == Run.candidate_id)
            .where(Candidate.experiment_id == experiment_id,
                   (Run.host != me.host) | (Run.pid != me.pid) | (Run.pid_start != me.pid_start))
            .order_by(Run.id.desc()).limit(1)).first()
        taker = (f"process {other.pid} on host {other.host} took it over (its runs from "
                 f"{as_utc(other.started_at).isoformat(timespec='seconds')}) and has since finished"
                 if other is not None else "another process took it over and has since finished")
    return (f"lost the sweep of experiment '{name}': {taker}, after no heartbeat from this process "
            f"(pid {me.pid} on host {me.host}) for over {stale_after:g} s (paused or cut off); "
            f"stopped, recording nothing more (what it recorded before stays; rerun to resume once no "
            f"other sweep runs)")


class Heartbeats:
    """The runs a store started and has not finished, and the daemon thread that refreshes
    their heartbeat every `interval` seconds (none for an interval of 0). Safe across a
    fork: a child starts over with no runs and a thread of its own."""

    def __init__(self, writer: Engine, interval: float, *, enabled: bool = True):
        self.writer = writer
        self.interval = interval
        self.enabled = enabled  # an in-memory store: no other process can see its runs
        self._active: set[int] = set()
        self.sweeps: set[int] = set()  # experiments whose sweep lock this process holds
        self._lock = threading.Lock()
        self.writing = threading.Lock()  # held through each beat's transaction
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        self._owner_pid = os.getpid()

    def track_sweep(self, experiment_id: int) -> None:
        self.track([], sweep=experiment_id)

    def untrack_sweep(self, experiment_id: int) -> None:
        with self._lock:
            self.sweeps.discard(experiment_id)

    def track(self, run_ids: Iterable[int], sweep: int | None = None) -> None:
        run_ids = list(run_ids)
        if not run_ids and sweep is None:
            return
        with self._lock:
            if self._owner_pid != os.getpid():  # used across a fork: the thread stayed behind
                self._owner_pid, self._beater, self._active, self.sweeps = os.getpid(), None, set(), set()
                self._stop = threading.Event()
            self._active.update(run_ids)
            if sweep is not None:
                self.sweeps.add(sweep)
            if self._beater is None and self.interval > 0 and self.enabled:
                self._beater = threading.Thread(target=self._beat, name=f"dse-heartbeat-{id(self):x}", daemon=True)
                self._beater.start()

    def untrack(self, run_ids: Iterable[int]) -> None:
        with self._lock:
            self._active.difference_update(run_ids)

    def stop(self) -> None:
        self._stop.set()
        if self._beater is not None:
            self._beater.join(timeout=5)
            self._beater = None

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                run_ids = sorted(self._active)
                sweeps = sorted(self.sweeps)
            if not run_ids and not sweeps:
                continue
            try:
                with self.writing, self.writer.begin() as connection:
                    if run_ids:
                        connection.execute(
                            update(Run)
                            .where(Run.id.in_(run_ids), Run.status == "running")
                            .values(heartbeat_at=utcnow())
                        )
                    if sweeps:
                        connection.execute(
                            update(SweepLock)
                            .where(SweepLock.experiment_id.in_(sweeps), _mine(provenance.collect()))
                            .values(heartbeat_at=utcnow())
                        )
            except Exception:  # noqa: BLE001 - a missed beat is retried at the next one
                pass


def sweep_holder(connection, experiment_id: int, stale_after: float) -> dict | None:
    """The live process sweeping the experiment (its host, pid, command, start and last
    heartbeat), or None when no sweep runs: no lock, or one left by a dead process (the
    test `acquire_sweep_lock` applies before taking a lock over)."""
    lock = connection.execute(select(SweepLock).where(SweepLock.experiment_id == experiment_id)).first()
    if lock is None or not _holder_alive(lock, provenance.hostname(), utcnow(), stale_after):
        return None
    return {"host": lock.host, "pid": lock.pid, "command": lock.command,
            "started_at": as_utc(lock.started_at).isoformat(timespec="seconds"),
            "heartbeat_at": as_utc(lock.heartbeat_at).isoformat(timespec="seconds")}
