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

from dse.errors import InputError
from dse.records import provenance
from dse.records.schema import Experiment, Run, SweepLock, utcnow

HEARTBEAT_INTERVAL_S = 30.0
STALE_AFTER_S = 600.0
# The error text of a run marked crashed because its process was gone. finish_run
# accepts such a run after all (the process was alive, only unseen), so a late finish
# is never lost.
ABANDONED = "abandoned: "


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


def release_sweep_lock(writer: Engine, experiment_id: int) -> None:
    """Give up this process's sweep lock on the experiment (another process's stays)."""
    me = provenance.collect()
    with writer.begin() as connection:
        connection.execute(delete(SweepLock).where(
            SweepLock.experiment_id == experiment_id, SweepLock.host == me.host, SweepLock.pid == me.pid))


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
                with self.writer.begin() as connection:
                    if run_ids:
                        connection.execute(
                            update(Run)
                            .where(Run.id.in_(run_ids), Run.status == "running")
                            .values(heartbeat_at=utcnow())
                        )
                    if sweeps:
                        connection.execute(
                            update(SweepLock)
                            .where(SweepLock.experiment_id.in_(sweeps), SweepLock.pid == os.getpid())
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
