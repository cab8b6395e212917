"""The report shows what the store holds: checked through the data behind each figure."""

import html
import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _dominated_by_any(values: np.ndarray, directions: list[str]) -> np.ndarray:
    """The definition, all pairs at once (the former implementation): the reference."""
    v = np.asarray(values, dtype=float).copy()
    for j, d in enumerate(directions):
        if d == "maximize":
            v[:, j] = -v[:, j]
    le = (v[None, :, :] <= v[:, None, :]).all(axis=2)
    lt = (v[None, :, :] < v[:, None, :]).any(axis=2)
    return ~(le & lt).any(axis=1)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3).flatmap(lambda k: st.tuples(
    st.lists(st.lists(st.integers(0, 5), min_size=k, max_size=k), min_size=1, max_size=40),
    st.lists(st.sampled_from(["minimize", "maximize"]), min_size=k, max_size=k))))
def test_pareto_mask_matches_the_definition(case):
    # Small integer values: many ties and duplicate points, where sweeps go wrong.
    points, directions = case
    values = np.array(points, dtype=float)
    assert list(pareto_mask(values, directions)) == list(_dominated_by_any(values, directions))


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
    assert "<script>alert(1)" not in page  # the page's own scripts (plotly, sorting) only
    assert html.escape("<script>alert(1)</script> & two workers beat one") in page
    every = page.split("<h2>Every candidate</h2>")[1].split("<h2>")[0]
    body_rows = re.findall(r'<tr id="c\d+" class="(ok|infeasible|failed)[^"]*" data-outcome="', every)
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


def test_markdown_twin_ops_breakdown_and_distinct_outcomes(tmp_path, monkeypatch, cli):
    import dse.runner.execution as execution

    real = execution._analytical_batch

    def flaky(graph, cands, *rest):  # one candidate fails, so the plot has all three outcomes
        if any(c.mapping.workers == 2 and c.chip.banks.count == 16 for c in cands):
            raise RuntimeError("injected fault")
        return real(graph, cands, *rest)

    monkeypatch.setattr(execution, "_analytical_batch", flaky)
    spec = write_spec(tmp_path, name="md")
    spec.write_text(spec.read_text().replace("Two workers beat one", "Two <b>workers</b> | beat one"))
    db = tmp_path / "r.db"
    run_sweep(spec, db, progress=False)
    with Store(db) as store:
        report = write_report(store, "md", tmp_path / "out")
        table = store.metric_table("md", "analytical")
    md = report.markdown.read_text()
    assert "Two &lt;b&gt;workers&lt;/b&gt; \\| beat one" in md and "<b>" not in md
    assert (tmp_path / "out" / "md_files" / "pareto.png").stat().st_size > 1000
    assert "](md_files/pareto.png)" in md

    # The Pareto plot draws each outcome with its own marker and count.
    pareto = report.figures["pareto"]
    labels = [t.get_text() for t in pareto.figure.axes[0].get_legend().get_texts()]
    counts = table["status"].value_counts()
    assert f"infeasible ({counts['infeasible']})" in labels and "failed (1)" in labels
    assert f"feasible ({counts['ok']})" in labels

    # The per-op breakdown shows the chosen candidates; each bar adds up to its total latency.
    ops = report.figures["ops"].data
    # "Best" is the verdict's: the failed candidate was the only one faster than the baseline,
    # so none passes, the hypothesis is refuted and there is no best (was: the fastest feasible).
    # (#18: the sweep proposes, a person decides: the status stays "testing")
    proposals = report.view.decisions[report.view.decisions["kind"] == "proposal"]
    assert report.view.exp["status"] == "testing" and proposals.iloc[-1]["verdict"] == "refuted"
    assert report.view.best_id is None
    # each decision says the evidence kinds it rests on and, on models only, the hardware
    # caveat (`dse.runner.caveats`, the sentence `dse show` and the UI print too)
    from dse.runner.caveats import hardware_caveat, kinds_text

    kinds = proposals.iloc[-1]["evidence_kinds"]
    assert kinds_text(kinds) == "analytical model"
    log = report.path.read_text().split('id="decision-log"')[1].split("</table>")[0]
    assert f'<td class="evidence-kinds">analytical model<br><span class="caveat">{hardware_caveat(kinds)}</span>' in log
    line = next(line for line in md.splitlines() if "| proposal | refuted |" in line)
    assert "| analytical model (hardware may differ: this rests on analytical model only, no measurement" in line
    assert ops.index[0] == report.view.baseline_id
    # the gemm recipe after its steps: quantize the input, the int8 product, dequantize
    assert set(ops.columns) == {"x_int8", "matmul_acc", "matmul"}
    totals = table.set_index("candidate_id")["latency_cycles"]
    for cid, row in ops.iterrows():
        assert row.sum() == totals[cid]

    code, out, _ = cli("report", "--history", "--db", db, "--out", tmp_path / "hist")
    assert code == 0 and out.strip().endswith("history.html")
    page = (tmp_path / "hist" / "history.html").read_text()
    assert "md" in page and "confirmed" in page
    code, _, err = cli("report", "md", "--db", db, "--x", "sram")
    assert code == 2 and "--x" in err and "private_sram_bytes" in err


def test_history_plot_shows_every_experiment_and_decision(tmp_path):
    from dse.report import history_plot

    db = tmp_path / "r.db"
    run_sweep(write_spec(tmp_path, name="a", banks="[16]"), db, progress=False)
    run_sweep(write_spec(tmp_path, name="b", banks="[16, 20]"), db, progress=False)
    with Store(db) as store:
        fig = history_plot(store.experiments(), store.decisions())
    ax = fig.figure.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert list(fig.data["experiment"]) == ["a", "b"] and set(fig.data["verdict"]) == {"confirmed"}


def test_the_report_names_the_verdicts_best_and_is_interactive_and_self_contained(tmp_path, cli):
    from uiserver import SPEC

    spec = tmp_path / "best.toml"
    spec.write_text(SPEC.format(name="best", banks="[4, 8, 16, 20]"))
    db = tmp_path / "r.db"
    run_sweep(spec, db, progress=False)
    with Store(db) as store:
        report = write_report(store, "best", tmp_path / "out")
        verdict = store.decisions("best").iloc[-1]
        table = store.metric_table("best", "analytical")
    named = int(re.search(r"best is candidate (\d+)", verdict["rationale"]).group(1))
    assert report.best_id == named
    ok = table[(table["status"] == "ok")]
    fastest = int(ok.sort_values("latency_cycles").iloc[0]["candidate_id"])
    assert fastest != named  # the fastest feasible uses more SRAM than the baseline: it does not pass
    page = report.path.read_text()
    assert f'vs <a href="#c{named}">candidate {named}</a>' in page
    # Where the cycles go: the baseline and that same best (not the first front members by id).
    baseline = report.view.baseline_id
    assert f"Analytical cycles per op for baseline (#{baseline}), best (#{named})." in page
    assert list(report.figures["ops"].data.index) == [baseline, named]
    assert 'id="parallel"' in page and 'id="ops"' in page and 'id="model-vs-emulator"' not in page  # not emulated
    # One self-contained file: plotly.js inlined, no script, style or image fetched from anywhere.
    assert "plotly.js v" in page and "Plotly.newPlot" in page and not re.search(r"<script[^>]*\bsrc=", page)
    markup = re.sub(r"<script\b.*?</script>", "", page, flags=re.S)
    assert not re.search(r'(?:src|href)="(?:https?:)?//', markup)
    assert page.count('<tr id="c') == len(table) and 'class="sortable"' in page
    assert "passes acceptance" in page and "acceptance region" in page
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", markup)  # timestamps to the second
    code, out, _ = cli("report", "--history", "--db", db, "--out", tmp_path / "out")
    history = (tmp_path / "out" / "history.html").read_text()
    assert code == 0 and '<a href="best.html">best</a>' in history and (tmp_path / "out" / "best.html").exists()
    assert '"type":"date"' in history.replace(" ", "")
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", re.sub(r"<script\b.*?</script>", "", history, flags=re.S))


def test_parallel_coordinates_by_hand():
    import json as json_lib

    import pandas as pd

    from dse.report.interactive import knob_values, parallel_figure

    # The baseline keeps every knob; the diff's first value is the baseline's.
    table = pd.DataFrame({
        "candidate_id": [1, 2, 3, 4],
        "status": ["ok", "ok", "ok", "infeasible"],
        "diff": ["{}", json_lib.dumps({"mapping.policy": ["framework", "mapper"]}),
                 json_lib.dumps({"config.banks.count": [16, 20], "mapping.policy": ["framework", "mapper"]}),
                 json_lib.dumps({"config.banks.count": [16, 4]})],
        "latency_cycles": [100.0, 80.0, 60.0, None],
        "private_sram_bytes": [256.0, 256.0, 320.0, None],
    })
    knobs = knob_values(table)
    assert knobs.to_dict("list") == {"config.banks.count": [16, 16, 20, 4],
                                     "mapping.policy": ["framework", "mapper", "mapper", "framework"]}
    fig, data = parallel_figure(table, [{"metric": "latency_cycles"}, {"metric": "private_sram_bytes"}])
    dims = fig.data[0].dimensions
    # The infeasible candidate has no objective values: not drawn. Its banks.count = 4 is not
    # an axis value; a policy is a category, ticks naming it.
    assert [d.label for d in dims] == ["banks.count", "policy", "latency cycles", "private sram bytes"]
    assert list(dims[0].values) == [16, 16, 20] and list(dims[1].values) == [0, 1, 1]
    assert list(dims[1].ticktext) == ["framework", "mapper"] and list(dims[2].values) == [100, 80, 60]
    assert list(data["candidate_id"]) == [1, 2, 3]
    assert list(fig.data[0].line.color) == [100, 80, 60]
