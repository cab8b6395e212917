"""`dse report EXPERIMENT`: one self-contained HTML file (figures embedded as PNG).

All user text goes through Jinja2's autoescaping: a `<script>` in a hypothesis shows as text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import jinja2
import matplotlib.pyplot as plt
import pandas as pd

from ..records import Store
from .figures import pareto_plot

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("dse.report", "templates"),
    autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
)


@dataclass
class Report:
    path: Path
    candidates: pd.DataFrame  # the table shown, one row per candidate
    best_id: int | None


def _objectives(exp: dict) -> list[dict]:
    import tomllib

    spec = tomllib.loads(exp["spec_text"]) if exp.get("spec_text") else {}
    return spec.get("objectives", [{"metric": "latency_cycles", "direction": "minimize"}])


def report_data(store: Store, experiment) -> dict:
    exp = store.experiment(experiment)
    table = store.metric_table(exp["id"], "analytical")
    cands = store.candidates(exp["id"]).set_index("id")
    table = table.copy()
    table["origin"] = table["candidate_id"].map(cands["origin"])
    table["changes"] = table["candidate_id"].map(
        lambda i: ", ".join(f"{k.removeprefix('config.').removeprefix('mapping.')}={v[1]}"
                            for k, v in (_as_dict(cands.loc[i, "diff"]) or {}).items()) or "(baseline)")
    objectives = _objectives(exp)
    first = objectives[0]
    ok = table[table["status"] == "ok"]
    best_id = None
    if len(ok) and first["metric"] in ok:
        best = ok.sort_values(first["metric"], ascending=first.get("direction", "minimize") == "minimize").iloc[0]
        best_id = int(best["candidate_id"])
    baseline_id = exp.get("baseline_candidate_id")
    compare = None
    if best_id is not None and baseline_id is not None:
        compare = store.compare(baseline_id, best_id)
        # Source counts describe the workload, not a candidate: they are recorded once.
        compare = compare[~compare["field"].str.startswith("source_counts:")]
    runs = store.runs(exp["id"])
    return dict(exp=exp, table=table, objectives=objectives, best_id=best_id, baseline_id=baseline_id,
                compare=compare, decisions=store.decisions(exp["id"]), runs=runs)


def _as_dict(value) -> dict:
    if isinstance(value, str):
        return json.loads(value) if value else {}
    return value or {}


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "—"
    if isinstance(v, float) and v.is_integer():
        return f"{int(v):,}"
    if isinstance(v, (int, float)):
        return f"{v:,.4g}"
    return str(v)


def write_report(store: Store, experiment, out_dir: str | Path = "reports") -> Report:
    d = report_data(store, experiment)
    exp, table = d["exp"], d["table"]
    x, y = "private_sram_bytes", "latency_cycles"
    if len(d["objectives"]) >= 2:
        y, x = d["objectives"][0]["metric"], d["objectives"][1]["metric"]
    plot = pareto_plot(table, x=x, y=y, baseline_id=d["baseline_id"],
                       title=f"{exp['name']}: {y} vs {x}")
    png = plot.png_base64()
    plt.close(plot.figure)
    front_ids = set(plot.data.loc[plot.data["on_front"], "candidate_id"])

    metric_cols = [m for m in ("latency_cycles", "private_sram_bytes", "peak_sram_bytes", "dma_bytes") if m in table]
    rows = []
    for r in table.sort_values("candidate_id").to_dict("records"):
        rows.append(dict(id=int(r["candidate_id"]), origin=r["origin"], status=r["status"],
                         changes=r["changes"], metrics=[_fmt(r.get(m)) for m in metric_cols],
                         reason=r.get("reason") or "", front=r["candidate_id"] in front_ids,
                         baseline=r["candidate_id"] == d["baseline_id"], best=r["candidate_id"] == d["best_id"]))
    runs = d["runs"]
    provenance = {}
    if len(runs):
        last = runs.iloc[-1]
        provenance = {"host": last.get("host"), "git commit": last.get("git_commit"),
                      "tree dirty": last.get("git_dirty"), "model": last.get("model_version"),
                      "versions": last.get("versions")}
    counts = table["status"].value_counts().to_dict()
    html = _ENV.get_template("report.html.j2").render(
        exp=exp, acceptance=_as_dict_list(exp.get("acceptance")), decisions=d["decisions"].to_dict("records"),
        compare=None if d["compare"] is None else d["compare"].to_dict("records"),
        baseline_id=d["baseline_id"], best_id=d["best_id"], png=png, metric_cols=metric_cols, rows=rows,
        infeasible=[r for r in rows if r["status"] != "ok"], counts=counts, provenance=provenance,
        front_count=len(front_ids), fmt=_fmt, objective=d["objectives"][0]["metric"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{exp['name']}.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(html)
    tmp.replace(path)
    return Report(path.resolve(), table, d["best_id"])


def _as_dict_list(value) -> list:
    if isinstance(value, str):
        return json.loads(value) if value else []
    return list(value or [])
