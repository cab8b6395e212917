"""The record store against real SQLite files: round trips, atomicity, migrations."""

from __future__ import annotations

import json
import math
import sqlite3

import pandas as pd
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from dse.records import MetricIn, Store, canonical_json, content_hash
from dse.records.schema import Base
from dse.records.store import alembic_config

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


@pytest.fixture
def db(tmp_path):
    return tmp_path / "records.db"


@pytest.fixture
def store(db):
    with Store(db) as opened:
        yield opened


# ---- identity --------------------------------------------------------------------------


def test_canonical_json_and_content_hash_ignore_key_order():
    assert canonical_json({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert content_hash({"b": 1, "a": 2}) == content_hash({"a": 2, "b": 1})
    assert len(content_hash({})) == 64


# ---- connection setup ------------------------------------------------------------------


def test_sqlite_file_is_created_in_wal_mode_with_foreign_keys_on(store, db):
    assert db.exists()
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10000
    # WAL is a property of the file: a plain sqlite3 connection sees it too.
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_foreign_keys_are_enforced(store):
    with pytest.raises(KeyError, match="no candidate with id 999"):
        store.start_run(999, "analytical")
    with store.engine.connect() as connection, pytest.raises(Exception, match="FOREIGN KEY"):
        connection.exec_driver_sql(
            "INSERT INTO metric (run_id, kind, name, value, unit, scope, scope_key) "
            "VALUES (999, 'analytical', 'cycles', 1.0, 'cycle', 'total', '')"
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


def test_experiment_lookup_errors(store):
    with pytest.raises(KeyError, match="no experiment named 'nope'"):
        store.experiment("nope")
    with pytest.raises(KeyError, match="no experiment id 42"):
        store.candidates(42)


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
    assert {"python", "numpy", "pandas", "torch", "sqlalchemy", "optuna", "dse"} <= set(versions)
    assert versions["sqlalchemy"].startswith("2.0")
    assert run["started_at"] <= run["finished_at"]


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
    assert table["status"].tolist() == ["ok", "ok", "infeasible"]  # each candidate's latest run
    assert table["stage"].tolist() == ["analytical", "emulator", "analytical"]
    assert table["reason"].tolist()[2] == "needs 64 banks"
    assert table["metric_run_id"].tolist()[0] == rerun
    assert table["model_version"].tolist()[:2] == ["m1", "m1"]
    assert table["is_baseline"].tolist() == [False, False, False]

    emulated = store.metric_table(experiment_id, "emulator_cycles")
    assert emulated["cycles"].tolist()[1] == 850.0
    assert emulated["cycles"].isna().tolist() == [True, False, True]

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
    with pytest.raises(KeyError, match="no candidate id 99"):
        store.compare(a, 99)


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


def test_store_upgrades_an_alembic_made_database_to_head(db):
    url = f"sqlite:///{db}"
    config = alembic_config(url)
    command.upgrade(config, "0001")
    assert current_revision(url) == "0001"
    with Store(db) as store:
        new_experiment(store)
    head = ScriptDirectory.from_config(config).get_current_head()
    assert current_revision(url) == head
    assert schema_diff(url) == []


def test_models_match_the_migrated_schema(db):
    url = f"sqlite:///{db}"
    Store(db).close()
    assert schema_diff(url) == []
    # The comparison is not vacuous: an unmigrated database differs from the models.
    command.downgrade(alembic_config(url), "base")
    assert schema_diff(url) != []


def test_store_refuses_a_database_from_a_newer_schema(db):
    Store(db).close()
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(RuntimeError, match="newer dse"):
        Store(db)


def test_two_stores_on_one_new_file(db):
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
