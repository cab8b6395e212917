"""latest_figures (0012): each candidate's latest total figures of each kind, packed one
row per candidate and kind, kept by the store's writes in the transaction of the metrics
(latest_metric, 0011, the same figures one row each, went in 0016). Checked against the
metric rows themselves (a reference computed here from `Store.metrics`, and
`metric_table` read the pre-0011 way) after every kind of write, and the migrations that
made and dropped them, on a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

import json
import random
import struct

import pandas as pd
import pytest
from alembic import command
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from sqlalchemy import create_engine, text

from dse.records import MetricIn, Store, candidate_runs, latest, reads, sql_reads
from dse.records.outcomes import outcome
from dse.records.light import open_light
from dse.records.store import SCHEMA_HEAD, alembic_config, database_url
from dse.ui import queries


def held(store: Store) -> dict[tuple[int, str, str], tuple[int, float]]:
    """latest_figures one row a figure, as latest_metric held them: (candidate, kind, name) -> (run, value)."""
    return {(c, k, name): (run, value) for (c, k), (run, _, _, named) in packed(store).items()
            for name, value in named.items()}


def held_at_0015(engine) -> dict[tuple[int, str, str], tuple[int, float]]:
    """latest_metric's rows, on a store taken down to 0015 (0016's downgrade refills it)."""
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT candidate_id, kind, name, run_id, value FROM latest_metric"))
        return {(c, k, n): (r, v) for c, k, n, r, v in rows}


def expected(store: Store, experiment: str) -> dict[tuple[int, str, str], tuple[int, float]]:
    """From the metric rows: per candidate and kind, the newest run with total metrics of
    that kind; the largest value of a name that run repeats."""
    long = store.metrics(experiment)
    long = long[long["scope"] == "total"]
    out: dict = {}
    for (candidate, kind), rows in long.groupby(["candidate_id", "kind"]):
        newest = rows[rows["run_id"] == rows["run_id"].max()]
        for name, value in newest.groupby("name")["value"].max().items():
            out[(int(candidate), kind, name)] = (int(newest["run_id"].iloc[0]), float(value))
    return out


def packed(store: Store) -> dict[tuple[int, str], tuple[int, str, str | None, dict[str, float]]]:
    """latest_figures unpacked: (candidate, kind) -> (run, model version, emulator version, figures)."""
    with store.engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT lf.candidate_id, lf.kind, lf.run_id, fl.layout, lf.figures FROM latest_figures lf "
            "JOIN figures_layout fl ON fl.id = lf.layout_id"))
        out = {}
        for c, k, run, layout, figures in rows:
            model_version, emulator_version, names = json.loads(layout)
            assert names == sorted(names)
            out[(c, k)] = (run, model_version, emulator_version,
                           dict(zip(names, struct.unpack(f"<{len(names)}d", bytes(figures)))))
        return out


def packed_expected(store: Store, now: dict) -> dict:
    """latest_figures as it should be: the figures `now` (one a row) of each pair, with their run's versions."""
    with store.engine.connect() as connection:
        versions = {r: (m, e) for r, m, e in connection.execute(
            text("SELECT id, model_version, emulator_version FROM run"))}
    out: dict = {}
    for (c, k, name), (run, value) in now.items():
        out.setdefault((c, k), (run, *versions[run], {}))[3][name] = value
    return out


def agrees(store: Store, experiment: str) -> dict:
    """latest_figures holds the reference's figures with their runs' versions, and
    metric_table reads the same every way."""
    ids = set(store.candidates(experiment)["id"])  # the experiment's rows (other experiments' are checked apart)
    now = expected(store, experiment)
    assert {key: value for key, value in packed(store).items() if key[0] in ids} == packed_expected(store, now)
    with store.engine.connect() as connection:
        for kind in ("analytical", "emulator_cycles", "rtl_cycles"):
            tables_agree(connection, experiment, kind)
        candidates_agree(store, connection, experiment)
    return now


def tables_agree(connection, experiment: str, kind: str) -> pd.DataFrame:
    """metric_table from latest_figures equals the one from the metric rows (pre-0011):
    columns, dtypes, order, values."""
    new = reads.metric_table(connection, experiment, kind)
    old = reads.metric_table(connection, experiment, kind, from_metrics=True)
    # The pre-0011 read also had a column for a name only older runs recorded,
    # empty throughout; now the columns are the names of the figures shown.
    gone = [c for c in old.columns if c not in new.columns]
    assert old[gone].isna().all().all()
    pd.testing.assert_frame_equal(new, old.drop(columns=gone))
    return new


def candidates_agree(store, connection, experiment: str) -> None:
    """`candidates` (candidate_run, the driver's rows) equals the read from the runs through
    SQLAlchemy's rows; so does the UI's page, sorted and filtered every way."""
    experiment_id = reads.experiment_id_of(connection, experiment)
    names = store.metric_names(experiment_id, None)
    for query in (queries.CandidateQuery(), queries.CandidateQuery(sort="status", descending=True),
                  queries.CandidateQuery(status="ok"), queries.CandidateQuery(status="not run"),
                  queries.CandidateQuery(status="infeasible", text="BIG"),
                  *(queries.CandidateQuery(sort=n, metric=n, high=1e9) for n in names[:1])):
        new = queries.candidate_page(store, experiment_id, query, names)
        old = queries.reference_page(store, experiment_id, query, names, through_runs=True)
        assert (new.rows, new.total) == (old.rows, old.total)
    # The UI's ranking worked out from one read (`queries.rankable`) equals the reference's.
    table = queries.rankable(store, experiment_id, names)
    for sort in ("id", "status", "origin", *names):
        for descending in (False, True):
            for status in ("", "ok", "infeasible", "not run"):
                for metric, low, high in (("", None, None), *((n, lo, hi) for n in names[:1]
                                                              for lo, hi in ((None, None), (50.0, 1e9)))):
                    query = queries.CandidateQuery(sort=sort, descending=descending, status=status, metric=metric,
                                                   low=low, high=high, text="big" if sort == "origin" else "")
                    assert (queries.ranked(table, query, names, store, experiment_id).tolist()
                            == queries.ranked_ids(connection, experiment_id, query, names).tolist()), query
    for stage in (None, "analytical", "emulator"):
        for lean in (False, True):
            pd.testing.assert_frame_equal(reads.candidates(connection, experiment_id, stage, lean),
                                          reads.candidates(connection, experiment_id, stage, lean, through_rows=True))


def lat(value: float, *more: MetricIn) -> list[MetricIn]:
    return [MetricIn("analytical", "latency_cycles", value, "cycles"), *more]


def test_latest_figures_follow_every_write(db, tmp_path):
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        a, _ = store.add_candidate(e, {"banks": 16}, {}, "baseline")
        b, _ = store.add_candidate(e, {"banks": 20}, {}, "grid")
        # One run at a time (ORM path): totals kept, other scopes not.
        r1 = store.start_run(a, "analytical")
        store.finish_run(r1, "ok", lat(120.0, MetricIn("analytical", "sram_bytes", 64.0, "bytes"),
                                       MetricIn("analytical", "cycles", 5.0, "cycles", scope="op", scope_key="mm")))
        assert agrees(store, "x") == {(a, "analytical", "latency_cycles"): (r1, 120.0),
                                      (a, "analytical", "sram_bytes"): (r1, 64.0)}
        # Two newer runs; the newest finishes first, then the older: the newest's figures
        # stand, and it replaced every figure of the kind (sram_bytes it lacks is gone).
        r2, r3 = store.start_runs([a, a], "analytical")
        store.finish_runs([{"run_id": r3, "status": "ok", "metrics": lat(90.0)}])
        store.finish_runs([{"run_id": r2, "status": "ok", "metrics": lat(95.0, MetricIn(
            "analytical", "dma_bytes", 1.0, "bytes"))}])
        assert agrees(store, "x") == {(a, "analytical", "latency_cycles"): (r3, 90.0)}
        # An infeasible rerun records nothing: the figures stay the last that were recorded.
        store.finish_run(store.start_run(a, "analytical", model_version="m2"), "infeasible", reason="needs 64 banks")
        assert agrees(store, "x")[(a, "analytical", "latency_cycles")] == (r3, 90.0)
        table = store.metric_table("x", "analytical").set_index("candidate_id")
        assert (table.loc[a, "status"], table.loc[a, "metric_run_id"], table.loc[a, "model_version"]) == (
            "infeasible", r3, "")  # the version of the run the figures are from
        # The sweep's batched path: results of a batch finished with the next batch's runs.
        r4, r5 = store.start_runs([a, b], "emulator")
        (_, _, r6), = store.add_candidates_and_start_runs(
            e, [{"config": {"banks": 24}, "mapping": {}, "origin": "grid"}], "analytical",
            finish=[{"run_id": r4, "status": "ok", "metrics": [MetricIn("emulator_cycles", "latency_cycles", 91.0,
                                                                        "cycles")]},
                    {"run_id": r5, "status": "ok", "metrics": [MetricIn("emulator_cycles", "latency_cycles", 70.0,
                                                                        "cycles")]}])
        store.finish_runs([{"run_id": r6, "status": "ok", "metrics": lat(50.0)}])
        now = agrees(store, "x")
        assert now[(a, "emulator_cycles", "latency_cycles")] == (r4, 91.0)
        assert now[(a, "analytical", "latency_cycles")] == (r3, 90.0)  # other kinds untouched
        # Evidence from outside dse (its own kind, its own run).
        measured = tmp_path / "fpga.csv"
        measured.write_text("name,value,unit\nlatency_cycles,88,cycles\n")
        imported = store.import_evidence(b, "rtl_cycles", measured)
        assert agrees(store, "x")[(b, "rtl_cycles", "latency_cycles")] == (imported.run_id, 88.0)
        # A bad batch writes nothing: neither metrics nor figures.
        before = held(store)
        with pytest.raises(ValueError, match="already finished"):
            store.finish_runs([{"run_id": r6, "status": "ok", "metrics": lat(1.0)}])
        assert held(store) == before
        # Deleting the experiment takes its figures with it; another experiment's stay.
        other = store.create_experiment("y", "h", [], "gemm", "w", "s2", "s2")
        c, _ = store.add_candidate(other, {"banks": 8}, {}, "baseline")
        rc = store.start_run(c, "analytical")
        store.finish_run(rc, "ok", lat(7.0))
        counts = store.delete_experiment("x")
        assert "latest_metric" not in counts and counts["latest_figures"] == 5
        assert held(store) == {(c, "analytical", "latency_cycles"): (rc, 7.0)}
        assert packed(store) == {(c, "analytical"): (rc, "", None, {"latency_cycles": 7.0})}


def test_the_ui_page_sorts_by_the_latest_analytical_run_figures(db):
    """The page sorts and shows a candidate's figures only where they are its latest
    analytical run's: an infeasible rerun sorts last, without the older figure."""
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        ids = [store.add_candidate(e, {"banks": n}, {}, "grid")[0] for n in (16, 20, 24, 28)]
        for cid, value in zip(ids, (300.0, 100.0, 200.0, 50.0)):
            store.finish_run(store.start_run(cid, "analytical"), "ok", lat(value))
        store.finish_run(store.start_run(ids[3], "analytical"), "infeasible", reason="too small")
        names = store.metric_names(e, None)
        page = queries.candidate_page(store, e, queries.CandidateQuery(sort="latency_cycles"), names)
        assert [r["id"] for r in page.rows] == [ids[1], ids[2], ids[0], ids[3]]
        assert [r["metrics"].get("latency_cycles") for r in page.rows] == [100.0, 200.0, 300.0, None]
        ranged = queries.candidate_page(store, e, queries.CandidateQuery(
            sort="latency_cycles", descending=True, metric="latency_cycles", high=250.0), names)
        assert [r["id"] for r in ranged.rows] == [ids[2], ids[1]] and ranged.total == 2


def test_migration_0011_backfills_an_existing_0010_store(db):
    """A store at 0010 with records (reruns, other scopes, several kinds) gets the table
    filled from its metric rows on open."""
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        a, _ = store.add_candidate(e, {"banks": 16}, {}, "baseline")
        b, _ = store.add_candidate(e, {"banks": 20}, {}, "grid")
        store.finish_run(store.start_run(a, "analytical"), "ok", lat(100.0, MetricIn("analytical", "x", 1.0, "")))
        store.finish_run(store.start_run(a, "analytical"), "ok", lat(85.0))
        store.finish_run(store.start_run(a, "emulator"), "ok", [
            MetricIn("emulator_cycles", "latency_cycles", 81.0, "cycles"),
            MetricIn("emulator_cycles", "cycles", 3.0, "cycles", scope="core", scope_key="0")])
        store.finish_run(store.start_run(b, "analytical"), "ok", lat(60.0))
        store.finish_run(store.start_run(b, "analytical"), "failed", error="boom")
        before = held(store)
        before_outcomes = outcomes(store)
    url = database_url(db)
    command.downgrade(alembic_config(url), "0010")
    engine = create_engine(url)
    with engine.connect() as connection:
        assert not {"latest_metric", "candidate_run"} & set(connection.dialect.get_table_names(connection))
    engine.dispose()
    with Store(db) as store:
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == SCHEMA_HEAD
        assert agrees(store, "x") == before
        assert len(before) == 3 and before[(a, "analytical", "latency_cycles")][1] == 85.0
        assert outcomes(store) == before_outcomes and before_outcomes[b][1] == "failed"
        counts_agree(store)
        # rebuild (for stores filled by bulk inserts) gives the same table, whole or in part.
        with store.engine.begin() as connection:
            latest.rebuild(connection)
        assert held(store) == before
        with store.engine.begin() as connection:
            connection.execute(text("DELETE FROM latest_figures"))
            latest.rebuild(connection, [a])
        assert held(store) == {k: v for k, v in before.items() if k[0] == a}


def test_migration_0012_backfills_an_existing_0011_store(db):
    """A store at 0011 with records (reruns replacing and keeping names, a failed rerun,
    other scopes, kinds of both stages, a candidate without figures) gets latest_figures
    filled from latest_metric on open; rebuild gives the same, whole or in part."""
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        a, b, c = (store.add_candidate(e, {"banks": n}, {}, "grid")[0] for n in (16, 20, 24))
        store.finish_run(store.start_run(a, "analytical"), "ok", lat(100.0, MetricIn("analytical", "x", 1.0, "")))
        store.finish_run(store.start_run(a, "analytical", model_version="m2"), "ok", lat(
            85.0, MetricIn("analytical", "dma_bytes", 4.5, "bytes")))
        store.finish_run(store.start_run(a, "emulator", emulator_version="e7"), "ok", [
            MetricIn("emulator_cycles", "latency_cycles", 81.0, "cycles"),
            MetricIn("emulator_cycles", "cycles", 3.0, "cycles", scope="core", scope_key="0")])
        store.finish_run(store.start_run(b, "analytical"), "ok", lat(60.0))
        store.finish_run(store.start_run(b, "analytical"), "failed", error="boom")
        store.finish_run(store.start_run(c, "analytical"), "infeasible", reason="needs 64 banks")
        before = packed(store)
        assert before == packed_expected(store, expected(store, "x")) and len(before) == 3
        tables = {}
        with store.engine.connect() as connection:
            for kind in ("analytical", "emulator_cycles"):
                tables[kind] = tables_agree(connection, "x", kind)
    assert before[(a, "analytical")][1:] == ("m2", None, {"latency_cycles": 85.0, "dma_bytes": 4.5})
    assert before[(a, "emulator_cycles")][2] == "e7"
    url = database_url(db)
    command.downgrade(alembic_config(url), "0011")
    engine = create_engine(url)
    with engine.connect() as connection:
        assert "latest_figures" not in connection.dialect.get_table_names(connection)
        assert connection.execute(text("SELECT count(*) FROM latest_metric")).scalar() == 4
    engine.dispose()
    with Store(db) as store:
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == SCHEMA_HEAD
            for kind, table in tables.items():
                pd.testing.assert_frame_equal(tables_agree(connection, "x", kind), table)
        assert packed(store) == before
        assert agrees(store, "x")
        table = tables["analytical"].set_index("candidate_id")
        assert table.loc[b, "status"] == "failed" and table.loc[b, "latency_cycles"] == 60.0
        assert table.loc[c, "status"] == "infeasible" and pd.isna(table.loc[c, "latency_cycles"])
        assert pd.isna(table.loc[c, "model_version"]) and table.loc[a, "dma_bytes"] == 4.5
        with store.engine.begin() as connection:
            latest.rebuild(connection)
        assert packed(store) == before
        with store.engine.begin() as connection:
            connection.execute(text("DELETE FROM latest_figures"))
            latest.rebuild(connection, [a])
        assert packed(store) == {k: v for k, v in before.items() if k[0] == a}


@pytest.mark.parametrize("seed", [1, 2])
def test_metric_table_equals_the_metric_rows_over_generated_stores(db, seed):
    """Random sweeps: several runs a candidate in both stages, finished out of order in
    batches, ok with varying names, infeasible, failed, pruned, candidates never run,
    other scopes; another experiment deleted midway and at the end. After each round the
    three reads of metric_table agree and latest_figures holds the metric rows' latest totals."""
    rng = random.Random(seed)
    names = ("latency_cycles", "dma_bytes", "peak_sram_bytes", "compute_cycles")

    def outcome(run: int, stage: str) -> dict:
        status = rng.choices(["ok", "infeasible", "failed", "pruned"], [6, 2, 1, 1 if stage == "emulator" else 0])[0]
        if status != "ok":
            return {"run_id": run, "status": status, **({"error": "boom"} if status == "failed" else
                                                          {"reason": f"{status} {rng.randrange(9)}"})}
        kinds = ["analytical"] if stage == "analytical" else rng.sample(["emulator_cycles", "emulator_host_time"],
                                                                          rng.randint(1, 2))
        metrics = [MetricIn(kind, name, rng.choice([0.0, -1.5, 1e300, rng.uniform(1, 1e6)]), "cycles")
                   for kind in kinds for name in rng.sample(names, rng.randint(1, len(names)))]
        metrics.append(MetricIn(kinds[0], "cycles", 1.0, "cycles", scope="op", scope_key="mm"))
        return {"run_id": run, "status": "ok", "metrics": metrics}

    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        ids = [cid for cid, _ in store.add_candidates(
            e, [{"config": {"banks": n}, "mapping": {}, "origin": "grid", "diff": {}} for n in range(24)])]
        store.set_baseline(e, ids[0])
        other = store.create_experiment("y", "h", [], "gemm", "w", "s2", "s2")
        others = [store.add_candidate(other, {"banks": n}, {}, "grid")[0] for n in range(3)]
        for round_ in range(5):
            stage = rng.choice(["analytical", "emulator"])
            chosen = rng.sample(ids[:20], rng.randint(4, 20)) + (others if round_ < 3 else [])
            runs = store.start_runs(chosen, stage, model_version=f"m{round_}",
                                    emulator_version=f"e{round_}" if stage == "emulator" else None)
            results = [outcome(run, stage) for run in runs]
            rng.shuffle(results)  # newer runs of a candidate may finish first
            for i in range(0, len(results), 7):
                store.finish_runs(results[i:i + 7])
            if round_ == 2:
                store.delete_experiment("y")
                other = store.create_experiment("y2", "h", [], "gemm", "w", "s3", "s3")
                others = [store.add_candidate(other, {"banks": 100 + n}, {}, "grid")[0] for n in range(2)]
            with store.engine.connect() as connection:
                tables_agree(connection, "x", "emulator_host_time")
            agrees(store, "x")
            agrees(store, other)
        store.delete_experiment("y2")
        assert {c for c, _ in packed(store)} <= set(ids[:20]) and {c for c, _, _ in held(store)} <= set(ids[:20])
        now = agrees(store, "x")
        assert packed(store) == packed_expected(store, now)
        with store.engine.connect() as connection:
            table = tables_agree(connection, "x", "analytical")
        assert table["candidate_id"].tolist() == ids and table["is_baseline"].tolist() == [True] + [False] * 23
        assert table.loc[20:, names[:1]].isna().all().all()  # never run


def test_metric_table_of_an_experiment_without_figures(db):
    """No candidates, then candidates without any figures: the same (empty) tables every way."""
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        with store.engine.connect() as connection:
            assert len(tables_agree(connection, "x", "analytical")) == 0
        a, _ = store.add_candidate(e, {"banks": 16}, {}, "grid")
        store.add_candidate(e, {"banks": 20}, {}, "grid")
        store.finish_run(store.start_run(a, "analytical"), "infeasible", reason="too small")
        with store.engine.connect() as connection:
            table = tables_agree(connection, "x", "analytical")
        assert table["status"].tolist() == ["infeasible", None] and "latency_cycles" not in table


def test_metric_table_reads_odd_texts_and_two_layouts_as_they_are(db):
    """Values outside the vocabularies (written by plain SQL, some looking like numbers),
    a candidate without figures or runs and a second layout come back as they are from
    the total table built from the driver's rows: the same table every way."""
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        a, b, c, d = (store.add_candidate(e, {"banks": n}, {}, "grid")[0] for n in (16, 20, 24, 28))
        store.finish_run(store.start_run(a, "analytical"), "ok", lat(100.0))
        store.finish_run(store.start_run(b, "analytical", model_version="m2"), "ok", lat(
            90.0, MetricIn("analytical", "dma_bytes", 4.5, "bytes")))
        odd = store.start_run(c, "analytical")
        store.finish_run(odd, "ok", lat(80.0))
        with store.engine.begin() as connection:
            connection.execute(text("UPDATE candidate SET origin = '1' WHERE id = :c"), {"c": a})
            connection.execute(text("UPDATE candidate SET origin = 'imported later' WHERE id = :c"), {"c": d})
            connection.execute(text("UPDATE run SET status = '2' WHERE id = :r"), {"r": odd})
            candidate_runs.changed(connection, [odd])  # what a writer of runs does (plain SQL: by hand)
        with store.engine.connect() as connection:
            table = tables_agree(connection, "x", "analytical").set_index("candidate_id")
    assert table["origin"].tolist() == ["1", "grid", "grid", "imported later"]
    assert table["status"].tolist() == ["ok", "ok", "2", None]
    assert table.loc[b, "dma_bytes"] == 4.5 and table.loc[b, "model_version"] == "m2"
    assert pd.isna(table.loc[a, "dma_bytes"]) and table.loc[c, "latency_cycles"] == 80.0
    assert pd.isna(table.loc[d, "metric_run_id"]) and pd.isna(table.loc[d, "model_version"])


def outcomes(store: Store) -> dict[int, tuple[int, str]]:
    with store.engine.connect() as connection:
        return {c: (r, s) for c, r, s in connection.execute(
            text("SELECT candidate_id, run_id, status FROM candidate_run WHERE role = 'outcome'"))}


def counts_agree(store: Store) -> dict[tuple[int, str], int]:
    """candidate_run's counts equal those computed from the runs (all experiments and each)."""
    with store.engine.connect() as connection:
        now = reads.outcome_counts(connection)
        assert now == reads.outcome_counts_from_runs(connection)
        for e in {e for e, _ in now}:
            assert reads.outcome_counts(connection, e) == reads.outcome_counts_from_runs(connection, e)
    return now


def test_candidate_outcomes_follow_every_writer_of_a_run(db, tmp_path):
    """Outcome (latest run, a pruned one leaving the earlier standing) after each way a
    run's status is written: start, finish, batches, a pruned emulator run, an import,
    a crash found by liveness, a plain SQL update (followed, as every writer of runs
    since 0017, by `candidate_runs.changed`); then a deleted experiment."""
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        a, b, c, d = (store.add_candidate(e, {"banks": n}, {}, "grid")[0] for n in (16, 20, 24, 28))
        ra = store.start_run(a, "analytical")
        assert outcomes(store) == {a: (ra, "running")} and counts_agree(store) == {(e, "running"): 1}
        store.finish_run(ra, "ok", lat(10.0))
        rb, rc = store.start_runs([b, c], "analytical")
        store.finish_runs([{"run_id": rb, "status": "infeasible", "reason": "too big"},
                           {"run_id": rc, "status": "ok", "metrics": lat(20.0)}])
        # Emulator stage: a is pruned (its analytical ok stands), c emulated and failed.
        pa, pc = store.start_runs([a, c], "emulator")
        store.finish_runs([{"run_id": pa, "status": "pruned", "reason": "not emulated: rank 2"},
                           {"run_id": pc, "status": "failed", "error": "boom"}])
        assert outcomes(store) == {a: (ra, "ok"), b: (rb, "infeasible"), c: (pc, "failed")}
        # d: only a pruned run (its outcome is that run); a crash found by liveness.
        pd_ = store.start_run(d, "emulator")
        store.finish_run(pd_, "pruned", reason="not emulated: analytically infeasible")
        stuck = store.start_run(b, "emulator")
        with store.engine.begin() as connection:
            connection.execute(text("UPDATE run SET host = 'gone', pid = NULL WHERE id = :r"), {"r": stuck})
        store.stale_after = 0.0
        assert store.reap_crashed() == [stuck]
        measured = tmp_path / "fpga.csv"
        measured.write_text("name,value,unit\nlatency_cycles,88,cycles\n")
        imported = store.import_evidence(c, "rtl_cycles", measured).run_id
        assert outcomes(store) == {a: (ra, "ok"), b: (stuck, "crashed"), c: (imported, "ok"), d: (pd_, "pruned")}
        # Another experiment, one candidate without runs (not counted), one by a plain UPDATE.
        other = store.create_experiment("y", "h", [], "gemm", "w", "s2", "s2")
        f, _ = store.add_candidate(other, {"banks": 8}, {}, "baseline")
        store.add_candidate(other, {"banks": 12}, {}, "grid")
        rf = store.start_run(f, "analytical")
        with store.engine.begin() as connection:
            connection.execute(text("UPDATE run SET status = 'pruned' WHERE id = :r"), {"r": rf})
            candidate_runs.changed(connection, [rf], outcome_of=[rf])
        assert outcomes(store)[f] == (rf, "pruned")  # its only run
        with store.engine.begin() as connection:
            connection.execute(text("UPDATE run SET status = 'failed' WHERE id = :r"), {"r": rf})
            candidate_runs.changed(connection, [rf], outcome_of=[rf])
        assert counts_agree(store) == {(e, "ok"): 2, (e, "crashed"): 1, (e, "pruned"): 1, (other, "failed"): 1}
        # By latest run's outcome (`dse show`): ties in the order of first occurrence, as
        # value_counts; d, pruned as analytically infeasible, counts as infeasible.
        for experiment, hand in (("x", [("pruned", 1), ("crashed", 1), ("ok", 1), ("infeasible", 1)]),
                                 ("y", [("failed", 1), ("not run", 1)])):
            rows = store.candidates(experiment)
            by_pandas = list(pd.Series([outcome(None if s != s else s, r) for s, r in zip(rows["status"], rows["reason"])])
                             .value_counts().items())
            assert store.latest_status_counts(experiment) == by_pandas == hand
        with store.engine.connect() as connection:
            candidates_agree(store, connection, "x")
            candidates_agree(store, connection, "y")
        assert store.outcome_counts(other) == {
            "ok": 0, "infeasible": 0, "pruned": 0, "failed": 1, "crashed": 0, "running": 0, "not run": 1}
        # latest and outcome of 4 candidates, and their 8 (candidate, stage) rows
        assert store.delete_experiment("x")["candidate_run"] == 16
        assert outcomes(store) == {f: (rf, "failed")} and counts_agree(store) == {(other, "failed"): 1}


def test_dse_show_lists_the_first_candidates_and_counts_them_all(db, capsys):
    """`dse show` reads the first --limit candidates and the counts by latest status (not
    every row); the same text as from every candidate's row; a negative --limit is refused."""
    from dse.cli import main as cli

    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        ids = [store.add_candidate(e, {"banks": n}, {}, "grid")[0] for n in (16, 20, 24, 28, 32)]
        store.set_baseline(e, ids[0])
        for cid, status in zip(ids, ("ok", "infeasible", "ok", "infeasible")):
            store.finish_run(store.start_run(cid, "analytical"), status, lat(1.0) if status == "ok" else [],
                             reason=None if status == "ok" else "too small")
        cands = store.candidates(e, lean=True)
    assert cli(["show", "x", "--db", db, "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "candidates: 5 (2 ok, 2 infeasible, 1 not run)" in out and "… 3 more" in out
    listed = [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].isdigit()]
    assert listed == [str(i) for i in cands["id"].head(2)]
    assert cli(["show", "x", "--db", db, "--limit", "-1"]) == 2
    assert "--limit" in capsys.readouterr().err


def test_a_metric_named_like_a_column_of_the_table_is_refused_by_every_read(db):
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        a, _ = store.add_candidate(e, {"banks": 16}, {}, "grid")
        store.finish_run(store.start_run(a, "analytical"), "ok", lat(1.0, MetricIn("analytical", "status", 2.0, "")))
        with store.engine.connect() as connection:
            for how in ({}, {"from_metrics": True}):
                with pytest.raises(ValueError, match=r"metric names \['status'\] clash"):
                    reads.metric_table(connection, "x", "analytical", **how)


def test_emulated_counts_candidates_with_any_ok_emulator_run_before_and_after_0013(db):
    """`dse history`'s n_emulated (0013: from candidate_run and run's (status, stage,
    candidate_id) index): a candidate whose latest emulator run failed after an ok one
    counts, one with two ok runs counts once, a failed or pruned one only, an analytical-only
    one and another experiment's do not; the same at 0012 (the old query's plan) and on the
    light read. And `settled_run_id`, the newest run of an experiment's when none is running."""
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        other = store.create_experiment("y", "h", [], "gemm", "w", "s", "s2")
        a, b, c, d, f = (store.add_candidate(e, {"banks": n}, {}, "grid")[0] for n in (16, 20, 24, 28, 32))
        g, _ = store.add_candidate(other, {"banks": 16}, {}, "baseline")
        store.finish_run(store.start_run(a, "emulator"), "ok")
        store.finish_run(store.start_run(a, "emulator"), "failed", error="boom")  # a: its earlier ok stands
        store.finish_run(store.start_run(b, "emulator"), "ok")
        store.finish_run(store.start_run(b, "emulator"), "ok")  # b: once
        store.finish_run(store.start_run(c, "emulator"), "failed", error="boom")
        store.finish_run(store.start_run(c, "analytical"), "ok")  # c: no
        store.finish_run(store.start_run(d, "analytical"), "ok")  # d: no
        store.finish_run(store.start_run(f, "emulator"), "pruned")  # f: no
        newest = store.start_run(f, "analytical")
        assert store.settled_run_id(e) is None  # a run in flight: no judgement covers it
        store.finish_run(newest, "ok")
        store.finish_run(store.start_run(g, "emulator"), "ok")  # the other experiment's: 1
        assert store.settled_run_id(e) == newest and store.settled_run_id(other) == newest + 1
        emulated = {s["name"]: s["n_emulated"] for s in store.experiment_summaries()}
    assert emulated == {"x": 2, "y": 1}
    if not db.startswith("postgresql"):
        with open_light(db) as light:
            assert {s["name"]: s["n_emulated"] for s in light.experiment_summaries()} == emulated
        import sqlite3

        with sqlite3.connect(db) as connection:  # the count reads indexes only (no run row per run)
            plan = " ".join(r[3] for r in connection.execute("EXPLAIN QUERY PLAN " + sql_reads.EMULATED_PER_EXPERIMENT))
        assert "COVERING INDEX ix_run_status_stage_candidate_id" in plan, plan
        assert "COVERING INDEX ix_candidate_run_experiment_id_role_status" in plan, plan
    url = database_url(db)
    command.downgrade(alembic_config(url), "0012")
    engine = create_engine(url)
    with engine.connect() as connection:
        assert connection.execute(text(sql_reads.EMULATED_PER_EXPERIMENT)).all() == [(1, 2), (2, 1)]
        assert connection.execute(text(  # the query before 0013 agrees
            "SELECT c.experiment_id, count(DISTINCT r.candidate_id) FROM run r JOIN candidate c ON r.candidate_id = c.id "
            "WHERE r.stage = 'emulator' AND r.status = 'ok' GROUP BY c.experiment_id ORDER BY 1")).all() == [(1, 2), (2, 1)]
    engine.dispose()
    with Store(db) as store:
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == SCHEMA_HEAD
        assert {s["name"]: s["n_emulated"] for s in store.experiment_summaries()} == emulated


def test_migration_0019_stores_each_layout_once_and_its_downgrade_puts_them_back(db):
    """0019: latest_figures names its layout (figures_layout, one row per distinct text)
    instead of holding the text in every row; the figures read back as before the
    migration, through it and back, and a store at 0018 gets its texts again."""
    with Store(db) as store:
        e = store.create_experiment("x", "h", [], "gemm", "w", "s", "s")
        ids = [cid for cid, _ in store.add_candidates(e, [
            {"config": {"banks": b}, "mapping": {}, "origin": "grid"} for b in (16, 20, 24)])]
        runs = store.start_runs(ids, "analytical", model_version="m1")
        store.finish_runs([{"run_id": r, "status": "ok", "metrics": lat(100.0 + i)} for i, r in enumerate(runs)])
        # another model version: a second layout, for the third candidate only
        store.finish_run(store.start_run(ids[2], "analytical", model_version="m2"), "ok",
                         lat(7.0, MetricIn("analytical", "sram_bytes", 64.0, "bytes")))
        before = packed(store)
        table = store.metric_table("x", "analytical")
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM figures_layout")).scalar() == 2
    assert {k: v[1] for k, v in before.items()} == {(ids[0], "analytical"): "m1", (ids[1], "analytical"): "m1",
                                                   (ids[2], "analytical"): "m2"}
    url = database_url(db)
    command.downgrade(alembic_config(url), "0018")
    engine = create_engine(url)
    with engine.connect() as connection:
        assert "figures_layout" not in connection.dialect.get_table_names(connection)
        layouts = dict(connection.execute(text("SELECT candidate_id, layout FROM latest_figures")).all())
    engine.dispose()
    assert {c: json.loads(t)[:2] for c, t in layouts.items()} == {
        ids[0]: ["m1", None], ids[1]: ["m1", None], ids[2]: ["m2", None]}
    assert json.loads(layouts[ids[2]])[2] == ["latency_cycles", "sram_bytes"]
    with Store(db) as store:  # opened: upgraded again, the texts moved back
        assert packed(store) == before
        pd.testing.assert_frame_equal(store.metric_table("x", "analytical"), table)
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM figures_layout")).scalar() == 2
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == SCHEMA_HEAD
