// A sweep followed live (dse.ui.live): the experiment page of a running sweep asks
// live.json every data-interval ms how far it is (percent, ETA, counts) and for the best
// passing candidate so far (the acceptance's judgement), adds the candidates recorded since,
// and once the sweep has ended shows 100 % (green) and renders its sections afresh (the
// whole candidate table, the plots): no reload. The experiments list re-reads itself
// likewise. All text goes in as textContent.
"use strict";
const setText = (id, text) => { const el = document.getElementById(id); if (el) el.textContent = text; };

function showHeadline(h, status) {
  setText("headline-answer", h.answer);
  setText("live-best-answer", h.answer);
  setText("headline-proposed", h.proposed);
  setText("headline-decided", h.decided);
  setText("headline-counts", h.counts);
  const head = document.getElementById("headline");
  if (head) head.dataset.best = h.best === null ? "" : h.best;
  const open = document.getElementById("headline-open");
  if (open && h.best !== null) {
    open.href = open.href.replace(/\d+$/, h.best);
    open.textContent = "open c" + h.best;
  }
  const verdict = document.getElementById("verdict");
  if (verdict) {
    verdict.className = "badge " + status;
    verdict.textContent = "hypothesis " + status;
  }
}

// The page's sections marked data-refresh, rendered again by the server (the state the
// sweep left), swapped in; then their plots drawn and their table controls bound.
async function refreshSections() {
  const response = await fetch(window.location.href, {headers: {"Accept": "text/html"}});
  if (!response.ok) throw new Error("HTTP " + response.status);
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
  for (const old of document.querySelectorAll("[data-refresh]")) {
    const next = fresh.getElementById(old.id);
    if (next) old.replaceWith(document.adoptNode(next));
  }
  document.querySelectorAll("[data-refresh] div.plot[data-src]").forEach((div) => { drawPlot(div); });
  if (typeof bindTable === "function") bindTable();
}

function followSweep(section) {
  let after = Number(section.dataset.after);
  const body = section.querySelector("#live-new tbody");
  const bar = document.getElementById("live-bar");
  const cell = (row, text, cls) => { const c = row.insertCell(); c.textContent = text; if (cls) c.className = cls; return c; };
  const unfinished = (status) => status === "running" || status === "not run";
  const fill = (row, r) => {
    row.className = r.status.replace(" ", "-");
    row.cells[2].textContent = r.status;
    row.cells[3].textContent = r.value === null || r.value === undefined ? "—" : number(r.value);
  };
  async function poll() {
    let news;
    // The rows still shown unfinished: asked again, so each shows its outcome once known.
    const watch = [...body.rows].filter((row) => unfinished(row.cells[2].textContent)).map((row) => row.dataset.id);
    try {
      const response = await fetch(section.dataset.src + "?after=" + after + (watch.length ? "&watch=" + watch.slice(0, 500).join(",") : ""),
                                   {headers: {"Accept": "application/json"}});
      if (!response.ok) throw new Error("HTTP " + response.status);
      news = await response.json();
    } catch (error) {
      setText("live-status", "could not ask for news (" + error.message + "); trying again");
      setTimeout(poll, Number(section.dataset.interval));
      return;
    }
    bar.value = news.percent;
    section.dataset.percent = news.percent;
    setText("live-percent", news.percent_text);
    setText("live-done", news.done_text);
    setText("live-eta", news.eta_text);
    setText("live-counts", news.counts_text);
    setText("facts-candidates", news.candidates_text);
    showHeadline(news.headline, news.status);
    section.dataset.candidates = news.candidates;
    for (const r of news.new.slice().reverse()) {  // oldest first, each on top: the newest ends up first
      const row = body.insertRow(0);
      row.dataset.id = r.id;
      const link = document.createElement("a");
      link.href = section.dataset.candidateUrl + r.id;
      link.textContent = r.id;
      row.insertCell().append(link);
      cell(row, r.origin);
      cell(row, "");
      cell(row, "", "num");
      cell(row, r.changes, "text");
      fill(row, r);
    }
    for (const r of news.updated) {
      const row = body.querySelector("tr[data-id='" + r.id + "']");
      if (row) fill(row, r);
    }
    after = news.last_id;
    if (news.running) {
      setTimeout(poll, Number(section.dataset.interval));
      return;
    }
    const done = news.state === "done";
    section.classList.add(done ? "done" : "interrupted");
    section.dataset.outcome = news.state;
    section.querySelector("h2").textContent = done ? "Sweep finished" : "Sweep ended before finishing";
    setText("live-status", (done ? "The sweep has finished: " : "The sweep has ended, interrupted: ") +
      news.counts_text + "; hypothesis " + news.status + ", " + news.headline.proposed + ".");
    section.dataset.state = "ended";
    try {
      await refreshSections();
      section.dataset.refreshed = "1";
    } catch (error) {
      setText("live-status", "The sweep has ended; could not show its final table (" + error.message + ").");
    }
  }
  poll();
}

// The experiments list: re-read while a sweep runs (often) or not (every fifth time as often).
function followList(list) {
  async function poll() {
    try {
      const response = await fetch(window.location.href, {headers: {"Accept": "text/html"}});
      if (!response.ok) throw new Error("HTTP " + response.status);
      const next = new DOMParser().parseFromString(await response.text(), "text/html").getElementById(list.id);
      if (next) {
        list.replaceWith(document.adoptNode(next));
        list = next;
      }
    } catch (error) {
      // the server is restarting, or gone: ask again later
    }
    const interval = Number(list.dataset.interval);
    setTimeout(poll, list.dataset.sweeping === "1" ? interval : 5 * interval);
  }
  const interval = Number(list.dataset.interval);
  setTimeout(poll, list.dataset.sweeping === "1" ? interval : 5 * interval);
}

const liveSection = document.getElementById("live");
if (liveSection) followSweep(liveSection);
const liveList = document.getElementById("experiment-list");
if (liveList) followList(liveList);
