"""Area, energy and power in `dse report` (HTML and its Markdown twin) and `dse compare`:
one real sweep (uiserver's "emulated": 6 candidates, the two fastest emulated) into a real
SQLite store, and each view checked against the store's own reads - every view shows the
figures recorded, the stacked bars add up to the recorded totals, each evidence kind apart,
and the Pareto fronts of latency, energy and area mark the candidates worked out by hand
(ppa_expect). The UI's pages are checked the same way in test_ui.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

from dse.ppa.components import COMPONENTS
from dse.records import Store
from dse.report import write_report
from dse.report.html import fmt_value
from dse.report.interactive import PPA_PAIRS, ppa_pareto_name
from dse.runner import run_sweep
from ppa_expect import decode, plotly_figures, stored
from uiserver import EMULATE_TOP_2, SPEC

KINDS = ("analytical", "emulator_cycles")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ppa")
    spec = folder / "ppa.toml"
    spec.write_text(SPEC.format(name="ppa", banks="[20]") + EMULATE_TOP_2)
    db = str(folder / "r.db")
    run_sweep(spec, db, progress=False)
    with Store(db) as store:
        report = write_report(store, "ppa", folder / "out")
    return db, stored(db, "ppa"), report


def _cells(html: str, table_id: str) -> dict[str, list[str]]:
    """A table of the page: row key (its data-component) -> the cells' texts after the first."""
    body = re.search(rf'<table[^>]*id="{re.escape(table_id)}".*?</table>', html, re.S).group(0)
    rows = {}
    for key, row in re.findall(r'<tr[^>]*data-component="([^"]+)"[^>]*>(.*?)</tr>', body, re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        rows[key] = cells[1:]
    return rows


def _bars(figure: dict) -> dict[tuple[str, str], dict[str, float]]:
    """A by-component figure's segments: (x axis, bar label) -> {component: value}."""
    out: dict = {}
    for trace in figure["data"]:
        for label, value in zip(decode(trace["y"]), decode(trace["x"])):
            out.setdefault((trace.get("xaxis", "x"), str(label)), {})[trace["name"]] = float(value)
    return out


def test_report_html_shows_the_recorded_area_energy_and_power(swept):
    db, s, report = swept
    page = report.path.read_text()
    figures = plotly_figures(page)
    labels = {s.baseline: "baseline", s.best: "best"}
    # By component, kind by kind: the baseline and the best where they have the kind.
    for kind in KINDS:
        have = [i for i in labels if len(s.component(kind, i))]
        assert have == ([s.baseline, s.best] if kind == "analytical" else [s.best])  # only the two fastest emulated
        bars = _bars(figures[f"components-{kind.replace('_', '-')}"])
        assert sorted({label for _, label in bars}) == sorted(f"{labels[i]} (c{i})" for i in have)
        table = _cells(page, f"components-table-{kind}")
        for n, ident in enumerate(have):
            parts = s.component(kind, ident)
            for axis, metric in (("x", "area_mm2"), ("x2", "energy_uj")):
                segments = bars[(axis, f"{labels[ident]} (c{ident})")]
                assert list(segments) == [c for c in COMPONENTS if c in parts.index]  # the order every view keeps
                assert segments == parts[metric].to_dict()  # the stored values, bit for bit
                assert sum(segments.values()) == pytest.approx(s.totals[kind].loc[ident, metric], rel=1e-12)
            for component, row in parts.iterrows():
                assert table[component][2 * n:2 * n + 2] == [fmt_value(row["area_mm2"]), fmt_value(row["energy_uj"])]
            total = s.totals[kind].loc[ident]
            assert table["total"][2 * n:2 * n + 2] == [fmt_value(total["area_mm2"]), fmt_value(total["energy_uj"])]
            assert table["power"][2 * n + 1] == fmt_value(total["power_mw"])
    assert f"Without emulator_cycles figures: baseline (#{s.baseline})" in page

    # The Pareto plots of the three pairs: the front worked out by hand, the baseline and best marked.
    for x, y in PPA_PAIRS:
        name = ppa_pareto_name(x, y)
        assert s.front(x, y) == s.hand_front(x, y)
        traces = {t["name"].split(" (")[0]: t for t in figures[name.replace("_", "-")]["data"]}
        assert set(decode(traces["Pareto front"]["customdata"]).tolist()) == s.hand_front(x, y)
        assert decode(traces["baseline"]["customdata"]).tolist() == [s.baseline]
        assert decode(traces["best"]["customdata"]).tolist() == [s.best]
        front = re.search(rf'id="front-{name}" data-front="([^"]*)"', page).group(1)
        assert {int(i) for i in front.split(",")} == s.hand_front(x, y)
        # every feasible point drawn at its recorded figures
        t = s.totals["analytical"]
        drawn = {}
        for trace in figures[name.replace("_", "-")]["data"]:
            if trace.get("type") == "scatter" and trace["name"].split(" (")[0] in ("feasible", "passes acceptance"):
                drawn.update(zip(decode(trace["customdata"]).tolist(), zip(decode(trace["x"]), decode(trace["y"]))))
        assert drawn == {i: (t.loc[i, x], t.loc[i, y]) for i in t.index[t["status"] == "ok"]}

    # Energy per op of the baseline and the best: the recorded per-op figures, summing to the total.
    ops = figures["op-energy"]["data"]
    recorded = s.op_energy.dropna(subset=["energy_uj"])
    for n, ident in enumerate((s.baseline, s.best)):
        mine = recorded[recorded["candidate_id"] == ident].set_index("scope_key")["energy_uj"]
        assert decode(ops[0]["y"]).tolist()[n] == f"{labels[ident]} (c{ident})"
        assert {t["name"]: float(decode(t["x"])[n]) for t in ops} == mine.to_dict()
        assert mine.sum() == pytest.approx(s.totals["analytical"].loc[ident, "energy_uj"], rel=1e-9)

    # The candidate table: area, energy and power of every candidate, as recorded.
    every = page.split("<h2>Every candidate</h2>")[1].split("</table>")[0]
    heads = re.findall(r"<th>([^<]*)</th>", every)
    for metric in ("area_mm2", "energy_uj", "power_mw"):
        col = heads.index(f"{metric} (analytical)")
        for ident, value in s.totals["analytical"][metric].items():
            row = re.search(rf'<tr id="c{ident}"[^>]*>(.*?)</tr>', every, re.S).group(1)
            cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            assert cells[col] == fmt_value(value)


def test_markdown_twin_shows_the_same_figures(swept):
    db, s, report = swept
    md = report.markdown.read_text()
    folder = report.markdown.parent
    for name in ("components_analytical", "components_emulator_cycles", "op_energy", "ppa_pareto"):
        assert f"](ppa_files/{name}.png)" in md and (folder / "ppa_files" / f"{name}.png").stat().st_size > 1000
    for kind in KINDS:
        section = md.split(f"### By component ({kind})")[1].split("###")[0]
        have = [s.baseline, s.best] if kind == "analytical" else [s.best]
        rows = {}
        for line in section.splitlines():
            if line.startswith("| ") and not line.startswith("| component"):
                cells = [c.strip() for c in line.strip("|").split("|")]
                rows[cells[0].replace("\\_", "_").strip("*")] = cells[1:]
        for n, ident in enumerate(have):
            for component, row in s.component(kind, ident).iterrows():
                assert rows[component][2 * n:2 * n + 2] == [fmt_value(row["area_mm2"]), fmt_value(row["energy_uj"])]
            total = s.totals[kind].loc[ident]
            assert rows["total (recorded)"][2 * n:2 * n + 2] == [fmt_value(total["area_mm2"]),
                                                                 fmt_value(total["energy_uj"])]
            assert rows["power mW"][2 * n] == fmt_value(total["power_mw"])
        # the PNG's bars: the same stored figures, adding up to the totals
        drawn = report.figures[f"components_{kind}"].data
        for ident in have:
            mine = drawn[drawn["candidate_id"] == ident].set_index("component")
            assert list(mine.index) == [c for c in COMPONENTS if c in mine.index]
            assert mine[["area_mm2", "energy_uj"]].to_dict() == s.component(kind, ident).to_dict()
            assert mine["energy_uj"].sum() == pytest.approx(s.totals[kind].loc[ident, "energy_uj"], rel=1e-12)
    for x, y in PPA_PAIRS:
        line = re.search(rf"#### {y} vs {x}\n\nOn the front \((\d+)\): (.*)", md)
        listed = {int(i) for i in re.findall(r"#(\d+)", line.group(2))}
        assert listed == s.hand_front(x, y) and int(line.group(1)) == len(listed)
        panels = report.figures["ppa_pareto"].data  # the PNG: the three pairs side by side
        plot = panels[(panels["x_metric"] == x) & (panels["y_metric"] == y)]
        assert set(plot.loc[plot["on_front"], "candidate_id"]) == s.hand_front(x, y)
    every = md.split("## Every candidate")[1].splitlines()
    head = next(line for line in every if line.startswith("| id |"))
    cols = [c.strip() for c in head.strip("|").split("|")]
    for ident, r in s.totals["analytical"].iterrows():
        line = next(line for line in every if re.match(rf"\| {ident} \|", line))
        cells = [c.strip() for c in line.strip("|").split("|")]
        for metric in ("area_mm2", "energy_uj", "power_mw"):
            assert cells[cols.index(f"{metric} (analytical)")] == fmt_value(r[metric])


def _heading(out: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.split()[:3] == ["kind", "name", "unit"])


def _compare_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["kind", "name", "unit"])
    return [line.split() for line in lines[start + 1:] if line.strip() and not line.startswith("(")]


def test_compare_by_component_lists_the_recorded_figures_and_totals(swept, cli):
    from dse.cli.records import _num

    db, s, _ = swept
    code, out, err = cli("compare", s.baseline, s.best, "--scope", "component", "--all-metrics", "--db", db)
    assert code == 0, err
    rows = _compare_rows(out)
    assert _heading(out) == ["kind", "name", "unit", "component", "A", "B", "delta", "B/A"]
    # The baseline has no emulator figures: the emulated best's figures beside a dash, kinds apart.
    for kind in KINDS:
        for metric in ("area_mm2", "energy_uj"):
            mine = [r for r in rows if r[0] == kind and r[1] == metric]
            base, best = s.component(kind, s.baseline), s.component(kind, s.best)
            components = list(dict.fromkeys([*base.index, *best.index]))
            assert [r[3] for r in mine] == [c for c in COMPONENTS if c in components] + ["(total)"]
            for r in mine[:-1]:
                a = _num(float(base.loc[r[3], metric])) if r[3] in base.index else "—"
                assert r[4:6] == [a, _num(float(best.loc[r[3], metric]))]
            totals = s.totals[kind]
            expected_a = _num(float(totals.loc[s.baseline, metric])) if kind == "analytical" else "—"
            assert mine[-1][4:6] == [expected_a, _num(float(totals.loc[s.best, metric]))]
            assert sum(best[metric]) == pytest.approx(totals.loc[s.best, metric], rel=1e-12)
    # Three candidates: ratios to the first, component by component.
    fast = s.by_knobs[(1024, 4)]
    code, out, err = cli("compare", s.best, fast, s.baseline, "--scope", "component", "--db", db)
    assert code == 0, err
    rows = _compare_rows(out)
    energy = {r[3]: r for r in rows if r[:2] == ["analytical", "energy_uj"]}
    for component, value in s.component("analytical", fast)["energy_uj"].items():
        assert energy[component][5] == _num(float(value))
    # The totals compare lists them too.
    code, out, _ = cli("compare", s.baseline, s.best, "--db", db)
    names = {(r[0], r[1]) for r in _compare_rows(out)}
    assert {("analytical", m) for m in ("area_mm2", "energy_uj", "power_mw")} <= names
    assert np.isfinite(s.totals["analytical"].loc[s.best, "power_mw"])
