"""Hard edges of the sweep driver, with real `dse sweep` processes: pool workers never
outlive a killed driver; two sweeps of one experiment never evaluate a candidate twice;
time limits on a recipe's capture and a candidate's evaluation."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil

from dse.runner.execution import HANG_ENV
from test_runner import write_spec

DSE = Path(sys.executable).with_name("dse")


def emulator_spec(tmp_path: Path, name: str = "edges", size: int = 128, extra: str = "") -> Path:
    spec = write_spec(tmp_path, name=name, banks="[12, 16]")
    spec.write_text(spec.read_text().replace("m = 64, n = 64, k = 64", f"m = {size}, n = {size}, k = {size}")
                    + '\n[stages]\nemulator = "all"\n' + extra)
    return spec


def running_emulator_runs(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute(
                "SELECT count(*) FROM run WHERE stage = 'emulator' AND status = 'running'").fetchone()[0]
    except sqlite3.Error:
        return 0


def pool_workers(driver_pid: int) -> list[psutil.Process]:
    """The children of the driver's forkserver: its pool's workers."""
    try:
        for child in psutil.Process(driver_pid).children():
            if "multiprocessing.forkserver" in " ".join(child.cmdline()):
                return child.children()
    except psutil.Error:
        pass
    return []


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_pool_workers_exit_soon_after_their_driver_is_killed(tmp_path):
    spec, db = emulator_spec(tmp_path, size=32), tmp_path / "r.db"
    # Every emulation hangs (the test hook): the workers are busy for as long as it takes.
    driver = subprocess.Popen([str(DSE), "sweep", str(spec), "--db", str(db), "--workers", "2", "--no-progress"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                              env={**os.environ, HANG_ENV: ""})
    family: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        # Until the pool's workers (children of the forkserver) are at the emulator stage.
        while running_emulator_runs(db) == 0 or len(pool_workers(driver.pid)) < 2:
            assert driver.poll() is None, driver.stderr.read().decode()
            assert time.monotonic() < deadline, "the emulator stage never started"
            time.sleep(0.2)
        time.sleep(0.3)  # the workers are mid-emulation
        family += psutil.Process(driver.pid).children(recursive=True)
        names = {p.pid: " ".join(p.cmdline())[-70:] for p in family}
        # the resource tracker, the forkserver and its two pool workers
        assert len(family) >= 4, names
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
        killed_at = time.monotonic()
        while any(alive(p) for p in family) and time.monotonic() - killed_at < 10:
            time.sleep(0.1)
        left = [names[p.pid] for p in family if alive(p)]
        assert not left, f"still running 10 s after the driver's SIGKILL: {left}"
        print(f"\n{len(family)} processes of the killed driver gone in {time.monotonic() - killed_at:.1f} s")
    finally:
        if driver.poll() is None:
            driver.kill()
        for p in family:  # what this test's driver started, should the test fail
            if alive(p):
                p.kill()


# ---- two sweeps of one experiment ------------------------------------------------------

import pytest  # noqa: E402

from dse.records import Store  # noqa: E402
from pg import pg_server, pg_url  # noqa: E402,F401  (fixtures)


def two_sweeps_at_once(spec: Path, db: str, tmp_path: Path) -> list[subprocess.CompletedProcess]:
    env = {**os.environ, "DSE_EVIDENCE_DIR": str(tmp_path / "evidence")}
    procs = [subprocess.Popen([str(DSE), "sweep", str(spec), "--db", db, "--workers", "2", "--no-progress"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    done = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_two_sweeps_of_one_experiment_never_evaluate_a_candidate_twice(dialect, tmp_path, request):
    db = str(tmp_path / "r.db") if dialect == "sqlite" else request.getfixturevalue("pg_url")
    spec = emulator_spec(tmp_path, name="twice", size=96)
    results = two_sweeps_at_once(spec, db, tmp_path)
    codes = sorted(r.returncode for r in results)
    for r in results:
        assert r.returncode in (0, 2), r.stderr
        if r.returncode == 2:  # one line naming the first sweep's process, host and start time
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
            assert "field 'experiment.name'" in lines[0] and "process " in lines[0] and " on host " in lines[0]
            assert " since " in lines[0], lines[0]
    assert codes[0] == 0, [r.stderr for r in results]
    with Store(db, heartbeat_interval=0) as store:
        runs = store.runs("twice")
        decisions = store.decisions("twice")
        n_candidates = len(store.candidates("twice"))
    finished = runs[runs["status"] != "running"]
    per = finished.groupby(["candidate_id", "stage"]).size()
    print(f"\n{dialect}: exit codes {codes}; {n_candidates} candidates, {len(finished)} finished runs, "
          f"max {per.max()} per candidate and stage; {len(decisions)} decision(s)")
    assert per.max() == 1, per[per > 1]
    assert (runs["status"] == "running").sum() == 0
    assert len(decisions[decisions["author"] == "dse sweep (automatic)"]) == 1


def test_a_dead_sweeps_lock_is_taken_over_a_live_ones_refuses(tmp_path):
    from dse.errors import InputError
    from dse.records import provenance
    from dse.runner import run_sweep

    spec, db = write_spec(tmp_path, name="taken"), tmp_path / "r.db"
    first = run_sweep(spec, db, progress=False)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    holders = {"dead": (dead.pid, "gone:1"), "live": (os.getppid(), provenance.process_start(os.getppid()))}
    for who, (pid, start) in holders.items():
        with sqlite3.connect(db) as connection:
            connection.execute("DELETE FROM sweep_lock")
            connection.execute(
                "INSERT INTO sweep_lock (experiment_id, host, pid, pid_start, command, started_at, heartbeat_at) "
                "VALUES (?, ?, ?, ?, 'dse sweep taken.toml', '2026-01-01 00:00:00', '2026-01-01 00:00:00')",
                (first.experiment_id, provenance.hostname(), pid, start))
        connection.close()
        if who == "dead":
            again = run_sweep(spec, db, progress=False)  # taken over, and given up at the end
            assert again.evaluated == 0 and again.resumed == 10
            with sqlite3.connect(db) as connection:
                assert connection.execute("SELECT count(*) FROM sweep_lock").fetchone() == (0,)
            connection.close()
        else:
            with pytest.raises(InputError, match=f"process {pid} on host .* since 2026-01-01T00:00:00"):
                run_sweep(spec, db, progress=False)


# ---- time limits -----------------------------------------------------------------------

def test_a_candidate_past_its_time_limit_is_failed_and_the_sweep_goes_on(tmp_path):
    """Every emulation hangs (the test hook); without a pool of its own (--workers 1) the
    emulator stage still runs in a worker process, killed past the limit."""
    spec, db = emulator_spec(tmp_path, name="slow", size=32, extra="top_k = 2\ncandidate_timeout_s = 2\n"), tmp_path / "r.db"
    spec.write_text(spec.read_text().replace('emulator = "all"', 'emulator = "top_k"'))
    started = time.monotonic()
    done = subprocess.run([str(DSE), "sweep", str(spec), "--db", str(db), "--no-progress"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, HANG_ENV: ""})
    assert done.returncode == 0, done.stderr
    with Store(db, heartbeat_interval=0) as store:
        runs = store.runs("slow")
    emulator = runs[runs["stage"] == "emulator"]
    failed = emulator[emulator["status"] == "failed"]
    assert len(failed) == 2 and set(emulator["status"]) == {"failed", "pruned"}
    assert all("time limit of 2 s per candidate ([stages] candidate_timeout_s)" in r for r in failed["reason"])
    assert set(runs[runs["stage"] == "analytical"]["status"]) <= {"ok", "infeasible"}
    print(f"\n2 hung candidates failed at their limit; the sweep took {time.monotonic() - started:.1f} s")


def test_a_capture_past_its_time_limit_stops_the_sweep_writing_nothing(tmp_path):
    spec = write_spec(tmp_path, name="capture", extra="\n[stages]\ncapture_timeout_s = 0.001\n")
    before = set(tmp_path.iterdir())
    done = subprocess.run([str(DSE), "sweep", str(spec), "--db", str(tmp_path / "r.db"), "--no-progress"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "field 'stages.capture_timeout_s': got 0.001" in lines[0], done.stderr
    assert set(tmp_path.iterdir()) == before


def test_a_time_limit_that_lands_inside_wrapping_code_is_still_the_limit_error():
    """The alarm can fire inside an import's class body, whose machinery re-raises it as
    something else (dataclasses' __set_name__: a RuntimeError from it); past the limit the
    caller must still see the limit's own error, and with no alarm an error is left alone."""
    from dse.errors import InputError
    from dse.runner.sweep import time_limit

    def limit_error():
        return InputError("spec.toml", "stages.capture_timeout_s", 0.01, "a limit the capture finishes within")

    def wrapping_body():
        try:
            while True:
                time.sleep(0.001)
        except InputError as inner:
            raise RuntimeError("Error calling __set_name__") from inner

    with pytest.raises(InputError, match="stages.capture_timeout_s"):
        with time_limit(0.01, limit_error):
            wrapping_body()
    with pytest.raises(ValueError, match="its own"):
        with time_limit(5, limit_error):
            raise ValueError("its own")


# ---- Ctrl-C ------------------------------------------------------------------------------

def test_ctrl_c_twice_during_a_sweep_is_one_line(tmp_path):
    """Two SIGINTs to a real sweep's process group, as a terminal's double Ctrl-C sends them:
    the first asks to stop after the chunk in hand, the second stops at once; either way one
    line (no traceback before it, from the driver or its helpers), exit 130, no run left
    running and the rerun resumes."""
    from dse.runner.sweep import STOP_ENV

    spec = write_spec(tmp_path, name="ctrlc", banks="[12, 16, 20, 24, 28]", extra="batch = 2\n")
    db = tmp_path / "r.db"
    # The driver pauses itself once its third batch is evaluated (the test hook; the second
    # is recorded), so the signals land mid-sweep; the second arrives after the first was handled.
    driver = subprocess.Popen([str(DSE), "sweep", str(spec), "--db", str(db), "--no-progress"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                              env={**os.environ, STOP_ENV: "3", "DSE_EVIDENCE_DIR": str(tmp_path / "evidence")})
    try:
        deadline = time.monotonic() + 120
        while psutil.Process(driver.pid).status() != psutil.STATUS_STOPPED:
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.05)
        os.killpg(driver.pid, signal.SIGINT)
        os.killpg(driver.pid, signal.SIGCONT)
        time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGINT)
        out, err = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dse: interrupted; rerun to resume (what finished is recorded)"), err
    with Store(db, heartbeat_interval=0) as store:
        runs = store.runs("ctrlc")
    assert len(runs) >= 3 and (runs["status"] == "running").sum() == 0, runs[["status", "error"]]
    # The line counts what the records hold (when the interrupt reached the sweep's own handler).
    if lines[0] != "dse: interrupted; rerun to resume (what finished is recorded)":
        assert lines[0].endswith(f": {len(runs)} candidates recorded by this run, {len(runs)} in all"), lines[0]
