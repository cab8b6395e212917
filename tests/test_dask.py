"""The same sweep on a real Dask cluster: a LocalCluster, and a scheduler plus worker
started as separate processes on loopback."""

import json
import os
import subprocess
import sys
import time

import pandas as pd
import pytest

from dse.records import Store
from dse.runner import run_sweep

from test_runner import write_spec


def latencies(db):
    with Store(db) as store:
        t = store.metric_table("gemm-workers", "analytical")
        c = store.candidates("gemm-workers")
    m = c.merge(t[["candidate_id", "latency_cycles"]], left_on="id", right_on="candidate_id")
    return m.set_index("hash")[["status", "latency_cycles"]].sort_index()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    spec = write_spec(tmp, banks="[8, 16, 20]")
    run_sweep(spec, tmp / "ref.db", progress=False)
    return spec, latencies(tmp / "ref.db")


def test_sweep_on_a_local_cluster_matches_one_process(tmp_path, reference):
    from distributed import LocalCluster

    spec, expected = reference
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        result = run_sweep(spec, tmp_path / "d.db", progress=False, cluster=cluster.scheduler_address)
    assert result.evaluated == len(expected)
    pd.testing.assert_frame_equal(latencies(tmp_path / "d.db"), expected)


def test_sweep_on_a_separate_scheduler_and_worker_via_the_environment(tmp_path, reference, repo, cli, monkeypatch):
    spec, expected = reference
    # The scheduler picks its port and writes its address to a file once it listens (a port
    # probed here and bound there seconds later may be taken meanwhile); the worker reads it.
    address_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(repo)}
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--dashboard-address", ":0", "--scheduler-file", str(address_file)],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                               str(address_file), "--nworkers", "1", "--nthreads", "1", "--dashboard-address", ":0"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from distributed import Client

        deadline = time.monotonic() + 60
        while True:  # wait until the worker has joined the scheduler
            assert scheduler.poll() is None and worker.poll() is None, "the Dask scheduler or worker exited"
            try:
                with Client(scheduler_file=str(address_file), timeout=5) as client:
                    if client.scheduler_info()["workers"]:
                        break
            except (OSError, ValueError):  # no file yet, or half written
                pass
            assert time.monotonic() < deadline, "the Dask worker did not join"
            time.sleep(0.5)
        address = json.loads(address_file.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:"), address
        monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", address)
        code, out, err = cli("sweep", spec, "--db", tmp_path / "e.db", "--no-progress")
        assert code == 0, err
        pd.testing.assert_frame_equal(latencies(tmp_path / "e.db"), expected)
    finally:
        for p in (worker, scheduler):
            p.terminate()
            p.wait(timeout=30)
