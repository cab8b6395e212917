// Draws the page's plotly figures from their JSON endpoints (data-src); a click on a
// point that carries a candidate id opens that candidate's page. Each figure's "summary"
// (sent beside it) fills the text around it; all text goes in as textContent.
"use strict";
const number = (v) => Math.round(v).toLocaleString("en-US");
// A signed percentage: one decimal from 1 % on, two significant digits below (a model
// within 0.003 % should not read "0.00 %").
const percent = (v) => (v >= 0 ? "+" : "−") + (Math.abs(v) >= 1 ? Math.abs(v).toFixed(1) : Math.abs(v).toPrecision(2)) + " %";
const summaries = {
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
  await Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false});
  if (fig.summary && summaries[div.id]) summaries[div.id](fig.summary, div);
  div.on("plotly_click", (event) => {
    const point = event.points && event.points[0];
    if (!point || point.customdata === undefined) return;
    if (div.dataset.candidateUrl) {
      window.location.href = div.dataset.candidateUrl + point.customdata;
    } else if (div.id === "timeline") {
      window.location.href = "/experiments/" + point.customdata;
    }
  });
  div.dataset.ready = "1";
}
document.querySelectorAll("div.plot[data-src]").forEach((div) => { drawPlot(div); });
