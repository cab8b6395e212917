"""The record store under real processes: four writers at once, and a writer killed with
SIGKILL in the middle of a transaction. Against SQLite (the file must stay intact) and
PostgreSQL."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from sqlalchemy import create_engine, text

from dse.records import Store, content_hash
from dse.records.store import ABANDONED, database_url

REPO = Path(__file__).resolve().parents[1]

WRITER = """
import sys, time
from pathlib import Path
from dse.records import MetricIn, Store

db, worker, count, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
while not go.exists():  # start together, so the opens (and the first migration) race too
    time.sleep(0.002)
with Store(db) as store:
    experiment = store.create_experiment("race", "four writers", [], "gemm", "w", "spec", "s")
    for i in range(count):
        candidate, created = store.add_candidate(
            experiment, {"worker": worker, "i": i}, {"tile": [16, 16]}, "grid")
        assert created
        run = store.start_run(candidate, "analytical", seed=worker)
        store.finish_run(run, "ok", [
            MetricIn("analytical", f"m{j}", worker * 1e6 + i * 10 + j, "cycles") for j in range(8)
        ])
print("done", worker)
"""

KILLED = """
import sys
from dse.records import MetricIn, Store

db, metrics = sys.argv[1], int(sys.argv[2])
with Store(db) as store:
    experiment = store.create_experiment("killed", "dies mid-run", [], "gemm", "w", "spec", "s")
    i = 0
    while True:
        candidate, _ = store.add_candidate(
            experiment, {"i": i, "padding": "x" * 4000}, {"tile": [i, 16]}, "grid")
        run = store.start_run(candidate, "emulator")
        rows = [MetricIn("emulator_cycles", "cycles", float(j), "cycles", scope="op",
                         scope_key=str(j)) for j in range(metrics)]
        print("finishing", run, flush=True)
        store.finish_run(run, "ok", rows)
        i += 1
"""


def python(code: str, *args, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)  # fmt: skip


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path, monkeypatch):
    if request.param == "sqlite":
        return str(tmp_path / "records.db")
    monkeypatch.setenv("DSE_EVIDENCE_DIR", str(tmp_path / "evidence"))
    return request.getfixturevalue("pg_url")


def scalar(db: str, sql: str):
    engine = create_engine(database_url(db))
    try:
        with engine.connect() as connection:
            return connection.execute(text(sql)).scalar()
    finally:
        engine.dispose()


def test_four_processes_write_at_once_and_every_row_arrives(db, tmp_path):
    # Per writer: 300 candidates + 300 runs + 2,400 metrics = 3,000 rows, in 900
    # transactions (a third of that on PostgreSQL, whose server shares the two cores).
    count = 300 if db.endswith(".db") else 100
    go = tmp_path / "go"
    writers = [python(WRITER, db, worker, count, go) for worker in range(4)]
    go.touch()
    outputs = [w.communicate(timeout=240) for w in writers]
    for worker, (w, (out, err)) in enumerate(zip(writers, outputs)):
        assert w.returncode == 0, err
        assert out.strip() == f"done {worker}"
        assert "locked" not in err.lower() and "busy" not in err.lower()
    with Store(db) as store:
        experiments = store.experiments()
        assert experiments["name"].tolist() == ["race"]
        summary = experiments.iloc[0]
        assert (summary["n_candidates"], summary["n_ok"], summary["n_running"]) == (4 * count, 4 * count, 0)
        candidates = store.candidates("race")
        metrics = store.metrics("race")
    seen = sorted(tuple(sorted(eval_json(c).items())) for c in candidates["config"])
    assert seen == sorted(tuple(sorted({"worker": w, "i": i}.items())) for w in range(4) for i in range(count))
    assert len(metrics) == 4 * count * 8
    expected = sum(w * 1e6 + i * 10 + j for w in range(4) for i in range(count) for j in range(8))
    assert metrics["value"].sum() == pytest.approx(expected, rel=1e-12)
    assert set(candidates["status"]) == {"ok"}
    if db.endswith(".db"):
        assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def eval_json(text_value: str) -> dict:
    import json

    return json.loads(text_value)


def test_a_writer_killed_mid_transaction_leaves_an_intact_store_and_a_crashed_run(db):
    metrics = 50_000  # a finish_run transaction of some 0.3 s, to be killed inside
    writer = python(KILLED, db, metrics)
    runs_started = []
    try:
        for line in writer.stdout:
            runs_started.append(int(line.split()[1]))
            if len(runs_started) == 3:
                break
        time.sleep(0.1)  # inside the third finish_run's transaction
        writer.send_signal(signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(timeout=30)
        writer.stdout.close()
        writer.stderr.close()
    assert writer.returncode == -signal.SIGKILL, "the writer died before it was killed"
    killed_run = runs_started[-1]

    if db.endswith(".db"):  # the file as SQLite itself sees it, before dse opens it again
        with sqlite3.connect(db) as raw:
            assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
    # Nothing half-written: the killed run is still "running" with no metrics at all,
    # the runs before it have every metric.
    assert scalar(db, f"SELECT status FROM run WHERE id = {killed_run}") == "running"
    # (a run's metrics are one packed row, 8 bytes a value: 0015)
    count = "SELECT coalesce(sum(length(figures)), 0) / 8 FROM run_metrics WHERE run_id = {}"
    assert scalar(db, count.format(killed_run)) == 0
    for run_id in runs_started[:-1]:
        assert scalar(db, count.format(run_id)) == metrics

    with Store(db) as store:  # the next open marks the dead process's run crashed
        run = store.run(killed_run)
        candidates = store.candidates("killed")
        summary = store.experiments().iloc[0]
    assert run["status"] == "crashed"
    assert run["error"].startswith(f"{ABANDONED}process {writer.pid} on ")
    assert run["metrics"].empty
    assert (summary["n_crashed"], summary["n_ok"], summary["n_running"]) == (1, 2, 0)
    # Every candidate row is whole: its content still hashes to its recorded hash.
    for row in candidates.to_dict("records"):
        config, mapping = eval_json(row["config"]), eval_json(row["mapping"])
        assert row["hash"] == content_hash({"config": config, "mapping": mapping})
        assert config["padding"] == "x" * 4000
