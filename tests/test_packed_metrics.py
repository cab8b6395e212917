"""A run's metrics packed into one row (run_metrics + metric_layout, 0015): a small real
sweep recorded, every reader's metric answers compared with the values the analytical
model computes for the same candidates; then the store taken down to 0014 (one metric row
a value, as the previous head wrote them) and up again by the migration: the metric rows
are the sweep's values, and every reader answers exactly as before. On a SQLite file and
on a real PostgreSQL."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pandas as pd
import pytest
from alembic import command
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from sqlalchemy import create_engine, text

from dse.chips import validate_chip
from dse.cli import main
from dse.mapping import Candidate, mapping_from_dict
from dse.records import Store, reads
from dse.records.light import open_light
from dse.records.store import SCHEMA_HEAD, alembic_config, database_url
from dse.runner import run_sweep
from dse.runner.stages import analytical_batch, analytical_graph
from dse.ui import queries

SPEC = """
[experiment]
name = "packed"
hypothesis = "packing changes no answer"

[workload]
recipe = "mlp"

[baseline]
chip = "goban"

[[space]]
name = "banks"
target = "chip.banks.count"
values = [4, 16]

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 4]

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"
"""


def computed(store: Store) -> dict[int, list[tuple]]:
    """candidate id -> the metric rows the analytical model gives it, computed here."""
    graph = analytical_graph("mlp", {})  # the spec's workload
    cands = store.candidates("packed")
    ids = [int(c) for c in cands["id"]]
    built = [Candidate(validate_chip(json.loads(c), "(test)", field_prefix="chip."),
                       mapping_from_dict(json.loads(m), "(test)")) for c, m in zip(cands["config"], cands["mapping"])]
    results = analytical_batch(graph, built, ppa_calibration={})
    return {i: [tuple(m) for m in r.metrics()] for i, r in zip(ids, results)}


def answers(store: Store, db: str) -> dict:
    """Every reader's metric answers of the experiment."""
    experiment = int(store.experiments()["id"].iloc[0])
    cands = [int(c) for c in store.candidates("packed")["id"]]
    runs = [int(r) for r in store.runs("packed")["id"]]
    out = {"metrics": store.metrics("packed"),
           **{f"table {scope}": store.metric_table("packed", "analytical", scope=scope)
              for scope in ("total", "op", "component")},
           "totals": store.totals(cands), "analytical totals": store.totals(cands, ["analytical"]),
           "compare": store.compare_metrics(cands[0], cands[-1]),
           "compare op": store.compare_metrics(cands[0], cands[-1], scope="op"),
           **{f"run {r}": store.run_metric_rows(r) for r in runs},
           **{f"candidate {c}": store.total_metric_rows(c) for c in cands}}
    light = open_light(db)
    if light is not None:  # the light reads (no SQLAlchemy) answer the same
        with contextlib.closing(light):
            out.update({f"light run {r}": light.run_metric_rows(r) for r in runs})
            out.update({f"light candidate {c}": light.total_metric_rows(c) for c in cands})
    with store.engine.connect() as connection:
        out["table from metrics"] = reads.metric_table(connection, experiment, "analytical", from_metrics=True)
        pd.testing.assert_frame_equal(out["table from metrics"], out["table total"])
        out["op cycles"] = store.op_metric_table(experiment, None, "cycles")
        figures = store.component_figures(experiment, cands, "analytical")
        out["components"] = (figures.parts, figures.totals)
        names = store.metric_names(experiment, None)
        out["names"] = names
        for sort in ("latency_cycles", "energy_uj"):
            query = queries.CandidateQuery(sort=sort, descending=True)
            page = queries.candidate_page(store, experiment, query, names)
            assert page.rows == queries.reference_page(store, experiment, query, names, through_runs=True).rows
            out[f"page by {sort}"] = page.rows
    for argv in (["show", "c1"], ["show", "r1"], ["show", "r2"], ["show", "packed"], ["history"]):
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            assert main([*argv, "--db", db]) == 0
        out[" ".join(argv)] = shown.getvalue()
    assert "latency_cycles" in out["show r1"] and "latency_cycles" in out["show c1"] and "metrics (3)" in out["show r2"]
    return out


def same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        left, right = a[key], b[key]
        if isinstance(left, tuple):
            for x, y in zip(left, right):
                pd.testing.assert_frame_equal(x, y, obj=key)
        elif isinstance(left, pd.DataFrame):
            pd.testing.assert_frame_equal(left, right, obj=key)
        else:
            assert left == right, key


def test_every_reader_answers_the_sweeps_values_before_and_after_the_migration(db, tmp_path):
    spec_path = tmp_path / "packed.toml"
    spec_path.write_text(SPEC)
    assert run_sweep(spec_path, db, progress=False).evaluated == 5  # the baseline and the grid of 4
    with Store(db) as store:
        expected = computed(store)
        long = store.metrics("packed")
        # The stored values are the model's, bit for bit, in its order (and the source
        # counts the sweep adds to one run besides).
        for cid, rows in expected.items():
            mine = long[(long["candidate_id"] == cid) & (long["kind"] == "analytical")]
            assert list(mine[["kind", "name", "value", "unit", "scope", "scope_key"]].itertuples(
                index=False, name=None)) == rows
            run = int(mine["run_id"].iloc[0])
            assert [tuple(r.values()) for r in store.run_metric_rows(run) if r["kind"] == "analytical"] == rows
        assert set(long["kind"]) == {"analytical", "source_counts"}
        table = store.metric_table("packed", "analytical").set_index("candidate_id")
        for cid, rows in expected.items():
            for kind, name, value, unit, scope, key in rows:
                if scope == "total":
                    assert table.loc[cid, name] == value
        before = answers(store, db)
        with store.engine.connect() as connection:
            layouts = connection.execute(text("SELECT count(*) FROM metric_layout")).scalar()
            packs = connection.execute(text("SELECT count(*) FROM run_metrics")).scalar()
        assert packs == 5 and layouts <= 3  # runs share their layouts (feasible, infeasible, with source counts)

    url = database_url(db)
    command.downgrade(alembic_config(url), "0014")  # the previous head: one metric row a value
    engine = create_engine(url)
    with engine.connect() as connection:
        names = set(connection.dialect.get_table_names(connection))
        assert "metric" in names and not {"run_metrics", "metric_layout"} & names
        rows = connection.execute(text(
            "SELECT run_id, kind, name, value, unit, scope, scope_key FROM metric ORDER BY id")).all()
    engine.dispose()
    by_run: dict[int, list[tuple]] = {}
    for run, *row in rows:
        by_run.setdefault(run, []).append(tuple(row))
    assert sorted(r for rs in by_run.values() for r in rs if r[0] == "analytical") == sorted(
        r for rs in expected.values() for r in rs)
    with Store(db) as store:  # opened: upgraded to 0015, the rows packed again
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == SCHEMA_HEAD
        same(answers(store, db), before)


def test_every_reader_answers_the_same_at_0015_and_back_at_head(db, tmp_path):
    """0016 drops latest_metric; its downgrade refills it from the packed metrics: at 0015
    it holds latest_figures' figures one row each (what 0015's writes kept), and back at
    head every reader answers as before."""
    spec_path = tmp_path / "packed.toml"
    spec_path.write_text(SPEC)
    assert run_sweep(spec_path, db, progress=False).evaluated == 5
    with Store(db) as store:
        before = answers(store, db)
        with store.engine.connect() as connection:
            assert "latest_metric" not in connection.dialect.get_table_names(connection)
            figures = {}
            for c, k, run, layout, packed in connection.execute(text(
                    "SELECT lf.candidate_id, lf.kind, lf.run_id, fl.layout, lf.figures FROM latest_figures lf "
                    "JOIN figures_layout fl ON fl.id = lf.layout_id")):
                names = json.loads(layout)[2]
                values = np.frombuffer(bytes(packed), dtype="<f8").tolist()
                figures.update({(c, k, n): (run, v) for n, v in zip(names, values)})
    long = before["metrics"]
    totals = long[long["scope"] == "total"]
    assert len(figures) == len(totals) > 0  # one run a candidate: each total figure once
    url = database_url(db)
    command.downgrade(alembic_config(url), "0015")
    engine = create_engine(url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0015"
        held = {(c, k, n): (r, v) for c, k, n, r, v in connection.execute(text(
            "SELECT candidate_id, kind, name, run_id, value FROM latest_metric"))}
        assert held == figures
        assert held == {(c, k, n): (r, v) for c, k, n, r, v in totals[
            ["candidate_id", "kind", "name", "run_id", "value"]].itertuples(index=False, name=None)}
        # (this head's readers need 0019's figures_layout: they are compared back at head, below)
    engine.dispose()
    with Store(db) as store:  # opened: upgraded to head, latest_metric dropped again
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == SCHEMA_HEAD
            assert "latest_metric" not in connection.dialect.get_table_names(connection)
        same(answers(store, db), before)
