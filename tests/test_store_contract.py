"""The record store's contract (`dse.records.contract`), one suite run against every reader
(the Store, the light read) on both databases (a SQLite file, a real PostgreSQL server),
as Optuna's storage tests run every storage: the same signatures, the same values, the
same refusals in the same words, the same acceptance judgement; and the Store as the
writer they all read back."""

from __future__ import annotations

import inspect
from datetime import datetime

import pytest
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from test_light_reads import add_runs, fill_more, reads_of

from dse.records import RecordNotFound, Store
from dse.records.contract import READER_METHODS, WRITER_METHODS, RecordReader, RecordWriter
from dse.records.light import LightStore, open_light
from dse.runner.acceptance import judge_experiment

DATABASES = ("sqlite", "postgresql")
READERS = ("Store", "LightStore")


@pytest.fixture(params=DATABASES)
def store_url(request, tmp_path) -> str:
    """A store filled by the Store (the writer): three experiments, their candidates, runs of
    every status and stage, metrics of several scopes, evidence files, decisions, notes, a link."""
    if request.param == "sqlite":
        url = str(tmp_path / "records.db")
    else:
        url = f"{request.getfixturevalue('pg_url')}?evidence_dir={tmp_path / 'evidence'}"
    with Store(url) as store:
        assert isinstance(store, RecordWriter)
        add_runs(store, fill_more(store))
    return url


def open_reader(kind: str, url: str):
    reader = Store(url) if kind == "Store" else open_light(url)
    assert isinstance(reader, Store if kind == "Store" else LightStore), (kind, url)
    return reader


def timeless(value):
    """`value` with every timestamp as one marker: two databases filled moments apart."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(timeless(v) for v in value)
    return "<time>" if isinstance(value, datetime) else value


def plain(value):
    """Arrays (of a figure column) as lists, so that results compare with ==."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value.tolist() if hasattr(value, "tolist") else value


def refusals(reader) -> list[tuple[str, list[str]]]:
    out = []
    for read in (lambda: reader.experiment("bankz"), lambda: reader.experiment(99), lambda: reader.candidate(99),
                 lambda: reader.run_row(99), lambda: reader.candidate_rows("nosuch"),
                 lambda: reader.latest_status_counts(7), lambda: reader.notes("banks-agian"),
                 lambda: reader.experiment_id("e1")):
        with pytest.raises(RecordNotFound) as caught:
            read()
        out.append((str(caught.value), caught.value.suggestions))
    return out


def judged(reader) -> list:
    """What the one acceptance judgement makes of each experiment, read through `reader`."""
    out = []
    for exp in reader.experiment_summaries():
        j = judge_experiment(reader, exp["id"])
        out.append((exp["name"], j.passing_ids, j.best, j.verdict, j.outcomes.tolist(), j.error))
    return out


@pytest.mark.parametrize("kind", READERS)
def test_every_reader_keeps_the_contracts_signatures(kind, store_url):
    with open_reader(kind, store_url) as reader:
        assert isinstance(reader, RecordReader)
        for name in READER_METHODS:
            wanted = inspect.signature(getattr(RecordReader, name))
            found = inspect.signature(getattr(type(reader), name))
            assert [(p.name, p.default) for p in found.parameters.values()] == [
                (p.name, p.default) for p in wanted.parameters.values()], (kind, name)


def test_the_writer_keeps_the_contracts_signatures():
    assert {"create_experiment", "add_candidate", "start_run", "finish_run", "finish_runs", "put_artifact",
            "add_decision", "add_note"} <= set(WRITER_METHODS)
    for name in WRITER_METHODS:
        wanted = [p for p in inspect.signature(getattr(RecordWriter, name)).parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        found = inspect.signature(getattr(Store, name)).parameters
        assert [p.name for p in wanted] == [n for n in found if n in {p.name for p in wanted}], name
        assert all(p.name in found for p in wanted), name


def test_every_reader_reads_what_the_writer_wrote(store_url):
    seen = {}
    for kind in READERS:
        with open_reader(kind, store_url) as reader:
            seen[kind] = (reads_of(reader, range(1, 7), range(1, 9)), reader.reason_groups(1),
                          reader.workload_points(1), reader.analytical_statuses(1),
                          plain(reader.figure_columns(["analytical", "emulator_cycles"], ["latency_cycles"], 1)),
                          reader.check_evidence(1).counts, reader.artifact_path("ab" * 32))
    assert seen["LightStore"] == seen["Store"]
    values = seen["Store"][0]
    assert values["statuses of 1"] == [("failed", 2), ("ok", 1), ("infeasible", 1), ("not run", 1)]
    assert [c["id"] for c in values["first two candidates"]] == [1, 2]
    assert values["candidate 2"]["diff"] == {"config.banks.count": [16, 20]}
    assert seen["Store"][4] == {"analytical": ([1, 2], {"latency_cycles": [1000.0, 800.0]}),
                                "emulator_cycles": ([2], {"latency_cycles": [812.0]})}
    assert [(m["name"], m["value"]) for m in values["metrics of r1"]] == [("latency_cycles", 1000.0),
                                                                          ("dma_bytes", 4096.0)]


def test_both_databases_hold_the_same_records(tmp_path, pg_url):  # noqa: F811
    read = []
    for url in (str(tmp_path / "records.db"), f"{pg_url}?evidence_dir={tmp_path / 'evidence'}"):
        with Store(url) as store:
            add_runs(store, fill_more(store))
        with open_light(url) as reader:
            read.append(timeless((reads_of(reader, range(1, 7), range(1, 9)), judged(reader))))
    assert read[0] == read[1]  # but for when they were written


def test_every_reader_refuses_what_the_store_lacks_in_the_same_words(store_url):
    found = {}
    for kind in READERS:
        with open_reader(kind, store_url) as reader:
            found[kind] = refusals(reader)
    assert found["LightStore"] == found["Store"]
    words = [text for text, _ in found["Store"]]
    assert "field 'experiment': got 'bankz'" in words[0] and "allowed: an experiment name or id: banks, empty, " \
        "banks-again" in words[0] and found["Store"][0][1] == ["banks"]
    assert "a candidate id of this store (6 candidates, ids 1 to 6)" in words[2]
    assert "a run id of this store (8 runs, ids 1 to 8)" in words[3]
    assert found["Store"][6][1] == ["banks-again"]


def test_every_reader_gives_the_one_judgement(store_url):
    found = {}
    for kind in READERS:
        with open_reader(kind, store_url) as reader:
            found[kind] = judged(reader)
    assert found["LightStore"] == found["Store"]
    # banks: c2 beats the baseline's cycles, but its latest analytical run failed (not eligible)
    assert found["Store"][0] == ("banks", [], None, "refuted", [[0], [1], [-1], [-1], [-1]], "")


@pytest.mark.parametrize("url", ["postgresql://dse@127.0.0.1:5433/records", "postgres://h/db?sslmode=disable",
                                 "postgresql+psycopg://user:pw@[::1]/x"])
def test_the_light_reader_looks_for_evidence_where_the_store_keeps_it(url, monkeypatch, tmp_path):
    from sqlalchemy.engine import make_url

    from dse.records import light_pg
    from dse.records.blobs import default_evidence_dir
    from dse.records.opening import checked_url

    monkeypatch.delenv("DSE_EVIDENCE_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert light_pg.evidence_dir(url) == default_evidence_dir(make_url(checked_url(url)))
    assert light_pg.shown(url) == make_url(checked_url(url)).render_as_string(hide_password=True)
    monkeypatch.setenv("DSE_EVIDENCE_DIR", str(tmp_path / "ev"))
    assert light_pg.evidence_dir(url) == default_evidence_dir(make_url(checked_url(url))) == tmp_path / "ev"
