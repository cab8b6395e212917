"""Why candidates stopped, said once a reason with its count, in `dse show` and the report
(the sweep's summary: tests/test_runner.py::test_quickstart_main_job_from_the_cli)."""

from __future__ import annotations

import re

from dse.records import MetricIn, Store
from dse.records.light import open_light
from dse.runner.reasons import reason_lines

TILE = "op mm: no legal tile for M=128 N=1024 K=256 within 4 banks"


def reasons_store(path) -> None:
    with Store(path) as store:
        e = store.create_experiment("tiles", "4 banks are enough", [], "gemm", "a" * 64, 'name = "tiles"', "s1")
        base, _ = store.add_candidate(e, {"banks": {"count": 16}}, {}, "baseline")
        store.set_baseline(e, base)
        store.finish_run(store.start_run(base, "analytical"), "ok",
                         [MetricIn("analytical", "latency_cycles", 100.0, "cycles")])
        for count in range(1, 6):  # five candidates stopped by one reason, two by another
            cid, _ = store.add_candidate(e, {"banks": {"count": count}}, {}, "grid")
            store.finish_run(store.start_run(cid, "analytical"), "infeasible", reason=TILE)
        for workers in (8, 16):
            cid, _ = store.add_candidate(e, {"banks": {"count": 16}}, {"workers": workers}, "grid")
            store.finish_run(store.start_run(cid, "analytical"), "infeasible", reason="8 workers, 4 cores")


def test_reasons_are_grouped_once_with_counts_in_show_and_report(tmp_path, cli):
    db = tmp_path / "r.db"
    reasons_store(db)
    expected = [("infeasible", TILE, 5), ("infeasible", "8 workers, 4 cores", 2)]
    with Store(db) as store:
        assert store.reason_groups("tiles") == expected
    light = open_light(str(db))
    assert light is not None and light.reason_groups(1) == expected  # the light read: the same SQL
    assert reason_lines(expected) == [f"[1] 5 candidates infeasible: {TILE}", "[2] 2 candidates infeasible: 8 workers, 4 cores"]

    code, out, _ = cli("show", "tiles", "--db", db)
    assert code == 0 and out.count(TILE) == 1 and f"[1] 5 candidates infeasible: {TILE}" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+\d+\s+grid", line)]
    assert [r[-1] for r in rows] == ["[1]"] * 5 + ["[2]"] * 2  # each row refers to its reason's line

    code, out, _ = cli("report", "tiles", "--db", db, "--out", tmp_path / "rep")
    assert code == 0
    page = (tmp_path / "rep" / "tiles.html").read_text()
    table = page[page.index('<table id="reasons">'):]
    table = table[:table.index("</table>")]
    cells = re.findall(r"<tr class=\"infeasible\"><td>(\[\d\])</td><td class=\"num\">(\d+)</td><td>infeasible</td>"
                       r"<td>([^<]*)</td>", table)
    assert cells == [("[1]", "5", TILE), ("[2]", "2", "8 workers, 4 cores")]
    md = (tmp_path / "rep" / "tiles.md").read_text()
    assert md.count("5 candidates infeasible") == 1
