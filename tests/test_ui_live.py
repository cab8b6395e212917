"""`dse ui` following a sweep, and the candidate table's columns, in Chromium.

A real sweep runs in another process, held at a gate batch by batch, while the
experiment page and the experiments list are open: the page's percent rises and ends at
100 % with its bar green, its header never disagrees with its counts, the best it names is
the one judgement's, and the final table is there without a reload; the list updates its
counts and shows the proposal, the decision and the accepted candidate apart. The table:
the column chooser (URL and localStorage), the text filter on what is shown, the sticky
header, no horizontal overflow at 1400 px.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dse.records import Store
from dse.records.liveness import sweep_holder
from dse.runner.acceptance import headline, judge_experiment
from dse.runner.decisions import decide
from uiserver import (EXPERIMENTS, REPO, SPEC, Console, chromium, dse_ui_process, make_store, open_drawn,
                      plots_drawn)

# The sweep's analytical batches after the baseline's (recorded once evaluated: the page
# opens on it), each held until the gate file names its number or a later one: the test lets
# the first batch go, waits until the page has shown the sweep part done, then lets the rest
# go. (Each batch's results are recorded as the next one starts, before that one is held.)
# The file "held" beside the gate names the batch the sweep waits at.
# A fixed pace is no gate: on a loaded machine the page's polls once came slower than the
# batches, and it saw no percent between the first and 100.
SLOW_SWEEP = """
import sys, time
from pathlib import Path
import dse.runner.execution as execution
real, gate, calls = execution._analytical_batch, Path(sys.argv[3]), []
def let_go(batch):
    try:
        return int(gate.read_text()) >= batch
    except (FileNotFoundError, ValueError):  # not written yet, or being written
        return False
def slow(*args):
    calls.append(1)
    if len(calls) > 1:
        gate.with_name("held").write_text(str(len(calls) - 1))
        while not let_go(len(calls) - 1):
            time.sleep(0.05)
    return real(*args)
execution._analytical_batch = slow
if __name__ == "__main__":
    from dse.runner import run_sweep
    # evaluated, not linked to the store's earlier experiment on this workload (dse.records.reuse)
    run_sweep(sys.argv[1], sys.argv[2], progress=False, reuse=False)
"""


@pytest.fixture(scope="module")
def store_db(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("ui-live"), experiments=EXPERIMENTS[:1])


@pytest.fixture(scope="module")
def server(store_db):
    with dse_ui_process(store_db) as (base, _proc):
        yield base


@pytest.fixture(scope="module")
def context():
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        yield context
        context.close()


def new_page(context):
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.console = Console(page)
    return page


def wait_for_sweep(store_db: str, name: str, sweep: subprocess.Popen, held: Path) -> int:
    """The experiment id once the sweep holds its lock and waits at its first batch's gate,
    the baseline recorded: nothing changes in the store until the gate opens."""
    deadline = time.monotonic() + 120
    while True:
        assert sweep.poll() is None, sweep.stderr.read()
        assert time.monotonic() < deadline, "the sweep did not start"
        if held.exists() and held.read_text() == "1":
            with Store(store_db) as store:
                known = store.experiments()
                exp_id = int(known.loc[known["name"] == name, "id"].iloc[0])
                with store.engine.connect() as connection:
                    assert sweep_holder(connection, exp_id, store.stale_after) is not None
                return exp_id
        time.sleep(0.2)


# Each value the page's percent takes, as it takes it (a MutationObserver on data-percent).
# (With the ETA shown at that moment.)
WATCH_PERCENT = """() => { const seen = () => [Number(document.getElementById('live').dataset.percent),
                                               document.getElementById('live-eta').textContent];
    window.__percents = [seen()];
    new MutationObserver(() => window.__percents.push(seen()))
        .observe(document.getElementById('live'), {attributes: true, attributeFilter: ['data-percent']}); }"""
# The list's candidate count of the live experiment, sampled every 100 ms (the list swaps its table in).
WATCH_LIST = """(id) => { window.__counts = []; setInterval(() => {
    const cell = document.querySelector(`#experiments tr[data-id="${id}"] td.n-candidates`);
    const sweep = document.querySelector(`#experiments tr[data-id="${id}"] td.sweep`);
    if (cell) window.__counts.push([Number(cell.textContent.replace(/,/g, '')), sweep.textContent.trim()]); }, 100); }"""


def test_the_live_page_and_list_follow_a_sweep_to_its_end(server, store_db, context, tmp_path):
    spec, script, gate = tmp_path / "live.toml", tmp_path / "slow_sweep.py", tmp_path / "go"
    spec.write_text(SPEC.format(name="live", banks="[4, 20]") + "batch = 3\n")
    script.write_text(SLOW_SWEEP)
    sweep = subprocess.Popen([sys.executable, str(script), str(spec), store_db, str(gate)], cwd=REPO,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        exp_id = wait_for_sweep(store_db, "live", sweep, tmp_path / "held")
        listing, page = new_page(context), new_page(context)
        listing.goto(server + "/")
        row = f"#experiments tr[data-id='{exp_id}']"
        assert listing.inner_text(f"{row} td.sweep").startswith("running")
        listing.evaluate(WATCH_LIST, exp_id)
        page.goto(server + f"/experiments/{exp_id}")
        assert page.locator("#live[data-state='running']").count() == 1
        first = float(page.get_attribute("#live", "data-percent"))
        assert 0 <= first < 100 and float(page.get_attribute("#live-bar", "value")) == first
        assert "reload" not in page.inner_text("#live")
        page.evaluate(WATCH_PERCENT)
        gate.write_text("1")
        # Part done (the first batch recorded, the second held), then at its end: the section
        # says so and shows the final state itself.
        page.wait_for_function("window.__percents.some(([p]) => p > %f && p < 100)" % first, timeout=90_000)
        gate.write_text("1000")
        page.wait_for_selector("#live[data-refreshed='1']", timeout=120_000)
        assert sweep.wait(timeout=60) == 0, sweep.stderr.read()
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()

    seen = page.evaluate("window.__percents")
    percents = [p for p, _ in seen]
    assert percents == sorted(percents) and percents[-1] == 100 and percents[0] < 100, seen
    assert len(set(percents)) >= 3  # the first, at least one between, and 100
    # Part done, an ETA from the pace so far; at the end, none.
    assert any(re.fullmatch(r"ETA: \d+ s|ETA: \d+ min \d+ s", eta) for p, eta in seen if 0 < p < 100), seen
    assert seen[-1][1] == "finished"
    assert page.locator("#live.done").count() == 1 and page.get_attribute("#live", "data-outcome") == "done"
    assert float(page.evaluate("document.getElementById('live-bar').value")) == 100
    # The plots drawn again for the final records (more candidates, a best with its bars): the
    # page rendered for them reserves each figure's own height (read from its HTML, before
    # any script draws), and each plot sits in it.
    plots_drawn(page)
    drawn = page.eval_on_selector_all("div.plot[data-src]", "ds => Object.fromEntries(ds.map(d => [d.id, "
                                      "[d.layout.height, d.getBoundingClientRect().height]]))")
    html = page.request.get(server + f"/experiments/{exp_id}").text()
    reserved = {m[1]: int(m[2]) for m in re.finditer(r'<div id="([^"]+)" class="plot" style="height: (\d+)px"', html)}
    assert drawn and reserved == {i: own for i, (own, _) in drawn.items()}, (reserved, drawn)
    assert all(own == shown for own, shown in drawn.values()), drawn
    assert page.inner_text("#live-percent") == "100.0 %" and page.inner_text("#live h2") == "Sweep finished"
    assert page.evaluate("getComputedStyle(document.getElementById('live-bar')).accentColor") == "rgb(67, 160, 71)"

    with Store(store_db) as store:
        exp = store.experiment(exp_id)
        judgement = judge_experiment(store, exp)
        top = headline(judgement, exp, store.decision_rows(exp_id))
        cands = store.candidates(exp_id, stage="analytical")
    statuses = cands["status"].value_counts().to_dict()
    assert judgement.best is not None and set(statuses) == {"ok", "infeasible"}
    # The best named is the judgement's (a passing one), in the live line and the header alike.
    assert page.inner_text("#live-best-answer") == top.lines[2] == page.inner_text("#headline-answer")
    assert int(page.get_attribute("#headline", "data-best")) == judgement.best
    assert page.inner_text("#headline-proposed") == f"proposed: confirmed c{judgement.best} (sweep)"
    # One set of counts: the facts line, the live line and the table say the same.
    n, ok, infeasible = len(cands), statuses["ok"], statuses["infeasible"]
    assert page.inner_text("#facts-candidates") == (f"{n} ({ok} ok runs, {infeasible} infeasible, 0 pruned, "
                                                    f"0 failed, 0 crashed, 0 running)")
    assert page.inner_text("#live-counts") == f"{n} candidates: {ok} ok, {infeasible} infeasible"
    rows = page.eval_on_selector_all("#candidates tbody tr", "rows => rows.map(r => Number(r.dataset.id))")
    assert sorted(rows) == sorted(int(i) for i in cands["id"])  # the whole table, no reload
    assert page.locator(f"#candidates tr[data-id='{judgement.best}'] td.marks").inner_text().startswith("★ best")

    # The list updated itself during the sweep and after it: its count rose to the final one.
    listing.wait_for_function(f"window.__counts.length && window.__counts.at(-1)[0] === {n} "
                              f"&& window.__counts.at(-1)[1] === '—'", timeout=60_000)
    counts = [c for c, _ in listing.evaluate("window.__counts")]
    assert counts == sorted(counts) and counts[0] < n
    assert page.console.errors == [] and listing.console.errors == []

    # The proposal and people's decisions apart: a later rejection of another candidate does
    # not hide the accepted one.
    other = next(int(c) for c in cands["id"] if int(c) not in (judgement.best, exp["baseline_candidate_id"])
                 and judgement.outcome(int(c)) is not None)
    with Store(store_db) as store:
        decide(store, exp_id, judgement.best, "ana", "fastest that passes")
        decide(store, exp_id, other, "bob", "not this one", verdict="rejected")
    listing.reload()
    assert listing.inner_text(f"{row} td.proposed") == f"confirmed c{judgement.best} (sweep)"
    assert listing.inner_text(f"{row} td.decided") == f"accepted c{judgement.best} by ana"
    assert listing.inner_text(f"{row} td.accepted") == f"c{judgement.best}"
    assert listing.inner_text(f"{row} td.sweep") == "—"
    assert listing.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    listing.close()
    page.close()


def _visible_metrics(page) -> list[str]:
    return page.eval_on_selector_all("#candidates thead th[data-metric]",
                                     "ths => ths.filter(th => !th.hidden).map(th => th.dataset.metric)")


def test_table_columns_filter_and_width(server, store_db, context):
    page = new_page(context)
    with Store(store_db) as store:
        exp = store.experiment("banks-workers")
        cands = store.candidates(exp["id"])
    url = server + f"/experiments/{exp['id']}"
    open_drawn(page, url)
    # By default the metrics the objectives and the acceptance name; the others one click away.
    assert _visible_metrics(page) == ["latency_cycles", "private_sram_bytes"]
    assert page.locator("#column-chooser input[type=checkbox]").count() >= 10
    # No horizontal overflow at 1400 px: "changes" and "reason" in view.
    sizes = page.evaluate("""() => ({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth,
        right: Math.max(...[...document.querySelectorAll('#candidates th.changes, #candidates th.reason')]
                        .map(th => th.getBoundingClientRect().right)), width: window.innerWidth})""")
    assert sizes["scroll"] <= sizes["client"] and sizes["right"] <= sizes["width"], sizes
    # The chooser: a column shown at once, kept in the URL and, for a URL without it, in the browser.
    page.click("#column-chooser summary")
    page.check("#column-chooser input[value='energy_uj']")
    assert _visible_metrics(page) == ["energy_uj", "latency_cycles", "private_sram_bytes"]
    assert "cols=energy_uj%2Clatency_cycles%2Cprivate_sram_bytes" in page.url
    cells = page.eval_on_selector_all("#candidates tbody td[data-metric='energy_uj']", "tds => tds.filter(td => !td.hidden).length")
    assert cells == page.locator("#candidates tbody tr").count() > 0
    open_drawn(page, url)
    assert _visible_metrics(page) == ["energy_uj", "latency_cycles", "private_sram_bytes"]
    page.click("th a[data-col='latency_cycles']")
    page.wait_for_url("**sort=latency_cycles**")
    plots_drawn(page)  # they move the filter form below them
    assert "cols=" in page.url and _visible_metrics(page) == ["energy_uj", "latency_cycles", "private_sram_bytes"]
    # The text filter finds what the table shows: "workers=4" in the changes.
    page.fill("#candidate-filters input[name=q]", "workers=4")
    page.click("#apply-filters")
    page.wait_for_url("**q=workers%3D4**")
    shown = page.eval_on_selector_all("#candidates tbody tr", "rows => rows.map(r => [Number(r.dataset.id), r.querySelector('td.changes').textContent])")
    expected = sorted(int(i) for i, d in zip(cands["id"], cands["diff"]) if '"mapping.workers":[1,4]' in d)
    assert sorted(i for i, _ in shown) == expected and expected
    assert all("workers=4" in text for _, text in shown)
    assert _visible_metrics(page) == ["energy_uj", "latency_cycles", "private_sram_bytes"]
    # The header stays in view while the table scrolls under it.
    open_drawn(page, url + "?per_page=100")  # no plot grows above the table once it is scrolled
    page.evaluate("window.scrollTo(0, document.querySelector('#candidates tbody tr:nth-child(20)').getBoundingClientRect().top + window.scrollY)")
    top = page.evaluate("document.querySelector('#candidates thead th').getBoundingClientRect().top")
    assert abs(top) < 1, top
    # No emulator ran here: no empty model-vs-emulator figure, a sentence instead.
    assert page.locator("#model-vs-emulator").count() == 0 and page.locator("#no-emulator").count() == 1
    # A column name the table does not have: a bad query, its allowed names listed.
    response = page.goto(url + "?cols=latency,energy_uj")
    assert response.status == 400 and "query parameter cols='latency'" in page.inner_text("#problem")
    page.console.errors = [e for e in page.console.errors if "400" not in e]
    assert page.console.errors == []
    page.evaluate("window.localStorage.clear()")
    page.close()
