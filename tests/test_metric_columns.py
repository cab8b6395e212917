"""A run's metrics handed over as columns (checks.MetricColumns, what the analytical stage
gives) read as their MetricRows, and are recorded exactly as those rows would be; a bad
value among them is refused as a row's would be, naming the run, with nothing written.
On a SQLite file and on a real PostgreSQL. And a single run's start and finish (a batch of
one) write what the batched writes write."""

from __future__ import annotations

import numpy as np
import pytest
from pg import pg_server, pg_url  # noqa: F401  (fixtures)

from dse.records import MetricRow, RecordNotFound, Store
from dse.records.checks import MetricColumns

ROWS = [MetricRow("analytical", "latency_cycles", 1200.0, "cycles"),
        MetricRow("analytical", "dma_bytes", 4096.0, "bytes"),
        MetricRow("analytical", "cycles", 700.0, "cycles", "op", "matmul_1"),
        MetricRow("analytical", "tile_m", 16.0, "elements", "op", "matmul_1")]


def columns(rows) -> MetricColumns:
    kinds, names, values, units, scopes, keys = zip(*rows)
    return MetricColumns((kinds, names, units, scopes, keys), list(values))


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path, monkeypatch):
    if request.param == "sqlite":
        url = str(tmp_path / "records.db")
    else:
        monkeypatch.setenv("DSE_EVIDENCE_DIR", str(tmp_path / "evidence"))
        url = request.getfixturevalue("pg_url")
    with Store(url) as opened:
        yield opened


def two_runs(store: Store) -> tuple[int, int]:
    experiment = store.create_experiment("cols", "h", [], "mlp", "w", "s", "s")
    (a, _), (b, _) = store.add_candidates(experiment, [
        dict(config={"banks": n}, mapping={}, origin="sampler", diff={}) for n in (4, 8)])
    return store.start_run(a, "analytical", model_version="m"), store.start_run(b, "analytical", model_version="m")


def test_columns_read_as_their_rows():
    got = columns(ROWS)
    assert list(got) == ROWS and len(got) == 4 and got[2] == ROWS[2] and got == ROWS
    got.append(MetricRow("analytical", "expert_imbalance", 1.5, "ratio"))
    assert list(got) == [*ROWS, MetricRow("analytical", "expert_imbalance", 1.5, "ratio")]
    assert got + [ROWS[0]] == [*got, ROWS[0]]


def test_columns_are_recorded_as_their_rows(store):
    as_rows, as_columns = two_runs(store)
    store.finish_runs([dict(run_id=as_rows, status="ok", metrics=ROWS),
                       dict(run_id=as_columns, status="ok", metrics=columns(ROWS))])
    read = {run: [(m["kind"], m["name"], m["value"], m["unit"], m["scope"], m["scope_key"])
                  for m in store.run_metric_rows(run)] for run in (as_rows, as_columns)}
    assert read[as_rows] == read[as_columns] == [tuple(r) for r in ROWS]
    assert store.run(as_columns)["status"] == "ok"


def test_a_bad_value_among_columns_is_refused_naming_its_run(store):
    good, bad = two_runs(store)
    values = columns(ROWS)
    values.values[1] = float("nan")
    with pytest.raises(ValueError, match=f"run {bad}: metric analytical:dma_bytes: value is NaN"):
        store.finish_runs([dict(run_id=good, status="ok", metrics=columns(ROWS)),
                           dict(run_id=bad, status="ok", metrics=values)])
    assert store.run(good)["status"] == store.run(bad)["status"] == "running"  # nothing written
    assert store.run_metric_rows(good) == []


@pytest.mark.parametrize("odd", [None, "many", 1j, 10 ** 400, float("inf") - float("inf")])
def test_anything_but_a_number_among_columns_is_refused_naming_its_run(store, odd):
    """The batch check is one sum over every value: a value it cannot add (None, text, a
    number no float holds) or that makes it NaN sends the batch to MetricIn's checks."""
    good, bad = two_runs(store)
    values = columns(ROWS)
    values.values[1] = odd
    with pytest.raises((ValueError, TypeError, OverflowError), match=f"run {bad}: "):
        store.finish_runs([dict(run_id=good, status="ok", metrics=columns(ROWS)),
                           dict(run_id=bad, status="ok", metrics=values)])
    assert store.run(good)["status"] == store.run(bad)["status"] == "running"  # nothing written


def test_numbers_of_other_types_among_columns_are_recorded_as_their_floats(store):
    """An int, a bool or a numpy float among the columns is recorded as the float it is (as
    MetricIn takes it), on the batch's fast path as on the row by row one."""
    as_rows, as_columns = two_runs(store)
    odd = columns(ROWS)
    odd.values[0], odd.values[1], odd.values[3] = 1200, np.float64(4096.0), True
    store.finish_runs([dict(run_id=as_rows, status="ok", metrics=[*ROWS[:3], ROWS[3]._replace(value=1.0)]),
                       dict(run_id=as_columns, status="ok", metrics=odd)])
    read = {run: [(m["name"], m["value"]) for m in store.run_metric_rows(run)] for run in (as_rows, as_columns)}
    assert read[as_rows] == read[as_columns] == [("latency_cycles", 1200.0), ("dma_bytes", 4096.0),
                                                 ("cycles", 700.0), ("tile_m", 1.0)]
    assert all(type(value) is float for _, value in read[as_columns])


def test_a_single_run_is_a_batch_of_one(store):
    one, batched = two_runs(store)
    (other,) = store.start_runs([store.run(batched)["candidate_id"]], "analytical", model_version="m")
    shown = ("stage", "status", "model_version", "emulator_version", "host", "git_commit", "versions", "command")
    assert {k: store.run(one)[k] for k in shown} == {k: store.run(other)[k] for k in shown}
    store.finish_run(one, "infeasible", reason="does not fit")
    store.finish_runs([dict(run_id=other, status="infeasible", reason="does not fit")])
    assert {k: store.run(one)[k] for k in (*shown, "reason")} == {k: store.run(other)[k] for k in (*shown, "reason")}
    with pytest.raises(ValueError, match=f"run {one} is already finished"):
        store.finish_run(one, "ok")
    with pytest.raises(RecordNotFound, match="field 'candidate': got 999"):
        store.start_run(999, "analytical")
    with pytest.raises(RecordNotFound, match="field 'run': got 999"):
        store.finish_run(999, "ok")
