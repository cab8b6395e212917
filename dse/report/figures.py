"""Figures for reports and notebooks. Each returns the figure with the data it shows, so
tests (and readers) can check what is drawn, not only that a file exists."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .pareto import pareto_mask  # noqa: E402


@dataclass
class ParetoPlot:
    figure: plt.Figure
    data: pd.DataFrame  # one row per candidate: x, y, status, on_front, is_baseline
    x: str
    y: str

    def png_base64(self) -> str:
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        return base64.b64encode(buf.getvalue()).decode()


def pareto_plot(table: pd.DataFrame, x: str = "private_sram_bytes", y: str = "latency_cycles",
                directions: tuple[str, str] = ("minimize", "minimize"), baseline_id: int | None = None,
                title: str = "") -> ParetoPlot:
    """Feasible candidates as points with the front highlighted; infeasible ones greyed
    along the top edge at their SRAM size (they have no latency)."""
    data = pd.DataFrame({
        "candidate_id": table["candidate_id"].astype(int),
        "x": pd.to_numeric(table.get(x), errors="coerce"),
        "y": pd.to_numeric(table.get(y), errors="coerce"),
        "status": table["status"],
    })
    data["is_baseline"] = data["candidate_id"] == baseline_id
    feasible = (data["status"] == "ok") & data["x"].notna() & data["y"].notna()
    data["on_front"] = False
    if feasible.any():
        mask = pareto_mask(data.loc[feasible, ["x", "y"]].to_numpy(), list(directions))
        data.loc[data.index[feasible][mask], "on_front"] = True

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    ok = data[feasible]
    ax.scatter(ok["x"], ok["y"], s=22, color="#4c72b0", alpha=0.55, label=f"feasible ({len(ok)})")
    front = ok[ok["on_front"]].sort_values("x")
    ax.plot(front["x"], front["y"], "-o", color="#dd8452", ms=6, label=f"Pareto front ({len(front)})")
    bad = data[~feasible]
    if len(bad):
        top = (ok["y"].max() * 1.08) if len(ok) else 1.0
        ax.scatter(bad["x"].fillna(0), np.full(len(bad), top), marker="x", color="#9a9a9a",
                   label=f"infeasible / failed ({len(bad)})")
    base = data[data["is_baseline"] & feasible]
    if len(base):
        ax.scatter(base["x"], base["y"], marker="*", s=220, color="#c44e52", zorder=5, label="baseline")
    xs = data["x"].dropna()
    if len(xs) and xs.min() > 0 and xs.max() / xs.min() > 20:
        ax.set_xscale("log")  # SRAM sizes span orders of magnitude
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    ax.set_title(title or f"{y} vs {x}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return ParetoPlot(fig, data, x, y)
