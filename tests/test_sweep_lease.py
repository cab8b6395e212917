"""A sweep that loses its lock knows it: a real `dse sweep` process, paused (SIGSTOP) past
its lease, is taken over by a second sweep; woken (SIGCONT), it records nothing more and
says which process took over. On SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dse.records import Store, provenance
from dse.records.liveness import HEARTBEAT_ENV, LEASE_ENV
from dse.runner import run_sweep
from dse.runner.sweep import STOP_ENV
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from test_runner import write_spec

DSE = Path(sys.executable).with_name("dse")
HEARTBEAT_S, LEASE_S = 0.2, 1.5
DONE = {"ok", "infeasible", "pruned", "failed"}


def wait_stopped(process: subprocess.Popen, within: float = 120) -> None:
    deadline = time.monotonic() + within
    while psutil.Process(process.pid).status() != psutil.STATUS_STOPPED:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the first sweep never reached its pause"
        time.sleep(0.05)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_paused_sweep_taken_over_records_nothing_more(dialect, tmp_path, request, monkeypatch):
    db = str(tmp_path / "r.db") if dialect == "sqlite" else request.getfixturevalue("pg_url")
    spec = write_spec(tmp_path, name="lease", banks="[12, 16, 20, 24, 28]", extra="batch = 2\n")
    lease = {HEARTBEAT_ENV: str(HEARTBEAT_S), LEASE_ENV: str(LEASE_S),
             "DSE_EVIDENCE_DIR": str(tmp_path / "evidence")}
    # The first sweep runs as if on another host (its pid means nothing here: only its
    # heartbeat tells it is alive) and stops itself once its third batch is evaluated, before
    # that batch is written.
    first = subprocess.Popen([str(DSE), "sweep", str(spec), "--db", db, "--no-progress"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, **lease, provenance.HOST_ENV: "elsewhere", STOP_ENV: "3"})
    try:
        wait_stopped(first)
        time.sleep(LEASE_S + 0.5)  # its heartbeat goes stale
        for name, value in lease.items():
            monkeypatch.setenv(name, value)
        taken_at = time.time()
        second = run_sweep(spec, db, progress=False)  # takes the lock over, sweeps the rest, gives it up
        os.kill(first.pid, signal.SIGCONT)
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
            first.kill()
    assert first.returncode == 75, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("dse: lost the sweep of experiment 'lease': ")
    assert f"process {os.getpid()} on host {provenance.hostname()} took it over" in lines[0], lines[0]
    assert f"on host elsewhere) for over {LEASE_S:g} s" in lines[0] and "recording nothing more" in lines[0]

    with Store(db, heartbeat_interval=0) as store:
        runs = store.runs("lease")
        n_candidates = len(store.candidates("lease"))
    assert n_candidates == 15 == second.evaluated + second.resumed  # 5 x 3 (the baseline among them)
    finished = runs[runs["status"].isin(DONE)]
    per = finished.groupby(["candidate_id", "stage"]).size()
    # Exactly one finished run per candidate and stage: the first sweep's late results were not written.
    assert len(per) == n_candidates and per.max() == 1, per[per > 1]
    theirs = runs[runs["host"] == "elsewhere"]
    late = theirs[theirs["status"].isin(DONE) & (theirs["finished_at"].map(lambda t: t.timestamp()) > taken_at)]
    assert late.empty, late
    # The first's batches before its pause are recorded, finished; the batch it had evaluated
    # when it paused is not (the second evaluated it), and nothing of it is left running.
    assert len(theirs) >= 2 and theirs["status"].isin(DONE).all(), theirs[["status", "error"]]
    assert (theirs["finished_at"].map(lambda t: t.timestamp()) < taken_at).all()
    assert (runs["status"] == "running").sum() == 0 and (runs["status"] == "crashed").sum() == 0
    print(f"\n{dialect}: {len(finished)} finished runs for {n_candidates} candidates, {len(theirs)} recorded "
          f"by the paused sweep; its line: {lines[0][:90]}...")
