"""`dse history` reads a SQLite store at the schema head with the standard library alone
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

from dse.records import Store
from dse.records.light import open_light

HEAVY = ("sqlalchemy", "pandas", "torch", "alembic")

# One CLI run in a fresh process: "light" as the CLI does it, "full" with the light read
# refused (the Store's path); stdout, stderr, exit code, whether the light read answered,
# and the modules loaded.
CLI = """
import contextlib, io, json, sys
import dse.records.light as light
mode, argv = sys.argv[1], sys.argv[2:]
answered, real = [], light.open_light
def open_light(db):
    found = None if mode == "full" else real(db)
    answered.append(found is not None)
    return found
light.open_light = open_light
from dse.cli import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = main(argv)
print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue(), "light": answered,
                  "modules": sorted(sys.modules)}))
"""


def run_cli(repo, mode: str, *argv) -> dict:
    p = subprocess.run([sys.executable, "-c", CLI, mode, *map(str, argv)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(repo)}, check=False)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def heavy(result: dict) -> set[str]:
    return {m for m in result["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)}


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
    return ids


@pytest.fixture
def rich(tmp_path):
    db = tmp_path / "records.db"
    with Store(db) as store:
        fill_more(store)
    return db


def reads_of(store) -> dict:
    return {"experiments": store.experiment_summaries(), "decisions": store.decision_rows(),
            "notes": store.notes(), "links": store.links()}


def test_history_reads_light_and_prints_what_the_store_path_prints(rich, repo, tmp_path):
    for argv in (["history", "--db", rich], ["history", "--decisions", "--db", rich]):
        light, full = run_cli(repo, "light", *argv), run_cli(repo, "full", *argv)
        assert light["light"] == [True] and full["light"] == [False]
        assert (light["out"], light["err"], light["code"]) == (full["out"], full["err"], full["code"])
        assert light["code"] == 0 and "banks-again" in light["out"] and "follows 1" in light["out"]
        assert "#2 accepted c2 by ana: faster, and fits [overriding the acceptance test" in light["out"]
        assert heavy(light) == set() and "sqlalchemy" in full["modules"]
    assert "proposed confirmed c2" in light["out"] and "(of experiment 1)" in light["out"]
    # the light read leaves nothing beside the store (no -wal, -shm)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.db"]


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


def test_the_shared_sql_reads_alike_on_sqlite_and_postgresql(tmp_path, pg_url):  # noqa: F811
    seen = []
    for url in (tmp_path / "records.db", pg_url):
        with Store(url) as store:
            fill_more(store)
            got = reads_of(store)
        for rows in got.values():
            for row in rows:
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


def copies(db, tmp_path, n: int = 2) -> list:
    out = []
    for i in range(n):
        folder = tmp_path / f"copy{i}"
        folder.mkdir()
        shutil.copy(db, folder / "records.db")
        out.append(folder / "records.db")
    return out


def same_as_the_store_path(repo, light_db, full_db, *argv, code: int) -> dict:
    light = run_cli(repo, "light", *argv, "--db", light_db)
    full = run_cli(repo, "full", *argv, "--db", full_db)
    assert light["light"] == [False]  # the light read stood aside
    assert (light["out"], light["err"].replace(str(light_db), "DB"), light["code"]) == (
        full["out"], full["err"].replace(str(full_db), "DB"), full["code"])
    assert light["code"] == code, light
    return light


def test_bad_stores_get_the_stores_own_message_and_exit_2(repo, tmp_path):
    missing = tmp_path / "missing.db"
    result = same_as_the_store_path(repo, missing, missing, "history", code=2)
    assert result["err"].startswith("dse: error: ") and "an existing record store" in result["err"]
    text = tmp_path / "notes.db"
    text.write_text("not a database\n" * 100)
    result = same_as_the_store_path(repo, text, text, "history", code=2)
    assert "not a SQLite database" in result["err"]
    assert not list(tmp_path.glob("*-wal")) and not list(tmp_path.glob("*-shm"))


def test_a_store_from_a_newer_dse_is_refused_as_before(repo, rich, tmp_path):
    with sqlite3.connect(rich) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0042'")
    connection.close()
    result = same_as_the_store_path(repo, rich, rich, "history", code=2)
    assert "schema revision 0042" in result["err"] and "upgrade dse" in result["err"]


def test_an_older_store_is_upgraded_by_the_store_path(repo, tmp_path):
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
    light_db, full_db = copies(db, tmp_path)
    result = same_as_the_store_path(repo, light_db, full_db, "history", code=0)
    assert "old" in result["out"] and "from 0010" in result["out"]
    with sqlite3.connect(light_db) as connection:  # upgraded by the Store's open
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() != [("0010",)]
    connection.close()


def test_runs_left_running_send_history_through_the_store(repo, rich, tmp_path):
    with Store(rich, heartbeat_interval=0) as store:
        store.start_run(3, "emulator")
    light_db, full_db = copies(rich, tmp_path)
    same_as_the_store_path(repo, light_db, full_db, "history", code=0)
