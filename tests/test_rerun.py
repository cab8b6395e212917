"""A rerun of a sweep the store holds in full answers from the records (dse.runner.rerun):
the same result, output and exit code as the full sweep's rerun, nothing written, none of
the stages' imports; wherever the full sweep would still do something, it runs."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys

from test_runner import write_spec

from dse.records import Store
from dse.runner import launch, load_spec, run_sweep
from dse.runner.rerun import recorded_rerun
from dse.runner.sweep import sweep_into_store

# What a recorded rerun must not import: the stages, the ORM and pandas, the samplers' optuna.
HEAVY = ("torch", "pandas", "sqlalchemy", "optuna", "tqdm", "dse.analytical", "dse.runner.sweep",
         "dse.runner.execution", "dse.workload.capture", "dse.plan", "dse.lower", "dse.cost", "emulator.machine",
         "emulator.timing")
# Of the record store, only its light read (and the package's lazy names).
LIGHT_RECORDS = {"dse.records", "dse.records.recorded", "dse.records.revisions", "dse.records.sqlite_file",
                 "dse.records.light", "dse.records.sql_reads", "dse.records.choices",
                 "dse.records.outcomes", "dse.records.blobs",  # blobs: evidence checks, light
                 "dse.records.not_found",  # the contract's refusals, light too
                 "dse.records.page_reads",  # the contract's workbench reads, which `light` gives too
                 "dse.records.light_pg"}  # the PostgreSQL reads: psycopg only once a URL connects

RERUN = """
import contextlib, io, json, sys
from dse.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["sweep", sys.argv[1], "--db", sys.argv[2], "--no-progress"])
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def records(db) -> list[str]:
    """Every row of the store, as SQL text."""
    with sqlite3.connect(db) as connection:
        return list(connection.iterdump())


def fields(result) -> dict:
    # The driver's own diagnostics (wall times, the sampler's proposal count) are not the result.
    return {k: v for k, v in dataclasses.asdict(result).items() if k not in ("seconds", "proposed_by_sampler")}


def rerun_in_a_fresh_process(spec, store: str, repo) -> dict:
    """`dse sweep` of a recorded `spec` into `store` (a path or URL) in a fresh process: its
    exit code, output and imported modules, asserted to have taken the shortcut (nothing
    evaluated, the proposal printed, none of the stages' imports)."""
    p = subprocess.run([sys.executable, "-c", RERUN, str(spec), store], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(repo)}, check=False)
    assert p.returncode == 0, p.stderr
    fast = json.loads(p.stdout.strip().splitlines()[-1])
    assert fast["code"] == 0 and "0 evaluated, 10 already recorded" in fast["out"]
    assert "proposed verdict: " in fast["out"]
    imported = {m for m in fast["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)}
    assert imported == set()
    return fast


def test_a_recorded_rerun_prints_what_the_full_rerun_prints_imports_no_stage_and_writes_nothing(
        tmp_path, graph_cache_dir, repo, cli, monkeypatch):
    spec, db = write_spec(tmp_path), tmp_path / "r.db"
    assert run_sweep(spec, db, progress=False).evaluated == 10
    before, files = records(db), sorted(os.listdir(tmp_path))
    fast = rerun_in_a_fresh_process(spec, str(db), repo)
    assert {m for m in fast["modules"] if m.startswith("dse.records")} == LIGHT_RECORDS
    assert sorted(os.listdir(tmp_path)) == files  # not even a -wal or -shm file left behind
    assert "dse.runner.rerun" in fast["modules"] and "emulator.chip" in fast["modules"]  # it did build the candidates
    assert records(db) == before
    # The full sweep's rerun (the shortcut turned off): the same text and code, nothing written either.
    monkeypatch.setattr(launch, "recorded_rerun", lambda *a, **k: None)
    code, out, _ = cli("sweep", spec, "--db", db, "--no-progress")
    assert (code, out) == (fast["code"], fast["out"])
    assert records(db) == before


def test_the_shortcut_gives_the_full_sweeps_result_and_stands_aside_while_there_is_work(tmp_path, graph_cache_dir):
    spec_path, db = write_spec(tmp_path), tmp_path / "r.db"
    spec = load_spec(spec_path)
    assert recorded_rerun(spec, db) is None  # no store yet
    first = run_sweep(spec, db, progress=False)
    fast = recorded_rerun(spec, db)
    assert fast is not None and fields(fast) == fields(sweep_into_store(spec, db, progress=False))
    assert fast.proposed and fast.resumed == 10 and sum(fast.counts.values()) == 10 and first.evaluated == 10

    # Evidence newer than the latest proposal, and no judgement since (as a store from before
    # 0013 holds it): `propose` judges it again (and finds the same).
    with sqlite3.connect(db) as c:
        c.execute("UPDATE decision SET created_at = '2000-01-01 00:00:00.000000' WHERE kind = 'proposal'")
        c.commit()
        assert recorded_rerun(spec, db) is not None  # the sweep's judgement covered every run
        c.execute("UPDATE experiment SET judged_run_id = NULL")
    assert recorded_rerun(spec, db) is None
    with sqlite3.connect(db) as c:  # a judgement older than the newest run: the same
        c.execute("UPDATE experiment SET judged_run_id = (SELECT max(id) - 1 FROM run)")
    assert recorded_rerun(spec, db) is None
    assert fields(sweep_into_store(spec, db, progress=False)) == fields(fast)

    # A run left "running" by a process gone silent: the store's open reaps it (a write), then
    # the sweep evaluates its candidate again.
    with sqlite3.connect(db) as c:
        c.execute("UPDATE run SET status = 'running', finished_at = NULL, pid = NULL, "
                  "heartbeat_at = '2000-01-01 00:00:00.000000' WHERE id = (SELECT max(id) FROM run)")
    assert recorded_rerun(spec, db) is None
    assert sweep_into_store(spec, db, progress=False).evaluated == 1

    # A spec changed under the same name (the sweep's error to give), an experiment not recorded.
    changed = load_spec(write_spec(tmp_path, banks="[4, 8, 16, 20]"))
    assert recorded_rerun(changed, db) is None
    assert recorded_rerun(load_spec(write_spec(tmp_path, name="other")), db) is None


def test_a_rerun_after_a_resumed_sweep_is_recorded_until_a_run_is_newer_than_its_judgement(
        tmp_path, graph_cache_dir):
    """A resumed sweep whose judgement finds the latest proposal again adds none: its runs
    are newer than the proposal, yet judged (experiment.judged_run_id), so the next rerun
    is the shortcut, with the full sweep's result; a run no sweep judged is the full sweep's."""
    spec_path, db = write_spec(tmp_path), tmp_path / "r.db"
    spec = load_spec(spec_path)
    run_sweep(spec, db, progress=False)
    with sqlite3.connect(db) as c:  # a run left "running" by a process gone silent: the rerun evaluates it again
        c.execute("UPDATE run SET status = 'running', finished_at = NULL, pid = NULL, "
                  "heartbeat_at = '2000-01-01 00:00:00.000000' WHERE id = (SELECT max(id) FROM run)")
    assert sweep_into_store(spec, db, progress=False).evaluated == 1

    def proposal_and_newest_run():
        with sqlite3.connect(db) as c:
            return (c.execute("SELECT count(*), max(created_at) FROM decision WHERE kind = 'proposal'").fetchone(),
                    c.execute("SELECT max(id), max(finished_at) FROM run").fetchone())

    (n_proposals, proposed_at), (newest_run, newest_at) = proposal_and_newest_run()
    assert n_proposals == 1 and newest_at > proposed_at  # the resumed sweep added no proposal
    fast = recorded_rerun(spec, db)
    assert fast is not None and fast.proposed
    before = records(db)
    assert fields(fast) == fields(sweep_into_store(spec, db, progress=False))
    assert records(db) == before  # the full rerun had nothing to write either

    # A run recorded after the judgement (no sweep judged it): the full sweep judges it.
    with Store(db) as store:
        store.finish_run(store.start_run(1, "analytical"), "ok")
    assert recorded_rerun(spec, db) is None
    full = sweep_into_store(spec, db, progress=False)
    assert proposal_and_newest_run()[0][0] == 1 and proposal_and_newest_run()[1][0] == newest_run + 1
    fast = recorded_rerun(spec, db)
    assert fast is not None and fields(fast) == fields(full)

    # A run in flight while the sweep judges (another process's): no judgement stands for it.
    with Store(db) as store:
        running = store.start_run(1, "analytical")
        assert store.settled_run_id(fast.experiment_id) is None
        store.finish_run(running, "ok")
        assert store.settled_run_id(fast.experiment_id) == running


def test_a_sampled_sweep_is_recorded_once_its_trials_are(tmp_path, graph_cache_dir):
    db = tmp_path / "r.db"
    spec = load_spec(write_spec(tmp_path, sampler="random", trials=4))
    run_sweep(spec, db, progress=False)
    fast = recorded_rerun(spec, db)
    assert fast is not None and fields(fast) == fields(sweep_into_store(spec, db, progress=False))
    more = load_spec(write_spec(tmp_path, name="more", sampler="random", trials=4))
    run_sweep(more, db, progress=False)
    with sqlite3.connect(db) as c:  # one trial's candidate lost: the sampler has a trial to ask for
        c.execute("DELETE FROM run WHERE id = (SELECT max(r.id) FROM run r JOIN candidate k ON k.id = r.candidate_id "
                  "JOIN experiment e ON e.id = k.experiment_id WHERE e.name = 'more')")
    assert recorded_rerun(more, db) is None


def test_the_light_reads_schema_head_is_the_stores():
    from dse.records.engine import SCHEMA_HEAD
    from dse.records.revisions import head_revision

    assert head_revision() == SCHEMA_HEAD


def test_with_the_emulator_stage_every_candidate_must_be_emulated_or_pruned(tmp_path, graph_cache_dir):
    path = write_spec(tmp_path, name="emu", banks="[12, 16]")
    path.write_text(path.read_text().replace("m = 64, n = 64, k = 64", "m = 32, n = 32, k = 32")
                    + '\n[stages]\nemulator = "top_k"\ntop_k = 1\n')
    spec, db = load_spec(path), tmp_path / "r.db"
    run_sweep(spec, db, progress=False)
    fast = recorded_rerun(spec, db)
    assert fast is not None and fields(fast) == fields(sweep_into_store(spec, db, progress=False))
    with sqlite3.connect(db) as c:  # a pruned candidate's emulator run lost: the sweep prunes it again
        c.execute("DELETE FROM run WHERE id = (SELECT max(id) FROM run WHERE stage = 'emulator' AND status = 'pruned')")
    assert recorded_rerun(spec, db) is None
