"""Sweeps across processes: a local pool gives the same evidence as one process, a worker
killed mid-candidate costs one retry, a driver killed mid-sweep resumes without duplicates."""

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import psutil
import pytest

from dse.records import Store
from dse.runner import run_sweep
from dse.runner import sweep as sweep_module
from dse.runner.execution import KILL_ENV
from dse.runner.sweep import STOP_ENV

from test_runner import write_spec

BIG = """
[experiment]
name = "big"
hypothesis = "a grid large enough to kill mid-way"

[workload]
recipe = "mlp"

[baseline]
chip = "goban"

[[space]]
name = "banks"
target = "chip.banks.count"
low = 4
high = 32

[[space]]
name = "rows"
target = "chip.banks.rows"
values = [128, 256, 512, 1024, 2048]

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 2, 3, 4]

[[space]]
name = "dataflow"
target = "mapping.dataflow"
values = ["ws", "os"]

[[space]]
name = "double_buffer"
target = "mapping.double_buffer"
values = [true, false]

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"
batch = 64
"""


def table(db, name):
    with Store(db) as store:
        t = store.metric_table(name, "analytical")
        c = store.candidates(name)
    return c.merge(t[["candidate_id", "latency_cycles"]], left_on="id", right_on="candidate_id")


@pytest.fixture
def pool_for_analytical(monkeypatch):
    """The pool evaluates analytical batches too (by default the driver keeps small ones)."""
    monkeypatch.setattr(sweep_module, "POOL_ANALYTICAL_MIN_SECONDS", 0)


def test_a_process_pool_records_the_same_evidence_as_one_process(tmp_path, pool_for_analytical):
    spec = write_spec(tmp_path, banks="[8, 12, 16, 20]")
    one = run_sweep(spec, tmp_path / "one.db", progress=False)
    two = run_sweep(spec, tmp_path / "two.db", progress=False, workers=2)
    assert one.counts == two.counts and sum(one.counts.values()) == 12  # 4 x 3 grid, baseline among them
    a = table(tmp_path / "one.db", "gemm-workers").set_index("hash")
    b = table(tmp_path / "two.db", "gemm-workers").set_index("hash")
    assert set(a.index) == set(b.index)
    pd.testing.assert_series_equal(a["latency_cycles"].sort_index(), b["latency_cycles"].sort_index())
    assert (a["status"].sort_index() == b["status"].sort_index()).all()


def test_a_worker_killed_mid_candidate_is_retried_once_then_failed(tmp_path, monkeypatch, pool_for_analytical):
    spec = write_spec(tmp_path, banks="[12, 16]")
    run_sweep(spec, tmp_path / "probe.db", progress=False)
    probe = table(tmp_path / "probe.db", "gemm-workers")
    victim = probe[(probe["origin"] != "baseline") & (probe["status"] == "ok")].iloc[0]["hash"]

    monkeypatch.setenv(KILL_ENV, victim[:16])
    result = run_sweep(spec, tmp_path / "r.db", progress=False, workers=2)
    got = table(tmp_path / "r.db", "gemm-workers").set_index("hash")
    assert got.loc[victim, "status"] == "failed"
    with Store(tmp_path / "r.db") as store:
        runs = store.runs(result.experiment_id)
    assert "died twice" in runs[runs["status"] == "failed"].iloc[0]["error"]
    # Everything else completed, with the same results as the undisturbed sweep.
    others = probe.set_index("hash").drop(index=victim)
    assert (got.loc[others.index, "status"] == others["status"]).all()
    assert len(got) == len(probe) and result.counts.get("failed") == 1
    # The broken pools are gone for good: no worker process and no pool thread outlives
    # the sweep (a leftover one made the interpreter hang at exit).
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("ForkServerProcess")]
    assert not [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread"]


def test_small_analytical_batches_stay_in_the_driver_with_a_pool(tmp_path, monkeypatch):
    # The rule: with a local pool, the driver evaluates an analytical batch itself unless
    # its measured cost would exceed POOL_ANALYTICAL_MIN_SECONDS. The first batch of 64
    # (enough to measure) costs far less, so the later ones stay in the driver too: no
    # worker sees a candidate of the last batch (the kill hook, which only workers obey,
    # never fires).
    spec = BIG.replace("batch = 64", "batch = 64\ntrials = 1").replace("low = 4\nhigh = 32", "low = 16\nhigh = 17")
    (tmp_path / "big.toml").write_text(spec)
    run_sweep(tmp_path / "big.toml", tmp_path / "probe.db", progress=False)
    probe = table(tmp_path / "probe.db", "big")
    assert len(probe) == 1 + 2 * 5 * 4 * 2 * 2  # the baseline and three batches
    monkeypatch.setenv(KILL_ENV, probe.iloc[-1]["hash"][:16])
    result = run_sweep(tmp_path / "big.toml", tmp_path / "r.db", progress=False, workers=2)
    assert "failed" not in result.counts
    got = table(tmp_path / "r.db", "big").set_index("hash")
    assert (got["status"].sort_index() == probe.set_index("hash")["status"].sort_index()).all()


def test_a_pool_takes_analytical_batches_the_driver_measured_as_costly(tmp_path, monkeypatch):
    from dse.runner.execution import PoolExecutor

    monkeypatch.setattr(sweep_module, "POOL_ANALYTICAL_MIN_SECONDS", 1e-9)  # any measured cost is too much
    used = []
    real_run = PoolExecutor.run
    monkeypatch.setattr(PoolExecutor, "run", lambda self, chunks: used.append(len(chunks)) or real_run(self, chunks))
    spec = BIG.replace("batch = 64", "batch = 64\ntrials = 1").replace('low = 4\nhigh = 32', 'low = 16\nhigh = 17')
    (tmp_path / "big.toml").write_text(spec)
    result = run_sweep(tmp_path / "big.toml", tmp_path / "r.db", progress=False, workers=2)
    # Baseline and the first batch in the driver (it measures its cost); the rest in the pool.
    assert used and result.evaluated == 1 + 2 * 5 * 4 * 2 * 2


def stopped_mid_sweep(cmd: list[str], env: dict, batches: int) -> subprocess.Popen:
    """The sweep, stopped by itself (SIGSTOP, the test hook) once `batches` batches are
    evaluated, the last not recorded. The whole grid takes a second or two once started: a
    poll of the store for "far enough" could see it finished (the more so under load)."""
    proc = subprocess.Popen(cmd, env={**env, STOP_ENV: str(batches)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
        assert proc.poll() is None, f"the sweep ended before its pause: {proc.communicate()[1]}"
        assert time.monotonic() < deadline, "the sweep never reached its pause"
        time.sleep(0.05)
    return proc


def test_driver_killed_mid_sweep_resumes_without_duplicates_or_losses(tmp_path, repo):
    spec = tmp_path / "big.toml"
    spec.write_text(BIG)
    db = tmp_path / "big.db"
    env = {**os.environ, "PYTHONPATH": str(repo)}
    cmd = [sys.executable, "-m", "dse", "sweep", str(spec), "--db", str(db), "--no-progress"]
    proc = stopped_mid_sweep(cmd, env, 5)  # 4 batches of 64 recorded, the 5th evaluated, its runs running
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with Store(db) as store:
        before = len(store.candidates("big"))
    grid = 29 * 5 * 4 * 2 * 2
    assert 0 < before < grid + 1

    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    with Store(db) as store:
        cands = store.candidates("big")
        runs = store.runs(store.experiment("big")["id"])
    assert cands["hash"].is_unique
    assert len(cands) == grid  # the baseline (20 banks, 1024 rows, 1 worker, ws, double) is a grid point
    assert set(cands["status"]) <= {"ok", "infeasible"}
    # Every candidate has a finished run; runs interrupted by the kill are not left running.
    assert not (runs["status"] == "running").any()


def test_ctrl_c_stops_cleanly_and_the_rerun_completes(tmp_path, repo):
    spec = tmp_path / "big.toml"
    spec.write_text(BIG.replace('name = "big"', 'name = "ctrlc"'))
    db = tmp_path / "c.db"
    env = {**os.environ, "PYTHONPATH": str(repo)}
    cmd = [sys.executable, "-m", "dse", "sweep", str(spec), "--db", str(db), "--no-progress"]
    proc = stopped_mid_sweep(cmd, env, 3)
    proc.send_signal(signal.SIGINT)  # handled once it runs again
    proc.send_signal(signal.SIGCONT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    with Store(db) as store:
        runs = store.runs(store.experiment("ctrlc")["id"])
        assert not (runs["status"] == "running").any()
        n = len(store.candidates("ctrlc"))
    assert 0 < n < 29 * 5 * 4 * 2 * 2
