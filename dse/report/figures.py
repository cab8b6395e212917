"""Figures for reports and notebooks. Each returns the figure with the data it shows, so
tests (and readers) can check what is drawn, not only that a file exists."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .interactive import COMPONENT_AXES, COMPONENT_COLORS
from .pareto import pareto_mask  # noqa: E402

# How each non-feasible outcome is drawn: distinct, so a reader tells them apart.
OUTCOME_STYLE = {
    "infeasible": dict(marker="x", color="#9a9a9a"),
    "pruned": dict(marker="s", color="#c9b458", facecolors="none"),
    "failed": dict(marker="X", color="#c44e52"),
    "crashed": dict(marker="X", color="#8c1c13"),
}


@dataclass
class Figure:
    figure: plt.Figure
    data: pd.DataFrame

    def png_bytes(self) -> bytes:
        buf = io.BytesIO()
        # Laid out once, when built (tight_layout): bbox_inches="tight" would lay it out again
        # and draw it twice (a sixth of the PNGs' time at 100,000 candidates).
        self.figure.savefig(buf, format="png", dpi=110)
        return buf.getvalue()

    def png_base64(self) -> str:
        return base64.b64encode(self.png_bytes()).decode()

    def close(self) -> None:
        plt.close(self.figure)


# Past this many points of one kind a PNG draws an even sample of them (the legend says
# so): the interactive plots' sample (`interactive.MAX_POINTS`), the same rows, so both
# figures of a report show the same points; at 100,000 candidates the cloud looks the same
# and its markers were the largest part of drawing the PNGs.
MAX_POINTS_PNG = 5_000


def _sample(rows: pd.DataFrame, label: str) -> tuple[pd.DataFrame, str]:
    if len(rows) <= MAX_POINTS_PNG:
        return rows, f"{label} ({len(rows):,})"
    step = -(-len(rows) // MAX_POINTS_PNG)
    return rows.iloc[::step], f"{label} ({len(rows):,}; every {step}th drawn)"


@dataclass
class ParetoPlot(Figure):
    x: str = ""
    y: str = ""


def _label(name: str) -> str:
    return name.replace("_", " ")


def pareto_plot(table: pd.DataFrame, x: str = "private_sram_bytes", y: str = "latency_cycles",
                directions: tuple[str, str] = ("minimize", "minimize"), baseline_id: int | None = None,
                title: str = "", best_id: int | None = None, ax=None, passing=(), accepted=()) -> ParetoPlot:
    """Feasible candidates as points with the front highlighted, those passing acceptance
    (`passing`: ids) in green, the baseline, the best and the accepted ones marked as the
    interactive plots mark them; infeasible, pruned and failed ones drawn distinctly along the
    top edge at their x value (they have no y). Past `MAX_POINTS_PNG` points of one kind, an
    even sample of them is drawn (the front and the marks always); `data` has every row.
    `ax`: draw into this axes of a figure the caller lays out (`pareto_panels`)."""
    data = pd.DataFrame({
        "candidate_id": table["candidate_id"].astype(int),
        "x": pd.to_numeric(table[x], errors="coerce") if x in table else np.nan,
        "y": pd.to_numeric(table[y], errors="coerce") if y in table else np.nan,
        "status": table["status"],
    })
    data["is_baseline"] = data["candidate_id"] == baseline_id
    data["is_best"] = data["candidate_id"] == best_id
    data["passes"] = data["candidate_id"].isin(set(passing))
    data["is_accepted"] = data["candidate_id"].isin(set(accepted))
    feasible = (data["status"] == "ok") & data["x"].notna() & data["y"].notna()
    data["on_front"] = False
    if feasible.any():
        mask = pareto_mask(data.loc[feasible, ["x", "y"]].to_numpy(), list(directions))
        data.loc[data.index[feasible][mask], "on_front"] = True

    own = ax is None
    fig, ax = plt.subplots(figsize=(7.5, 4.8)) if own else (ax.figure, ax)
    ok = data[feasible]
    shown, label = _sample(ok[~ok["passes"]], "feasible")
    ax.scatter(shown["x"], shown["y"], s=22, color="#4c72b0", alpha=0.55, label=label)
    good = ok[ok["passes"]]
    if len(good):
        good, label = _sample(good, "passes acceptance")
        ax.scatter(good["x"], good["y"], s=34, color="#55a868", edgecolors="#1b5e20", linewidths=0.8, zorder=3,
                   label=label)
    front = ok[ok["on_front"]].sort_values("x")
    ax.plot(front["x"], front["y"], "-o", color="#dd8452", ms=6, label=f"Pareto front ({len(front)})")
    top = (ok["y"].max() * 1.08) if len(ok) else 1.0
    unfit = data[~feasible]  # a few of 100,000: their statuses compared there
    for status, style in OUTCOME_STYLE.items():
        bad = unfit[unfit["status"] == status]
        if len(bad):
            bad, label = _sample(bad, status)
            ax.scatter(bad["x"].fillna(0), np.full(len(bad), top), s=30, label=label, **style)
    base = data[data["is_baseline"] & feasible]
    if len(base):  # hollow: a candidate at the same point stays visible
        ax.scatter(base["x"], base["y"], marker="*", s=240, facecolors="none", edgecolors="#c44e52", linewidths=1.6,
                   zorder=5, label="baseline")
    best = data[data["is_best"] & feasible]
    if len(best):
        ax.scatter(best["x"], best["y"], marker="*", s=150, color="#2ca02c", edgecolors="#1b5e20", linewidths=0.8,
                   zorder=6, label="best")
    chosen = data[data["is_accepted"] & feasible]
    if len(chosen):
        ax.scatter(chosen["x"], chosen["y"], marker="D", s=170, facecolors="none", edgecolors="#000000",
                   linewidths=1.4, zorder=6, label="accepted")
    xs = data["x"].dropna()
    if len(xs) and xs.min() > 0 and xs.max() / xs.min() > 20:
        ax.set_xscale("log")  # SRAM sizes span orders of magnitude
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(y))
    ax.set_title(title or f"{_label(y)} vs {_label(x)}")
    ax.grid(alpha=0.3)
    # "best" places the legend by testing every point: seconds at 100,000 points.
    ax.legend(fontsize=8, loc="best" if len(data) <= 5000 else "upper right")
    if own:
        fig.tight_layout()
    return ParetoPlot(fig, data, x, y)


def pareto_panels(table: pd.DataFrame, pairs, directions: dict[str, str], baseline_id: int | None = None,
                  best_id: int | None = None, title: str = "", passing=(), accepted=()
                  ) -> tuple[Figure, list[ParetoPlot]]:
    """`pareto_plot` of each (x, y) of `pairs`, side by side in one figure (one image to
    lay out and write: at 100,000 candidates a figure's fixed cost is most of its time).
    Returns the figure (data: every plot's rows, with its x and y metric names) and the
    plots (their own data: which candidates are on each front)."""
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.6 * len(pairs), 4.6), squeeze=False)
    plots = [pareto_plot(table, x, y, (directions.get(x, "minimize"), directions.get(y, "minimize")),
                         baseline_id=baseline_id, title=f"{_label(y)} vs {_label(x)}", best_id=best_id, ax=ax,
                         passing=passing, accepted=accepted)
             for (x, y), ax in zip(pairs, axes[0])]
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    data = pd.concat([p.data.assign(x_metric=p.x, y_metric=p.y) for p in plots], ignore_index=True)
    return Figure(fig, data), plots


def op_breakdown_plot(op_cycles: pd.DataFrame, candidate_ids: list[int], labels: dict[int, str] | None = None,
                      title: str = "analytical cycles per op", xlabel: str = "cycles") -> Figure:
    """Stacked horizontal bars: one bar per chosen candidate, one segment per op."""
    data = op_cycles.loc[candidate_ids].fillna(0.0)
    fig, ax = plt.subplots(figsize=(7.5, 0.6 * max(len(data), 1) + 1.6))
    left = np.zeros(len(data))
    names = [(labels or {}).get(i, f"#{i}") for i in data.index]
    colors = plt.get_cmap("tab20")(np.linspace(0, 1, max(len(data.columns), 1)))
    for op, color in zip(data.columns, colors):
        ax.barh(names, data[op].to_numpy(), left=left, color=color, label=op)
        left += data[op].to_numpy()
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=min(4, max(len(data.columns), 1)), loc="upper center",
              bbox_to_anchor=(0.5, -0.25 if len(data) < 3 else -0.12))
    fig.tight_layout()
    return Figure(fig, data)


def component_plot(figures, labels: dict[int, str], title: str = "") -> Figure:
    """Area and energy by component of one evidence kind (a `dse.records.report_reads.ComponentFigures`):
    stacked horizontal bars, one per labelled candidate that has the figures, a segment per
    component in `COMPONENTS` order, area left and energy right; colours as the
    interactive figure's. Data: candidate_id, component, area_mm2, energy_uj."""
    ids = [i for i in (labels or {}) if i in figures.candidates]
    names = [f"{labels[i]} (c{i})" for i in ids]
    fig, axes = plt.subplots(1, len(COMPONENT_AXES), figsize=(10, 0.55 * max(len(ids), 1) + 2.2), sharey=True)
    for ax, (metric, axis) in zip(axes, COMPONENT_AXES.items()):
        data = figures.wide(metric).loc[ids]
        left = np.zeros(len(data))
        for component in data.columns:
            values = data[component].to_numpy()
            ax.barh(names, values, left=left, color=COMPONENT_COLORS.get(component, "#999999"), label=component)
            left += values
        ax.set_xlabel(axis)
        ax.grid(axis="x", alpha=0.3)
    axes[0].invert_yaxis()
    handles, texts = axes[0].get_legend_handles_labels()
    # Inside the figure's bottom strip that tight_layout's rect leaves: the PNG is the figure.
    fig.legend(handles, texts, fontsize=7, ncol=min(7, max(len(texts), 1)), loc="lower center",
               bbox_to_anchor=(0.5, 0.01))
    fig.suptitle(title or f"area and energy by component ({figures.kind})")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    shown = figures.parts[figures.parts["candidate_id"].isin(ids)]
    return Figure(fig, shown[["candidate_id", "component", "area_mm2", "energy_uj"]].reset_index(drop=True))


def history_plot(experiments: pd.DataFrame, decisions: pd.DataFrame) -> Figure:
    """A timeline: one row per experiment from creation, decisions marked by verdict."""
    exps = experiments.sort_values("created_at").reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(8, 0.5 * max(len(exps), 1) + 1.8))
    colors = {"confirmed": "#55a868", "refuted": "#c44e52", "accepted": "#55a868", "rejected": "#c44e52"}
    rows = []
    for y, e in exps.iterrows():
        ax.scatter([e["created_at"]], [y], marker="|", s=200, color="#4c72b0")
        mine = decisions[decisions["experiment_id"] == e["id"]] if len(decisions) else decisions
        for d in mine.to_dict("records"):
            ax.scatter([d["created_at"]], [y], marker="o", s=60, color=colors.get(d["verdict"], "#8172b2"), zorder=3)
            rows.append({"experiment": e["name"], "when": d["created_at"], "verdict": d["verdict"]})
    ax.set_yticks(range(len(exps)), exps["name"].tolist())
    ax.invert_yaxis()
    ax.set_xlabel("date (UTC)")
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d %H:%M"))
    ax.set_title("experiments (|) and decisions (o)")
    fig.autofmt_xdate()
    fig.tight_layout()
    return Figure(fig, pd.DataFrame(rows, columns=["experiment", "when", "verdict"]))


def model_vs_emulator_plot(emulated: pd.DataFrame) -> Figure:
    """Analytical estimate against emulator cycles, one point per candidate run on both,
    with the y = x line: the model's trust at a glance."""
    fig, ax = plt.subplots(figsize=(5.5, 4.6))
    ax.scatter(emulated["emulator_cycles"], emulated["analytical_cycles"], color="#4c72b0", s=30)
    if len(emulated):
        lo = float(min(emulated["emulator_cycles"].min(), emulated["analytical_cycles"].min()))
        hi = float(max(emulated["emulator_cycles"].max(), emulated["analytical_cycles"].max()))
        ax.plot([lo, hi], [lo, hi], "--", color="#999999", label="y = x")
        ax.legend(fontsize=8)
    ax.set_xlabel("emulator cycles (overlapped)")
    ax.set_ylabel("analytical estimate (cycles)")
    ax.set_title("model vs emulator")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return Figure(fig, emulated.copy())


def core_time_plot(core_time: pd.DataFrame, candidate_ids: list[int]) -> Figure:
    """Per emulated candidate and core: busy and waiting cycles (stacked)."""
    data = core_time[core_time["candidate_id"].isin(candidate_ids)].copy()
    data = data.sort_values(["candidate_id", "scope_key"])
    labels = [f"#{int(c)} core {k}" for c, k in zip(data["candidate_id"], data["scope_key"])]
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * max(len(data), 1) + 1.6))
    busy = data["busy_cycles"].to_numpy(dtype=float)
    waiting = data["waiting_cycles"].to_numpy(dtype=float)
    ax.barh(labels, busy, color="#55a868", label="busy")
    ax.barh(labels, waiting, left=busy, color="#c9c9c9", label="waiting")
    ax.invert_yaxis()
    ax.set_xlabel("cycles")
    ax.set_title("emulator: core busy vs waiting")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return Figure(fig, data[["candidate_id", "scope_key", "busy_cycles", "waiting_cycles"]].reset_index(drop=True))
