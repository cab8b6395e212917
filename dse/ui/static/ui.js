// Draws the page's plotly figures from their JSON endpoints (data-src); a click on a
// point that carries a candidate id opens that candidate's page. Each figure's "summary"
// (sent beside it) fills the text around it; all text goes in as textContent.
"use strict";
const number = (v) => Math.round(v).toLocaleString("en-US");
// A signed percentage: one decimal from 1 % on, two significant digits below (a model
// within 0.003 % should not read "0.00 %").
const percent = (v) => (v >= 0 ? "+" : "−") + (Math.abs(v) >= 1 ? Math.abs(v).toFixed(1) : Math.abs(v).toPrecision(2)) + " %";
// A figure of area, energy or power as text: four significant digits.
const figure = (v) => (v === null || v === undefined) ? "—" : Number(v.toPrecision(4)).toLocaleString("en-US");
const summaries = {
  // Area and energy by component (the experiment's or a candidate's): each bar's totals, and who has none.
  components(s, div) {
    const out = document.getElementById(div.id + "-summary");
    if (!out) return;
    const shown = s.candidates.map((c) => (c.label ? c.label + " " : "") + "(candidate " + c.id + "): " +
      figure(c.totals.area_mm2) + " mm², " + figure(c.totals.energy_uj) + " µJ, " + figure(c.totals.power_mw) + " mW");
    const missing = s.missing.map((c) => c.label + " (candidate " + c.id + ")");
    out.textContent = s.kind + ": " + (shown.length ? shown.join("; ") : "no candidate has these figures") +
      (missing.length ? ". Without " + s.kind + " figures: " + missing.join(", ") : "") + ".";
  },
  "ppa-pareto"(s) {
    const out = document.getElementById("ppa-pareto-summary");
    if (out) {
      out.textContent = s.feasible + " feasible; on the front (" + s.front + "): candidates " + s.front_ids.join(", ") +
        (s.best !== null ? "; best: candidate " + s.best : "");
    }
  },
  "op-energy"(s) {
    const out = document.getElementById("op-energy-summary");
    if (out) {
      out.textContent = s.candidates.length ? "Shown: " + s.candidates.map((c) => c.label + " (candidate " + c.id + ")").join(", ") + "."
        : "No energy per op recorded for the baseline, best or accepted candidates.";
    }
  },
  pareto(s) {
    const out = document.getElementById("pareto-summary");
    if (out) {
      out.textContent = s.candidates + " candidates, " + s.feasible + " feasible, " + s.front +
        " on the front, " + s.passing + " pass acceptance" + (s.best !== null ? "; best: candidate " + s.best : "");
    }
  },
  parallel(s) {
    const out = document.getElementById("parallel-summary");
    if (out) out.textContent = s.lines + " of " + s.feasible + " feasible candidates drawn.";
  },
  ops(s) {
    const out = document.getElementById("ops-summary");
    if (out) {
      out.textContent = s.candidates.length ? "Shown: " + s.candidates.map((c) => c.label + " (candidate " + c.id + ")").join(", ") + "."
        : "No feasible baseline, best or accepted candidate yet.";
    }
  },
  "model-vs-emulator"(s, div) {
    const body = document.querySelector("#model-error tbody");
    if (!body) return;
    body.replaceChildren();
    if (!s.rows.length) {
      const cell = body.insertRow().insertCell();
      cell.colSpan = 4;
      cell.textContent = "No candidate has both an analytical estimate and emulator cycles (the spec's [stages] emulator is \"none\", or none ran yet).";
    }
    for (const r of s.rows) {
      const row = body.insertRow();
      const link = document.createElement("a");
      link.href = div.dataset.candidateUrl + r.candidate_id;
      link.textContent = r.candidate_id;
      row.insertCell().append(link);
      for (const text of [number(r.analytical_cycles), number(r.emulator_cycles),
                          percent(r.error_pct)]) {
        const cell = row.insertCell();
        cell.className = "num";
        cell.textContent = text;
      }
    }
  },
};
async function drawPlot(div) {
  const response = await fetch(div.dataset.src, {headers: {"Accept": "application/json"}});
  if (!response.ok) {
    div.textContent = "could not load the figure (HTTP " + response.status + ")";
    return;
  }
  const fig = await response.json();
  // The plot's room is the figure's own height: the page reserved it from what the figure
  // would show. (A sweep's end swaps in new sections, with new plots: each is drawn once.)
  if (fig.layout && fig.layout.height) div.style.height = fig.layout.height + "px";
  await Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false});
  const summarize = summaries[div.id] || summaries[div.dataset.summary];
  if (fig.summary && summarize) summarize(fig.summary, div);
  div.dataset.ready = "1";
  div.on("plotly_click", (event) => {
    const point = event.points && event.points[0];
    if (!point || point.customdata === undefined) return;
    if (div.dataset.candidateUrl) {
      window.location.href = div.dataset.candidateUrl + point.customdata;
    } else if (div.id === "timeline") {
      window.location.href = "/experiments/" + point.customdata;
    }
  });
}
document.querySelectorAll("div.plot[data-src]").forEach((div) => { drawPlot(div); });
