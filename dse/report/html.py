"""`dse report EXPERIMENT` and `dse report --history`: a self-contained HTML file (figures
embedded as PNG) and a Markdown twin (figures as PNG files beside it).

All user text is escaped: Jinja2's autoescaping in HTML, and the `md` filter in Markdown,
so a `<script>` in a hypothesis shows as text in both.
"""

from __future__ import annotations

import base64
import html as html_lib
import re
from contextlib import ExitStack
from urllib.parse import quote
from dataclasses import dataclass, replace
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd
import plotly.io as pio
from markupsafe import Markup

from ..records import Store
from ..runner.caveats import hardware_caveat, kinds_text
from ..records.blobs import EvidenceCheck
from ..records.report_reads import COMPONENT_TOTALS
from . import aside
from .data import (PPA_KINDS, ExperimentView, accepted_candidates, changes, experiment_view,
                   meaningful_candidates, outcome_mark, row_marks, stored_bank_lifetimes)
from .figures import (component_plot, core_time_plot, history_plot, model_vs_emulator_plot, op_breakdown_plot,
                      pareto_panels, pareto_plot)
from ..runner.reasons import reason_ref, reason_refs
from .interactive import (PPA_PAIRS, bank_lifetime_figure, experiment_figures, history_figure, ppa_figures,
                          ppa_pareto_name, search_history_figure)
from .interactive import load as load_plotly
from .search_history import EVALUATOR, best_words, importance_rows, search_history


def _when(moment) -> str:
    """A timestamp to the second, in UTC (no microseconds)."""
    if moment is None or (not isinstance(moment, str) and pd.isna(moment)):
        return "—"
    return pd.Timestamp(moment).strftime("%Y-%m-%d %H:%M:%S UTC")


def _inline(fig, div_id: str, with_js: bool) -> Markup:
    """A plotly figure as HTML for a self-contained file: plotly.js inlined once (from the
    installed package, as `dse ui` serves it), the figure's JSON escaped by plotly."""
    return Markup(pio.to_html(fig, include_plotlyjs=with_js, full_html=False, div_id=div_id,
                              config={"displaylogo": False, "responsive": True}))


def fmt_value(v) -> str:
    """A table cell: "—" for a missing value, whole numbers with separators, else 4 digits."""
    if v is None or v is pd.NA or (isinstance(v, float) and pd.isna(v)):
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    if isinstance(v, (int, float)):
        return f"{v:,.4g}"
    return str(v)


# Characters that make Markdown out of text: links and images ([x](y), ![](y)), emphasis,
# code, headings, lists, tables. Each is shown as itself (a backslash escape).
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~>-])")
# Bare URLs that GitHub-flavoured Markdown links by itself: break the scheme's "//" and "www.".
_MD_AUTOLINK = re.compile(r"(?i)(?<=:)//|\bwww\.")


def _md(text) -> str:
    """Markdown-safe text for a table cell or paragraph: raw HTML escaped, Markdown syntax
    (links, images, emphasis, code, pipes) backslash-escaped and bare URLs unlinked, newlines
    kept inert, so user text shows as text and nothing in it is a live link."""
    text = html_lib.escape(" ".join(str(text).splitlines()), quote=False)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return _MD_AUTOLINK.sub(lambda m: "\\/\\/" if m.group(0) == "//" else m.group(0)[:-1] + "\\.", text)


def _md_code(text) -> str:
    """Text for inside a Markdown code span: shown literally, so only backticks and pipes matter."""
    return str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ")


def _env(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("dse.report", "templates"), autoescape=autoescape,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt_value
    env.filters["md"] = _md
    env.filters["mdcode"] = _md_code
    env.filters["when"] = _when
    return env


_HTML, _MD = _env(True), _env(False)


# Rows of a report's candidate tables: past this, the most telling ones (baseline, best,
# accepted, front, passing, then the best by the first objective); `dse export` has all.
MAX_ROWS = 2000


def _shown_rows(table: pd.DataFrame, first: set[int], objective: dict) -> pd.DataFrame:
    """At most MAX_ROWS rows of `table` (all when it has no more), in candidate order."""
    if len(table) <= MAX_ROWS:
        return table.sort_values("candidate_id")
    ids = table["candidate_id"].to_numpy()
    metric = objective["metric"]
    value = (pd.to_numeric(table[metric], errors="coerce").to_numpy(dtype=float) if metric in table
             else np.full(len(table), np.nan))
    missing = np.isnan(value)
    key = np.where(missing, 0.0, value if objective.get("direction", "minimize") == "minimize" else -value)
    # The telling ones, then those with the figure by it, then by id (np.lexsort: the last key
    # first); an index sort of 100,000 rows, not a sort of the table.
    order = np.lexsort((ids, key, missing, ~np.isin(ids, np.fromiter(first, dtype=np.int64, count=len(first)))))
    return table.iloc[order[:MAX_ROWS]].sort_values("candidate_id")


@dataclass
class Report:
    path: Path  # the HTML file
    markdown: Path
    view: ExperimentView
    figures: dict  # name -> Figure (data kept, matplotlib figure closed)
    evidence: EvidenceCheck  # the experiment's evidence files, re-hashed as the report was written

    @property
    def candidates(self) -> pd.DataFrame:
        return self.view.table

    @property
    def best_id(self) -> int | None:
        return self.view.best_id


def _write(path: Path, text: str | bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(text if isinstance(text, bytes) else text.encode())
    tmp.replace(path)


def write_report(store: Store, experiment, out_dir: str | Path = "reports", x: str | None = None,
                 y: str | None = None) -> Report:
    from tqdm import tqdm

    # A big store's report takes seconds: a bar on a terminal, nothing otherwise (disable=None).
    # `closing`: what the report starts that must end with it (the child building part of it).
    with tqdm(total=4, desc=f"report {experiment}: read the store", unit="phase", leave=False,
              disable=None) as bar, ExitStack() as closing:
        return _write_report(store, experiment, out_dir, x, y, bar, closing)


def _write_report(store: Store, experiment, out_dir: str | Path, x: str | None, y: str | None, bar,
                  closing: ExitStack) -> Report:
    view = experiment_view(store, experiment)
    evidence = store.check_evidence(view.exp["id"])
    bar.update()
    bar.set_description(f"report {experiment}: figures")
    exp, table, objectives = view.exp, view.table, view.objectives
    directions = {o["metric"]: o.get("direction", "minimize") for o in objectives}
    y = y or objectives[0]["metric"]
    x = x or (objectives[1]["metric"] if len(objectives) > 1 else "private_sram_bytes")
    accepted = accepted_candidates(view.decisions)
    passing_ids = set(int(i) for i in table.loc[view.passing, "candidate_id"])
    pareto = pareto_plot(table, x=x, y=y, directions=(directions.get(x, "minimize"), directions.get(y, "minimize")),
                         baseline_id=view.baseline_id, best_id=view.best_id, title=f"{exp['name']}: {y} vs {x}",
                         passing=passing_ids, accepted=accepted)
    front_ids = [int(i) for i in pareto.data.loc[pareto.data["on_front"], "candidate_id"]]
    figures = {"pareto": pareto}
    # The per-op look: baseline, best (the verdict's) and accepted, as the UI shows them.
    labels = meaningful_candidates(table, view.baseline_id, view.best_id, accepted)
    op_cycles = view.op_cycles_of(list(labels))
    labels = {i: label for i, label in labels.items() if i in op_cycles.index}
    chosen = list(labels)
    if chosen and len(op_cycles.columns):
        figures["ops"] = op_breakdown_plot(op_cycles, chosen, labels)
    ppa = _ppa_section(view, meaningful_candidates(table, view.baseline_id, view.best_id, accepted), directions,
                       figures)
    if len(view.emulated):
        figures["model_vs_emulator"] = model_vs_emulator_plot(view.emulated)
    if len(view.core_time) and "busy_cycles" in view.core_time:
        figures["core_time"] = core_time_plot(view.core_time, list(view.emulated["candidate_id"]))
    # Every PNG figure is built. A big report draws those of many points (its Pareto plots) in
    # a child process, with its interactive area, energy and latency figures, while this one
    # builds the rest (`aside`; the two shares about equal at 100,000 candidates).
    many = {name: fig for name, fig in figures.items() if len(fig.data) >= aside.ASIDE_FROM}
    jobs = {f"{name}.png": fig.png_bytes for name, fig in many.items()}
    load_plotly()  # loaded once for both processes
    ppa_view = replace(view, store=None)  # from what it read above (`ExperimentView._kept`), not the store
    ppa_labels = meaningful_candidates(table, view.baseline_id, view.best_id, accepted)
    jobs[PPA_PLOTS] = lambda: {name: _inline(fig, name.replace("_", "-"), False)
                               for name, fig in ppa_figures(ppa_view, ppa_labels).items()}
    apart = closing.enter_context(aside.Aside(jobs, aside=len(table) >= aside.ASIDE_FROM))
    if apart.pid is not None:  # the child has its own copies
        for fig in many.values():
            fig.close()
    # The interactive figures (the UI's): plotly.js inlined once, with the first.
    interactive_html = {name: _inline(fig, name.replace("_", "-"), name == "pareto")
                        for name, fig in experiment_figures(view, x, y, ppa=False).items()}
    # What the search did: the objective candidate after candidate, and which knobs mattered
    # (computed once: `search_history`, as the UI shows it).
    history = search_history(table, objectives[0])
    if history.ids:
        interactive_html["search_history"] = _inline(search_history_figure(history), "search-history", False)
    # The bank lifetimes of the best candidate (else the baseline) as its emulator run recorded them.
    banks = None
    for cid in dict.fromkeys(i for i in (view.best_id, view.baseline_id) if i is not None):
        run_id, lives = stored_bank_lifetimes(store, int(cid))
        if lives:
            banks = {"candidate": int(cid), "run": run_id, "count": len(lives)}
            interactive_html["banks"] = _inline(bank_lifetime_figure(
                lives, title=f"candidate {cid}: bank lifetimes (emulator run r{run_id})"), "banks", False)
            break
    # The emulator's counters by scope (Ball, bank, DMA, bus) and its host time by phase: of
    # the emulated candidates, the labelled ones (baseline, best, accepted) first.
    emulated_ids = [int(i) for i in view.emulated["candidate_id"]] if len(view.emulated) else []
    counter_ids = sorted(emulated_ids, key=lambda i: (i not in labels, i))[:MAX_COUNTER_CANDIDATES]
    counters = view.counters_of(counter_ids) if counter_ids else {}
    stall_cols = [c for c in view.core_time.columns if str(c).startswith("stall_")]
    stalls = (view.core_time[["candidate_id", "scope_key", *stall_cols]].to_dict("records")
              if stall_cols else [])

    metric_cols = [m for m in dict.fromkeys([y, x, "latency_cycles", "private_sram_bytes", "peak_sram_bytes",
                                             "dma_bytes"]) if m in table]
    # What a candidate costs, where the store has it.
    metric_cols += [m for m in PPA_COLUMNS if m not in metric_cols and m in table and table[m].notna().any()]
    front_set = set(front_ids)
    shown = _shown_rows(table, {view.baseline_id, view.best_id, *accepted, *front_set, *passing_ids} - {None},
                        objectives[0])
    rows = []
    first = objectives[0]["metric"]
    for r in shown.to_dict("records"):
        cid = int(r["candidate_id"])
        outcome = view.judgement.outcome(cid)
        rows.append(dict(id=cid, origin=r["origin"], status=r["status"], changes=changes(r["diff"]),
                         metrics=[r.get(m) for m in metric_cols], reason=r.get("reason") or "",
                         front=cid in front_set, baseline=cid == view.baseline_id, best=cid == view.best_id,
                         passes=cid in passing_ids, accepted=cid in accepted, outcome=outcome or "",
                         judged=outcome_mark(outcome),
                         marks=", ".join(row_marks(cid, baseline_id=view.baseline_id, best_id=view.best_id,
                                                   accepted=accepted, front=front_set)),
                         ratio=_times(view.judgement.ratio(cid, "analytical", first))))
    # Each reason once, with its count (`Store.reason_groups`, as the sweep and `dse show`
    # print them); a row refers to its reason's line by number.
    groups = store.reason_groups(int(exp["id"]))
    refs = reason_refs(groups)
    for row in rows:
        row["reason"] = reason_ref(refs, row["status"], row["reason"] or None) or row["reason"]
    reasons = [dict(ref=refs[(status, reason)], n=n, status=status, reason=reason) for status, reason, n in groups]

    bar.update()
    bar.set_description(f"report {experiment}: images")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    assets = out / f"{exp['name']}_files"
    assets.mkdir(exist_ok=True)
    # This process's PNGs, then the child's: as late as can be, its work overlaps all of this.
    here = {name: fig.png_bytes() for name, fig in figures.items() if name not in many}
    built = apart.results()
    interactive_html.update(built[PPA_PLOTS])
    pngs = {name: here[name] if name in here else built[f"{name}.png"] for name in figures}
    for name, fig in figures.items():
        fig.close()
        _write(assets / f"{name}.png", pngs[name])

    bar.update()
    bar.set_description(f"report {experiment}: pages")
    context = dict(
        exp=exp, decisions=[{**d, "candidate": "—" if pd.isna(d["candidate_id"]) else f"c{d['candidate_id']}",
                             "kinds": kinds_text(d["evidence_kinds"]), "caveat": hardware_caveat(d["evidence_kinds"])}
                            for d in view.decisions.to_dict("records")], notes=view.notes,
        compare=None if view.compare is None else view.compare.to_dict("records"),
        baseline_id=view.baseline_id, best_id=view.best_id, metric_cols=metric_cols, rows=rows,
        reasons=reasons, reused=view.reused, n_candidates=len(table), counts=view.counts, provenance=view.provenance,
        front_count=len(front_ids), objective=objectives[0]["metric"], x=x, y=y, headline=view.headline,
        chosen=[(labels[i], i) for i in chosen], has_ops="ops" in figures,
        emulated=view.emulated.to_dict("records"), stall_cols=stall_cols, stalls=stalls, counters=counters,
        has_emulator="model_vs_emulator" in figures, has_core_time="core_time" in figures, ppa=ppa, banks=banks,
        host_time=view.host_time,
        search=history, importance=importance_rows(history), search_best=best_words(history), evaluator=EVALUATOR,
        evidence=evidence,
    )
    html = _HTML.get_template("report.html.j2").render(
        **context, images={n: base64.b64encode(b).decode() for n, b in pngs.items()},
        plots=interactive_html, passing_count=len(passing_ids), accepted=sorted(accepted))
    md = _MD.get_template("report.md.j2").render(**context, images={n: f"{assets.name}/{n}.png" for n in pngs})
    path, md_path = out / f"{exp['name']}.html", out / f"{exp['name']}.md"
    _write(path, html)
    _write(md_path, md)
    bar.update()
    bar.refresh()  # the full bar drawn before it goes (an update within mininterval is not)
    return Report(path.resolve(), md_path.resolve(), view, figures, evidence)


# The `aside` job of the interactive area, energy and latency figures (`ppa_figures`).
PPA_PLOTS = "interactive area, energy and latency figures"

# Candidates whose counter tables the report shows (each bank of each core is a row).
MAX_COUNTER_CANDIDATES = 4


def _times(ratio: float) -> str:
    """A candidate's figure over the baseline's, as its table's "x baseline" column shows it."""
    return "—" if ratio is None or ratio != ratio else f"{ratio:#.3g}x"


# The candidate tables' columns of what a candidate costs (shown where recorded).
PPA_COLUMNS = ("area_mm2", "energy_uj", "power_mw")


def _ppa_section(view: ExperimentView, labels: dict[int, str], directions: dict[str, str], figures: dict) -> dict:
    """The report's area, energy and power: by component, kind by kind, of the labelled
    candidates (baseline, best, accepted: a table each kind, the recorded totals under it,
    and its figure in `figures`), the Pareto plots of latency, energy and area with the
    candidates on each front, and the energy per op. The PNG figures go into `figures` under
    the names `experiment_figures` gives the interactive ones."""
    exp, table = view.exp, view.table
    kinds = []
    for kind in PPA_KINDS:
        parts = view.components_of(list(labels), kind) if labels else None
        if parts is None or not parts.candidates:
            continue
        ids = parts.candidates
        area, energy = parts.wide("area_mm2"), parts.wide("energy_uj")
        rows = [{"component": c, "cells": [(area.loc[i, c], energy.loc[i, c]) for i in ids]} for c in area.columns]
        totals = [{name: parts.totals.loc[i, name] for name in COMPONENT_TOTALS} | {"run": int(parts.totals.loc[i, "run_id"])}
                  for i in ids]
        kinds.append({"kind": kind, "candidates": [(labels[i], i) for i in ids], "rows": rows, "totals": totals,
                      "missing": [(label, i) for i, label in labels.items() if i not in ids]})
        figures[f"components_{kind}"] = component_plot(
            parts, labels, title=f"{exp['name']}: area and energy by component ({kind})")
    pairs = []
    feasible = table["status"] == "ok"
    drawn = [(x, y) for x, y in PPA_PAIRS
             if x in table and y in table and (feasible & table[x].notna() & table[y].notna()).any()]
    if drawn:  # one PNG of the pairs side by side (the HTML draws each interactively)
        figures["ppa_pareto"], plots = pareto_panels(
            table, drawn, directions, baseline_id=view.baseline_id, best_id=view.best_id,
            title=f"{exp['name']}: latency, energy and area (analytical)",
            passing=set(int(i) for i in table.loc[view.passing, "candidate_id"]),
            accepted=accepted_candidates(view.decisions))
        for plot in plots:
            front = sorted(int(i) for i in plot.data.loc[plot.data["on_front"], "candidate_id"])
            pairs.append({"name": ppa_pareto_name(plot.x, plot.y), "x": plot.x, "y": plot.y, "front": front})
    op_energy = view.op_metric_of(list(labels), "energy_uj") if labels else pd.DataFrame()
    shown = [i for i in labels if i in op_energy.index]
    if shown and len(op_energy.columns):
        figures["op_energy"] = op_breakdown_plot(op_energy, shown, labels, title="analytical energy per op",
                                                 xlabel="energy per inference (uJ)")
    return {"kinds": kinds, "pairs": pairs, "op_energy": [(labels[i], i) for i in shown] if "op_energy" in figures else [],
            "columns": [m for m in PPA_COLUMNS if m in table and table[m].notna().any()]}


@dataclass
class HistoryReport:
    path: Path
    markdown: Path
    figure: object


def write_history(store: Store, out_dir: str | Path = "reports") -> HistoryReport:
    """The timeline of experiments and decisions across the whole store."""
    exps = store.experiments()
    decisions = store.decisions()
    fig = history_plot(exps, decisions)
    png = fig.png_bytes()
    fig.close()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "history.png", png)
    context = dict(experiments=exps.sort_values("created_at").to_dict("records"),
                   decisions=decisions.to_dict("records"))
    html = _HTML.get_template("history.html.j2").render(
        **context, timeline=_inline(history_figure(exps, decisions), "timeline", True),
        report_of=lambda name: quote(f"{name}.html"))
    md = _MD.get_template("history.md.j2").render(**context, image="history.png")
    _write(out / "history.html", html)
    _write(out / "history.md", md)
    return HistoryReport((out / "history.html").resolve(), (out / "history.md").resolve(), fig)
