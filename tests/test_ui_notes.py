"""Notes, links, decisions' evidence, artifact viewers and config trees, in every view.

One real store from two real small sweeps (the MLP on goban; the first emulates its two
fastest candidates and keeps their outputs (.npy) and counters; the second `follows` the
first), a real `dse ui` process and Debian's Chromium: a note added in the UI shows in
`dse show` and one added with `dse note` shows in the UI; a refused decision or note comes
back with its text; the hardware caveat reads the same in `dse show`, the report and the UI;
the array and counter viewers show what numpy and the emulator's counters say.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from dse.config_tree import tree_rows, tree_text
from dse.records import Store
from dse.runner.caveats import hardware_caveat, kinds_text
from dse.ui import artifacts
from uiserver import EMULATE_TOP_2, Console, chromium, dse_ui_process, make_store, open_drawn

FOLLOWS = '\n[experiment.follows]\nexperiment = "emulated"\nreason = "fewer banks, same question"\n'
EXPERIMENTS = (("emulated", "[20]", EMULATE_TOP_2), ("later", "[8]", FOLLOWS))


@pytest.fixture(scope="module")
def store_db(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("notes"), experiments=EXPERIMENTS)


@pytest.fixture(scope="module")
def server(store_db):
    with dse_ui_process(store_db) as (base, _):
        yield base


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.console = Console(page)
    yield page
    context.close()


# ---- the one formatter, the one caveat ------------------------------------------------------


def test_a_config_is_a_tree_of_indented_rows():
    config = {"banks": {"count": 16, "rows": 128}, "name": "16", "tags": [1, 2],
              "balls": [{"kind": "matrix", "latency": {"os": "M*N"}}], "limits": {}, "note": " x"}
    assert tree_text(config) == "\n".join([
        "banks:", "  count: 16", "  rows: 128",
        'name: "16"',  # a string that reads as a number stays quoted
        "tags: [1, 2]",
        "balls:", "  [0]:", "    kind: matrix", "    latency:", "      os: M*N",
        "limits: {}", 'note: " x"'])
    assert [r.path for r in tree_rows(config) if r.value is not None][:3] == ["banks.count", "banks.rows", "name"]
    assert "balls[0].latency.os" in {r.path for r in tree_rows(config)}


def test_the_hardware_caveat_is_said_of_model_evidence_only():
    assert hardware_caveat(["analytical"]).startswith("hardware may differ: this rests on analytical model only")
    assert "emulator cycles" in hardware_caveat('["analytical", "emulator_cycles", "numerics"]')
    # a measurement of hardware (or its RTL) among the kinds: no caveat
    assert hardware_caveat(["emulator_cycles", "rtl_cycles"]) is None
    assert hardware_caveat(None) is None and hardware_caveat("") is None  # nothing recorded: nothing to say
    assert kinds_text(None) == "not recorded" and kinds_text('["fpga_cycles"]') == "FPGA cycles"


def test_array_statistics_are_numpys_chunk_by_chunk(tmp_path, monkeypatch):
    values = np.random.default_rng(0).normal(3.0, 2.0, size=(5, 7, 9)).astype(np.float32)
    values[1, 2, 3] = np.nan
    values[4, 0, 0] = np.nan
    path = tmp_path / "a.npy"
    np.save(path, np.asfortranarray(values))
    monkeypatch.setattr(artifacts, "STATS_CHUNK", 16)  # many chunks: the parallel update must agree
    view = artifacts.array_view(path)
    s = view.stats
    assert (view.shape, view.dtype, view.order, s.nan, s.read) == ((5, 7, 9), "float32", "F", 2, 315)
    assert s.low == float(np.nanmin(values)) and s.high == float(np.nanmax(values))
    assert math.isclose(s.mean, float(np.nanmean(values.astype(np.float64))), rel_tol=1e-12)
    assert math.isclose(s.std, float(np.nanstd(values.astype(np.float64))), rel_tol=1e-12)
    monkeypatch.setattr(artifacts, "MAX_STATS_ELEMENTS", 100)  # the cap: read no further, and say so
    capped = artifacts.array_view(path)
    assert capped.stats.read == 100 and "first 100 of 315 elements" in capped.note
    heat = artifacts.heat_slice(artifacts.open_array(path), artifacts.parse_at("4", (5, 7, 9)))
    assert heat.label == "[4, :, :]" and heat.z.shape == (7, 9) and np.isnan(heat.z[0, 0])
    with pytest.raises(artifacts.BadQuery, match="axis 0 index below 5"):
        artifacts.parse_at("5", (5, 7, 9))


# ---- dse show and the report ----------------------------------------------------------------


def test_show_prints_the_best_candidates_figures_and_ratios(store_db, cli):
    with Store(store_db) as store:
        exp = store.experiment("later")
        table = store.metric_table("later", "analytical").set_index("candidate_id")
    base = int(exp["baseline_candidate_id"])
    code, out, _ = cli("show", "later", "--db", store_db)
    assert code == 0
    best = int(re.search(r"answer: best passing candidate c(\d+):", out).group(1))
    block = out.split("key figures")[1].split("limitations:")[0]
    rows = {line.split()[0]: line for line in block.splitlines()[2:]}
    for cid in (base, best):
        lat, sram = table.loc[cid, "latency_cycles"], table.loc[cid, "private_sram_bytes"]
        ratio = lat / table.loc[base, "latency_cycles"], sram / table.loc[base, "private_sram_bytes"]
        assert f"{int(lat):,} ({ratio[0]:.3g}x)" in rows[f"c{cid}"]
        assert f"{int(sram):,} ({ratio[1]:.3g}x)" in rows[f"c{cid}"]
    assert "★ best" in rows[f"c{best}"] and "baseline" in rows[f"c{base}"]
    # the links both ways, and the config of a candidate as a tree
    assert "follows experiment 1 'emulated': fewer banks, same question" in out
    code, out, _ = cli("show", f"c{best}", "--db", store_db)
    with Store(store_db) as store:
        cand = store.candidate(best)
    assert "config:\n" + tree_text(cand["config"], depth=1) + "\nmapping:\n" + tree_text(cand["mapping"], depth=1) in out
    assert "\n  banks:\n    acc_col: " in out


def test_a_decision_shows_its_evidence_kinds_and_the_caveat_in_show(store_db, cli):
    # (the report's decision log: tests/test_report.py; the UI's: below)
    from dse.runner.acceptance import judge_experiment

    with Store(store_db) as store:
        best = judge_experiment(store, "later").best  # the one judgement's best (the headline's)
    code, out, _ = cli("decide", "later", "--accept", best, "--why", "fastest, half the SRAM", "--author", "ana",
                       "--db", store_db)
    assert code == 0, out
    caveat = hardware_caveat(["analytical"])
    code, out, _ = cli("show", "later", "--db", store_db)
    assert f"accepted c{best} by ana" in out and f"      evidence kinds: analytical model; {caveat}" in out
    code, out, _ = cli("show", f"c{best}", "--db", store_db)
    assert f"  evidence kinds: analytical model; {caveat}" in out


# ---- the UI -----------------------------------------------------------------------------------


def test_notes_written_in_the_ui_and_with_dse_note_are_one_list(server, store_db, page, cli):
    open_drawn(page, server + "/experiments/1")
    assert page.inner_text("#link-list") == "followed by experiment 2 ‘later’: fewer banks, same question"
    page.select_option("#note-form select[name=kind]", "limitation")
    page.fill("#note-form input[name=author]", "Bo <b>")
    page.fill("#note-form textarea[name=text]", "the emulator's DMA has no <i>refresh</i> stalls")
    page.click("#add-note")
    page.wait_for_url(re.compile(r"/experiments/1#note-\d+$"))
    row = page.inner_text("#note-list tbody tr:last-child")
    assert "limitation" in row and "Bo <b>" in row and "no <i>refresh</i> stalls" in row
    code, out, _ = cli("show", "emulated", "--db", store_db)
    assert "by Bo <b>: the emulator's DMA has no <i>refresh</i> stalls" in out.split("limitations:")[1]
    # ... and the other way: `dse note` on the candidate, seen on the candidate's page
    with Store(store_db) as store:
        ok = store.candidates("emulated")
    emulated = sorted(int(c) for c in ok["id"])[3]  # c4: one of the two emulated
    code, out, _ = cli("note", "emulated", "--note", f"c{emulated} wins on paper; check banks", "--author", "cy",
                       "--db", store_db)
    assert code == 0
    open_drawn(page, server + f"/candidates/{emulated}")
    assert f"c{emulated} wins on paper; check banks" in page.inner_text("#candidate-notes #note-list")
    # a note from the candidate's page goes back to it, and names it
    assert page.input_value("#note-form textarea[name=text]") == f"c{emulated}: "
    page.fill("#note-form input[name=author]", "dee")
    page.fill("#note-form textarea[name=text]", page.input_value("#note-form textarea[name=text]") +
              "its counters look right")
    page.click("#add-note")
    page.wait_for_url(re.compile(rf"/candidates/{emulated}#note-\d+$"))
    assert f"c{emulated}: its counters look right" in page.inner_text("#candidate-notes #note-list")
    code, out, _ = cli("show", "emulated", "--db", store_db)
    assert f"by dee: c{emulated}: its counters look right" in out
    assert page.console.errors == []


def test_a_refused_decision_or_note_comes_back_with_its_text(server, store_db, page):
    with Store(store_db) as store:
        before = (len(store.decisions()), len(store.notes()))
        judged = store.candidates("emulated").sort_values("id")
    failing = int(judged["id"].iloc[1])  # c2: fails the acceptance test
    open_drawn(page, server + f"/candidates/{failing}")  # its decide form names it
    page.fill("#decide-form input[name=author]", "ana")
    page.fill("#decide-form textarea[name=why]", "a long reason\nover two lines <b>kept</b>")
    page.click("#decide")
    page.wait_for_selector("#problem")
    assert "give --override" in page.inner_text("#problem")
    assert page.input_value("#decide-form textarea[name=why]") == "a long reason\nover two lines <b>kept</b>"
    assert page.input_value("#decide-form input[name=author]") == "ana"
    assert page.input_value("#decide-form input[name=candidate]") == str(failing)
    # a note of spaces only: refused as `dse note` refuses it, the author kept
    open_drawn(page, server + f"/candidates/{failing}")
    page.fill("#note-form input[name=author]", "eve")
    page.fill("#note-form textarea[name=text]", "   ")
    page.click("#add-note")
    page.wait_for_selector("#problem")
    assert "a non-empty note" in page.inner_text("#problem")
    assert page.input_value("#note-form input[name=author]") == "eve"
    with Store(store_db) as store:
        assert (len(store.decisions()), len(store.notes())) == before
    # the kept form, corrected (an override reason), is taken
    open_drawn(page, server + f"/candidates/{failing}")
    page.fill("#decide-form input[name=author]", "ana")
    page.fill("#decide-form textarea[name=why]", "smaller banks matter more")
    page.click("#decide")
    page.wait_for_selector("#problem")
    page.fill("#decide-form input[name=override]", "SRAM is what we lack")
    page.click("#decide")
    page.wait_for_url(re.compile(r"/experiments/1#decisions$"))
    row = page.inner_text("#decision-log tbody tr:last-child")
    assert "smaller banks matter more" in row and "analytical model" in row
    assert hardware_caveat(["analytical"]) in row  # the caveat `dse show` and the report print
    page.goto(server + f"/candidates/{failing}")
    assert hardware_caveat(["analytical"]) in page.locator(".decision .evidence-kinds").last.inner_text()
    # the three refusals' HTTP 400s, and nothing else
    assert page.console.errors == ["console: Failed to load resource: the server responded with a status of "
                                   "400 (Bad Request)"] * 3


def test_array_and_counter_viewers_of_a_real_emulated_run(server, store_db, page):
    with Store(store_db) as store:
        arts = store.artifacts("emulated")
        arts = arts[arts["run_id"].notna()]
        npy = arts[arts["name"].str.endswith(".npy")].iloc[0]
        counters = arts[arts["name"] == "counters.json"].iloc[0]
        run = store.run(int(npy["run_id"]))
    values = np.load(npy["path"])
    open_drawn(page, server + f"/candidates/{int(npy['candidate_id'])}")
    page.click(f"tr[data-artifact='{int(npy['id'])}'] a:text-is('view')")
    page.wait_for_selector("#heatmap[data-ready='1']")
    assert page.inner_text("#array-shape") == "(" + ", ".join(map(str, values.shape)) + ")"
    assert page.inner_text("#array-dtype") == str(values.dtype)
    stat = {k: page.inner_text(f"[data-stat={k}]") for k in ("min", "max", "mean", "std", "nan")}
    wide = values.astype(np.float64)
    assert stat == {"min": f"{wide.min():.6g}", "max": f"{wide.max():.6g}", "mean": f"{wide.mean():.6g}",
                    "std": f"{wide.std():.6g}", "nan": "0"}
    drawn = page.evaluate("(() => { const d = document.getElementById('heatmap')._fullData[0];"
                          " return [d.type, d.z.length, d.z[0].length]; })()")
    rows, cols = values.shape[-2:]
    assert drawn == ["heatmap", rows, math.ceil(cols / math.ceil(cols / artifacts.HEATMAP_CELLS))]
    assert page.get_attribute("#download", "href") == f"/artifacts/{int(npy['id'])}"
    # the counters, as a table: the chip's cycles are the run's emulator latency
    page.goto(server + f"/artifacts/{int(counters['id'])}/view")
    rows_in_file = json.loads(open(counters["path"]).read())
    assert page.inner_text("#counter-count").startswith(f"{len(rows_in_file):,} of {len(rows_in_file):,} rows")
    header = page.eval_on_selector_all("#counters thead th", "els => els.map(e => e.textContent)")
    assert header[:4] == ["name", "value", "unit", "scope"] and header[-1] == "event"
    cells = page.eval_on_selector_all("#counters tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    chip = [c for c in cells if c[0] == "cycles" and c[3] == "chip"]
    metrics = run["metrics"]
    latency = metrics[(metrics["kind"] == "emulator_cycles") & (metrics["name"] == "latency_cycles")
                      & (metrics["scope"] == "total")]["value"].iloc[0]
    assert chip and chip[0][1] == f"{int(latency):,}"
    page.fill("input[name=q]", "dma_bytes_in")
    page.click("button:text('filter')")
    page.wait_for_url(re.compile(r"q=dma_bytes_in"))
    kept = [r for r in rows_in_file if any("dma_bytes_in" in str(v).lower() for v in r.values())]
    assert page.inner_text("#counter-count").startswith(f"{len(kept)} of {len(kept)} rows") and kept
    assert page.console.errors == []


def test_big_arrays_and_logs_are_capped_and_say_so(server, store_db, page):
    with Store(store_db) as store:
        run_id = int(store.runs(experiment="emulated").query("stage == 'emulator' and status == 'ok'")["id"].iloc[0])
        big = np.arange(3 * 450 * 1000, dtype=np.float32).reshape(3, 450, 1000)
        big[2, 5, 7] = np.nan
        import io

        buffer = io.BytesIO()
        np.save(buffer, big)
        arr = store.put_artifact(buffer.getvalue(), role="outputs", run_id=run_id, name="outputs/big.npy")
        log = store.put_artifact(("line of the log\n" * 20_000).encode(), role="log", run_id=run_id, name="run.log")
    page.goto(server + f"/artifacts/{arr.id}/view?at=2")
    page.wait_for_selector("#heatmap[data-ready='1']")
    assert page.inner_text("[data-stat=nan]") == "1"
    assert page.inner_text("[data-stat=max]") == f"{float(big.size - 1):.6g}"
    z = page.evaluate("(() => { const d = document.getElementById('heatmap')._fullData[0];"
                      " return [d.z.length, d.z[0].length, d.z[1][1]]; })()")
    # every 3rd row and 5th column of slice 2: at most 200 a side
    assert z == [150, 200, float(big[2, 3, 5])]
    assert "every 3 rows, every 5 columns" in page.evaluate("document.getElementById('heatmap').layout.title.text")
    page.goto(server + f"/artifacts/{log.id}/view")
    assert "The first 256.0 KiB of 312.5 KiB shown" in page.inner_text("#text-cut")
    assert len(page.inner_text("#artifact-text")) <= artifacts.MAX_TEXT_BYTES
    assert page.console.errors == []


def test_config_trees_on_the_candidate_and_run_pages(server, store_db, page):
    with Store(store_db) as store:
        cands = store.candidates("emulated").sort_values("id")
        cand = store.candidate(int(cands["id"].iloc[3]))
    page.goto(server + f"/candidates/{cand['id']}")
    shown = page.eval_on_selector_all("#config-tree .tree-row", "rows => rows.map(r => r.textContent)")
    assert shown == [f"{r.key}:" if r.value is None else f"{r.key}: {r.value}" for r in tree_rows(cand["config"])]
    changed = page.eval_on_selector_all("#config-tree .tree-row.changed, #mapping-tree .tree-row.changed",
                                        "rows => rows.map(r => r.dataset.path)")
    assert sorted(changed) == sorted(k.split(".", 1)[1] for k in cand["diff"])
    indent = page.eval_on_selector("#config-tree [data-path='banks.rows']", "r => getComputedStyle(r).paddingLeft")
    assert indent != "0px"
    with Store(store_db) as store:
        run_id = int(store.runs(candidate=int(cand["id"]))["id"].iloc[0])
    page.goto(server + f"/runs/{run_id}")
    shown = page.eval_on_selector_all("#mapping-tree .tree-row", "rows => rows.map(r => r.textContent)")
    assert shown == [f"{r.key}: {r.value}" for r in tree_rows(cand["mapping"])] and len(shown) >= 4
    assert page.console.errors == []


def test_the_note_form_is_csrf_protected_and_goes_back_only_to_its_own_pages(server, store_db):
    import http.cookiejar
    import urllib.error
    import urllib.parse
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect)
    with opener.open(server + "/experiments/2", timeout=60) as response:
        token = re.search(r'name="csrf_token" value="([^"]+)"', response.read().decode()).group(1)

    def post(fields: dict, headers: dict | None = None, via=opener) -> tuple[int, str, str]:
        request = urllib.request.Request(server + "/experiments/2/notes", data=urllib.parse.urlencode(fields).encode(),
                                         headers=headers or {}, method="POST")
        try:
            with via.open(request, timeout=60) as response:
                return response.status, response.read().decode(), response.headers.get("location", "")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(), error.headers.get("location", "")

    with Store(store_db) as store:
        before = len(store.notes("later"))
    good = {"csrf_token": token, "kind": "open_question", "text": "batch 8?", "author": "fay"}
    for fields, headers, via in (({**good, "csrf_token": ""}, {}, opener), (good, {"Origin": "http://evil.example"}, opener),
                                 (good, {}, urllib.request.build_opener(NoRedirect))):  # no cookie
        assert post(fields, headers, via)[0] == 403
    status, body, _ = post({**good, "kind": "rumour"})
    assert status == 400 and "rumour" in body and "batch 8?" in body  # refused, the text kept
    with Store(store_db) as store:
        assert len(store.notes("later")) == before
    status, _, location = post({**good, "back": "https://evil.example/candidates/1"})
    assert status == 303 and re.fullmatch(r"/experiments/2#note-\d+", location)  # not to another site
    with Store(store_db) as store:
        added = store.notes("later")[-1]
    assert (added["kind"], added["text"], added["author"]) == ("open_question", "batch 8?", "fay")
