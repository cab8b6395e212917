"""Interactive figures (plotly) of an experiment, shared by `dse ui` and the static report.

Each function returns a `plotly.graph_objects.Figure`; the UI sends it as JSON to the
plotly.js served from the installed plotly package, the report inlines that same script.
Hover text is built here from record values, HTML-escaped (plotly renders hover text as
markup), with a candidate id in each point's customdata so a click can open its page.
"""

from __future__ import annotations

import functools
import html
import json
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from ..ppa.names import COMPONENTS
from ..runner.acceptance import NAMES as ACCEPTANCE_NAMES
from ..runner.acceptance import elementwise, formulas
from .data import PPA_KINDS, accepted_candidates, meaningful_candidates
from .pareto import pareto_mask

GRID = 120  # cells per axis of the shaded acceptance region
# Past this many points a trace is drawn with WebGL (plotly's scattergl); below, as SVG,
# which needs no GPU and draws a few thousand points at once.
WEBGL_FROM = 5000


# Past this many points of one kind, an even sample of them is drawn (the legend says so):
# 100,000 hover texts would make a page of tens of MB that shows nothing more.
MAX_POINTS = 5_000


def _thin(rows: pd.DataFrame, label: str) -> tuple[pd.DataFrame, str]:
    if len(rows) <= MAX_POINTS:
        return rows, f"{label} ({len(rows):,})"
    step = int(math.ceil(len(rows) / MAX_POINTS))
    return rows.iloc[::step], f"{label} ({len(rows):,}; every {step}th drawn)"


@functools.lru_cache(maxsize=1)
def _white() -> go.layout.Template:
    """plotly's "plotly_white" template. Named, plotly deep-copies the registered one for
    every figure (a tenth of a report's interactive figures); the object itself it copies
    cheaply. The figure's JSON is the same."""
    return pio.templates["plotly_white"]


def load() -> None:
    """Load what plotly loads for its first figure (its validators, the template: a third of
    a second), once: before a fork, so that both processes have it (`dse.report.aside`)."""
    go.Figure(layout=dict(template=_white()))


def _scatter(n: int, **kwargs):
    return (go.Scattergl if n >= WEBGL_FROM else go.Scatter)(**kwargs)
OUTCOME_COLORS = {"infeasible": "#c44e52", "pruned": "#8172b2", "failed": "#937860", "crashed": "#222222",
                  "running": "#999999", "not run": "#bbbbbb"}


def _label(name: str) -> str:
    return name.replace("_", " ")


def _num(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.4g}"


@functools.lru_cache(maxsize=4096)
def _escaped_scalar(kind: type, value) -> str:
    return html.escape(json.dumps(value))


def _escaped(value) -> str:
    """`html.escape(json.dumps(value))`, a knob's few scalar values made once each (keyed by
    type too: 1, 1.0 and True are equal keys): making the same texts again was a third of a
    100,000-candidate report's hover texts."""
    if isinstance(value, (list, dict)):
        return html.escape(json.dumps(value))
    return _escaped_scalar(type(value), value)


@functools.lru_cache(maxsize=1024)
def _knob_text(path: str) -> str:
    return html.escape(path.removeprefix("config.").removeprefix("mapping."))


def _changes(diff) -> str:
    # Each part escaped piece by piece: the joining text (": ", " → ") has nothing to escape.
    if isinstance(diff, str):
        diff = json.loads(diff) if diff else {}
    return "<br>".join(f"{_knob_text(k)}: {_escaped(a)} → {_escaped(b)}"
                       for k, (a, b) in (diff or {}).items()) or "(the baseline)"


def pareto_data(table: pd.DataFrame, x: str, y: str, directions: tuple[str, str], passing: np.ndarray) -> pd.DataFrame:
    """One row per candidate: x, y, status, whether it is on the front, passes acceptance."""
    data = pd.DataFrame({
        "candidate_id": table["candidate_id"].astype(int).to_numpy(),
        "x": pd.to_numeric(table[x], errors="coerce").to_numpy() if x in table else np.nan,
        "y": pd.to_numeric(table[y], errors="coerce").to_numpy() if y in table else np.nan,
        "status": table["status"].fillna("not run").to_numpy(),
        "reason": table["reason"].fillna("").to_numpy(),
        "passes": passing,
    })  # fmt: skip
    feasible = (data["status"] == "ok") & data["x"].notna() & data["y"].notna()
    data["on_front"] = False
    if feasible.any():
        front = pareto_mask(data.loc[feasible, ["x", "y"]].to_numpy(), list(directions))
        data.loc[data.index[feasible.to_numpy()][front], "on_front"] = True
    data["feasible"] = feasible
    return data


def _region(exprs: list[str], x: str, y: str, baseline: dict, xs: np.ndarray, ys: np.ndarray):
    """The acceptance region over the plot's (x, y) range as a 0/1 grid, when every metric
    the criteria name is on an axis (else the region depends on metrics the plot does not
    show, and None: the passing candidates are still marked)."""
    checks = formulas(exprs)
    used = set().union(*(f.used for f in checks)) if checks else set()
    if not checks or not {n for n in used if not n.startswith("baseline_")} <= {x, y}:
        return None
    gx, gy = np.meshgrid(xs, ys)
    columns = {x: gx.ravel(), y: gy.ravel()}
    for name in ACCEPTANCE_NAMES:
        if name.startswith("baseline_"):
            value = baseline.get(name.removeprefix("baseline_"), math.nan)
            columns[name] = np.full(gx.size, math.nan if value is None or pd.isna(value) else float(value))
    return elementwise(exprs, columns).reshape(gx.shape).astype(np.int8)


def _axis(values: np.ndarray) -> tuple[np.ndarray, bool]:
    values = values[np.isfinite(values)]
    if not len(values):
        return np.linspace(0, 1, GRID), False
    lo, hi = float(values.min()), float(values.max())
    log = lo > 0 and hi / lo > 20
    if log:
        return np.geomspace(lo / 1.3, hi * 1.3, GRID), True
    pad = (hi - lo) * 0.08 or abs(hi) * 0.1 or 1.0
    return np.linspace(lo - pad, hi + pad, GRID), False


# Each figure's height, from what it shows: the figure sets it, and the UI's page reserves
# it before the figure's JSON arrives, so that nothing below a plot moves when it is drawn.
PARETO_HEIGHT = 480
SEARCH_HISTORY_HEIGHT = 360
PARALLEL_HEIGHT = 420
MODEL_VS_EMULATOR_HEIGHT = 420


def history_height(experiments: int) -> int:
    """`history_figure`'s: a row an experiment."""
    return 140 + 34 * max(experiments, 1)


def op_height(bars: int) -> int:
    """`op_figure`'s: a bar a candidate."""
    return 160 + 48 * max(bars, 1)


def component_height(bars: int) -> int:
    """`component_figure`'s: a bar a candidate, the legend below."""
    return 250 + 48 * max(bars, 1)


def bank_rows(lives: list[dict]) -> list[str]:
    """`bank_lifetime_figure`'s row of each lifetime: its core's bank (shared or not)."""
    return [f"core {r['core']} {'shared ' if r['shared'] else ''}bank {r['bank']}" for r in lives]


def bank_lifetime_height(rows: int) -> int:
    """`bank_lifetime_figure`'s: a row a bank that some lifetime held."""
    return max(260, 22 * rows + 120)


def pareto_figure(table: pd.DataFrame, x: str, y: str, directions: tuple[str, str], *, passing: np.ndarray,
                  exprs: list[str], baseline_id: int | None, accepted: set[int], title: str = "",
                  best_id: int | None = None, changes: dict[int, str] | None = None) -> tuple[go.Figure, pd.DataFrame]:
    """The Pareto plot: feasible candidates, the front, those passing acceptance, the
    baseline, the best (the verdict's, when given) and the accepted ones; infeasible,
    pruned and failed ones along the top edge at their x (they have no y), their reason in
    the hover; the acceptance region shaded. `changes`: a memo of the rows' hover text of
    their changes (by row position), for several plots of one table (building it is most of
    a plot's time at 100,000 candidates)."""
    data = pareto_data(table, x, y, directions, passing)
    diffs = table["diff"].to_numpy() if "diff" in table else np.full(len(table), "")
    memo = {} if changes is None else changes

    def changed(idx: int) -> str:
        text = memo.get(idx)
        if text is None:
            text = memo[idx] = _changes(diffs[idx])
        return text
    ok = data[data["feasible"]]
    x_label, y_label = _label(x), _label(y)

    def hover(rows: pd.DataFrame, with_reason: bool = False) -> np.ndarray:
        # An object array, not a list: plotly takes it whole (a list it checks string by
        # string, a third of a 100,000-candidate report's plots); the JSON is the same.
        out = []
        reasons = rows["reason"].tolist() if with_reason else [""] * len(rows)
        for idx, ident, status, vx, vy, reason in zip(rows.index, rows["candidate_id"].tolist(),
                                                       rows["status"].tolist(), rows["x"].tolist(),
                                                       rows["y"].tolist(), reasons):
            text = f"<b>candidate {ident}</b> ({html.escape(status)})<br>{x_label}: {_num(vx)}"
            if status == "ok":
                text += f"<br>{y_label}: {_num(vy)}"
            if reason:
                text += "<br>reason: " + html.escape(reason[:200])
            out.append(f"{text}<br>{changed(idx)}")
        return np.array(out, dtype=object)

    fig = go.Figure()
    xs, xlog = _axis(data["x"].to_numpy(dtype=float))
    ys, ylog = _axis(data.loc[data["feasible"], "y"].to_numpy(dtype=float))
    base_rows = table[table["candidate_id"] == baseline_id]
    if len(base_rows) and base_rows.iloc[0]["status"] == "ok" and exprs:
        z = _region(exprs, x, y, base_rows.iloc[0].to_dict(), xs, ys)
        if z is not None and z.any():
            fig.add_trace(go.Heatmap(x=xs, y=ys, z=z, showscale=False, hoverinfo="skip", name="acceptance region",
                                     colorscale=[[0, "rgba(0,0,0,0)"], [1, "rgba(85,168,104,0.18)"]], zmin=0, zmax=1))
    plain, name = _thin(ok[~ok["passes"]], "feasible")
    fig.add_trace(_scatter(len(plain), x=plain["x"], y=plain["y"], mode="markers", name=name,
                               marker=dict(color="#4c72b0", size=7, opacity=0.6), customdata=plain["candidate_id"],
                               hovertext=hover(plain), hoverinfo="text"))
    good, name = _thin(ok[ok["passes"]], "passes acceptance")
    fig.add_trace(_scatter(len(good), x=good["x"], y=good["y"], mode="markers", name=name,
                               marker=dict(color="#55a868", size=9, line=dict(color="#1b5e20", width=1)),
                               customdata=good["candidate_id"], hovertext=hover(good), hoverinfo="text"))
    front = ok[ok["on_front"]].sort_values("x")
    fig.add_trace(go.Scatter(x=front["x"], y=front["y"], mode="lines+markers", name=f"Pareto front ({len(front)})",
                             line=dict(color="#dd8452", width=2), marker=dict(size=6, color="#dd8452"),
                             customdata=front["candidate_id"], hovertext=hover(front), hoverinfo="text"))
    top = float(ok["y"].max() * 1.08) if len(ok) else 1.0
    unfit = data[~data["feasible"]]  # a few of 100,000: their statuses compared there
    for status, color in OUTCOME_COLORS.items():
        bad = unfit[unfit["status"] == status]
        if len(bad):
            bad, name = _thin(bad, status)
            fig.add_trace(_scatter(len(bad), x=bad["x"].fillna(0), y=np.full(len(bad), top), mode="markers",
                                       name=name, marker=dict(symbol="x", color=color, size=8),
                                       customdata=bad["candidate_id"], hovertext=hover(bad, True), hoverinfo="text"))
    # The baseline hollow (a candidate at its point stays visible), the best and the accepted
    # ones over it: the same marks as the report's PNG plots and the candidate tables (★ best,
    # ◇ accepted).
    for ids, name, symbol, color, size in ((
            {baseline_id} if baseline_id is not None else set(), "baseline", "star-open", "#c44e52", 20),
            ({best_id} if best_id is not None else set(), "best", "star", "#2ca02c", 15),
            (accepted, "accepted", "diamond-open", "#000000", 22)):
        marked = ok[ok["candidate_id"].isin(ids)]
        if len(marked):
            fig.add_trace(go.Scatter(x=marked["x"], y=marked["y"], mode="markers", name=name,
                                     marker=dict(symbol=symbol, color=color, size=size, line=dict(width=2.5, color=color)),
                                     customdata=marked["candidate_id"], hovertext=hover(marked), hoverinfo="text"))
    fig.update_layout(title=title or f"{_label(y)} vs {_label(x)}", xaxis_title=_label(x), yaxis_title=_label(y),
                      template=_white(), height=PARETO_HEIGHT, margin=dict(l=60, r=20, t=50, b=50),
                      hovermode="closest", legend=dict(font=dict(size=11)))
    if xlog:
        fig.update_xaxes(type="log")
    if ylog:
        fig.update_yaxes(type="log")
    return fig, data


def history_figure(experiments: pd.DataFrame, decisions: pd.DataFrame) -> go.Figure:
    """A timeline with a date axis: one row per experiment from its creation, decisions
    marked by verdict, each point's hover naming the experiment."""
    exps = experiments.sort_values("created_at").reset_index(drop=True)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=exps["created_at"], y=exps["name"], mode="markers", name="created",
                             marker=dict(symbol="line-ns-open", size=16, color="#4c72b0"),
                             customdata=exps["id"], hovertext=[f"<b>{html.escape(n)}</b><br>created {t:%Y-%m-%d %H:%M}"
                                                               for n, t in zip(exps["name"], exps["created_at"])],
                             hoverinfo="text"))
    colors = {"confirmed": "#55a868", "refuted": "#c44e52", "accepted": "#55a868", "rejected": "#c44e52"}
    if len(decisions):
        for verdict, group in decisions.groupby("verdict", sort=True):
            fig.add_trace(go.Scatter(
                x=group["created_at"], y=group["experiment"], mode="markers", name=html.escape(str(verdict)),
                marker=dict(size=11, color=colors.get(verdict, "#8172b2")), customdata=group["experiment_id"],
                hovertext=[f"<b>{html.escape(e)}</b>: {html.escape(str(verdict))} by {html.escape(str(a))}"
                           f"<br>{t:%Y-%m-%d %H:%M}<br>{html.escape(str(r)[:160])}"
                           for e, a, t, r in zip(group["experiment"], group["author"], group["created_at"],
                                                 group["rationale"])], hoverinfo="text"))  # fmt: skip
    fig.update_layout(template=_white(), height=history_height(len(exps)), xaxis_title="date (UTC)",
                      margin=dict(l=140, r=20, t=30, b=50), title="experiments and decisions")
    fig.update_xaxes(type="date", tickformat="%Y-%m-%d\n%H:%M")
    fig.update_yaxes(autorange="reversed", type="category")
    return fig


def search_history_figure(history, title: str = "") -> go.Figure:
    """The first objective candidate after candidate (`search_history.SearchHistory`): each
    feasible candidate a point (an even sample past MAX_POINTS, the legend says so), the
    best so far a step line drawn through the candidates where it changes and the last one
    (the same line as through every candidate, at 100,000 candidates a few points)."""
    points = [(i, v) for i, v in zip(history.ids, history.values) if v is not None]
    step = max(1, math.ceil(len(points) / MAX_POINTS))
    name = history.metric if step == 1 else f"{history.metric} ({len(points):,}; every {step}th drawn)"
    xs, ys = [i for i, _ in points[::step]], [v for _, v in points[::step]]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=name, marker=dict(size=6, color="#1f77b4"),
                             customdata=xs, hovertemplate="candidate %{x}: %{y:.6g}<extra></extra>"))
    known = [(i, b) for i, b in zip(history.ids, history.best_so_far) if b is not None]
    steps = [(i, b) for k, (i, b) in enumerate(known) if k == 0 or k == len(known) - 1 or b != known[k - 1][1]]
    fig.add_trace(go.Scatter(x=[i for i, _ in steps], y=[b for _, b in steps], mode="lines", line_shape="hv",
                             name="best so far", line=dict(color="#2ca02c", width=2),
                             hovertemplate="best so far at candidate %{x}: %{y:.6g}<extra></extra>"))
    fig.update_layout(template=_white(), height=SEARCH_HISTORY_HEIGHT, margin=dict(l=70, r=20, t=40, b=50),
                      title=title or f"{history.metric} candidate after candidate ({history.direction})",
                      xaxis_title="candidate (in the order proposed)", yaxis_title=_label(history.metric))
    return fig


def knob_values(table: pd.DataFrame) -> pd.DataFrame:
    """The knobs as columns: every path some candidate changes ("config.banks.count",
    "mapping.workers"), each candidate's value of it (the baseline's where it keeps it, which
    the diff records as the pair's first value). One row per row of `table`."""
    diffs = [json.loads(d) if isinstance(d, str) and d else (d or {}) for d in table["diff"]]
    baseline_value: dict[str, object] = {}
    for diff in diffs:
        for path, (before, _after) in diff.items():
            baseline_value.setdefault(path, before)
    return pd.DataFrame({path: [d[path][1] if path in d else before for d in diffs]
                         for path, before in sorted(baseline_value.items())}, index=table.index)


def _dimension(label: str, values: pd.Series) -> dict:
    """A parcoords axis: numbers as they are; anything else (a policy name, a list) as
    categories, ticks naming them."""
    numeric = pd.to_numeric(values, errors="coerce")
    if numeric.notna().all() and not values.map(lambda v: isinstance(v, bool)).any():
        return dict(label=label, values=numeric.to_numpy(dtype=float))
    texts = values.map(lambda v: v if isinstance(v, str) else json.dumps(v))
    categories = sorted(set(texts))
    index = {c: i for i, c in enumerate(categories)}
    return dict(label=label, values=texts.map(index).to_numpy(dtype=float), tickvals=list(range(len(categories))),
                ticktext=[html.escape(c) for c in categories])


def parallel_figure(table: pd.DataFrame, objectives: list[dict], title: str = "") -> tuple[go.Figure, pd.DataFrame]:
    """Parallel coordinates from the knobs to the objectives: one line per feasible candidate
    (an even sample past MAX_POINTS), coloured by the first objective. Drag along an axis to
    keep the lines through a range. Returns the figure and the rows drawn (knob and
    objective columns, candidate ids)."""
    metrics = [o["metric"] for o in objectives if o["metric"] in table]
    ok = table[(table["status"] == "ok") & table[metrics].notna().all(axis=1)] if metrics else table.iloc[:0]
    shown, name = _thin(ok, "feasible candidates")
    knobs = knob_values(shown) if len(shown) else pd.DataFrame(index=shown.index)
    # A knob no drawn candidate changes says nothing: left out.
    knobs = knobs[[k for k in knobs.columns if knobs[k].map(json.dumps).nunique() > 1]]
    dims = [_dimension(k.removeprefix("config.").removeprefix("mapping."), knobs[k]) for k in knobs.columns]
    dims += [dict(label=_label(m), values=shown[m].to_numpy(dtype=float)) for m in metrics]
    first = metrics[0] if metrics else None
    fig = go.Figure(go.Parcoords(
        dimensions=dims, name=name,
        line=dict(color=shown[first].to_numpy(dtype=float) if first else [], colorscale="Viridis_r"
                  if objectives[0].get("direction", "minimize") == "minimize" else "Viridis",
                  showscale=True, colorbar=dict(title=_label(first) if first else ""))))
    fig.update_layout(title=title or f"knobs to objectives ({name})", template=_white(), height=PARALLEL_HEIGHT,
                      margin=dict(l=80, r=60, t=80, b=30))
    data = pd.concat([shown[["candidate_id"]].astype(int), knobs, shown[metrics]], axis=1).reset_index(drop=True)
    return fig, data


# What a per-op metric is called on an axis, and its unit in the hover.
OP_METRICS = {"cycles": ("cycles (analytical)", "cycles"), "energy_uj": ("energy per inference, uJ (analytical)", "uJ")}


def op_cycles_figure(op_cycles: pd.DataFrame, labels: dict[int, str], title: str = "") -> go.Figure:
    """Where the cycles go: `op_figure` of the analytical cycles per op."""
    return op_figure(op_cycles, labels, "cycles", title or "analytical cycles per op")


def op_figure(op_table: pd.DataFrame, labels: dict[int, str], metric: str = "cycles", title: str = "") -> go.Figure:
    """Where the cycles (or the energy) go: one stacked bar per labelled candidate (rows of
    `op_table`, an analytical per-op metric of `OP_METRICS` in graph order), one segment per
    op; hover names the op, its value and its share of the candidate's total."""
    axis, unit = OP_METRICS[metric]
    ids = [i for i in labels if i in op_table.index]
    data = op_table.loc[ids].fillna(0.0)
    names = [f"{labels[i]} (c{i})" for i in ids]
    totals = data.sum(axis=1).to_numpy()
    fig = go.Figure()
    for op in data.columns:
        values = data[op].to_numpy()
        share = np.divide(values, totals, out=np.zeros_like(values), where=totals > 0)
        fig.add_trace(go.Bar(
            y=names, x=values, orientation="h", name=html.escape(str(op)), customdata=ids,
            hovertext=[f"<b>{html.escape(str(op))}</b><br>{html.escape(n)}<br>{_num(v)} {unit} ({s:.1%} of {_num(t)})"
                       for n, v, s, t in zip(names, values, share, totals)], hoverinfo="text"))
    fig.update_layout(barmode="stack", title=title or f"analytical {metric} per op", template=_white(),
                      xaxis_title=axis, height=op_height(len(ids)),
                      margin=dict(l=160, r=20, t=50, b=50), hovermode="closest", legend=dict(font=dict(size=10)))
    fig.update_yaxes(autorange="reversed", type="category")
    return fig


def _component_colors() -> dict[str, str]:
    # matplotlib's tab20, dark then light: hex, which plotly and matplotlib both read.
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
               "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94"]
    return {name: palette[i % len(palette)] for i, name in enumerate(COMPONENTS)}


# One colour a component, the same in every figure (the UI's, the report's, a notebook's).
COMPONENT_COLORS = _component_colors()
COMPONENT_AXES = {"area_mm2": "area (mm2)", "energy_uj": "energy per inference (uJ)"}


def component_ids(figures, labels: dict[int, str]) -> list[int]:
    """The labelled candidates `component_figure` draws a bar of: those with figures."""
    return [i for i in labels if i in figures.candidates]


def component_figure(figures, labels: dict[int, str], title: str = "") -> go.Figure:
    """Area and energy by component, one evidence kind (`figures`: a
    `dse.records.report_reads.ComponentFigures`): one stacked bar per labelled candidate that has
    such figures, a segment per component (in `COMPONENTS` order, one colour each), area
    on the left, energy on the right. Hover names the component, its value and share."""
    from plotly.subplots import make_subplots

    ids = component_ids(figures, labels)
    names = [f"{labels[i]} (c{i})" for i in ids]
    fig = make_subplots(rows=1, cols=len(COMPONENT_AXES), horizontal_spacing=0.08,
                        subplot_titles=list(COMPONENT_AXES.values()))
    for col, (metric, axis) in enumerate(COMPONENT_AXES.items(), start=1):
        data = figures.wide(metric).loc[ids]
        totals = data.sum(axis=1).to_numpy()
        unit = axis.split("(")[-1].rstrip(")")
        for component in data.columns:
            values = data[component].to_numpy()
            share = np.divide(values, totals, out=np.zeros_like(values), where=totals > 0)
            fig.add_trace(go.Bar(
                y=names, x=values, orientation="h", name=html.escape(str(component)), legendgroup=str(component),
                showlegend=col == 1, customdata=ids, marker=dict(color=COMPONENT_COLORS.get(component, "#999999")),
                hovertext=[f"<b>{html.escape(str(component))}</b><br>{html.escape(n)} ({html.escape(figures.kind)})"
                           f"<br>{_num(v)} {unit} ({s:.1%} of {_num(t)})"
                           for n, v, s, t in zip(names, values, share, totals)], hoverinfo="text"), row=1, col=col)
        fig.update_yaxes(autorange="reversed", type="category", row=1, col=col, showticklabels=col == 1)
    # The legend under the bars, in rows: beside them it would scroll for two bars.
    fig.update_layout(barmode="stack", title=title or f"area and energy by component ({figures.kind})",
                      template=_white(), height=component_height(len(ids)),
                      margin=dict(l=160, r=20, t=80, b=20), hovermode="closest",
                      legend=dict(font=dict(size=11), orientation="h", yanchor="top", y=-0.12, x=0))
    return fig


# The Pareto plots over latency, energy and area: (x, y) of each pair.
PPA_PAIRS = (("energy_uj", "latency_cycles"), ("area_mm2", "latency_cycles"), ("area_mm2", "energy_uj"))
PPA_AXES = ("latency_cycles", "energy_uj", "area_mm2")


def ppa_pareto_name(x: str, y: str) -> str:
    """The key of a latency/energy/area Pareto figure in `experiment_figures`."""
    short = {"latency_cycles": "latency", "energy_uj": "energy", "area_mm2": "area"}
    return f"ppa_{short[y]}_{short[x]}"


def model_vs_emulator_figure(emulated: pd.DataFrame, title: str = "") -> go.Figure:
    """The analytical estimate against emulator cycles, one point per candidate run on both
    (columns candidate_id, analytical_cycles, emulator_cycles, error_pct), with y = x: two
    evidence kinds side by side, never merged. Hover gives both and the model's error."""
    fig = go.Figure()
    if len(emulated):
        lo = float(min(emulated["emulator_cycles"].min(), emulated["analytical_cycles"].min()))
        hi = float(max(emulated["emulator_cycles"].max(), emulated["analytical_cycles"].max()))
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x (model exact)",
                                 line=dict(dash="dash", color="#999999"), hoverinfo="skip"))
    fig.add_trace(go.Scatter(
        x=emulated["emulator_cycles"], y=emulated["analytical_cycles"], mode="markers",
        name=f"emulated candidates ({len(emulated)})", marker=dict(size=10, color="#4c72b0"),
        customdata=emulated["candidate_id"].astype(int),
        hovertext=[f"<b>candidate {int(c)}</b><br>emulator: {_num(e)} cycles<br>analytical: {_num(a)} cycles"
                   f"<br>model error: {p:+.1f} %" for c, e, a, p in zip(
                       emulated["candidate_id"], emulated["emulator_cycles"], emulated["analytical_cycles"],
                       emulated["error_pct"])], hoverinfo="text"))
    fig.update_layout(title=title or "model vs emulator", template=_white(), height=MODEL_VS_EMULATOR_HEIGHT,
                      xaxis_title="emulator cycles", yaxis_title="analytical estimate (cycles)",
                      margin=dict(l=70, r=20, t=50, b=50), hovermode="closest")
    return fig


def bank_lifetime_figure(lives: list[dict], title: str = "") -> go.Figure:
    """Bank lifetimes (rows of `dse.lower.banks.bank_lifetimes`, as a run's banks.json holds
    them): one bar a virtual bank, on its core's row of banks, from its MSET to its free in
    program order, coloured by the op that holds it; hover says what it holds."""
    fig = go.Figure()
    rows = bank_rows(lives)
    order = sorted(dict.fromkeys(rows), key=lambda t: (int(t.split()[1]), "shared" in t, int(t.split()[-1])))
    for op in dict.fromkeys(r["op"] for r in lives):
        mine = [(row, r) for row, r in zip(rows, lives) if r["op"] == op]
        fig.add_trace(go.Bar(
            orientation="h", name=op, y=[row for row, _ in mine], base=[r["start"] for _, r in mine],
            x=[r["end"] - r["start"] for _, r in mine],
            hovertext=[f"<b>{row}</b> x{r['banks']} physical<br>op {html.escape(op)}<br>instructions "
                       f"{r['start']}..{r['end']}<br>{html.escape(r['holds'])}" for row, r in mine],
            hoverinfo="text"))
    fig.update_layout(title=title or "bank lifetimes", template=_white(), barmode="overlay",
                      height=bank_lifetime_height(len(order)), xaxis_title="instruction (program order, per core)",
                      yaxis=dict(categoryorder="array", categoryarray=order[::-1]),
                      margin=dict(l=140, r=20, t=50, b=50), hovermode="closest", legend_title_text="op")
    return fig


def experiment_figures(view, x: str | None = None, y: str | None = None, ppa: bool = True) -> dict[str, go.Figure]:
    """The interactive figures of an experiment, as `dse ui` and the report draw them, from
    its `dse.report.experiment_view`: "pareto", "parallel" (when a candidate is feasible),
    "ops" and "op_energy" (baseline, best and accepted candidates, when op cycles, op
    energy are recorded), "components_<kind>" (their area and energy by component, one
    figure an evidence kind that has them), "ppa_<y>_<x>" (the Pareto plots of latency,
    energy and area, `PPA_PAIRS`, when recorded) and "model_vs_emulator" (when some
    candidate has both evidence kinds); `ppa` False: without `ppa_figures`' (a report
    builds those apart). For notebooks:

        figs = experiment_figures(experiment_view(store, "quickstart")); figs["ops"]
    """
    exp, table, objectives = view.exp, view.table, view.objectives
    directions = {o["metric"]: o.get("direction", "minimize") for o in objectives}
    y = y or objectives[0]["metric"]
    x = x or (objectives[1]["metric"] if len(objectives) > 1 else "private_sram_bytes")
    accepted = accepted_candidates(view.decisions)
    changes: dict[int, str] = {}  # the Pareto plots' hover text of each candidate's changes, made once
    figures = {"pareto": pareto_figure(table, x, y, (directions.get(x, "minimize"), directions.get(y, "minimize")),
                                       passing=view.passing, exprs=[c["expr"] for c in exp["acceptance"]],
                                       baseline_id=view.baseline_id, accepted=accepted, best_id=view.best_id,
                                       title=f"{exp['name']}: {_label(y)} vs {_label(x)}", changes=changes)[0]}
    parallel, drawn = parallel_figure(table, objectives, title=f"{exp['name']}: knobs to objectives")
    if len(drawn):
        figures["parallel"] = parallel
    labels = meaningful_candidates(table, view.baseline_id, view.best_id, accepted)
    op_cycles = view.op_cycles_of(list(labels)) if labels else pd.DataFrame()
    labels = {i: label for i, label in labels.items() if i in op_cycles.index}
    if labels and len(op_cycles.columns):
        figures["ops"] = op_cycles_figure(op_cycles, labels, title=f"{exp['name']}: analytical cycles per op")
    if ppa:
        figures.update(ppa_figures(view, meaningful_candidates(table, view.baseline_id, view.best_id, accepted),
                                   changes))
    if len(view.emulated):
        figures["model_vs_emulator"] = model_vs_emulator_figure(
            view.emulated, title=f"{exp['name']}: analytical estimate vs emulator cycles")
    return figures


def ppa_figures(view, labels: dict[int, str], changes: dict[int, str] | None = None) -> dict[str, go.Figure]:
    """`experiment_figures`' area, energy and power figures: "op_energy", "components_<kind>"
    and the "ppa_<y>_<x>" Pareto plots (`PPA_PAIRS`, analytical), the first two of the
    labelled candidates (`labels`: the baseline, best and accepted ones), each figure when
    its metrics are recorded. `changes`: `pareto_figure`'s memo, shared with other plots."""
    exp, table = view.exp, view.table
    figures: dict[str, go.Figure] = {}
    op_energy = view.op_metric_of(list(labels), "energy_uj") if labels else pd.DataFrame()
    shown = {i: label for i, label in labels.items() if i in op_energy.index}
    if shown and len(op_energy.columns):
        figures["op_energy"] = op_figure(op_energy, shown, "energy_uj",
                                         title=f"{exp['name']}: analytical energy per op")
    for kind in PPA_KINDS:
        parts = view.components_of(list(labels), kind) if labels else None
        if parts is not None and parts.candidates:
            figures[f"components_{kind}"] = component_figure(
                parts, labels, title=f"{exp['name']}: area and energy by component ({kind})")
    directions = {o["metric"]: o.get("direction", "minimize") for o in view.objectives}
    accepted = accepted_candidates(view.decisions)
    feasible = table["status"] == "ok"
    memo = {} if changes is None else changes
    for x, y in PPA_PAIRS:
        if x in table and y in table and (feasible & table[x].notna() & table[y].notna()).any():
            figures[ppa_pareto_name(x, y)] = pareto_figure(
                table, x, y, (directions.get(x, "minimize"), directions.get(y, "minimize")), passing=view.passing,
                exprs=[c["expr"] for c in exp["acceptance"]], baseline_id=view.baseline_id, accepted=accepted,
                best_id=view.best_id, title=f"{exp['name']}: {_label(y)} vs {_label(x)} (analytical)",
                changes=memo)[0]
    return figures
