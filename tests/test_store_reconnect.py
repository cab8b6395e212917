"""A sweep whose PostgreSQL server goes away mid-sweep: each transaction that loses its
connection is tried again (a line per retry, $DSE_DB_RETRIES over $DSE_DB_RETRY_S); a
server back in time lets the sweep finish, one that stays away stops it with one line
(exit 75), and the rerun resumes. Either way every candidate is recorded once.

The server is stopped while the driver is paused with a batch evaluated and not yet
written (the sweep's own test hook, SIGSTOP), then the driver goes on against no server:
that write meets the lost connection for certain, not by a race with the restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg

from dse.runner.sweep import STOP_ENV
from pg import SUPERUSER, PgServer, _run, throwaway_server

DSE = Path(sys.executable).with_name("dse")

SPEC = """
[experiment]
name = "{name}"
hypothesis = "Bank counts past 12 do not change a 16^3 gemm's latency on goban"

[workload]
recipe = "gemm"
params = {{ m = 16, n = 16, k = 16 }}

[baseline]
chip = "goban"
mapping = {{ workers = 1 }}

[[space]]
name = "banks"
target = "chip.banks.count"
low = 12
high = 111

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 2]

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"
batch = 50
"""
CANDIDATES = 100 * 2  # the grid; the baseline (20 banks, 1 worker) is one of its points


def pg_ctl(server: PgServer, action: str) -> None:
    root = server.datadir.parent
    options = (f"-p {server.port} -c listen_addresses=127.0.0.1 -k {root} "
               "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=60")
    _run([str(server.bin / "pg_ctl"), "-D", str(server.datadir), "-l", str(server.log), "-o", options,
          "-m", "fast", "-w", "-t", "60", action], server.run_as, server.log)


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def paused(pid: int) -> bool:
    return psutil.Process(pid).status() == psutil.STATUS_STOPPED


def recorded(url: str, name: str) -> tuple[int, int, dict[str, int]]:
    """(candidates, distinct hashes, analytical runs by status) of an experiment."""
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as connection:
        cands, hashes = connection.execute(
            "SELECT count(*), count(DISTINCT c.hash) FROM candidate c JOIN experiment e ON e.id = c.experiment_id "
            "WHERE e.name = %s", (name,)).fetchone()
        runs = dict(connection.execute(
            "SELECT r.status, count(*) FROM run r JOIN candidate c ON c.id = r.candidate_id "
            "JOIN experiment e ON e.id = c.experiment_id WHERE e.name = %s AND r.stage = 'analytical' "
            "GROUP BY r.status", (name,)).fetchall())
    return cands, hashes, runs


def sweep_paused_then_cut_off(server: PgServer, url: str, spec: Path, err: Path, env: dict) -> subprocess.Popen:
    """A sweep paused once its second batch is evaluated (unless `env` says another), its
    server stopped meanwhile, then woken."""
    process = subprocess.Popen([str(DSE), "sweep", str(spec), "--db", url, "--no-progress"], stdout=subprocess.PIPE,
                               stderr=err.open("w"), text=True, env={**os.environ, STOP_ENV: "2", **env})
    wait_for(lambda: paused(process.pid) or process.poll() is not None, 120, "the sweep's pause")
    assert process.poll() is None, err.read_text()
    pg_ctl(server, "stop")
    os.kill(process.pid, signal.SIGCONT)
    return process


def test_a_sweep_stops_resumably_without_its_database_and_rides_out_a_restart(tmp_path):
    with throwaway_server() as server:
        url = server.url(server.create_database())
        spec, err = tmp_path / "cut.toml", tmp_path / "cut.err"
        spec.write_text(SPEC.format(name="cut"))

        # The server stays away: one line per retry, then one line and exit 75.
        process = sweep_paused_then_cut_off(server, url, spec, err, {"DSE_DB_RETRIES": "2", "DSE_DB_RETRY_S": "1",
                                                                     STOP_ENV: "3"})
        process.communicate(timeout=120)
        lines = err.read_text().splitlines()
        assert process.returncode == 75, lines
        assert "Traceback" not in err.read_text() and len(lines) == 3, lines
        assert all(line.startswith(f"dse: lost the connection to the record store {url} (") for line in lines[:2])
        assert "retry 1 of 2 in 0.3 s" in lines[0] and "retry 2 of 2 in 0.7 s" in lines[1], lines  # 1 s * 2^i / 3
        assert "could not get it back (2 retries over 1 s" in lines[2] and "rerun the same command" in lines[2]
        pg_ctl(server, "start")
        partial, _, runs = recorded(url, "cut")
        assert 1 < partial < CANDIDATES  # the first batches were recorded before the server went
        # the batch it had evaluated when the server went is not recorded at all (nothing
        # running, nothing crashed): the rerun evaluates it again
        done = runs.get("ok", 0) + runs.get("infeasible", 0)
        assert done == partial and set(runs) <= {"ok", "infeasible"}, runs

        # The rerun resumes; its server goes too, and comes back within the retries: it finishes.
        process = sweep_paused_then_cut_off(server, url, spec, err, {"DSE_DB_RETRIES": "6", "DSE_DB_RETRY_S": "40"})
        wait_for(lambda: "retry 1 of 6" in err.read_text() or process.poll() is not None, 60, "the first retry")
        pg_ctl(server, "start")
        out, _ = process.communicate(timeout=180)
        lines = err.read_text().splitlines()
        assert process.returncode == 0, lines
        assert lines and all(line.startswith("dse: lost the connection to the record store") for line in lines), lines
        assert "Traceback" not in err.read_text() and "retry 1 of 6 in 0.6 s" in lines[0]  # 40 s * 1 / (2^6 - 1)
        assert f"{CANDIDATES - done} evaluated, {done} already recorded" in out, out
        cands, hashes, runs = recorded(url, "cut")
        assert cands == hashes == CANDIDATES  # every candidate once
        assert runs.get("ok", 0) + runs.get("infeasible", 0) == CANDIDATES, runs  # each finished once
        assert set(runs) <= {"ok", "infeasible"}, runs
