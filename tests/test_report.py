"""The report shows what the store holds: checked through the data behind each figure."""

import html
import re

import numpy as np

from dse.records import Store
from dse.report import pareto_mask, pareto_plot, write_report
from dse.runner import run_sweep

from test_runner import write_spec


def test_pareto_mask_by_hand():
    pts = np.array([[1, 5], [2, 3], [3, 4], [4, 1], [2, 3]])
    # (3,4) is dominated by (2,3); equal points do not dominate each other.
    assert list(pareto_mask(pts, ["minimize", "minimize"])) == [True, True, False, True, True]
    # Maximising y, (1,5) is best on both axes and dominates every other point.
    assert list(pareto_mask(pts, ["minimize", "maximize"])) == [True, False, False, False, False]


def test_report_escapes_user_text_and_shows_every_candidate(tmp_path):
    spec = write_spec(tmp_path, name="xss")
    text = spec.read_text().replace(
        'hypothesis = "Two workers beat one for a 64^3 gemm on goban"',
        'hypothesis = "<script>alert(1)</script> & two workers beat one"')
    spec.write_text(text)
    db = tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False)
    with Store(db) as store:
        report = write_report(store, "xss", tmp_path / "out")
        cands = store.candidates(result.experiment_id)
        table = store.metric_table(result.experiment_id, "analytical")
        exp = store.experiment("xss")
    page = report.path.read_text()
    assert "<script>" not in page
    assert html.escape("<script>alert(1)</script> & two workers beat one") in page
    body_rows = re.findall(r'<tr class="(ok|infeasible|failed)[^"]*">', page)
    assert len(body_rows) == len(cands) == 10
    for reason in cands.loc[cands["status"] == "infeasible", "reason"]:
        assert html.escape(reason) in page
    assert "data:image/png;base64," in page and "confirmed" in page
    assert report.best_id is not None

    plot = pareto_plot(table, baseline_id=exp["baseline_candidate_id"])
    feasible = plot.data[plot.data["status"] == "ok"]
    assert len(plot.data) == 10 and len(feasible) == (cands["status"] == "ok").sum() == 3
    expected = pareto_mask(feasible[["x", "y"]].to_numpy(), ["minimize", "minimize"])
    assert list(feasible["on_front"]) == list(expected)
    ax = plot.figure.axes[0]
    assert ax.get_xlabel() == "private sram bytes" and ax.get_ylabel() == "latency cycles"
    # Drawn: feasible points, the front line, infeasible crosses, the baseline star.
    offsets = [c.get_offsets() for c in ax.collections]
    assert [len(o) for o in offsets] == [3, 7, 1]
    assert len(ax.lines[0].get_xdata()) == int(feasible["on_front"].sum())
