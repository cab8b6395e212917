"""The record store's contract (`dse.records.contract`), one suite run against every reader
(the Store, the light read) on both databases (a SQLite file, a real PostgreSQL server),
as Optuna's storage tests run every storage: the same signatures, the same values, the
same refusals in the same words, the same acceptance judgement, the same calibrations, the
same workbench pages (`PageReader`: ranks, filters, sorts, page boundaries, counts, the live
view's reads); the report's reads (`ReportReader`, the Store alone) worked out by hand on both
databases; and the Store as the writer they all read back."""

from __future__ import annotations

import inspect
from datetime import datetime, timedelta, timezone

import pytest
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from test_light_reads import add_runs, fill_more, reads_of

from dse.records import MetricIn, RecordNotFound, Store, page_reads
from dse.records.contract import (PAGE_METHODS, READER_METHODS, REPORT_METHODS, WRITER_METHODS, PageReader,
                                  RecordReader, RecordWriter, ReportReader)
from dse.records.calibrations import latest_ppa_calibration
from dse.records.light import LightStore, open_light
from dse.runner.acceptance import judge_experiment
from dse.runner.result import DONE
from dse.ui import queries
from dse.ui.queries import CandidateQuery

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
        add_calibrations(store)
    return url


def add_calibrations(store: Store) -> None:
    """Calibrations 1 to 4, in this order: toy's cycles; goban's area, power, and a newer area fit."""
    for chip, source, constants in (("toy", "emulator_cycles", {"core_scale": 1.5}),
                                    ("goban", "synth_area", {"matrix": 2.0}),
                                    ("goban", "power", {"matrix": 0.5, "cores": 3.0}),
                                    ("goban", "synth_area", {"matrix": 1.2})):
        store.add_calibration(chip=chip, chip_hash="0" * 64, source=source, model_version="m", emulator_version=None,
                              constants=constants, error_before={"mape": 9.5}, error_after={"mape": 1.25},
                              points=[{"label": "p", "measured": 10.0}], command="dse calibrate")


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
    """Each method of `RecordReader` and `PageReader` takes the same parameters, in the same
    order, of the same kind and with the same defaults, in every reader."""
    with open_reader(kind, store_url) as reader:
        assert isinstance(reader, RecordReader) and isinstance(reader, PageReader)
        for protocol, names in ((RecordReader, READER_METHODS), (PageReader, PAGE_METHODS)):
            for name in names:
                wanted = inspect.signature(getattr(protocol, name))
                found = inspect.signature(getattr(type(reader), name))
                assert [(p.name, p.kind, p.default) for p in found.parameters.values()] == [
                    (p.name, p.kind, p.default) for p in wanted.parameters.values()], (kind, name)


def test_the_writer_keeps_the_contracts_signatures():
    assert {"create_experiment", "add_candidate", "start_run", "finish_run", "finish_runs", "put_artifact",
            "add_decision", "add_note", "add_calibration"} <= set(WRITER_METHODS)
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
                          reader.check_evidence(1).counts, reader.artifact_path("ab" * 32),
                          reader.reused_run_rows(1))
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


def test_every_reader_reads_the_same_calibrations(store_url):
    """Which calibration the model uses for a chip, through every reader on both databases:
    the newest cycles fit; of area and energy, the newest fit of each PPA source."""
    seen = {}
    for kind in READERS:
        with open_reader(kind, store_url) as reader:
            every = reader.calibrations()
            seen[kind] = {"every": every, "goban": [c["id"] for c in reader.calibrations("goban")],
                          "power": [c["id"] for c in reader.calibrations(sources=("power", "rtl_cycles"))],
                          "2 and 4 of goban": [c["id"] for c in reader.calibrations("goban", ids=[4, 2, 1])],
                          "none": reader.calibrations(ids=[]), "no chip": reader.calibrations("nosuch"),
                          "cycles": [reader.latest_calibration(c) for c in ("toy", "goban")],
                          "ppa": [[c["id"] for c in reader.latest_ppa_records(c)] for c in ("toy", "goban")],
                          "factors": latest_ppa_calibration(reader, "goban")}
    assert seen["LightStore"] == seen["Store"]
    got = seen["Store"]
    assert [c["id"] for c in got["every"]] == [4, 3, 2, 1]  # newest first
    newest = got["every"][0]
    assert {k: v for k, v in newest.items() if k != "created_at"} == {
        "id": 4, "chip": "goban", "chip_hash": "0" * 64, "source": "synth_area", "model_version": "m",
        "emulator_version": None, "constants": {"matrix": 1.2}, "error_before": {"mape": 9.5},
        "error_after": {"mape": 1.25}, "points": [{"label": "p", "measured": 10.0}], "command": "dse calibrate",
        "git_commit": newest["git_commit"]}
    assert all(c["created_at"].tzinfo is not None for c in got["every"])
    assert got["goban"] == [4, 3, 2] and got["power"] == [3] and got["2 and 4 of goban"] == [4, 2]
    assert got["none"] == got["no chip"] == []
    assert got["cycles"][0]["id"] == 1 and got["cycles"][1] is None
    assert got["ppa"] == [[], [4, 3]]  # synth_area's newest, then power's
    assert got["factors"] == {"matrix": {"area": 1.2, "energy": 0.5}, "cores": {"area": 1.0, "energy": 3.0}}


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


def pages_of(reader) -> dict:
    """Every workbench read (`PageReader`, and the candidate table `dse.ui.queries` makes of
    them) of the contract's store, through `reader`."""
    names = reader.metric_names(1, 1)
    out = {"names": names, "names without a baseline": reader.metric_names(1, None),
           "names of an empty experiment": reader.metric_names(2, None),
           "analytical runs": reader.analytical_runs(1), "analytical runs of 3": reader.analytical_runs(3),
           "rows 2, 1": reader.page_rows([2, 1]), "row 5": reader.page_rows([5]),
           "row 5 of experiment 1": reader.page_rows([5], 1), "no rows": reader.page_rows([]),
           "after 2": [r["id"] for r in reader.candidates_after(1, 2)],
           "after 2, two": [r["id"] for r in reader.candidates_after(1, 2, limit=2)],
           "last": [reader.last_candidate_id(e) for e in (1, 2, 3)],
           "outcomes": [reader.outcome_counts(e) for e in (1, 2, 3)],
           "emulator runs": [reader.emulator_runs(e) for e in (1, 2, 3)],
           "analysed": [reader.analysed(e) for e in (1, 2, 3)],
           "matches": {text: reader.shown_matches(1, text) for text in ("NEEDS", "banks.count=2", "(baseline)",
                                                                         "tile=[1, 1]", "nowhere")}}
    long_ago, later = datetime(2000, 1, 1, tzinfo=timezone.utc), datetime.now(timezone.utc) + timedelta(days=1)
    out["finished"] = [reader.finished_since(1, long_ago, "analytical"), reader.finished_since(1, later, "analytical"),
                       reader.finished_since(1, long_ago, "emulator")]
    table = queries.rankable(reader, 1, names)
    out["rankable"] = (table.ids.tolist(), table.origin.tolist(), nan_as_none(table.run_id), table.status.tolist(),
                       {n: nan_as_none(v) for n, v in table.values.items()})
    out["ranked"] = {repr(q): queries.ranked(table, q, names, reader, 1).tolist() for q in QUERIES}
    out["pages"] = {repr(q): [(p.total, p.pages, [r["id"] for r in p.rows])
                              for p in [queries.candidate_page(reader, 1, q, names)]][0] for q in QUERIES}
    ranked = out["ranked"][repr(CandidateQuery())]
    out["boundaries"] = [[r["id"] for r in queries.page_of(reader, ranked, CandidateQuery(page=n, per_page=2),
                                                           names).rows] for n in (1, 2, 3, 4)]
    return out


def nan_as_none(values) -> list:
    """An array's values, NaN (no figure, no run) as None: lists that compare with ==."""
    return [None if v != v else v for v in values.tolist()]


# The candidate table's sorts and filters the contract's store is checked under (by hand, below).
QUERIES = (CandidateQuery(), CandidateQuery(descending=True), CandidateQuery(sort="latency_cycles"),
           CandidateQuery(sort="latency_cycles", descending=True), CandidateQuery(sort="status"),
           CandidateQuery(sort="status", descending=True), CandidateQuery(sort="origin", descending=True),
           CandidateQuery(status="failed"), CandidateQuery(status="not run"),
           CandidateQuery(metric="latency_cycles", high=2000.0), CandidateQuery(metric="dma_bytes", low=5000.0),
           CandidateQuery(text="banks.count=2", sort="origin"), CandidateQuery(page=2))


def test_every_reader_reads_the_same_pages(store_url):
    """The workbench's reads, through every reader on both databases, equal and as worked out
    by hand: experiment 1's c1 (baseline, ok: 1000 cycles), c2 (its latest analytical run
    failed: no figures shown, though an earlier run recorded 800), c3 (infeasible, "needs
    needs ..."), c4 (sampler, failed), c6 (sampler, not run); experiment 3's c5 (emulated only)."""
    seen = {}
    for kind in READERS:
        with open_reader(kind, store_url) as reader:
            seen[kind] = pages_of(reader)
            first_runs = (reader.run_row(1)["started_at"], reader.run_row(6)["started_at"])
    assert seen["LightStore"] == seen["Store"]
    got = seen["Store"]
    assert got["names"] == got["names without a baseline"] == ["dma_bytes", "latency_cycles"]
    assert got["names of an empty experiment"] == []
    assert got["analytical runs"] == [(1, "baseline", 1, "ok"), (2, "grid", 7, "failed"), (3, "grid", 8, "infeasible"),
                                      (4, "sampler", 4, "failed"), (6, "sampler", None, None)]
    assert got["analytical runs of 3"] == [(5, "baseline", None, None)]
    assert got["rows 2, 1"] == [
        {"id": 2, "origin": "grid", "diff": {"config.banks.count": [16, 20]}, "run_id": 7, "stage": "analytical",
         "status": "failed", "reason": None, "metrics": {}},
        {"id": 1, "origin": "baseline", "diff": {}, "run_id": 1, "stage": "analytical", "status": "ok", "reason": None,
         "metrics": {"latency_cycles": 1000.0, "dma_bytes": 4096.0}}]
    assert [(r["id"], r["run_id"], r["metrics"]) for r in got["row 5"]] == [(5, None, {})]
    assert got["row 5 of experiment 1"] == got["no rows"] == []
    assert got["after 2"] == [6, 4, 3] and got["after 2, two"] == [6, 4]
    assert got["last"] == [6, None, 5]
    none = {"running": 0, "ok": 0, "infeasible": 0, "pruned": 0, "failed": 0, "crashed": 0, "not run": 0}
    assert got["outcomes"] == [{**none, "ok": 1, "infeasible": 1, "failed": 2, "not run": 1}, none, {**none, "ok": 1}]
    assert got["emulator runs"] == [{"ok": 1}, {}, {"ok": 1}]
    assert got["analysed"] == [4, 0, 0]
    assert got["matches"] == {"NEEDS": [3], "banks.count=2": [2, 4], "(baseline)": [1], "tile=[1, 1]": [6],
                              "nowhere": []}
    # r1, r2, r3, r4, r7, r8 finished (analytical), the first started first; none since tomorrow; r6 emulated.
    assert got["finished"] == [(6, first_runs[0]), (0, None), (1, first_runs[1])]
    # (NaN read as None): c2's figures are of r2, not its latest analytical run r7
    assert got["rankable"] == ([1, 2, 3, 4, 6], ["baseline", "grid", "grid", "sampler", "sampler"],
                               [1.0, 7.0, 8.0, 4.0, None], ["ok", "failed", "infeasible", "failed", None],
                               {"dma_bytes": [4096.0, None, None, None, None],
                                "latency_cycles": [1000.0, None, None, None, None]})
    by_hand = [  # (query, (matching, pages, the first page's ids))
        (CandidateQuery(), (5, 1, [1, 2, 3, 4, 6])),
        (CandidateQuery(descending=True), (5, 1, [6, 4, 3, 2, 1])),
        # the candidates without the figure last either way, by id
        (CandidateQuery(sort="latency_cycles"), (5, 1, [1, 2, 3, 4, 6])),
        (CandidateQuery(sort="latency_cycles", descending=True), (5, 1, [1, 2, 3, 4, 6])),
        (CandidateQuery(sort="status"), (5, 1, [2, 4, 3, 1, 6])),
        (CandidateQuery(sort="status", descending=True), (5, 1, [1, 3, 2, 4, 6])),
        (CandidateQuery(sort="origin", descending=True), (5, 1, [4, 6, 2, 3, 1])),
        (CandidateQuery(status="failed"), (2, 1, [2, 4])),
        (CandidateQuery(status="not run"), (1, 1, [6])),
        (CandidateQuery(metric="latency_cycles", high=2000.0), (1, 1, [1])),
        (CandidateQuery(metric="dma_bytes", low=5000.0), (0, 1, [])),
        (CandidateQuery(text="banks.count=2", sort="origin"), (2, 1, [2, 4])),
        (CandidateQuery(page=2), (5, 1, [])),  # past the last page: no rows, the count still right
    ]
    assert got["pages"] == {repr(q): page for q, page in by_hand}
    # the order of every page (a page's query aside): the first page's but for page 2's query
    assert got["ranked"] == {repr(q): [1, 2, 3, 4, 6] if q.page == 2 else page[2] for q, page in by_hand}
    assert got["boundaries"] == [[1, 2], [3, 4], [6], []]


def test_the_live_view_counts_what_a_sweep_counts_as_done():
    assert set(page_reads.DONE_STATUSES) == DONE


def test_the_database_ranks_as_the_readers_do(store_url):
    """The reference (`queries.ranked_ids`: the database sorts and filters) agrees with the
    ranking every reader works out from one read (`queries.ranked`)."""
    with Store(store_url) as store, store.engine.connect() as connection:
        names = store.metric_names(1, 1)
        for q in QUERIES:
            assert (queries.ranked_ids(connection, 1, q, names).tolist()
                    == queries.ranked(queries.rankable(store, 1, names), q, names, store, 1).tolist()), q
            assert queries.reference_page(store, 1, q, names).rows == queries.candidate_page(store, 1, q, names).rows


# ---- the report's reads (`ReportReader`: the Store alone) -------------------------------------

@pytest.fixture(params=DATABASES)
def report_url(request, tmp_path) -> str:
    """A store for the report's reads: experiment 1's c1 (baseline; r1 ok: totals, cycles and
    energy per op, area and energy by component; r4 an emulator run with a component of its
    own), c2 (r2 ok with figures, then r3 failed: its latest analytical run), c3 (no run);
    experiment 2 without candidates."""
    if request.param == "sqlite":
        url = str(tmp_path / "report.db")
    else:
        url = f"{request.getfixturevalue('pg_url')}?evidence_dir={tmp_path / 'evidence'}"
    m = MetricIn
    with Store(url) as store:
        e = store.create_experiment("report", "h", [], "gemm", "a" * 64, "x", "s1")
        store.create_experiment("quiet", "h", [], "gemm", "a" * 64, "y", "s2")
        c1, _ = store.add_candidate(e, {"banks": {"count": 16}}, {}, "baseline")
        store.set_baseline(e, c1)
        c2, _ = store.add_candidate(e, {"banks": {"count": 20}}, {}, "grid")
        store.add_candidate(e, {"banks": {"count": 24}}, {}, "grid")
        store.finish_run(store.start_run(c1, "analytical"), "ok", [
            m("analytical", "latency_cycles", 1000.0, "cycles"), m("analytical", "area_mm2", 2.0, "mm2"),
            m("analytical", "energy_uj", 5.0, "uJ"), m("analytical", "power_mw", 50.0, "mW"),
            m("analytical", "cycles", 600.0, "cycles", "op", "matmul_0"),
            m("analytical", "cycles", 400.0, "cycles", "op", "relu_1"),
            m("analytical", "energy_uj", 3.0, "uJ", "op", "matmul_0"),
            # recorded cores first: the views list components in COMPONENTS order
            m("analytical", "area_mm2", 0.5, "mm2", "component", "cores"),
            m("analytical", "energy_uj", 1.0, "uJ", "component", "cores"),
            m("analytical", "area_mm2", 1.5, "mm2", "component", "private_sram"),
            m("analytical", "energy_uj", 4.0, "uJ", "component", "private_sram")])
        store.finish_run(store.start_run(c2, "analytical"), "ok", [
            m("analytical", "latency_cycles", 800.0, "cycles"), m("analytical", "area_mm2", 1.0, "mm2"),
            m("analytical", "energy_uj", 3.0, "uJ"),
            m("analytical", "cycles", 500.0, "cycles", "op", "matmul_0"),
            m("analytical", "cycles", 300.0, "cycles", "op", "relu_1"),
            m("analytical", "area_mm2", 1.0, "mm2", "component", "private_sram"),
            m("analytical", "energy_uj", 3.0, "uJ", "component", "private_sram")])
        store.finish_run(store.start_run(c2, "analytical"), "failed", error="boom")
        store.finish_run(store.start_run(c1, "emulator"), "ok", [
            m("emulator_cycles", "latency_cycles", 990.0, "cycles"),
            m("emulator_cycles", "area_mm2", 0.6, "mm2", "component", "cores"),
            m("emulator_cycles", "energy_uj", 1.1, "uJ", "component", "cores")])
    return url


def rows_of(frame) -> list:
    """A frame's index, columns and rows, NaN as None: what compares with ==."""
    return [list(frame.index), list(frame.columns),
            [[None if v != v else v for v in row] for row in frame.itertuples(index=False)]]


def test_the_store_keeps_the_report_readers_signatures():
    for name in REPORT_METHODS:
        wanted = inspect.signature(getattr(ReportReader, name))
        found = inspect.signature(getattr(Store, name))
        assert [(p.name, p.kind, p.default) for p in found.parameters.values()] == [
            (p.name, p.kind, p.default) for p in wanted.parameters.values()], name
    assert set(REPORT_METHODS) == {"candidate_metrics", "op_metric_table", "component_figures", "last_run_id"}


def test_the_report_reads_what_the_writer_wrote(report_url):
    """Each of the report's reads on both databases, worked out by hand."""
    with Store(report_url) as store:
        assert isinstance(store, ReportReader)
        table = store.candidate_metrics(1, ["latency_cycles", "area_mm2"])
        found = store.figure_columns(["analytical"], ["latency_cycles", "area_mm2"], 1, with_runs=True)
        same = store.candidate_metrics(1, ["latency_cycles", "area_mm2"], found)
        none = store.candidate_metrics(2, ["latency_cycles"])
        ops = store.op_metric_table(1, None, "cycles")
        energy = store.op_metric_table(1, [1, 2], "energy_uj")
        no_ops = [store.op_metric_table(1, [], "cycles"), store.op_metric_table(1, [3], "cycles")]
        parts = store.component_figures(1, [2, 1, 3], "analytical")
        emulated = store.component_figures(1, [1, 3], "emulator_cycles")
        no_parts = [store.component_figures(1, [], "analytical"), store.component_figures(1, [3], "analytical")]
        last = [store.last_run_id(1), store.last_run_id(2)]
    # c2's latest analytical run (r3) failed: no figures shown, though r2 recorded some
    assert rows_of(table) == [[0, 1, 2], ["candidate_id", "origin", "is_baseline", "diff", "metric_run_id", "status",
                                          "reason", "latency_cycles", "area_mm2"],
                              [[1, "baseline", True, "{}", 1.0, "ok", None, 1000.0, 2.0],
                               [2, "grid", False, '{"config.banks.count":[16,20]}', 3.0, "failed", None, None, None],
                               [3, "grid", False, '{"config.banks.count":[16,24]}', None, None, None, None, None]]]
    assert rows_of(same) == rows_of(table) and len(none) == 0 and "latency_cycles" in none
    assert rows_of(ops) == [[1, 2], ["matmul_0", "relu_1"], [[600.0, 400.0], [500.0, 300.0]]]
    assert rows_of(energy) == [[1], ["matmul_0"], [[3.0]]]
    assert all(t.empty for t in no_ops)
    # candidates as asked, components in COMPONENTS order; each run's recorded totals (NaN: none)
    assert rows_of(parts.parts) == [list(range(3)), ["candidate_id", "run_id", "component", "area_mm2", "energy_uj"],
                                    [[2, 2, "private_sram", 1.0, 3.0], [1, 1, "private_sram", 1.5, 4.0],
                                     [1, 1, "cores", 0.5, 1.0]]]
    assert rows_of(parts.totals) == [[2, 1], ["run_id", "area_mm2", "energy_uj", "power_mw"],
                                     [[2, 1.0, 3.0, None], [1, 2.0, 5.0, 50.0]]]
    assert parts.kind == "analytical" and parts.candidates == [2, 1]
    assert rows_of(emulated.parts)[2] == [[1, 4, "cores", 0.6, 1.1]]
    assert rows_of(emulated.totals) == [[1], ["run_id", "area_mm2", "energy_uj", "power_mw"], [[4, None, None, None]]]
    assert all(p.parts.empty and p.totals.empty for p in no_parts)
    assert last == [4, None]
