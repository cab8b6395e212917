// Draws the page's plotly figures from their JSON endpoints (data-src); a click on a
// point that carries a candidate id opens that candidate's page.
"use strict";
async function drawPlot(div) {
  const response = await fetch(div.dataset.src, {headers: {"Accept": "application/json"}});
  if (!response.ok) {
    div.textContent = "could not load the figure (HTTP " + response.status + ")";
    return;
  }
  const fig = await response.json();
  await Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false});
  if (fig.summary) {
    const s = fig.summary, out = document.getElementById("pareto-summary");
    if (out) {
      out.textContent = s.candidates + " candidates, " + s.feasible + " feasible, " + s.front +
        " on the front, " + s.passing + " pass acceptance" + (s.best !== null ? "; best: candidate " + s.best : "");
    }
  }
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
