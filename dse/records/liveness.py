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

from sqlalchemy import Engine, select, update

from dse.records import provenance
from dse.records.schema import Run, utcnow

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


class Heartbeats:
    """The runs a store started and has not finished, and the daemon thread that refreshes
    their heartbeat every `interval` seconds (none for an interval of 0). Safe across a
    fork: a child starts over with no runs and a thread of its own."""

    def __init__(self, writer: Engine, interval: float, *, enabled: bool = True):
        self.writer = writer
        self.interval = interval
        self.enabled = enabled  # an in-memory store: no other process can see its runs
        self._active: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        self._owner_pid = os.getpid()

    def track(self, run_ids: Iterable[int]) -> None:
        run_ids = list(run_ids)
        if not run_ids:
            return
        with self._lock:
            if self._owner_pid != os.getpid():  # used across a fork: the thread stayed behind
                self._owner_pid, self._beater, self._active = os.getpid(), None, set()
                self._stop = threading.Event()
            self._active.update(run_ids)
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
            if not run_ids:
                continue
            try:
                with self.writer.begin() as connection:
                    connection.execute(
                        update(Run)
                        .where(Run.id.in_(run_ids), Run.status == "running")
                        .values(heartbeat_at=utcnow())
                    )
            except Exception:  # noqa: BLE001 - a missed beat is retried at the next one
                pass
