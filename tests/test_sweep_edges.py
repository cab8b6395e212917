"""Hard edges of the sweep driver, with real `dse sweep` processes: pool workers never
outlive a killed driver; two sweeps of one experiment never evaluate a candidate twice;
time limits on a recipe's capture and a candidate's evaluation."""

from __future__ import annotations

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
