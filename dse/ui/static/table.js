// The candidate table's column chooser: which metric columns show, remembered in the URL
// (cols=...) and, per experiment, in the browser (localStorage) for the next visit whose
// URL names none. Bound again after the live page swaps the table in (bindTable).
"use strict";
function withCols(href, cols) {
  const url = new URL(href, window.location.href);
  url.searchParams.set("cols", cols);
  return url.pathname + url.search + url.hash;
}

function bindTable() {
  const chooser = document.getElementById("column-chooser");
  const table = document.getElementById("candidates");
  if (!chooser || !table) return;
  const key = "dse.columns." + chooser.dataset.experiment;
  const boxes = [...chooser.querySelectorAll("input[type=checkbox]")];
  const apply = (chosen) => {
    for (const box of boxes) box.checked = chosen.includes(box.value);
    for (const c of table.querySelectorAll("[data-metric]")) c.hidden = !chosen.includes(c.dataset.metric);
    chooser.querySelector("summary").textContent = "metric columns (" + chosen.length + " of " + boxes.length + " shown)";
  };
  // The choice in the URL, and in the links and the filter form that lead to the next page.
  const remember = (chosen) => {
    const cols = chosen.length ? chosen.join(",") : "-";
    window.history.replaceState(null, "", withCols(window.location.href, cols));
    document.querySelectorAll("a.sort, #prev-page, #next-page").forEach((a) => { a.href = withCols(a.href, cols); });
    const form = document.getElementById("candidate-filters");
    let input = form.querySelector("input[name=cols]");
    if (!input) {
      input = document.createElement("input");
      input.type = "hidden";
      input.name = "cols";
      form.append(input);
    }
    input.value = cols;
  };
  if (!new URLSearchParams(window.location.search).has("cols")) {
    const saved = window.localStorage.getItem(key);
    if (saved !== null) {
      const chosen = saved ? saved.split(",").filter((m) => boxes.some((b) => b.value === m)) : [];
      apply(chosen);
      remember(chosen);
    }
  }
  for (const box of boxes) {
    box.addEventListener("change", () => {
      const chosen = boxes.filter((b) => b.checked).map((b) => b.value);
      apply(chosen);
      window.localStorage.setItem(key, chosen.join(","));
      remember(chosen);
    });
  }
}
bindTable();
