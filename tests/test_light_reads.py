"""`dse history` and `dse show` (of an experiment, a candidate, a run) read a SQLite store at
the schema head with the standard library alone (dse.records.light), running the Store's
own SQL (dse.records.sql_reads): the same output and exit code as the Store's path, fresh
processes both, and none of SQLAlchemy, pandas, torch or alembic imported; wherever opening
a Store would do or say something, the Store's path runs; what the store lacks, both say
in the same words. The shared SQL gives the same values on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from test_records_cli import fill

import pandas as pd

from dse.cli.records import _table, _text_table
from dse.records import MetricIn, Store
from dse.records.light import open_light

HEAVY = ("sqlalchemy", "pandas", "torch", "alembic")

# CLI runs in one fresh process, one after the other: "light" as the CLI does them, "full"
# with the light read refused (the Store's path); for each its stdout, stderr, exit code,
# whether the light read answered, and the modules loaded by then.
CLI = """
import contextlib, io, json, sys
import dse.records.light as light
mode, runs = sys.argv[1], json.loads(sys.argv[2])
answered, real = [], light.open_light
def open_light(db):
    found = None if mode == "full" else real(db)
    answered.append(found is not None)
    return found
light.open_light = open_light
from dse.cli import main
results = []
for argv in runs:
    out, err = io.StringIO(), io.StringIO()
    answered.clear()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue(), "light": list(answered),
                    "modules": sorted(sys.modules)})
print(json.dumps(results))
"""


def run_cli(repo, mode: str, runs: list[list]) -> list[dict]:
    p = subprocess.run([sys.executable, "-c", CLI, mode, json.dumps([[str(a) for a in argv] for argv in runs])],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(repo)},
                       check=False)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def heavy(result: dict) -> set[str]:
    return {m for m in result["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)}


def printed(result: dict, db=None) -> tuple:
    """What a run printed and its exit code (the store's path as DB: copies of one store)."""
    if db is None:
        return result["out"], result["err"], result["code"]
    return result["out"].replace(str(db), "DB"), result["err"].replace(str(db), "DB"), result["code"]


def fill_more(store: Store) -> dict:
    """`fill`'s two experiments, and a third that follows the first; people's decisions and
    a sweep's proposal (one naming another experiment's candidate), notes over lines."""
    ids = fill(store)
    e = ids["experiment"]
    store.add_decision(e, "confirmed", "12 of 74 feasible\ncandidates meet", "dse sweep (automatic)",
                       [ids["runs"][ids["fast"]]], ids["fast"], kind="proposal", evidence_kinds=["analytical"])
    store.add_decision(e, "accepted", "faster, and fits", "ana", [ids["runs"][ids["fast"]]], ids["fast"],
                       override="the emulator run comes next week", status="confirmed")
    store.add_note(e, "limitation", "one shape only — the\tdecoder step at batch 1", "bo")
    store.add_note(e, "open_question", "batch 8?", "ana")
    later = store.create_experiment("banks-again", "20 banks still beat 16 at batch 8 " + "é" * 80, [], "gemm",
                                    "c" * 64, "x", "s3", links=[("follows", e, "start from banks' best")])
    other, _ = store.add_candidate(later, {"banks": {"count": 20}}, {"tile": [8, 8]}, "baseline")
    store.add_decision(later, "rejected", "another experiment's candidate", "bo", [], ids["fast"])
    store.add_decision(later, "refuted", "no gain at batch 8", "bo", [])
    store.finish_run(store.start_run(other, "emulator"), "ok")
    store.set_whys({ids["bad"]: "a hand-picked\tshape"})
    store.put_artifact(b"graph 0", role="graph_dump", experiment_id=e, name="step 0\nquantize.txt")
    store.put_artifact(b"no name", role="report", experiment_id=e)
    store.put_artifact(b"outputs", role="outputs", run_id=ids["runs"][ids["fast"]], name="out.npz")
    return ids


@pytest.fixture
def rich(tmp_path):
    db = tmp_path / "records.db"
    with Store(db) as store:
        fill_more(store)
    return db


def reads_of(store, candidates=range(1, 6), runs=range(1, 6)) -> dict:
    """Every read the light path has, of the whole store, of experiments 1 and 3, and of
    these candidates and runs."""
    return {"experiments": store.experiment_summaries(), "decisions": store.decision_rows(),
            "notes": store.notes(), "links": store.links(),
            **{f"{name} of {e}": read(e) for e in (1, 3) for name, read in (
                ("experiment", store.experiment), ("candidates", store.candidate_rows),
                ("statuses", store.latest_status_counts), ("artifacts", store.artifact_rows),
                ("decisions", store.decision_rows), ("notes", store.notes), ("links", store.links))},
            "first two candidates": store.candidate_rows(1, limit=2),
            **{f"candidate {c}": store.candidate(c) for c in candidates},
            **{f"runs of c{c}": store.run_rows(c) for c in candidates},
            **{f"totals of c{c}": store.total_metric_rows(c) for c in candidates},
            **{f"artifacts of c{c}": store.artifact_rows(candidate=c) for c in candidates},
            **{f"run {r}": store.run_row(r) for r in runs},
            **{f"metrics of r{r}": store.run_metric_rows(r) for r in runs},
            **{f"artifacts of r{r}": store.artifact_rows(run=r) for r in runs}}


def add_runs(store: Store, ids: dict) -> None:
    """More runs on `fill_more`'s store: the fast candidate's emulator run with metrics of
    several kinds and scopes and evidence of its own, then a later analytical run of it
    that failed (its totals then come from its first), an infeasible rerun with a reason
    and an error; a candidate without runs, with notes."""
    fast = ids["fast"]
    emulated = store.start_run(fast, "emulator", model_version="m1")
    store.finish_run(emulated, "ok", [
        MetricIn("emulator_cycles", "latency_cycles", 812.0, "cycles"),
        MetricIn("emulator_cycles", "busy_cycles", 790.0, "cycles", scope="core", scope_key="0"),
        MetricIn("emulator_cycles", "busy_cycles", 801.0, "cycles", scope="core", scope_key="1"),
        MetricIn("emulator_cycles", "cycles", 333.0, "cycles", scope="op", scope_key="matmul_0"),
        MetricIn("numerics", "max_abs_error", 0.0441989, "abs"),
        MetricIn("emulator_host_time", "seconds", 0.0223656, "s")])
    store.finish_run(store.start_run(fast, "analytical", model_version="m2"), "failed",
                     error="RuntimeError: boom\non two lines", traceback="Traceback:\n  here\n\n")
    store.finish_run(store.start_run(ids["big"], "analytical"), "infeasible", reason="needs " * 20,
                     error="and an error")
    store.put_artifact(b"counters", role="measurements", run_id=emulated, name=None)
    lone, _ = store.add_candidate(ids["experiment"], {"banks": {"count": 99}}, {"tile": [1, 1]}, "sampler")
    store.set_candidate_notes({lone: "rows past the row field\nand another line"})
    store.add_decision(ids["experiment"], "rejected", "too hot " * 20, "bo", [emulated], fast)


LIGHT = [["history"], ["history", "--decisions"], ["show", "banks"], ["show", "1"], ["show", "banks", "--limit", "0"],
         ["show", "banks", "--limit", "2"], ["show", "banks-again"], ["show", "empty"], ["show", "c2"], ["show", "r1"],
         ["show", "cand:4"], ["show", "run#4"], ["show", "e3"]]
# Not in the store: the light read says so, and what the store has, in the Store's words.
NOT_IN_STORE = [["show", "nosuch"], ["show", "c99"], ["show", "r99"], ["show", "e99"]]


def test_history_and_show_read_light_and_print_what_the_store_path_prints(rich, repo, tmp_path):
    runs = [[*argv, "--db", rich] for argv in LIGHT + NOT_IN_STORE]
    light, full = run_cli(repo, "light", runs), run_cli(repo, "full", runs)
    for argv, quick, store in zip(runs, light, full):
        assert printed(quick) == printed(store), argv
        assert store["light"] == [False] and "sqlalchemy" in store["modules"]
    for quick in light:
        assert quick["light"] == [True] and heavy(quick) == set()
    for quick in light[:len(LIGHT)]:
        assert quick["code"] == 0
    history, decisions, banks, by_id, none, two = (r["out"] for r in light[:6])
    assert "banks-again" in history and "follows 1" in history and "(of experiment 1)" in history
    assert "#2 accepted c2 by ana: faster, and fits [overriding the acceptance test" in history
    assert "proposed confirmed c2" in decisions and "proposed" not in history.split("oldest first:")[1]
    assert banks == by_id and "why (hand-picked)" in banks and "a hand-picked shape" in banks
    assert "step 0\\nquantize.txt" in banks and " None" in banks  # as pandas printed them
    assert f"(in {rich}.evidence;" in banks and "artifacts: 3" in banks
    assert "Empty DataFrame" in none and "… 4 more" in none and "… 2 more" in two
    fast, run, bad, failed, again = (r["out"] for r in light[8:13])
    assert fast.startswith("candidate 2 of experiment 'banks' (id 1)\n") and "config.banks.count: 16 -> 20" in fast
    assert "decision #2 " in fast and "accepted by ana: faster, and fits" in fast and f"{rich}.evidence/" in fast
    assert run.startswith("run 1: analytical of candidate 1 (experiment 1), status ok\n") and "metrics (2):" in run
    assert "why (hand-picked): a hand-picked\tshape" in bad and "ZeroDivisionError: x" in bad
    assert "error: ZeroDivisionError: x\ntraceback:\nTraceback (most recent call last):\n  boom\n" in failed
    assert again.startswith("experiment 3 'banks-again'")
    for quick in light[len(LIGHT):]:
        assert quick["code"] == 2 and quick["err"].startswith("dse: error: ") and quick["err"].count("\n") == 1
    assert [field in quick["err"] for quick, field in zip(light[len(LIGHT):], (
        "'ID'", "'candidate'", "'run'", "'experiment'"))] == [True] * 4
    # the light reads leave nothing beside the store (no -wal, -shm)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.db", "records.db.evidence"]


SWEEP = """
[experiment]
name = "gemm-show"
hypothesis = "Two workers beat one for a 64^3 gemm on goban"

[[acceptance]]
expr = "latency_cycles < baseline_latency_cycles"
prose = "faster than the baseline"

[workload]
recipe = "gemm"
params = { m = 64, n = 64, k = 64 }

[baseline]
chip = "goban"
mapping = { workers = 1 }

[[candidates]]
why = "two workers,\tby hand"
set = { "mapping.workers" = 2 }

[[candidates]]
why = "rows past the row-address field"
set = { "chip.banks.rows" = 2048 }

[[space]]
name = "banks"
target = "chip.banks.count"
values = [6, 16]

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 8]

[[objectives]]
metric = "latency_cycles"

[stages]
emulator = "top_k"
top_k = 2
host_time_repeats = 1
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A real sweep's store (baseline, two hand-picked candidates, a grid with infeasible
    points; the two best emulated, with evidence files, the rest pruned), then a failed
    run with its traceback and a person's decision on a candidate."""
    from dse.runner import run_sweep

    folder = tmp_path_factory.mktemp("swept")
    (folder / "spec.toml").write_text(SWEEP)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DSE_CACHE_DIR", str(folder / "graph-cache"))
        result = run_sweep(folder / "spec.toml", folder / "records.db", progress=False)
    with Store(folder / "records.db") as store:
        store.finish_run(store.start_run(6, "analytical", model_version="m-next"), "failed",
                         error="ValueError: no tile\nfits", traceback="Traceback (most recent call last):\n  deep\n")
        store.add_decision(result.experiment_id, "accepted", "faster on the emulator", "ana", [1, 2], 2,
                           override="checked by hand")
    with sqlite3.connect(folder / "records.db") as connection:  # runs of a dirty and of a clean tree, wherever run
        connection.execute("UPDATE run SET git_commit = '0123456789abcdef', git_dirty = (id = 1) WHERE id IN (1, 2)")
    connection.close()
    return folder / "records.db"


def test_candidate_and_run_shows_of_a_sweep_read_light_and_print_what_the_store_path_prints(swept, repo):
    with sqlite3.connect(swept) as connection:
        candidates = [row[0] for row in connection.execute("SELECT id FROM candidate ORDER BY id")]
        found = connection.execute("SELECT id, candidate_id, stage, status, reason FROM run")
        runs = {row[0]: row[1:] for row in found}
    connection.close()
    shows = [f"c{c}" for c in candidates] + [f"r{r}" for r in runs]
    argvs = [["show", ident, "--db", swept] for ident in shows]
    light, full = run_cli(repo, "light", argvs), run_cli(repo, "full", argvs)
    for argv, quick, store in zip(argvs, light, full):
        assert printed(quick) == printed(store), argv
        assert quick["light"] == [True] and quick["code"] == 0 and store["light"] == [False]
    assert heavy(light[-1]) == set() and "sqlalchemy" in heavy(full[-1])  # the light path, every show
    out = dict(zip(shows, (r["out"] for r in light)))
    statuses = {status for _, _, status, _ in runs.values()}
    assert {"ok", "infeasible", "pruned", "failed"} <= statuses
    assert "why (hand-picked): two workers,\tby hand" in out["c2"] and "[baseline]" in out["c1"]
    assert "; git 0123456789+dirty\n" in out["r1"] and " 0123456789+dirty " in out["c1"]
    assert "; git 0123456789\n" in out["r2"] and " 0123456789 " in out["c2"]
    assert "notes: banks.rows = 2048" in out["c3"] and "difference from the baseline: none" in out["c1"]
    assert "decision #2 " in out["c2"] and "accepted by ana: faster on the emulator" in out["c2"]
    for ident, (candidate, stage, status, reason) in runs.items():
        shown = out[f"r{ident}"]
        assert shown.startswith(f"run {ident}: {stage} of candidate {candidate} (experiment 1), status {status}\n")
        git = re.search(r"; git (\S+)\n", shown).group(1)  # a dirty tree's runs say so in both tables
        cell = "" if git == "—" else re.escape(git)
        assert re.search(rf"^ *{ident} +{stage} +{status} +[\d-]+ [\d:]+ +\S+ +{cell} ", out[f"c{candidate}"],
                         re.MULTILINE), (ident, candidate, git)
        if status == "infeasible":
            assert f"\nreason: {reason}\n" in shown and " ".join(reason.split())[:40] in out[f"c{candidate}"]
        if stage == "emulator" and status == "ok":  # figures of several kinds and scopes, evidence files
            assert re.search(r"^ +emulator_cycles +busy_cycles +[\d,]+ +cycles +core +0$", shown, re.MULTILINE)
            assert re.search(r"^ +numerics +integer_bit_exact +1 +bool +total +$", shown, re.MULTILINE)
            # its log, counters, replay manifest, bank lifetimes, inputs, outputs (model and physical shapes)
            assert re.search(r"^artifacts: evidence files: ([7-9]|\d\d+) ok, 0 missing, 0 altered, 0 refused\n id",
                             shown, re.MULTILINE)
            assert f"{swept}.evidence/" in shown and "outputs/" in shown and " ok " in shown
            assert "emulator_host_time" in out[f"c{candidate}"] and re.search(
                r"^artifacts: evidence files: \d+ ok, 0 missing, 0 altered, 0 refused\n id +run_id", out[f"c{candidate}"],
                re.MULTILINE)
    failed = out[f"r{max(runs)}"]
    assert "error: ValueError: no tile\nfits\ntraceback:\nTraceback (most recent call last):\n  deep\n" in failed
    assert "ValueError: no tile fits" in out["c6"]


def _refusal(read) -> tuple:
    from dse.records import RecordNotFound

    with pytest.raises(RecordNotFound) as caught:
        read()
    return str(caught.value), caught.value.suggestions


def test_the_light_read_gives_the_stores_values(tmp_path):
    db = tmp_path / "records.db"
    with Store(db) as store:
        add_runs(store, fill_more(store))
        expected = reads_of(store, range(1, 7), range(1, 9))
        stored_path = store.artifact_path("ab" * 32)
        missing = [_refusal(read) for read in (lambda: store.candidate(7), lambda: store.run_row(9),
                                                lambda: store.experiment("bankz"), lambda: store.notes(99))]
    with open_light(str(db)) as light:
        assert reads_of(light, range(1, 7), range(1, 9)) == expected
        # what the store lacks: the Store's error, word for word
        assert [_refusal(read) for read in (lambda: light.candidate(7), lambda: light.run_row(9),
                                            lambda: light.experiment("bankz"), lambda: light.notes(99))] == missing
        assert light.artifact_path("ab" * 32) == stored_path
    banks = expected["experiments"][0]
    assert (banks["n_candidates"], banks["n_ok"], banks["n_infeasible"], banks["n_failed"]) == (5, 1, 1, 2)
    assert (banks["proposed_verdict"], banks["latest_verdict"], banks["latest_candidate_id"]) == (
        "confirmed", "rejected", 2)
    assert expected["experiments"][2]["n_emulated"] == 1 and expected["experiments"][2]["n_decisions"] == 2
    assert expected["decisions"][0]["evidence"] == "[2]" and expected["decisions"][0]["created_at"].tzinfo
    assert [d["candidate_experiment_id"] for d in expected["decisions"]] == [1, 1, 1, None, 1]
    assert expected["statuses of 1"] == [("failed", 2), ("ok", 1), ("infeasible", 1), ("not run", 1)]
    assert [c["id"] for c in expected["first two candidates"]] == [1, 2]
    assert expected["experiment of 1"]["acceptance"] == [{"expr": "latency_cycles < baseline_latency_cycles",
                                                         "prose": "faster"}]
    assert [a["run_id"] for a in expected["artifacts of 1"]] == [None, None, 2, 6]
    base, fast = expected["candidate 1"], expected["candidate 2"]
    assert base["is_baseline"] and not fast["is_baseline"] and fast["experiment"] == "banks"
    assert fast["diff"] == {"config.banks.count": [16, 20]} and fast["mapping"] == {"tile": [16, 16]}
    assert expected["candidate 6"]["notes"] == "rows past the row field\nand another line"
    assert expected["candidate 4"]["why"] == "a hand-picked\tshape" and base["created_at"].tzinfo
    assert [(r["id"], r["stage"], r["status"]) for r in expected["runs of c2"]] == [
        (2, "analytical", "ok"), (6, "emulator", "ok"), (7, "analytical", "failed")]
    assert expected["runs of c6"] == [] and expected["totals of c6"] == [] and expected["artifacts of c6"] == []
    # the latest run of each kind: the later analytical run failed with no figures, the first's stand
    assert [(m["kind"], m["name"], m["value"], m["run_id"]) for m in expected["totals of c2"]] == [
        ("analytical", "latency_cycles", 800.0, 2), ("analytical", "dma_bytes", 4096.0, 2),
        ("emulator_cycles", "latency_cycles", 812.0, 6), ("numerics", "max_abs_error", 0.0441989, 6),
        ("emulator_host_time", "seconds", 0.0223656, 6)]
    assert [(m["scope"], m["scope_key"]) for m in expected["metrics of r6"]] == [
        ("total", ""), ("core", "0"), ("core", "1"), ("op", "matmul_0"), ("total", ""), ("total", "")]
    failed = expected["run 7"]
    assert (failed["experiment_id"], failed["candidate_id"]) == (1, 2)
    assert failed["error"] == "RuntimeError: boom\non two lines"
    assert failed["traceback"] == "Traceback:\n  here\n\n" and failed["started_at"].tzinfo and failed["finished_at"]
    assert isinstance(failed["versions"], dict) and failed["git_dirty"] in (True, False, None)
    assert expected["run 3"]["reason"] == "needs 64 banks, has 20" and expected["run 8"]["error"] == "and an error"
    assert [a["run_id"] for a in expected["artifacts of c2"]] == [2, 6]
    assert [a["id"] for a in expected["artifacts of c2"]] == [a["id"] for a in
                                                             expected["artifacts of r2"] + expected["artifacts of r6"]]
    assert expected["artifacts of r6"][0]["name"] is None and expected["artifacts of c5"] == []


def test_the_stores_plain_reads_of_a_candidate_and_a_run_hold_what_its_frames_hold(tmp_path):
    """`runs(candidate=)`, `run()` and `metrics()` (the Store's DataFrames) against the
    plain rows `dse show` prints."""
    with Store(tmp_path / "records.db") as store:
        ids = fill_more(store)
        add_runs(store, ids)
        fast = ids["fast"]
        frame, rows = store.runs(candidate=fast), store.run_rows(fast)
        assert frame["id"].tolist() == [r["id"] for r in rows] == [2, 6, 7]
        assert frame["started_at"].tolist() == [r["started_at"] for r in rows]
        assert frame["git_dirty"].dtype == "boolean" and frame["seed"].dtype == "Int64"
        assert [None if pd.isna(d) else bool(d) for d in frame["git_dirty"]] == [r["git_dirty"] for r in rows]
        for column in ("stage", "status", "reason", "error", "host", "git_commit", "versions", "command",
                       "model_version", "emulator_version"):
            assert [None if pd.isna(v) else v for v in frame[column]] == [r[column] for r in rows], column
        run = store.run(6)
        assert run["metrics"].to_dict("records") == store.run_metric_rows(6)
        assert {k: v for k, v in run.items() if k != "metrics"} == store.run_row(6)
        metrics = store.metrics("banks")
        totals = metrics[(metrics["candidate_id"] == fast) & (metrics["scope"] == "total")]
        totals = totals[totals["run_id"] == totals.groupby("kind")["run_id"].transform("max")]
        assert totals[["kind", "name", "value", "unit", "run_id"]].to_dict("records") == store.total_metric_rows(fast)


def test_the_shared_sql_reads_alike_on_sqlite_and_postgresql(tmp_path, pg_url):  # noqa: F811
    seen = []
    for url in (tmp_path / "records.db", pg_url):
        with Store(url) as store:
            add_runs(store, fill_more(store))
            got = reads_of(store, range(1, 7), range(1, 9))
        for rows in got.values():
            for row in [rows] if isinstance(rows, dict) else rows:
                if not isinstance(row, dict):
                    continue
                for column in ("created_at", "started_at", "finished_at", "heartbeat_at"):  # the moments differ
                    if row.get(column) is not None:
                        assert row.pop(column).utcoffset().total_seconds() == 0 or url == pg_url
        seen.append(got)
    assert seen[0] == seen[1]
    with Store(pg_url) as store:  # with one experiment named: its notes, decisions, links
        assert [n["text"] for n in store.notes("banks")] == ["one shape only — the\tdecoder step at batch 1",
                                                             "batch 8?"]
        assert [d["verdict"] for d in store.decision_rows("banks-again")] == ["rejected", "refuted"]
        assert [link["other"] for link in store.links("banks")] == ["banks"]
        assert store.links("empty") == []


def copies(db, folder, n: int = 2) -> list:
    out = []
    for i in range(n):
        (folder / f"copy{i}").mkdir(parents=True)
        shutil.copy(db, folder / f"copy{i}" / db.name)
        if Path(f"{db}.evidence").is_dir():  # its evidence files too: a store without them says so (exit 2)
            shutil.copytree(f"{db}.evidence", folder / f"copy{i}" / f"{db.name}.evidence")
        out.append(folder / f"copy{i}" / db.name)
    return out


def older_store(tmp_path):
    from alembic import command

    from dse.records import database_url
    from dse.records.store import alembic_config

    db = tmp_path / "old.db"
    command.upgrade(alembic_config(database_url(db)), "0010")
    with sqlite3.connect(db) as connection:
        connection.execute(
            "INSERT INTO experiment (id, name, hypothesis, status, acceptance, workload_recipe, workload_hash, "
            "spec_text, spec_hash, limitations, open_questions, created_at) VALUES "
            "(1, 'old', 'from 0010', 'testing', '[]', 'gemm', 'w', 's', 'sh', '', '', '2026-01-02 03:04:05')")
    connection.close()
    return db


def test_where_the_stores_open_would_do_or_say_something_its_path_runs(rich, repo, tmp_path):
    """A missing file, not a database, a newer dse's store (refused, exit 2), an older one
    (upgraded), runs left running (reaped; or shown running, their process alive): the
    light read stands aside, the same output."""
    missing = tmp_path / "missing.db"
    text = tmp_path / "notes.db"
    text.write_text("not a database\n" * 100)
    newer = copies(rich, tmp_path / "newer", 1)[0]
    with sqlite3.connect(newer) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0042'")
    connection.close()
    with Store(rich, heartbeat_interval=0) as store:
        store.start_run(3, "emulator")
    running = copies(rich, tmp_path / "running")
    old = copies(older_store(tmp_path), tmp_path / "old")
    runs = {mode: [["history", "--db", missing], ["show", "banks", "--db", text], ["history", "--db", newer],
                   ["show", "old", "--db", old[i]], ["history", "--db", running[i]],
                   ["show", "banks", "--db", running[i]], ["show", "c3", "--db", running[i]],
                   ["show", "r6", "--db", running[i]]] for i, mode in enumerate(("light", "full"))}
    light, full = run_cli(repo, "light", runs["light"]), run_cli(repo, "full", runs["full"])
    for i, (quick, store) in enumerate(zip(light, full)):
        assert quick["light"] == [False], runs["light"][i]
        db_light, db_full = runs["light"][i][-1], runs["full"][i][-1]
        assert printed(quick, db_light) == printed(store, db_full), runs["light"][i]
    assert [r["code"] for r in light] == [2, 2, 2, 0, 0, 0, 0, 0]
    assert "an existing record store" in light[0]["err"] and "not a SQLite database" in light[1]["err"]
    assert "schema revision 0042" in light[2]["err"] and "upgrade dse" in light[2]["err"]
    assert "from 0010" in light[3]["out"] and "1 running" in light[5]["out"]
    assert re.search(r"^ +6 +emulator +running ", light[6]["out"], re.MULTILINE)
    assert light[7]["out"].startswith("run 6: emulator of candidate 3")
    with sqlite3.connect(old[0]) as connection:  # upgraded by the Store's open
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() != [("0010",)]
    connection.close()
    assert not list(tmp_path.glob("*-wal")) and not list(tmp_path.glob("*-shm"))


def test_the_plain_table_is_what_pandas_prints():
    rng = __import__("random").Random(7)
    words = ["a", "bb", "é", "日本", "x y", "", " ", "\t", "q\nr", "…", None, "None", "-5", "grid*"]
    for _ in range(500):
        n, columns = rng.randint(1, 5), {}
        for j in range(rng.randint(1, 5)):
            name = rng.choice(["id", "origin", "why (hand-picked)", "x"]) + str(j) * rng.randint(0, 2)
            if rng.random() < 0.4:
                columns[name] = [rng.randint(-5, 10 ** rng.randint(0, 8)) for _ in range(n)]
            else:
                columns[name] = [rng.choice(words) if rng.random() < 0.5 else
                                 "".join(rng.choice(words[:6]) for _ in range(rng.randint(0, 8))) for _ in range(n)]
        assert _text_table(columns) == _table(pd.DataFrame(columns)), columns
    assert _text_table({"id": [], "origin": []}) == _table(pd.DataFrame({"id": [], "origin": []}))
    with pytest.raises(TypeError):
        _text_table({"value": [1.5]})
