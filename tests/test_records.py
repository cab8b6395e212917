"""The record store suite, run against a real SQLite file and a real PostgreSQL server
(tests/pg.py starts a throwaway one): round trips, atomicity, migrations, crashed runs,
artifacts, imported evidence, comparisons and decisions."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from dse.errors import InputError
from dse.records import MetricIn, MetricRow, RecordNotFound, Store, blobs, canonical_json, content_hash
from dse.records.engine import make_engine, schema_is_current, upgrade_schema, writer_engine
from dse.records.opening import BadStore
from dse.records.schema import Base, utcnow
from dse.runner.decisions import decide
from dse.records.store import ABANDONED, SCHEMA_HEAD, alembic_config, database_url

ACCEPTANCE = [{"expr": "cycles_b < 0.95 * cycles_a", "prose": "20 banks at least 5% faster"}]
BASE_CONFIG = {"banks": {"count": 16, "rows": 1024}, "cores": 4}
BASE_MAPPING = {"tile": [16, 16], "dataflow": "ws"}


def new_experiment(store: Store, name: str = "banks-20-vs-16", spec_hash: str = "spec-1") -> int:
    return store.create_experiment(
        name=name,
        hypothesis="20 banks beat 16 for this decoder step",
        acceptance=ACCEPTANCE,
        workload_recipe="tiny_decoder",
        workload_hash="w" * 64,
        spec_text='name = "banks-20-vs-16"\n',
        spec_hash=spec_hash,
        limitations="toy workload",
        open_questions="does it hold at batch 8?",
    )


def with_banks(count: int) -> dict:
    return {**BASE_CONFIG, "banks": {**BASE_CONFIG["banks"], "count": count}}


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path, monkeypatch):
    """A new, empty store location: a SQLite file path, or a PostgreSQL database URL."""
    if request.param == "sqlite":
        return str(tmp_path / "records.db")
    monkeypatch.setenv("DSE_EVIDENCE_DIR", str(tmp_path / "evidence"))
    return request.getfixturevalue("pg_url")


@pytest.fixture
def sqlite_db(tmp_path):
    return tmp_path / "records.db"


@pytest.fixture
def store(db):
    with Store(db) as opened:
        yield opened


def engine_for(db):
    return create_engine(database_url(db))


def execute(db, sql: str, **params) -> None:
    engine = engine_for(db)
    try:
        with engine.begin() as connection:
            connection.execute(text(sql), params)
    finally:
        engine.dispose()


# ---- identity --------------------------------------------------------------------------


def test_canonical_json_and_content_hash_ignore_key_order():
    assert canonical_json({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert content_hash({"b": 1, "a": 2}) == content_hash({"a": 2, "b": 1})
    assert len(content_hash({})) == 64


# ---- connection setup ------------------------------------------------------------------


def test_sqlite_file_is_created_in_wal_mode_with_foreign_keys_on(sqlite_db):
    db = sqlite_db
    with Store(db) as store, store.engine.connect() as connection:
        assert db.exists()
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10000
        # a sweep's batch of thousands of candidates commits without a checkpoint in between
        assert connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 4096
        # and its pages stay in the page cache until the commit, not spilled into the WAL before
        assert connection.exec_driver_sql("PRAGMA cache_size").scalar() == 4096
    # WAL is a property of the file: a plain sqlite3 connection sees it too.
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # a new file's switch to WAL went without syncs; its connections then sync as any store's
    with Store(db) as store, store.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL


def test_a_new_file_whose_snapshot_is_declined_is_migrated_with_syncs(tmp_path):
    # (the schema made without syncs only when the snapshot makes it; the migrations after a
    # rollback, as before, and the connection back to NORMAL)
    engine = make_engine(database_url(tmp_path / "new.db"))
    try:
        offered = []
        upgrade_schema(writer_engine(engine), lambda connection: offered.append(1) or False)
        assert offered == [1, 1]  # the unsynced try, then the migrations' transaction
        assert schema_is_current(engine)
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    finally:
        engine.dispose()


def test_a_file_with_pages_switches_to_wal_keeping_them(tmp_path):
    db = tmp_path / "rollback.db"
    plain = sqlite3.connect(db)
    plain.execute("CREATE TABLE kept (x)")
    plain.execute("INSERT INTO kept VALUES (7)")
    plain.commit()
    plain.close()
    with pytest.raises(BadStore, match="holds other tables"):  # opened (so switched), not taken for a store
        Store(db)
    plain = sqlite3.connect(db)
    assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert plain.execute("SELECT x FROM kept").fetchall() == [(7,)]


def test_foreign_keys_are_enforced(store):
    with pytest.raises(KeyError, match="field 'candidate': got 999"):
        store.start_run(999, "analytical")
    with store.engine.connect() as connection, pytest.raises(IntegrityError):
        connection.exec_driver_sql(
            "INSERT INTO run_metrics (run_id, layout_id, figures) VALUES (999, 999, X'00')"
            if connection.dialect.name == "sqlite" else
            "INSERT INTO run_metrics (run_id, layout_id, figures) VALUES (999, 999, '\\x00')"
        )


# ---- writes, read back through a fresh Store -------------------------------------------


def test_experiment_round_trip_and_resume(db):
    with Store(db) as store:
        experiment_id = new_experiment(store)
    with Store(db) as store:
        record = store.experiment("banks-20-vs-16")
        assert store.experiment(experiment_id) == record
        assert new_experiment(store) == experiment_id  # same name, same spec: resume
        with pytest.raises(ValueError, match="taken by a different spec"):
            new_experiment(store, spec_hash="spec-2")
        assert len(store.experiments()) == 1
    assert record["id"] == experiment_id
    assert record["acceptance"] == ACCEPTANCE
    assert record["status"] == "proposed"
    assert record["limitations"] == "toy workload"
    assert record["open_questions"] == "does it hold at batch 8?"
    assert record["baseline_candidate_id"] is None
    assert record["created_at"].tzinfo is not None


def test_unknown_names_and_ids_are_input_errors_naming_what_exists(store):
    with pytest.raises(RecordNotFound, match="which has none yet"):
        store.experiment("nope")
    new_experiment(store)
    with pytest.raises(InputError) as caught:
        store.experiment("nope")
    assert caught.value.field == "experiment" and caught.value.value == "nope"
    assert "banks-20-vs-16" in caught.value.allowed
    assert "\n" not in str(caught.value)
    with pytest.raises(KeyError, match="got 42"):  # still a KeyError for Python callers
        store.candidates(42)
    assert store.experiment("1")["name"] == "banks-20-vs-16"  # an id typed as text
    for call in (lambda: store.candidate(7), lambda: store.compare(7, 8),
                 lambda: store.compare_metrics(7, 8)):  # fmt: skip
        with pytest.raises(RecordNotFound, match="a candidate id of this store"):
            call()
    with pytest.raises(RecordNotFound, match="field 'run'"):
        store.run(5)


def test_bad_enumerated_values_name_the_allowed_set(store):
    experiment_id = new_experiment(store)
    with pytest.raises(ValueError, match="allowed: proposed, testing, confirmed, refuted"):
        store.set_status(experiment_id, "done")
    with pytest.raises(ValueError, match="allowed: baseline, grid, sampler, hand"):
        store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "random")
    candidate_id, _ = store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
    with pytest.raises(ValueError, match="allowed: analytical, emulator, numerics, imported"):
        store.start_run(candidate_id, "rtl")
    with pytest.raises(ValueError, match="allowed: source_counts, analytical"):
        MetricIn("guess", "cycles", 1.0, "cycle")
    with pytest.raises(ValueError, match="scope_key"):
        MetricIn("analytical", "cycles", 1.0, "cycle", scope="op")
    with pytest.raises(ValueError, match="scope_key"):
        MetricIn("analytical", "cycles", 1.0, "cycle", scope_key="matmul")
    with pytest.raises(ValueError, match="acceptance"):
        store.create_experiment("x", "h", [{"expr": "a"}], "r", "w", "s", "sh")
    assert store.runs().empty


def test_status_and_baseline_round_trip(db):
    with Store(db) as store:
        experiment_id = new_experiment(store)
        baseline_id, _ = store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
        store.set_baseline(experiment_id, baseline_id)
        store.set_status(experiment_id, "testing")
        other_experiment = new_experiment(store, name="other")
        with pytest.raises(ValueError, match="belongs to experiment"):
            store.set_baseline(other_experiment, baseline_id)
    with Store(db) as store:
        record = store.experiment(experiment_id)
        assert record["status"] == "testing"
        assert record["baseline_candidate_id"] == baseline_id
        assert store.candidates(experiment_id)["is_baseline"].tolist() == [True]


def test_candidate_dedup_by_hash_and_diff_from_baseline(db):
    with Store(db) as store:
        experiment_id = new_experiment(store)
        baseline_id, created = store.add_candidate(
            experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline"
        )
        assert created
        store.set_baseline(experiment_id, baseline_id)
        candidate_id, created = store.add_candidate(
            experiment_id, with_banks(20), BASE_MAPPING, "grid"
        )
        assert created
    with Store(db) as store:
        # Same content, different key order and a tuple for a list: the same candidate.
        reordered = {"cores": 4, "banks": {"rows": 1024, "count": 20}}
        again = store.add_candidate(
            experiment_id, reordered, {"dataflow": "ws", "tile": (16, 16)}, "sampler"
        )
        assert again == (candidate_id, False)
        # The same content in another experiment is another candidate.
        elsewhere, created = store.add_candidate(
            new_experiment(store, name="other"), with_banks(20), BASE_MAPPING, "grid"
        )
        assert created and elsewhere != candidate_id
        frame = store.candidates("banks-20-vs-16")
    assert frame["id"].tolist() == [baseline_id, candidate_id]
    assert frame["origin"].tolist() == ["baseline", "grid"]
    assert frame["is_baseline"].tolist() == [True, False]
    row = frame.set_index("id").loc[candidate_id]
    assert row["hash"] == content_hash({"config": with_banks(20), "mapping": BASE_MAPPING})
    assert json.loads(row["config"]) == with_banks(20)
    assert json.loads(row["mapping"]) == BASE_MAPPING
    assert json.loads(row["diff"]) == {"config.banks.count": [16, 20]}
    assert pd.isna(row["status"])  # no run yet


def test_explicit_diff_is_kept(store):
    experiment_id = new_experiment(store)
    diff = {"mapping.tile": [[16, 16], [32, 8]]}
    candidate_id, _ = store.add_candidate(
        experiment_id, BASE_CONFIG, {"tile": [32, 8]}, "hand", diff=diff
    )
    assert json.loads(store.candidates(experiment_id)["diff"].iloc[0]) == diff


def test_run_round_trip_with_provenance(db):
    with Store(db) as store:
        experiment_id = new_experiment(store)
        candidate_id, _ = store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
        run_id = store.start_run(
            candidate_id,
            "emulator",
            seed=7,
            command="dse run experiments/banks.toml",
            model_version="analytical-3",
            emulator_version="emu-1",
        )
        store.heartbeat(run_id)
        store.finish_run(run_id, "infeasible", reason="needs 18 banks, chip has 16")
    with Store(db) as store:
        runs = store.runs(experiment="banks-20-vs-16")
        assert store.runs(candidate=candidate_id).equals(runs)
        assert store.runs(experiment=experiment_id).equals(runs)
    run = runs.iloc[0]
    assert run["id"] == run_id and run["candidate_id"] == candidate_id
    assert run["experiment_id"] == experiment_id
    assert (run["stage"], run["status"]) == ("emulator", "infeasible")
    assert run["reason"] == "needs 18 banks, chip has 16"
    assert run["seed"] == 7
    assert run["command"] == "dse run experiments/banks.toml"
    assert (run["model_version"], run["emulator_version"]) == ("analytical-3", "emu-1")
    assert run["host"]
    versions = json.loads(run["versions"])
    assert {"python", "allocator", "numpy", "pandas", "torch", "sqlalchemy", "optuna", "dse"} <= set(versions)
    assert versions["sqlalchemy"].startswith("2.0")
    assert run["started_at"] <= run["finished_at"]
    with Store(db) as store:  # DataFrame timestamps (parsed from text) equal the row's own
        single = store.run(run_id)
    assert run["started_at"] == single["started_at"] and run["finished_at"] == single["finished_at"]
    assert single["started_at"].microsecond == run["started_at"].microsecond
    assert str(run["started_at"].tz) == "UTC"


def test_run_is_visible_as_running_from_another_store(db):
    with Store(db) as writer, Store(db) as reader:
        experiment_id = new_experiment(writer)
        candidate_id, _ = writer.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
        run_id = writer.start_run(candidate_id, "analytical")
        assert reader.runs(candidate=candidate_id)["status"].tolist() == ["running"]
        assert reader.experiments()["n_running"].tolist() == [1]
        writer.finish_run(run_id, "ok", [MetricIn("analytical", "cycles", 10.0, "cycle")])
        assert reader.runs(candidate=candidate_id)["status"].tolist() == ["ok"]
        assert reader.metrics(experiment_id)["value"].tolist() == [10.0]


def test_finish_run_is_atomic(db):
    with Store(db) as store:
        experiment_id = new_experiment(store)
        candidate_id, _ = store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
        run_id = store.start_run(candidate_id, "analytical")
        cycles = MetricIn("analytical", "cycles", 10.0, "cycle")
        bad_scope = {"kind": "analytical", "name": "bytes", "value": 1.0, "unit": "B",
                     "scope": "chip", "scope_key": "0"}  # fmt: skip
        not_a_number = {"kind": "analytical", "name": "x", "value": math.nan, "unit": "cycle"}
        with pytest.raises(ValueError, match="allowed: ok, infeasible, pruned, failed, crashed"):
            store.finish_run(run_id, "done", [cycles])
        with pytest.raises(ValueError, match="allowed: ok"):
            store.finish_run(run_id, "running", [cycles])
        with pytest.raises(ValueError, match="allowed: total, op, core, ball, bank"):
            store.finish_run(run_id, "ok", [cycles, bad_scope])
        with pytest.raises(ValueError, match="given twice"):
            store.finish_run(run_id, "ok", [cycles, cycles])
        with pytest.raises(ValueError, match="NaN"):
            store.finish_run(run_id, "ok", [cycles, not_a_number])
    with Store(db) as store:
        assert store.runs()["status"].tolist() == ["running"]
        assert store.metrics(experiment_id).empty
        store.finish_run(run_id, "ok", [cycles])
        with pytest.raises(ValueError, match="already finished"):
            store.finish_run(run_id, "failed")
        assert store.metrics(experiment_id)["name"].tolist() == ["cycles"]


def test_failed_run_keeps_error_and_traceback(store):
    experiment_id = new_experiment(store)
    candidate_id, _ = store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
    run_id = store.start_run(candidate_id, "emulator")
    store.finish_run(run_id, "crashed", error="ZeroDivisionError: x", traceback="Traceback ...")
    run = store.runs().iloc[0]
    assert (run["status"], run["error"], run["traceback"]) == (
        "crashed", "ZeroDivisionError: x", "Traceback ...",
    )
    assert store.experiments()["n_crashed"].tolist() == [1]


def test_decision_round_trip(db):
    with Store(db) as store:
        experiment_id = new_experiment(store)
        candidate_id, _ = store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
        run_id = store.start_run(candidate_id, "analytical")
        store.finish_run(run_id, "ok")
        with pytest.raises(ValueError, match=r"runs \[999\] are not runs of experiment"):
            store.add_decision(experiment_id, "confirmed", "r", "ana", evidence=[999])
        store.add_decision(experiment_id, "inconclusive", "first look", "ana")
        decision_id = store.add_decision(
            experiment_id, "confirmed", "20 banks 7% faster", "ana", evidence=[run_id]
        )
    with Store(db) as store:
        decisions = store.decisions("banks-20-vs-16")
        assert store.decisions().equals(decisions)
        assert store.experiments()["latest_verdict"].tolist() == ["confirmed"]
    assert decisions["verdict"].tolist() == ["inconclusive", "confirmed"]
    last = decisions.iloc[-1]
    assert last["id"] == decision_id and last["author"] == "ana"
    assert last["rationale"] == "20 banks 7% faster"
    assert json.loads(last["evidence"]) == [run_id]


def test_experiments_summary_counts(store):
    experiment_id = new_experiment(store)
    new_experiment(store, name="empty")
    outcomes = [(16, "ok"), (20, "ok"), (24, "infeasible"), (28, "failed"), (32, "pruned")]
    for count, status in outcomes:
        candidate_id, _ = store.add_candidate(
            experiment_id, with_banks(count), BASE_MAPPING, "grid"
        )
        store.finish_run(store.start_run(candidate_id, "analytical"), status)
    summary = store.experiments().set_index("name")
    counts = ["n_candidates", "n_ok", "n_infeasible", "n_failed", "n_pruned", "n_running"]
    assert summary.loc["banks-20-vs-16", counts].tolist() == [5, 2, 1, 1, 1, 0]
    assert summary.loc["empty", counts].tolist() == [0, 0, 0, 0, 0, 0]
    assert summary.loc["empty", "latest_verdict"] is None


# ---- analysis reads --------------------------------------------------------------------


def test_metric_table_pivots_latest_run_per_candidate(store):
    experiment_id = new_experiment(store)
    a, _ = store.add_candidate(experiment_id, with_banks(16), BASE_MAPPING, "baseline")
    b, _ = store.add_candidate(experiment_id, with_banks(20), BASE_MAPPING, "grid")
    c, _ = store.add_candidate(experiment_id, with_banks(64), BASE_MAPPING, "grid")

    def analytical(candidate, cycles, dram_bytes, version="m1"):
        run_id = store.start_run(candidate, "analytical", model_version=version)
        store.finish_run(run_id, "ok", [
            MetricIn("analytical", "cycles", cycles, "cycle"),
            MetricIn("analytical", "dram_bytes", dram_bytes, "B"),
            MetricIn("analytical", "cycles", cycles / 2, "cycle", scope="op", scope_key="matmul"),
            MetricIn("analytical", "cycles", cycles / 4, "cycle", scope="op", scope_key="softmax"),
        ])
        return run_id

    analytical(a, 1000, 4096, version="m0")
    rerun = analytical(a, 900, 4000)  # a newer estimate supersedes the older one
    analytical(b, 800, 5000)
    store.finish_run(
        store.start_run(b, "emulator"), "ok", [MetricIn("emulator_cycles", "cycles", 850, "cycle")]
    )
    store.finish_run(store.start_run(c, "analytical"), "infeasible", reason="needs 64 banks")

    table = store.metric_table(experiment_id, "analytical")
    assert table["candidate_id"].tolist() == [a, b, c]
    assert table.columns[-2:].tolist() == ["cycles", "dram_bytes"]
    assert table["cycles"].tolist()[:2] == [900.0, 800.0]
    assert table["dram_bytes"].tolist()[:2] == [4000.0, 5000.0]
    assert table[["cycles", "dram_bytes"]].iloc[2].isna().all()
    # status and stage of each candidate's latest run in the stage producing this kind: b's
    # later emulator run does not stand in for its analytical outcome
    assert table["status"].tolist() == ["ok", "ok", "infeasible"]
    assert table["stage"].tolist() == ["analytical", "analytical", "analytical"]
    assert table["reason"].tolist()[2] == "needs 64 banks"
    assert table["metric_run_id"].tolist()[0] == rerun
    assert table["model_version"].tolist()[:2] == ["m1", "m1"]
    assert table["is_baseline"].tolist() == [False, False, False]

    emulated = store.metric_table(experiment_id, "emulator_cycles")
    assert emulated["cycles"].tolist()[1] == 850.0
    assert emulated["cycles"].isna().tolist() == [True, False, True]
    assert emulated["stage"].tolist()[1] == "emulator" and emulated["status"].isna().tolist() == [True, False, True]
    assert store.candidates(experiment_id)["stage"].tolist() == ["analytical", "emulator", "analytical"]

    per_op = store.metric_table(experiment_id, "analytical", scope="op").dropna(subset=["cycles"])
    assert per_op[["candidate_id", "scope_key", "cycles"]].values.tolist() == [
        [a, "matmul", 450.0], [a, "softmax", 225.0], [b, "matmul", 400.0], [b, "softmax", 200.0],
    ]

    long = store.metrics(experiment_id, kind="emulator_cycles")
    assert long.columns[:9].tolist() == [
        "candidate_id", "run_id", "stage", "kind", "name", "value", "unit", "scope", "scope_key",
    ]
    assert long[["candidate_id", "stage", "value"]].values.tolist() == [[b, "emulator", 850.0]]


def test_compare_shows_only_differing_fields(store):
    experiment_id = new_experiment(store)
    a, _ = store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
    b, _ = store.add_candidate(
        experiment_id, with_banks(20), {**BASE_MAPPING, "tile": [32, 8]}, "hand"
    )
    for candidate, cycles in [(a, 1000.0), (b, 800.0)]:
        store.finish_run(store.start_run(candidate, "analytical"), "ok", [
            MetricIn("analytical", "cycles", cycles, "cycle"),
            MetricIn("analytical", "sram_rows", 64.0, "row"),  # equal: not shown
        ])
    frame = store.compare(a, b)
    assert frame.columns.tolist() == ["field", "a", "b"]
    assert frame.values.tolist() == [
        ["config.banks.count", 16, 20],
        ["mapping.tile", [16, 16], [32, 8]],
        ["analytical:cycles", 1000.0, 800.0],
    ]
    assert store.compare(a, a).empty
    with pytest.raises(KeyError, match="got 99; allowed: a candidate id of this store"):
        store.compare(a, 99)


# ---- the PostgreSQL fixture itself -------------------------------------------------------


@pytest.mark.parametrize("ci, outcome", [("", "1 skipped"), ("true", "1 error")])
def test_without_postgresql_binaries_tests_skip_but_fail_under_ci(tmp_path, ci, outcome):
    import subprocess
    import sys

    probe = tmp_path / "test_probe.py"
    probe.write_text("from pg import pg_server, pg_url\n\ndef test_needs_pg(pg_url):\n    pass\n")
    env = {**os.environ, "CI": ci, "DSE_PG_BIN": str(tmp_path / "none"),
           "PYTHONPATH": str(Path(__file__).parent)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(probe)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )
    assert outcome in done.stdout, done.stdout
    assert "no PostgreSQL server binaries" in done.stdout


# ---- migrations ------------------------------------------------------------------------


def schema_diff(url: str) -> list:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()


def current_revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def test_schema_head_constant_is_the_newest_migration():
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert SCHEMA_HEAD == head


def test_a_store_made_at_0001_with_records_opens_and_upgrades(db):
    """Records written by the first schema survive the upgrade and read back through
    today's API; the new columns are empty, and a run left running then is crashed."""
    url = database_url(db)
    command.upgrade(alembic_config(url), "0001")
    assert current_revision(url) == "0001"
    long_ago = utcnow() - timedelta(hours=2)
    execute(
        db,
        "INSERT INTO experiment (id, name, hypothesis, status, acceptance, workload_recipe, "
        "workload_hash, spec_text, spec_hash, limitations, open_questions, created_at) VALUES "
        "(1, 'old', 'h', 'testing', '[]', 'gemm', 'w', 's', 'sh', '', '', :t)",
        t=long_ago,
    )
    execute(
        db,
        "INSERT INTO candidate (id, experiment_id, hash, config, mapping, origin, diff, created_at) "
        "VALUES (1, 1, 'c1', '{\"banks\": 16}', '{}', 'baseline', '{}', :t)",
        t=long_ago,
    )
    for run_id, status in [(1, "ok"), (2, "running")]:
        execute(
            db,
            "INSERT INTO run (id, candidate_id, stage, status, started_at, heartbeat_at, host, "
            "versions, command, model_version) VALUES "
            "(:id, 1, 'analytical', :status, :t, :t, 'elsewhere', '{}', 'dse sweep', 'm0')",
            id=run_id, status=status, t=long_ago,
        )  # fmt: skip
    execute(
        db,
        "INSERT INTO metric (run_id, kind, name, value, unit, scope, scope_key) "
        "VALUES (1, 'analytical', 'latency_cycles', 1234.0, 'cycles', 'total', '')",
    )
    execute(
        db,
        "INSERT INTO decision (experiment_id, verdict, rationale, author, created_at, evidence) "
        "VALUES (1, 'confirmed', 'why', 'ana', :t, '[ 1 ]')",
        t=long_ago,
    )
    with Store(db) as store:
        assert current_revision(url) == SCHEMA_HEAD
        assert store.metric_table("old", "analytical")["latency_cycles"].tolist() == [1234.0]
        runs = store.runs("old").set_index("id")
        assert runs.loc[1, "status"] == "ok" and pd.isna(runs.loc[1, "pid"])
        assert runs.loc[2, "status"] == "crashed"
        assert runs.loc[2, "error"].startswith(ABANDONED + "no heartbeat")
        decisions = store.decisions("old")
        assert decisions["verdict"].tolist() == ["confirmed"]
        assert decisions["candidate_id"].isna().all()
        assert store.candidate(1)["config"] == {"banks": 16}
        # Older JSON text was rewritten in canonical form, as the store now writes it.
        assert store.candidates("old")["config"].tolist() == ['{"banks":16}']
        assert store.decisions("old")["evidence"].tolist() == ["[1]"]
    assert schema_diff(url) == []


def test_models_match_the_migrated_schema(db):
    url = database_url(db)
    Store(db).close()
    assert schema_diff(url) == []
    # The comparison is not vacuous: an older schema differs from the models.
    command.downgrade(alembic_config(url), "0001")
    assert schema_diff(url) != []
    command.downgrade(alembic_config(url), "base")
    command.upgrade(alembic_config(url), "head")
    assert schema_diff(url) == []


def test_store_refuses_a_database_from_a_newer_schema(db):
    Store(db).close()
    execute(db, "UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(InputError, match="schema revision 9999 is from a newer dse: upgrade dse"):
        Store(db)


def test_two_stores_on_one_new_database(db):
    first, second = Store(db), Store(db)
    try:
        experiment_id = new_experiment(first)
        assert new_experiment(second) == experiment_id
        candidate, _ = second.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
        assert first.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "grid") == (
            candidate, False,
        )
    finally:
        first.close()
        second.close()


# ---- runs whose process died -----------------------------------------------------------


def one_candidate(store: Store) -> tuple[int, int]:
    experiment_id = new_experiment(store)
    candidate_id, _ = store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
    return experiment_id, candidate_id


def test_a_run_of_a_live_process_stays_running_on_open(db):
    with Store(db) as store:
        _, candidate_id = one_candidate(store)
        run_id = store.start_run(candidate_id, "analytical")
        with Store(db) as other:  # this very process is alive: nothing to reap
            assert other.runs()["status"].tolist() == ["running"]
        run = store.run(run_id)
        assert run["pid"] == os.getpid() and run["pid_start"]
        store.finish_run(run_id, "ok")


def test_a_run_of_a_gone_process_on_this_host_is_crashed_on_open(db):
    with Store(db) as store:
        _, candidate_id = one_candidate(store)
        run_id = store.start_run(candidate_id, "emulator")
    # Same pid, another start time: the process that wrote the row is gone (pid reused).
    execute(db, "UPDATE run SET pid_start = 'another-boot:1' WHERE id = :id", id=run_id)
    with Store(db) as store:
        run = store.run(run_id)
        assert run["status"] == "crashed"
        assert run["error"].startswith(f"{ABANDONED}process {os.getpid()} on ")
        assert run["finished_at"] >= run["started_at"]
        assert store.experiments()["n_crashed"].tolist() == [1]
        # The process was only unseen after all: its late finish is kept.
        store.finish_run(run_id, "ok", [MetricIn("emulator_cycles", "cycles", 5.0, "cycles")])
        assert store.run(run_id)["status"] == "ok"
        with pytest.raises(ValueError, match="already finished"):
            store.finish_run(run_id, "failed")


def test_a_run_from_another_host_is_crashed_only_when_its_heartbeat_is_stale(db):
    with Store(db) as store:
        _, candidate_id = one_candidate(store)
        run_id = store.start_run(candidate_id, "emulator")
    execute(db, "UPDATE run SET host = 'far-away', pid = 1 WHERE id = :id", id=run_id)
    with Store(db, stale_after=600) as store:
        assert store.run(run_id)["status"] == "running"  # beat a moment ago
    execute(db, "UPDATE run SET heartbeat_at = :t WHERE id = :id",
            id=run_id, t=utcnow() - timedelta(minutes=11))  # fmt: skip
    with Store(db, stale_after=600) as store:
        run = store.run(run_id)
    assert run["status"] == "crashed"
    assert "no heartbeat from process 1 on far-away" in run["error"]


def test_the_heartbeat_thread_keeps_a_long_run_fresh(db):
    with Store(db, heartbeat_interval=0.05) as store:
        _, candidate_id = one_candidate(store)
        run_id = store.start_run(candidate_id, "emulator")
        first = store.run(run_id)["heartbeat_at"]
        for _ in range(100):
            if store.run(run_id)["heartbeat_at"] > first:
                break
            time.sleep(0.02)
        assert store.run(run_id)["heartbeat_at"] > first
        store.finish_run(run_id, "ok")


# ---- artifacts ---------------------------------------------------------------------------


def test_artifacts_are_content_addressed_files_written_before_their_rows(store, tmp_path):
    experiment_id, candidate_id = one_candidate(store)
    run_id = store.start_run(candidate_id, "emulator")
    trace = tmp_path / "trace.ndjson"
    trace.write_bytes(b'{"event":"ball"}\n')
    ref = store.put_artifact(trace, role="trace", run_id=run_id)
    again = store.put_artifact(b'{"event":"ball"}\n', role="outputs", experiment_id=experiment_id)
    assert ref.sha256 == again.sha256 == content_sha(b'{"event":"ball"}\n')
    assert ref.path == again.path == store.artifact_path(ref.sha256)
    assert ref.path.parent.name == ref.sha256[:2] and ref.path.read_bytes() == trace.read_bytes()
    assert not list(ref.path.parent.parent.glob(".incoming-*"))  # no temp file left
    table = store.artifacts(experiment_id)
    assert table["role"].tolist() == ["trace", "outputs"]
    assert table["run_id"].tolist()[0] == run_id and pd.isna(table["run_id"].tolist()[1])
    assert table["candidate_id"].tolist()[0] == candidate_id
    assert table["media_type"].tolist()[0] == "application/x-ndjson"
    assert table["name"].tolist()[0] == str(trace)
    assert table["path"].tolist()[0] == str(ref.path)
    assert store.artifacts(run=run_id)["id"].tolist() == [ref.id]
    with pytest.raises(ValueError, match="allowed: graph_dump, trace"):
        store.put_artifact(trace, role="junk", run_id=run_id)
    with pytest.raises(RecordNotFound):
        store.put_artifact(trace, role="trace", run_id=999)
    assert len(store.artifacts()) == 2


def test_artifacts_written_together_are_the_rows_and_files_one_by_one_makes(store):
    """`put_artifacts` (a sweep's frontend dumps): each file content-addressed and placed,
    its row with its name and media type, in one transaction; a bad owner or role writes
    neither files nor rows."""
    experiment_id, _ = one_candidate(store)
    items = [(b"graph 0\n", "frontend/01-import.txt"), (b"graph 1\n", "frontend/02-fold.txt"),
             (b"graph 0\n", "frontend/03-same.txt")]
    refs = store.put_artifacts(items, role="graph_dump", experiment_id=experiment_id)
    assert [r.sha256 for r in refs] == [content_sha(data) for data, _ in items] and refs[0].path == refs[2].path
    assert all(r.path == store.artifact_path(r.sha256) and r.path.read_bytes() == data
               for r, (data, _) in zip(refs, items))
    assert not list(refs[0].path.parent.parent.glob(".incoming-*"))  # no temp file left
    table = store.artifacts(experiment_id).sort_values("id")
    assert table["id"].tolist() == [r.id for r in refs] and table["role"].tolist() == ["graph_dump"] * 3
    assert table["name"].tolist() == [name for _, name in items] and set(table["media_type"]) == {"text/plain"}
    assert not store.check_evidence(experiment_id).bad
    root = refs[0].path.parent.parent
    files = sorted(p for p in root.rglob("*") if p.is_file())
    with pytest.raises(RecordNotFound):
        store.put_artifacts([(b"never kept", "x.txt")], role="graph_dump", run_id=999)
    with pytest.raises(ValueError, match="allowed: graph_dump, trace"):
        store.put_artifacts([(b"never kept", "x.txt")], role="junk", experiment_id=experiment_id)
    assert sorted(p for p in root.rglob("*") if p.is_file()) == files and len(store.artifacts()) == 3


def test_evidence_files_synced_together_say_a_failed_sync_and_work_in_a_forked_child(tmp_path):
    """The files (and folders) of `put_artifacts` are synced together by a few threads: a
    sync that fails is raised once all have ended; a child forked after the threads
    started makes its own (a parent's pool has no threads in the child: it would hang)."""

    there = tmp_path / "there"
    there.write_bytes(b"x")
    with pytest.raises(FileNotFoundError):
        blobs._together(blobs._fsync_file, [there, tmp_path / "missing", there])
    blobs._together(blobs._fsync_file, [there, there])  # the threads are started now
    pid = os.fork()
    if pid == 0:  # the child: a whole batch of evidence files written and placed
        code = 1
        try:
            with blobs.writing_blobs(tmp_path / "evidence", [b"one", b"two", b"three"]) as pending:
                pass
            code = 0 if all(p.path.read_bytes() for p in pending) else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while (ended := os.waitpid(pid, os.WNOHANG)) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's evidence write hung")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(ended[1]) == 0


def content_sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_sqlite_evidence_lives_beside_the_database(sqlite_db):
    with Store(sqlite_db) as store:
        assert store.evidence_dir == sqlite_db.parent / "records.db.evidence"


# ---- imported evidence, comparisons with kinds, decisions -----------------------------

PMCTRACE = "\n".join([
    '{"type":"itrace","clk":90,"event":"issue","rob_id":3}',
    '{"type":"pmctrace","clk":500,"event":"ball","ball_id":0,"rob_id":3,"elapsed":400}',
    '{"type":"pmctrace","clk":700,"event":"ball","ball_id":0,"rob_id":4,"elapsed":250}',
    '{"type":"pmctrace","clk":650,"event":"ball","ball_id":2,"rob_id":5,"elapsed":50}',
    '{"type":"pmctrace","clk":120,"event":"load","rob_id":1,"elapsed":20}',
    '{"type":"pmctrace","clk":760,"event":"store","rob_id":6,"elapsed":60}',
    "",
])  # fmt: skip


def test_imported_rtl_cycles_stay_their_own_kind(store, tmp_path):
    experiment_id, candidate_id = one_candidate(store)
    emulated = store.start_run(candidate_id, "emulator", emulator_version="emu-1")
    store.finish_run(emulated, "ok", [MetricIn("emulator_cycles", "latency_cycles", 600.0, "cycles")])
    trace = tmp_path / "bdb.ndjson"
    trace.write_text(PMCTRACE)
    imported = store.import_evidence(candidate_id, "rtl_cycles", trace, note="verilator 5.0")
    assert imported.format == "pmctrace" and imported.summary["other_lines_skipped"] == 1
    assert imported.artifact.path.read_text() == PMCTRACE
    run = store.run(imported.run_id)
    assert (run["stage"], run["status"], run["candidate_id"]) == ("imported", "ok", candidate_id)
    assert run["versions"]["evidence_source"] == "verilator 5.0"
    rtl = store.metric_table(experiment_id, "rtl_cycles")
    # First issue at 120 - 20 = 100, last completion at 760.
    assert rtl["latency_cycles"].tolist() == [660.0]
    assert rtl[["ball_busy_cycles", "ball_ops", "load_ops", "store_busy_cycles"]].values.tolist() == [
        [700.0, 3.0, 1.0, 60.0]
    ]
    per_ball = store.metric_table(experiment_id, "rtl_cycles", scope="ball")
    assert per_ball[["scope_key", "busy_cycles", "ops", "max_op_cycles"]].values.tolist() == [
        ["0", 650.0, 2.0, 400.0], ["2", 50.0, 1.0, 50.0],
    ]
    # The emulator's figure is untouched and apart.
    assert store.metric_table(experiment_id, "emulator_cycles")["latency_cycles"].tolist() == [600.0]
    kinds = store.metrics(experiment_id).groupby("kind")["run_id"].unique()
    assert kinds["rtl_cycles"].tolist() == [imported.run_id]
    assert kinds["emulator_cycles"].tolist() == [emulated]
    assert store.artifacts(run=imported.run_id)["role"].tolist() == ["trace"]


def test_a_bad_evidence_file_or_target_writes_nothing(store, tmp_path):
    experiment_id, candidate_id = one_candidate(store)
    bad = tmp_path / "bad.ndjson"
    bad.write_text(PMCTRACE + '{"type":"pmctrace","event":"ball","rob_id":1,"elapsed":-3}\n')
    good = tmp_path / "good.ndjson"
    good.write_text(PMCTRACE)
    cases = [
        (lambda: store.import_evidence(candidate_id, "rtl_cycles", bad), "line 7: elapsed"),
        (lambda: store.import_evidence(candidate_id, "emulator_cycles", good), "--kind"),
        (lambda: store.import_evidence(999, "rtl_cycles", good), "candidate"),
        (lambda: store.import_evidence(candidate_id, "fpga_cycles", tmp_path / "nope.csv"), "FILE"),
    ]
    for call, field in cases:
        with pytest.raises(InputError) as caught:
            call()
        assert caught.value.field == field
    assert len(store.runs()) == 0 and store.metrics(experiment_id).empty
    assert len(store.artifacts()) == 0
    assert not store.evidence_dir.exists() or not any(store.evidence_dir.rglob("*"))


def test_compare_metrics_keeps_kinds_apart_with_deltas_and_versions(store, tmp_path):
    experiment_id = new_experiment(store)
    a, _ = store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
    b, _ = store.add_candidate(experiment_id, with_banks(20), BASE_MAPPING, "grid")
    for candidate, cycles, version in [(a, 1000.0, "m1"), (b, 800.0, "m2")]:
        run_id = store.start_run(candidate, "analytical", model_version=version)
        store.finish_run(run_id, "ok", [
            MetricIn("analytical", "latency_cycles", cycles, "cycles"),
            MetricIn("analytical", "dma_bytes", 64.0, "bytes"),
        ])  # fmt: skip
    measured = tmp_path / "fpga.csv"
    measured.write_text("name,value,unit\nlatency_cycles,1100,cycles\n")
    store.import_evidence(b, "fpga_cycles", measured)
    table = store.compare_metrics(a, b)
    rows = {(r["kind"], r["name"]): r for r in table.to_dict("records")}
    assert set(rows) == {
        ("analytical", "latency_cycles"), ("analytical", "dma_bytes"),
        ("fpga_cycles", "latency_cycles"),
    }  # fmt: skip
    analytical = rows[("analytical", "latency_cycles")]
    assert (analytical["a"], analytical["b"], analytical["delta"]) == (1000.0, 800.0, -200.0)
    assert analytical["ratio"] == pytest.approx(0.8)
    assert (analytical["model_version_a"], analytical["model_version_b"]) == ("m1", "m2")
    assert rows[("analytical", "dma_bytes")]["delta"] == 0.0
    fpga = rows[("fpga_cycles", "latency_cycles")]
    assert math.isnan(fpga["a"]) and fpga["b"] == 1100.0 and math.isnan(fpga["delta"])
    assert table["kind"].tolist()[:2] == ["analytical", "analytical"]  # kinds in METRIC_KINDS order
    # compare() keeps "kind:name" fields apart too.
    assert {"analytical:latency_cycles", "fpga_cycles:latency_cycles"} <= set(store.compare(a, b)["field"])


def test_decide_accepts_or_rejects_a_candidate_with_its_evidence(store):
    experiment_id = new_experiment(store)
    base, _ = store.add_candidate(experiment_id, BASE_CONFIG, BASE_MAPPING, "baseline")
    store.set_baseline(experiment_id, base)
    other, _ = store.add_candidate(experiment_id, with_banks(20), BASE_MAPPING, "grid")
    base_run = store.start_run(base, "analytical")
    store.finish_run(base_run, "ok")
    other_run = store.start_run(other, "analytical")
    store.finish_run(other_run, "ok")
    store.start_run(other, "emulator")  # still running: not evidence
    # This experiment's criterion names no metric the store knows: accepting needs an override.
    with pytest.raises(InputError, match="acceptance\\[0\\] `cycles_b < 0.95 \\* cycles_a` cannot be evaluated"):
        decide(store, "banks-20-vs-16", other, "ana", "7% faster, fits")
    decision_id = decide(store, "banks-20-vs-16", other, "ana", "7% faster, fits",
                         override="criterion predates the metric names").decision_id
    decide(store, experiment_id, base, "bo", "slower", verdict="rejected")
    decisions = store.decisions(experiment_id)
    assert decisions["id"].tolist()[0] == decision_id
    assert decisions["verdict"].tolist() == ["accepted", "rejected"]
    assert decisions["kind"].tolist() == ["decision", "decision"]
    assert decisions["override"].tolist()[0] == "criterion predates the metric names"
    assert decisions["candidate_id"].tolist() == [other, base]
    assert json.loads(decisions["evidence"].iloc[0]) == [base_run, other_run]
    assert json.loads(decisions["evidence"].iloc[1]) == [base_run]
    summary = store.experiments().iloc[0]
    assert (summary["latest_verdict"], summary["latest_candidate_id"]) == ("rejected", base)
    # A candidate of another experiment may be named; its runs are evidence too.
    third = new_experiment(store, name="other")
    elsewhere = store.add_candidate(third, BASE_CONFIG, {}, "hand")[0]
    elsewhere_run = store.start_run(elsewhere, "analytical")
    store.finish_run(elsewhere_run, "ok")
    result = decide(store, experiment_id, elsewhere, "ana", "same chip, earlier sweep", override="as above")
    assert result.candidate_experiment == "other" and result.evidence == [base_run, elsewhere_run]
    assert store.decisions(experiment_id)["candidate_experiment_id"].tolist()[-1] == third
    with pytest.raises(InputError, match="--why"):
        decide(store, experiment_id, other, "ana", "  ")
    with pytest.raises(RecordNotFound, match="candidate"):
        decide(store, experiment_id, 999, "ana", "why")
    fourth = store.add_candidate(new_experiment(store, name="fourth"), BASE_CONFIG, {}, "hand")[0]
    fourth_run = store.start_run(fourth, "analytical")
    with pytest.raises(ValueError, match="are not runs of experiment"):
        store.add_decision(experiment_id, "accepted", "x", "ana", [fourth_run], candidate_id=elsewhere)
    assert len(store.decisions(experiment_id)) == 3


# ---- text round trips ------------------------------------------------------------------

NASTY = [
    "it's \"quoted\" `back` 'single'",
    "Robert'); DROP TABLE experiment;--",
    "%s %(x)s %% {0} $1 ? :name \\ \\n",
    "ünïcödé ✓ 漢字 🚀 עברית e\u0301 \u200b \U0001f9ea",
    "line1\r\nline2\tTab\x7f",
    "x" * 1_000_000 + "end",
]


def test_text_round_trips_unchanged(db):
    long_text = NASTY[-1]
    with Store(db) as store:
        experiment_id = store.create_experiment(
            name=NASTY[1], hypothesis=" | ".join(NASTY), acceptance=[{"expr": NASTY[2], "prose": NASTY[3]}],
            workload_recipe=NASTY[0], workload_hash="w", spec_text=long_text, spec_hash="s",
            limitations=NASTY[4], open_questions=NASTY[3],
        )  # fmt: skip
        config = {NASTY[0]: NASTY[1], "nested": {NASTY[3]: [NASTY[2], long_text]}}
        candidate_id, _ = store.add_candidate(experiment_id, config, {"k": NASTY[4]}, "hand")
        run_id = store.start_run(candidate_id, "numerics", command=NASTY[2])
        store.finish_run(
            run_id, "failed",
            [MetricIn("numerics", NASTY[3], 1.5, NASTY[0], scope="op", scope_key=NASTY[1])],
            reason=NASTY[0], error=NASTY[1], traceback=long_text,
        )  # fmt: skip
        store.add_decision(experiment_id, NASTY[3], long_text, NASTY[0], [run_id])
    with Store(db) as store:
        record = store.experiment(NASTY[1])
        assert record["hypothesis"] == " | ".join(NASTY)
        assert record["acceptance"] == [{"expr": NASTY[2], "prose": NASTY[3]}]
        assert (record["spec_text"], record["limitations"]) == (long_text, NASTY[4])
        assert store.candidate(candidate_id)["config"] == config
        assert json.loads(store.candidates(experiment_id)["config"].iloc[0]) == config
        assert store.candidate(candidate_id)["hash"] == content_hash(
            {"config": config, "mapping": {"k": NASTY[4]}}
        )
        run = store.run(run_id)
        assert (run["command"], run["reason"], run["error"], run["traceback"]) == (
            NASTY[2], NASTY[0], NASTY[1], long_text,
        )
        metric = run["metrics"].iloc[0]
        assert (metric["name"], metric["unit"], metric["scope_key"]) == (NASTY[3], NASTY[0], NASTY[1])
        decision = store.decisions(NASTY[1]).iloc[0]
        assert (decision["verdict"], decision["rationale"], decision["author"]) == (
            NASTY[3], long_text, NASTY[0],
        )
        assert len(store.experiments()) == 1  # the DROP TABLE stayed text


def test_batched_writes_match_single_writes(tmp_path):
    """add_candidates / start_runs / finish_runs: one transaction each, same rows as one by one."""
    from dse.records import Store

    with Store(tmp_path / "b.db") as store:
        exp = store.create_experiment("e", "h", [], "r", "rh", "spec", "sh")
        rows = [dict(config={"i": i % 3}, mapping={"w": 1}, origin="grid", diff={}) for i in range(5)]
        got = store.add_candidates(exp, rows)
        # three distinct hashes; repeats inside the batch return the first id, not created
        assert [created for _, created in got] == [True, True, True, False, False]
        assert got[3][0] == got[0][0] and got[4][0] == got[1][0]
        again = store.add_candidates(exp, rows[:2])
        assert again == [(got[0][0], False), (got[1][0], False)]
        ids = [got[i][0] for i in range(3)]
        runs = store.start_runs(ids, "analytical", seed=7, model_version="m")
        assert list(store.runs(exp)["status"]) == ["running"] * 3
        metrics = [dict(kind="analytical", name="latency_cycles", value=10.0 * k, unit="cycles") for k in range(3)]
        with pytest.raises(ValueError):  # a bad status anywhere: nothing of the batch is written
            store.finish_runs([dict(run_id=runs[0], status="ok", metrics=[metrics[0]]),
                               dict(run_id=runs[1], status="bogus")])
        assert list(store.runs(exp)["status"]) == ["running"] * 3 and store.metrics(exp).empty
        store.finish_runs([dict(run_id=r, status="ok", metrics=[m]) for r, m in zip(runs, metrics)])
        table = store.metric_table(exp, "analytical").set_index("candidate_id")
        assert [table.loc[i, "latency_cycles"] for i in ids] == [0.0, 10.0, 20.0]
        with pytest.raises(ValueError, match="already finished"):
            store.finish_runs([dict(run_id=runs[0], status="ok")])


def test_a_batch_start_finishes_the_previous_batch_and_sets_the_baseline_in_one_transaction(db):
    """The sweep's one transaction per batch: the previous batch's results, this batch's
    candidates and runs, the baseline; a bad result anywhere writes none of it."""

    with Store(db) as store:
        exp = new_experiment(store)
        rows = [dict(config=with_banks(n), mapping=BASE_MAPPING, origin="grid", diff={}) for n in (8, 16)]
        first = store.add_candidates_and_start_runs(exp, rows, "analytical", baseline=True)
        assert [made for _, made, _ in first] == [True, True]
        assert store.experiment(exp)["baseline_candidate_id"] == first[0][0]
        (c1, _, r1), (c2, _, r2) = first
        done = [dict(run_id=r1, status="ok", metrics=[MetricRow("analytical", "latency_cycles", 10, "cycles"),
                                                      MetricRow("analytical", "cycles", 4.0, "cycles", "op", "mm")]),
                dict(run_id=r2, status="infeasible", reason="too few banks")]
        # One known hash and one new: the known one keeps its id and is not created again.
        more = [dict(config=with_banks(16), mapping=BASE_MAPPING, origin="grid", diff={}),
                dict(config=with_banks(32), mapping=BASE_MAPPING, origin="grid", diff={})]
        bad_batches = [
            [dict(run_id=r1, status="ok", metrics=[MetricRow("analytical", "x", math.nan, "cycles")])],
            [dict(run_id=r1, status="ok", metrics=[MetricRow("analytical", "x", 1.0, "cycles")] * 2)],
            [dict(run_id=r1, status="ok", metrics=[MetricRow("rtl", "x", 1.0, "cycles")])],
            [dict(run_id=r1, status="ok", metrics=[MetricRow("analytical", "x", 1.0, "cycles", "op")])],
            [dict(run_id=r1, status="ok", metrics=[MetricRow("analytical", "x", "many", "cycles")])],
            [dict(run_id=r1, status="ok", metrics=[MetricRow("analytical", None, 1.0, "cycles")])],
            [dict(run_id=r1, status="ok"), dict(run_id=r1 + 99, status="ok")],
        ]
        errors = ["NaN", "given twice", "got 'rtl'; allowed: source_counts, analytical", "scope_key", "'many'",
                  "name: must not be empty", f"'run': got {r1 + 99}"]
        for bad, error in zip(bad_batches, errors):
            with pytest.raises((ValueError, RecordNotFound), match=error) as raised:
                store.add_candidates_and_start_runs(exp, more, "analytical", finish=bad)
            assert str(raised.value).startswith(f"run {r1}: ") or "'run'" in error  # names the run
        assert len(store.candidates(exp)) == 2 and set(store.runs(exp)["status"]) == {"running"}
        assert store.metrics(exp).empty
        second = store.add_candidates_and_start_runs(exp, more, "analytical", finish=done)
        assert [(cid, made) for cid, made, _ in second] == [(c2, False), (c2 + 1, True)]
        runs = store.runs(exp).set_index("id")
        assert runs.loc[[r1, r2], "status"].tolist() == ["ok", "infeasible"]
        assert runs.loc[[r for _, _, r in second], "status"].tolist() == ["running", "running"]
        metrics = store.metrics(exp)
        assert metrics[["name", "value", "scope_key"]].values.tolist() == [
            ["latency_cycles", 10.0, ""], ["cycles", 4.0, "mm"]]
        assert store.experiment(exp)["baseline_candidate_id"] == c1
        with pytest.raises(ValueError, match="already finished"):
            store.add_candidates_and_start_runs(exp, more, "analytical", finish=done[:1])
        assert len(store.runs(exp)) == 4


def test_a_batch_written_finished_holds_what_starting_then_finishing_it_holds(db):
    """The sweep's analytical batch in one write (`add_candidates_with_finished_runs`): the
    same runs (status, reason, error, traceback, link), metrics, latest figures,
    candidate_run rows, notes and baseline as the same batch started, then finished and
    linked; a bad result anywhere writes none of it."""

    def metrics(latency):
        return [MetricRow("analytical", "latency_cycles", latency, "cycles"),
                MetricRow("analytical", "cycles", 4.0, "cycles", "op", "mm")]

    reason = "needs 12 banks \u2014 'quoted', \"too\"\nsecond line \U0001F680"
    with Store(db) as store:
        earlier = new_experiment(store, name="earlier", spec_hash="spec-0")
        ((_, _, source),) = store.add_candidates_and_start_runs(
            earlier, [dict(config=with_banks(64), mapping=BASE_MAPPING, origin="grid", diff={})], "analytical")
        store.finish_runs([dict(run_id=source, status="ok", metrics=metrics(7.0))])
        rows = [dict(config=with_banks(n), mapping=BASE_MAPPING, origin="grid", diff={"config.banks": [20, n]},
                     notes=note) for n, note in ((8, "picked ws"), (16, ""), (32, None), (64, "linked"))]
        results = [dict(status="ok", metrics=metrics(10.0)), dict(status="infeasible", reason=reason),
                   dict(status="failed", error="ValueError: b\u00e4d", traceback="Traceback\n  line \u00e9\n"),
                   dict(reused_run_id=source)]
        # The same batch started, then finished and linked (the path before).
        before = new_experiment(store, name="before", spec_hash="spec-1")
        started = store.add_candidates_and_start_runs(before, rows, "analytical", baseline=True, seed=3,
                                                      model_version="m")
        store.finish_runs([{**r, "run_id": run} for r, (_, _, run) in zip(results[:3], started[:3])])
        store.link_runs({started[3][2]: source})
        # In one write.
        now = new_experiment(store, name="now", spec_hash="spec-2")
        for bad in ([*results[:3], dict(status="bogus")], [dict(status="ok", metrics=[MetricRow(
                "analytical", "x", math.nan, "cycles")]), *results[1:]], results[:3]):
            with pytest.raises(ValueError):
                store.add_candidates_with_finished_runs(now, rows, "analytical", bad, baseline=True)
        assert store.candidates(now).empty and store.runs(now).empty
        written = store.add_candidates_with_finished_runs(now, rows, "analytical", results, baseline=True, seed=3,
                                                          model_version="m")
        assert [made for _, made, _ in written] == [True] * 4

        def held(exp, made):
            runs = store.runs(exp).set_index("id").loc[[run for _, _, run in made]]
            cands = store.candidates(exp).set_index("id").loc[[cid for cid, _, _ in made]]
            own = ["stage", "status", "reason", "error", "traceback", "reused_run_id", "seed", "model_version"]
            figures = store.metric_table(exp, "analytical").set_index("candidate_id").loc[[c for c, _, _ in made]]
            with store.engine.connect() as connection:
                roles = connection.execute(text(
                    "SELECT candidate_id, role, run_id, stage, status, reason FROM candidate_run "
                    "WHERE experiment_id = :e ORDER BY candidate_id, role"), dict(e=exp)).all()
            index = {cid: i for i, (cid, _, _) in enumerate(made)} | {run: i for i, (_, _, run) in enumerate(made)}
            return (runs[own].reset_index(drop=True).to_dict("records"),
                    [(index[r[0]], r[1], index.get(r[2], r[2]), *r[3:]) for r in roles],
                    cands[["hash", "notes", "status", "reason", "is_baseline"]].reset_index(drop=True)
                    .to_dict("records"),
                    figures.drop(columns=["metric_run_id"]).reset_index(drop=True).fillna("-").to_dict("records"),
                    store.metrics(exp)[["name", "value", "scope_key"]].values.tolist())

        assert held(now, written) == held(before, started)
        runs = store.runs(now).set_index("id")
        assert runs["status"].tolist() == ["ok", "infeasible", "failed", "ok"]
        assert runs["reason"].iloc[1] == reason and runs["traceback"].iloc[2] == "Traceback\n  line \u00e9\n"
        assert runs["reused_run_id"].iloc[3] == source and runs["finished_at"].notna().all()
        assert store.experiment(now)["baseline_candidate_id"] == written[0][0]


def test_notes_go_in_with_the_batch_that_writes_their_candidates_or_runs(db):
    """The sweep's notes, written in its batch transactions (not one of their own): a new
    row's notes with its INSERT, a known candidate's replaced, a finished batch's with its
    runs; a candidate id the store lacks writes none of the batch."""
    with Store(db) as store:
        exp = new_experiment(store)
        rows = [dict(config=with_banks(n), mapping=BASE_MAPPING, origin="grid", diff={}, notes=note)
                for n, note in ((8, "rows past the row field"), (16, ""))]
        (c1, _, r1), (c2, _, r2) = store.add_candidates_and_start_runs(exp, rows, "analytical", baseline=True)
        notes = lambda: store.candidates(exp).set_index("id")["notes"].to_dict()  # noqa: E731
        assert notes() == {c1: "rows past the row field", c2: None}
        # c2 known (its notes replaced), c3 new; r1 finished with its candidate's notes.
        more = [dict(config=with_banks(16), mapping=BASE_MAPPING, origin="grid", diff={}, notes="now noted"),
                dict(config=with_banks(32), mapping=BASE_MAPPING, origin="grid", diff={})]
        with pytest.raises(RecordNotFound, match="candidate"):
            store.add_candidates_and_start_runs(exp, more, "analytical", finish=[dict(run_id=r1, status="ok")],
                                                finish_notes={c1: "picked", c2 + 99: "nobody's"})
        assert notes() == {c1: "rows past the row field", c2: None} and len(store.candidates(exp)) == 2
        assert set(store.runs(exp)["status"]) == {"running"}
        (_, made2, _), (c3, made3, r3) = store.add_candidates_and_start_runs(
            exp, more, "analytical", finish=[dict(run_id=r1, status="ok")], finish_notes={c1: "picked"})
        assert (made2, made3) == (False, True)
        assert notes() == {c1: "picked", c2: "now noted", c3: None}
        store.finish_runs([dict(run_id=r2, status="ok"), dict(run_id=r3, status="infeasible", reason="x")],
                          notes={c3: "late"})
        assert notes()[c3] == "late" and store.runs(exp).set_index("id").loc[r3, "status"] == "infeasible"
