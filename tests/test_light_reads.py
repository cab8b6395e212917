"""`dse history` and `dse show EXPERIMENT` read a SQLite store at the schema head with the standard library alone
(dse.records.light), running the Store's own SQL (dse.records.sql_reads): the same output
and exit code as the Store's path, fresh processes both, and none of SQLAlchemy, pandas or
torch imported; wherever opening a Store would do or say something, the Store's path runs.
The shared SQL gives the same values on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from test_records_cli import fill

import pandas as pd

from dse.cli.records import _table, _text_table
from dse.records import Store
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


def reads_of(store) -> dict:
    """Every read the light path has, of the whole store and of experiments 1 and 3."""
    return {"experiments": store.experiment_summaries(), "decisions": store.decision_rows(),
            "notes": store.notes(), "links": store.links(),
            **{f"{name} of {e}": read(e) for e in (1, 3) for name, read in (
                ("experiment", store.experiment), ("candidates", store.candidate_rows),
                ("statuses", store.latest_status_counts), ("artifacts", store.artifact_rows),
                ("decisions", store.decision_rows), ("notes", store.notes), ("links", store.links))},
            "first two candidates": store.candidate_rows(1, limit=2)}


LIGHT = [["history"], ["history", "--decisions"], ["show", "banks"], ["show", "1"], ["show", "banks", "--limit", "0"],
         ["show", "banks", "--limit", "2"], ["show", "banks-again"], ["show", "empty"]]
# Not an experiment of the store: the Store's path says what it is, or what the store has.
NOT_EXPERIMENTS = [["show", "c2"], ["show", "r1"], ["show", "nosuch"], ["show", "c99"]]


def test_history_and_show_read_light_and_print_what_the_store_path_prints(rich, repo, tmp_path):
    runs = [[*argv, "--db", rich] for argv in LIGHT + NOT_EXPERIMENTS]
    light, full = run_cli(repo, "light", runs), run_cli(repo, "full", runs)
    for argv, quick, store in zip(runs, light, full):
        assert printed(quick) == printed(store), argv
        assert store["light"] == [False] and "sqlalchemy" in store["modules"]
    for quick in light[:len(LIGHT)]:
        assert quick["light"] == [True] and quick["code"] == 0 and heavy(quick) == set()
    history, decisions, banks, by_id, none, two = (r["out"] for r in light[:6])
    assert "banks-again" in history and "follows 1" in history and "(of experiment 1)" in history
    assert "#2 accepted c2 by ana: faster, and fits [overriding the acceptance test" in history
    assert "proposed confirmed c2" in decisions and "proposed" not in history.split("oldest first:")[1]
    assert banks == by_id and "why (hand-picked)" in banks and "a hand-picked shape" in banks
    assert "step 0\\nquantize.txt" in banks and " None" in banks  # as pandas printed them
    assert f"(in {rich}.evidence;" in banks and "artifacts: 3" in banks
    assert "Empty DataFrame" in none and "… 4 more" in none and "… 2 more" in two
    for quick, argv in zip(light[len(LIGHT):], NOT_EXPERIMENTS):
        assert "sqlalchemy" in quick["modules"]  # no experiment of that name: the Store answered
        if argv[1] in ("nosuch", "c99"):
            assert quick["code"] == 2 and quick["err"].startswith("dse: error: ") and quick["err"].count("\n") == 1
        else:
            assert quick["code"] == 0
    assert "banks" in light[-2]["err"] and "candidate" in light[-1]["err"]
    # the light reads leave nothing beside the store (no -wal, -shm)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.db", "records.db.evidence"]


def test_the_light_read_gives_the_stores_values(rich):
    with Store(rich) as store:
        expected = reads_of(store)
    with open_light(str(rich)) as light:
        assert reads_of(light) == expected
    banks = expected["experiments"][0]
    assert (banks["n_candidates"], banks["n_ok"], banks["n_infeasible"], banks["n_failed"]) == (4, 2, 1, 1)
    assert (banks["proposed_verdict"], banks["latest_verdict"], banks["latest_candidate_id"]) == (
        "confirmed", "accepted", 2)
    assert expected["experiments"][2]["n_emulated"] == 1 and expected["experiments"][2]["n_decisions"] == 2
    assert expected["decisions"][0]["evidence"] == "[2]" and expected["decisions"][0]["created_at"].tzinfo
    assert [d["candidate_experiment_id"] for d in expected["decisions"]] == [1, 1, 1, None]
    assert expected["statuses of 1"] == [("ok", 2), ("infeasible", 1), ("failed", 1)]
    assert [c["id"] for c in expected["first two candidates"]] == [1, 2]
    assert expected["experiment of 1"]["acceptance"] == [{"expr": "latency_cycles < baseline_latency_cycles",
                                                         "prose": "faster"}]
    assert [a["run_id"] for a in expected["artifacts of 1"]] == [None, None, 2]


def test_the_shared_sql_reads_alike_on_sqlite_and_postgresql(tmp_path, pg_url):  # noqa: F811
    seen = []
    for url in (tmp_path / "records.db", pg_url):
        with Store(url) as store:
            fill_more(store)
            got = reads_of(store)
        for rows in got.values():
            for row in [rows] if isinstance(rows, dict) else rows:
                if isinstance(row, dict) and "created_at" in row:
                    assert row["created_at"].utcoffset().total_seconds() == 0 or url == pg_url
                    row.pop("created_at")
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
    (upgraded), runs left running (reaped): the light read stands aside, the same output."""
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
                   ["show", "banks", "--db", running[i]]] for i, mode in enumerate(("light", "full"))}
    light, full = run_cli(repo, "light", runs["light"]), run_cli(repo, "full", runs["full"])
    for i, (quick, store) in enumerate(zip(light, full)):
        assert quick["light"] == [False], runs["light"][i]
        db_light, db_full = runs["light"][i][-1], runs["full"][i][-1]
        assert printed(quick, db_light) == printed(store, db_full), runs["light"][i]
    assert [r["code"] for r in light] == [2, 2, 2, 0, 0, 0]
    assert "an existing record store" in light[0]["err"] and "not a SQLite database" in light[1]["err"]
    assert "schema revision 0042" in light[2]["err"] and "upgrade dse" in light[2]["err"]
    assert "from 0010" in light[3]["out"] and "1 running" in light[5]["out"]
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
