"""The details behind the answer, each computed once and shown alike everywhere: reasons a
candidate stopped, grouped with counts (`dse show`, the report; the sweep's summary:
tests/test_runner.py::test_quickstart_main_job_from_the_cli); host-time differences within
the repeats' spread flagged as noise (`dse compare`, the report); the search history and the
knobs' importance (the report and the UI, the same numbers)."""

from __future__ import annotations

import html
import json
import re
import urllib.request

import pytest

from dse.records import MetricIn, Store
from dse.records.light import open_light
from dse.report import write_report
from dse.report.search_history import MIN_TRIALS, importance_rows, search_history
from dse.runner.noise import host_time_comparison
from dse.runner.reasons import reason_lines
from uiserver import dse_ui_thread

TILE = "op mm: no legal tile for M=128 N=1024 K=256 within 4 banks"
SPEC_TEXT = 'name = "tiles"\n[[objectives]]\nmetric = "latency_cycles"\ndirection = "minimize"\n'
# (banks, workers) -> latency: workers decide it, banks barely touch it.
GRID = {(b, w): 1000.0 / w + b * 0.5 for b in (8, 12, 16) for w in (1, 2, 4)}


def host(median: float, low: float, high: float, runs: int = 3) -> list[MetricIn]:
    return [MetricIn("emulator_host_time", "run_seconds_median", median, "s"),
            MetricIn("emulator_host_time", "run_seconds_min", low, "s"),
            MetricIn("emulator_host_time", "run_seconds_max", high, "s"),
            MetricIn("emulator_host_time", "runs", float(runs), "count")]


def fill(store: Store) -> dict:
    e = store.create_experiment("tiles", "more workers beat more banks",
                                [{"expr": "latency_cycles < baseline_latency_cycles", "prose": "faster"}],
                                "gemm", "a" * 64, SPEC_TEXT, "s1")
    base, _ = store.add_candidate(e, {"banks": {"count": 16}}, {"workers": 1}, "baseline")
    store.set_baseline(e, base)
    ids = {(16, 1): base}
    store.finish_run(store.start_run(base, "analytical"), "ok",
                     [MetricIn("analytical", "latency_cycles", GRID[16, 1], "cycles")])
    for (banks, workers), latency in GRID.items():
        if (banks, workers) == (16, 1):
            continue
        diff = {k: v for k, v in (("config.banks.count", [16, banks]), ("mapping.workers", [1, workers]))
                if v[0] != v[1]}
        cid, _ = store.add_candidate(e, {"banks": {"count": banks}}, {"workers": workers}, "grid", diff)
        ids[banks, workers] = cid
        store.finish_run(store.start_run(cid, "analytical"), "ok",
                         [MetricIn("analytical", "latency_cycles", latency, "cycles")])
    for count in range(1, 6):  # five candidates stopped by one reason, two by another
        cid, _ = store.add_candidate(e, {"banks": {"count": count}}, {"workers": 1}, "grid",
                                     {"config.banks.count": [16, count]})
        store.finish_run(store.start_run(cid, "analytical"), "infeasible", reason=TILE)
    for workers in (8, 16):
        cid, _ = store.add_candidate(e, {"banks": {"count": 16}}, {"workers": workers}, "grid",
                                     {"mapping.workers": [1, workers]})
        store.finish_run(store.start_run(cid, "analytical"), "infeasible", reason="8 workers, 4 cores")
    # The baseline and the best emulated: host times 1.59x apart, within either's spread.
    best = ids[8, 4]
    store.finish_run(store.start_run(base, "emulator"), "ok", host(0.100, 0.080, 0.210))
    store.finish_run(store.start_run(best, "emulator"), "ok", host(0.159, 0.090, 0.200))
    # Two more experiments: a constant objective, and a single feasible candidate.
    for name, latencies in (("flat", [500.0, 500.0, 500.0, 500.0]), ("lonely", [500.0])):
        x = store.create_experiment(name, "-", [], "gemm", "a" * 64, SPEC_TEXT.replace("tiles", name), name)
        for i, latency in enumerate(latencies):
            cid, _ = store.add_candidate(x, {"banks": {"count": 16 + i}}, {"workers": 1}, "grid",
                                         {"config.banks.count": [16, 16 + i]} if i else {})
            if not i:
                store.set_baseline(x, cid)
            store.finish_run(store.start_run(cid, "analytical"), "ok",
                             [MetricIn("analytical", "latency_cycles", latency, "cycles")])
    return dict(base=base, best=best, ids=ids)


@pytest.fixture(scope="module")
def answered(tmp_path_factory):
    """The store, its report of 'tiles' (written once), and the ids."""
    folder = tmp_path_factory.mktemp("answer")
    db = folder / "r.db"
    with Store(db) as store:
        ids = fill(store)
        report = write_report(store, "tiles", folder / "rep")
    return db, ids, report.path.read_text(), report.markdown.read_text()


def test_reasons_are_grouped_once_with_counts_in_show_and_report(answered, cli):
    db, _, page, md = answered
    expected = [("infeasible", TILE, 5), ("infeasible", "8 workers, 4 cores", 2)]
    with Store(db) as store:
        assert store.reason_groups("tiles") == expected
    light = open_light(str(db))
    assert light is not None and light.reason_groups(1) == expected  # the light read: the same SQL
    assert reason_lines(expected) == [f"[1] 5 candidates infeasible: {TILE}",
                                      "[2] 2 candidates infeasible: 8 workers, 4 cores"]
    code, out, _ = cli("show", "tiles", "--db", db, "--limit", "100")
    assert code == 0 and out.count(TILE) == 1 and f"[1] 5 candidates infeasible: {TILE}" in out
    refs = [line.split()[-1] for line in out.splitlines() if re.match(r"\s+\d+\s+grid .* infeasible", line)]
    assert refs == ["[1]"] * 5 + ["[2]"] * 2  # each row refers to its reason's line
    table = page[page.index('<table id="reasons">'):]
    cells = re.findall(r"<tr class=\"infeasible\"><td>(\[\d\])</td><td class=\"num\">(\d+)</td><td>infeasible</td>"
                       r"<td>([^<]*)</td>", table[:table.index("</table>")])
    assert cells == [("[1]", "5", TILE), ("[2]", "2", "8 workers, 4 cores")]
    assert md.count("5 candidates infeasible") == 1


def test_host_time_within_the_spread_is_noise():
    a, b = {"run_seconds_median": 0.100, "run_seconds_min": 0.080, "run_seconds_max": 0.210, "runs": 3}, \
           {"run_seconds_median": 0.159, "run_seconds_min": 0.090, "run_seconds_max": 0.200, "runs": 3}
    said = host_time_comparison(a, b)
    assert said.noise is True and said.ratio == pytest.approx(1.59) and "within the repeats' spread" in said.words
    tight = {**b, "run_seconds_min": 0.158, "run_seconds_max": 0.160}
    a_tight = {**a, "run_seconds_min": 0.099, "run_seconds_max": 0.101}
    assert host_time_comparison(a_tight, tight).noise is False  # 0.059 s apart, spreads 0.002 s
    assert host_time_comparison(a_tight, tight, identical=True).noise is True  # identical designs: noise
    one = {"run_seconds_median": 0.1, "run_seconds_min": 0.1, "runs": 1}
    assert host_time_comparison(one, {**one, "run_seconds_median": 0.2}).noise is None  # spread unknown
    assert host_time_comparison({}, b) is None


def test_compare_and_report_flag_the_host_time_as_noise(answered, cli):
    db, ids, page, md = answered
    code, out, _ = cli("compare", ids["base"], ids["best"], "--db", db)
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("emulator host time"))
    assert "B/A 1.59x: within the repeats' spread" in line and "noise, not a difference" in line
    assert ('<p id="host-time">Emulator host time (median): best/baseline 1.59x: within the repeats\' spread '
            '(baseline: 0.08-0.21 s over 3 runs, best: 0.09-0.2 s over 3 runs): noise') in html.unescape(page)
    assert "1.59 (noise)" in page and "1.59 (noise)" in md


def test_search_history_and_importance_agree_in_report_and_ui(answered):
    db, ids, page, md = answered
    with Store(db) as store:
        table = store.candidate_metrics(1, ["latency_cycles"])
    history = search_history(table, {"metric": "latency_cycles", "direction": "minimize"})
    # Hand-computed: the best is 4 workers on 8 banks; the history's best so far never rises.
    assert history.best == GRID[8, 4] == min(GRID.values())
    assert history.trials == len(GRID) and len(history.ids) == len(GRID) + 7
    steps = [b for b in history.best_so_far if b is not None]
    assert steps == sorted(steps, reverse=True) and history.values.count(None) == 7
    assert list(history.importances)[0] == "workers" and history.importances["workers"] > 0.5
    assert sum(history.importances.values()) == pytest.approx(1.0)
    rows = importance_rows(history)

    def importance_table(html: str) -> list[tuple[str, str]]:
        part = html[html.index('id="importance"'):]
        return re.findall(r"<tr><td>([^<]+)</td><td class=\"num\">([0-9.]+)</td></tr>", part[:part.index("</table>")])

    assert importance_table(page) == rows
    assert all(f"| {k} | {v} |" in md for k, v in rows)
    with dse_ui_thread(str(db)) as base:
        with urllib.request.urlopen(f"{base}/experiments/1") as response:
            ui = response.read().decode()
        assert importance_table(ui) == rows
        best_line = re.search(r'<p id="search-best">([^<]+)</p>', ui).group(1)
        assert best_line in page and f"{history.best:.6g}" in best_line
        with urllib.request.urlopen(f"{base}/experiments/1/search.json") as response:
            figure = json.loads(response.read())
        assert figure["summary"]["best"] == history.best and figure["summary"]["importances"] == history.importances
        assert figure["data"][1]["y"][-1] == history.best  # the best-so-far line ends at the best
        for name, words in (("flat", "all 4 feasible candidates have the same latency_cycles (500)"),
                            ("lonely", f"1 feasible candidate with latency_cycles; importance needs at least {MIN_TRIALS}")):
            with urllib.request.urlopen(f"{base}/experiments/{name}") as response:
                ui = response.read().decode()
            assert f"Knob importance: not enough trials: {words}." in ui and 'id="importance"' not in ui
