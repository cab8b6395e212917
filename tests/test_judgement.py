"""One judgement of acceptance over every evidence kind (dse.runner.acceptance), and the
headline built from it, in every view.

A real sweep whose acceptance names emulator and numerics evidence (the gemm on goban, its
emulator stage pruned to the 4 best by SRAM, so two candidates wait for evidence), a
person's decision, then: the sweep's proposal, `dse decide`, the report (HTML and
Markdown), the UI in Chromium and `dse show` all name the same passing candidates and the
same best, which the test works out by hand from the stored figures. The headline's text on
a hand-filled store, where its ratios can be checked by eye.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from dse.records import MetricIn, Store
from dse.runner import run_sweep
from dse.runner.acceptance import headline, judge_experiment, ratio_words, times
from dse.runner.decisions import DecisionRefused, decide

SPEC = """
[experiment]
name = "emu-judged"
hypothesis = "More workers beat one in the emulator, bit for bit"

[[acceptance]]
expr = "emulator.latency_cycles < 0.8 * baseline.emulator.latency_cycles and numerics.integer_bit_exact == 1"
prose = "20% faster in the emulator, the same integers"

[workload]
recipe = "gemm"
params = { m = 64, n = 64, k = 64 }

[baseline]
chip = "goban"
mapping = { workers = 1 }

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 2, 4]

[[space]]
name = "banks"
target = "chip.banks.count"
values = [16, 20]

[[objectives]]
metric = "private_sram_bytes"

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"

[stages]
emulator = "top_k"
top_k = 4
host_time_repeats = 1
"""
NAME = "emu-judged"


def by_hand(store: Store) -> dict:
    """The judgement worked out from the stored figures, without dse's: each candidate's
    outcome, the passing ones and the best (least private SRAM of the passing, then id)."""
    exp = store.experiment(NAME)
    base = int(exp["baseline_candidate_id"])
    model = store.metric_table(NAME, "analytical").set_index("candidate_id")
    emu = store.metric_table(NAME, "emulator_cycles").set_index("candidate_id")
    num = store.metric_table(NAME, "numerics").set_index("candidate_id")
    emulated = emu["latency_cycles"].dropna()
    exact = num["integer_bit_exact"].dropna()
    outcome = {}
    for cid in model.index:
        if cid == base or model.loc[cid, "status"] != "ok":
            continue
        clauses = [None if cid not in emulated else emulated[cid] < 0.8 * emulated[base],
                   None if cid not in exact else exact[cid] == 1]
        outcome[int(cid)] = ("fail" if False in clauses else "waiting" if None in clauses else "pass")
    passing = sorted(c for c, o in outcome.items() if o == "pass")
    best = min(passing, key=lambda c: (model.loc[c, "private_sram_bytes"], c))
    return {"base": base, "outcome": outcome, "passing": passing, "best": best, "model": model, "emu": emulated}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("judged")
    spec, db = folder / "spec.toml", folder / "records.db"
    spec.write_text(SPEC)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DSE_CACHE_DIR", str(folder / "graphs"))
        run_sweep(spec, db, progress=False)
    with Store(db) as store:
        hand = by_hand(store)
        # Every outcome is here: passing, failing and waiting for emulator evidence.
        assert set(hand["outcome"].values()) == {"pass", "fail", "waiting"}
        decide(store, NAME, hand["best"], "ana", "least SRAM of those 20% faster")
    return db, hand


def test_the_sweep_proposes_what_the_judgement_says(swept):
    db, hand = swept
    with Store(db) as store:
        proposal = store.decisions(NAME).query("kind == 'proposal'").iloc[-1]
        judgement = judge_experiment(store, NAME)
    assert proposal["verdict"] == "confirmed" and int(proposal["candidate_id"]) == hand["best"] == judgement.best
    assert proposal["rationale"].startswith(f"{len(hand['passing'])} of {len(hand['outcome'])} feasible candidates meet")
    assert judgement.passing_ids == hand["passing"]
    assert {c: judgement.outcome(c) for c in hand["outcome"]} == hand["outcome"]
    assert judgement.outcome(hand["base"]) is None
    waiting = [c for c, o in hand["outcome"].items() if o == "waiting"]
    assert judgement.lacking_kinds == ["emulator_cycles", "numerics"] and waiting


def test_decide_accepts_exactly_the_passing_candidates(swept, tmp_path):
    db, hand = swept
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    with Store(copy) as store:
        for cid, outcome in hand["outcome"].items():
            if outcome == "pass":
                assert decide(store, NAME, cid, "bo", "passes").checks[0]["outcome"] == "pass"
                continue
            with pytest.raises(DecisionRefused) as refused:
                decide(store, NAME, cid, "bo", "try")
            if outcome == "fail":
                assert "`emulator.latency_cycles < 0.8 * baseline.emulator.latency_cycles` fails" in str(refused.value)
            else:
                assert "has no evidence yet for emulator.latency_cycles" in str(refused.value)
                assert "numerics.integer_bit_exact" in str(refused.value)


def _md(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def test_the_report_judges_as_the_sweep(swept, tmp_path):
    from dse.report import write_report

    db, hand = swept
    with Store(db) as store:
        report = write_report(store, NAME, tmp_path / "out")
        top = headline(judge_experiment(store, NAME), store.experiment(NAME), store.decision_rows(NAME))
    assert report.best_id == hand["best"]
    page = report.path.read_text()
    head = re.search(r'<section id="headline"[^>]*data-best="(\d+)" data-passing="([\d,]*)"', page)
    assert int(head.group(1)) == hand["best"] and [int(i) for i in head.group(2).split(",")] == hand["passing"]
    assert f"best passing candidate c{hand['best']}: " in page and "passes both clauses" in page
    assert f"proposed: confirmed c{hand['best']} (sweep)" in page
    assert f"decided: accepted c{hand['best']} by ana" in page
    rows = dict(re.findall(r'<tr id="c(\d+)" class="[^"]*" data-outcome="(\w*)"', page))
    assert {int(c): o for c, o in rows.items() if o} == hand["outcome"]
    best_row = re.search(rf'<tr id="c{hand["best"]}".*?</tr>', page, re.S).group(0)
    assert "★ best" in best_row and "◇ accepted" in best_row and "✓ pass" in best_row
    assert f"{len(hand['passing'])} pass the acceptance criteria" in page
    # The Pareto plot marks the same: passing in green, the best and the accepted one.
    pareto = report.figures["pareto"].data
    assert sorted(pareto.loc[pareto["passes"], "candidate_id"]) == hand["passing"]
    assert pareto.loc[pareto["is_best"], "candidate_id"].tolist() == [hand["best"]]
    md = report.markdown.read_text()
    assert f"**{top.lines[2]}**" in _md(md) and top.proposed in _md(md) and top.decided in _md(md)
    every = md.split("## Every candidate")[1]
    marks = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| ([^|]+) \|", every, re.M)}
    expected = {"pass": "✓ pass", "fail": "✗ fail", "waiting": "… waiting"}
    assert {c: marks[c].strip() for c in hand["outcome"]} == {c: expected[o] for c, o in hand["outcome"].items()}
    assert marks[hand["base"]].strip() == "—"
    ratio = hand["model"].loc[hand["best"], "private_sram_bytes"] / hand["model"].loc[hand["base"], "private_sram_bytes"]
    assert re.search(rf"^\| {hand['best']} \| ✓ pass \| ★ best, [^|]*◇ accepted \| grid \| ok \| {ratio:#.3g}x \|",
                     every, re.M)


def test_dse_show_judges_as_the_sweep(swept, run_cli):
    db, hand = swept
    code, out, err = run_cli("show", NAME, "--db", db)
    assert code == 0, err
    answer = next(line for line in out.splitlines() if line.startswith("answer: "))
    assert answer.startswith(f"answer: best passing candidate c{hand['best']}: ") and "passes both clauses" in answer
    assert f"  proposed: confirmed c{hand['best']} (sweep)" in out and f"  decided: accepted c{hand['best']} by ana" in out
    assert f"passing: {', '.join(f'c{c}' for c in hand['passing'])}" in out
    n = len(hand["outcome"])
    assert (f"{len(hand['passing'])} of {n} pass, 1 fails, 2 wait for evidence (emulator_cycles, numerics)") in out
    table = out.split("\ncandidates: ")[1].split("decisions and proposals:")[0].splitlines()
    at = next(i for i, line in enumerate(table) if "acceptance" in line)  # after the grouped reasons
    head = table[at]
    rows = {int(line.split()[0]): line for line in table[at + 1:] if line.strip()[:1].isdigit()}
    start = head.index("acceptance")
    shown = {c: rows[c][start:start + len("acceptance")].strip() for c in hand["outcome"]}
    expected = {"pass": "✓ pass", "fail": "✗ fail", "waiting": "… waiting"}
    assert shown == {c: expected[o] for c, o in hand["outcome"].items()}
    assert "★ best" in rows[hand["best"]] and "◇ accepted" in rows[hand["best"]]


def test_the_ui_judges_as_the_sweep(swept):
    from uiserver import Console, chromium, dse_ui_process

    db, hand = swept
    with Store(db) as store:
        exp_id = int(store.experiment(NAME)["id"])
        top = headline(judge_experiment(store, NAME), store.experiment(NAME), store.decision_rows(NAME))
    with dse_ui_process(str(db)) as (base, _), chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        console = Console(page)
        page.goto(f"{base}/experiments/{exp_id}")
        head = page.locator("#headline")
        assert int(head.get_attribute("data-best")) == hand["best"]
        assert [int(i) for i in head.get_attribute("data-passing").split(",")] == hand["passing"]
        answer = page.inner_text("#headline-best")
        assert answer.startswith(top.lines[2]) and answer.startswith(f"best passing candidate c{hand['best']}: ")
        assert page.inner_text("#headline-proposed") == f"proposed: confirmed c{hand['best']} (sweep)"
        assert page.inner_text("#headline-decided") == f"decided: accepted c{hand['best']} by ana"
        outcomes = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#candidates tbody tr')]
            .map(r => [r.dataset.id, [r.dataset.outcome, r.querySelector('td.judged').innerText,
                                      r.querySelector('td.marks').innerText, r.querySelector('td.ratio').innerText]]))""")
        assert {int(c): o[0] for c, o in outcomes.items() if o[0]} == hand["outcome"]
        assert outcomes[str(hand["base"])][1] == "—"
        best = outcomes[str(hand["best"])]
        assert best[1] == "✓ pass" and "★ best" in best[2] and "◇ accepted" in best[2]
        ratio = hand["model"].loc[hand["best"], "private_sram_bytes"] / hand["model"].loc[hand["base"], "private_sram_bytes"]
        assert best[3] == f"{ratio:#.3g}x"
        # The Pareto plot: passing in green, the best and the accepted one marked.
        page.wait_for_selector("#pareto[data-ready='1']")
        traces = page.evaluate("""() => Object.fromEntries(document.getElementById('pareto')._fullData
            .map(t => [t.name.split(' (')[0], Array.from(t.customdata || [])]))""")
        assert sorted(traces["passes acceptance"]) == hand["passing"]
        assert traces["best"] == [hand["best"]] and traces["accepted"] == [hand["best"]]
        assert f"{len(hand['passing'])} pass acceptance; best: candidate {hand['best']}" in page.inner_text(
            "#pareto-summary")
        assert console.errors == []


# ---- the headline by hand ------------------------------------------------------------------


def _analytical(store, cand, cycles, sram):
    run = store.start_run(cand, "analytical")
    store.finish_run(run, "ok", [MetricIn("analytical", "latency_cycles", cycles, "cycles"),
                                 MetricIn("analytical", "private_sram_bytes", sram, "bytes")])


SPEC_TEXT = '[[objectives]]\nmetric = "latency_cycles"\n\n[[objectives]]\nmetric = "private_sram_bytes"\n'


def test_the_headline_by_hand(tmp_path):
    with Store(tmp_path / "r.db") as store:
        e = store.create_experiment(
            "hand", "a 3x faster design in less SRAM",
            [{"expr": "latency_cycles < baseline_latency_cycles and private_sram_bytes < baseline_private_sram_bytes",
              "prose": "faster and smaller"},
             {"expr": "emulator.latency_cycles < baseline.emulator.latency_cycles", "prose": "in the emulator"}],
            "gemm", "h" * 64, SPEC_TEXT, "s")
        base, fast, small, late = (store.add_candidate(e, {"banks": b}, {}, "grid")[0] for b in (16, 20, 12, 8))
        store.set_baseline(e, base)
        _analytical(store, base, 3000.0, 1000.0)
        _analytical(store, fast, 1000.0, 300.0)  # 3.0x faster, 0.30x the SRAM
        _analytical(store, small, 2000.0, 1200.0)  # fails: more SRAM
        _analytical(store, late, 900.0, 100.0)  # passes the model's clauses, no emulator run yet
        exp = store.experiment(e)
        j = judge_experiment(store, exp)
        top = headline(j, exp, store.decision_rows(e))
        assert (j.passing_ids, j.best, j.verdict) == ([], None, "refuted")
        assert top.summary == "nothing passes: 1 of 3 fail, 2 wait for evidence"
        assert top.proposed == "proposed: nothing yet (no sweep has judged the evidence)"
        assert top.decided == "decided: no decision yet (people decide: dse decide)"
        for cand, cycles in ((base, 2950.0), (fast, 980.0), (small, 1990.0)):
            store.finish_run(store.start_run(cand, "emulator"), "ok",
                             [MetricIn("emulator_cycles", "latency_cycles", cycles, "cycles")])
        j = judge_experiment(store, exp)
        assert {c: j.outcome(c) for c in (base, fast, small, late)} == {
            base: None, fast: "pass", small: "fail", late: "waiting"}
        assert j.best == fast and [c.outcome for c in j.checks(late)] == ["pass", "pass", "missing"]
        store.add_decision(e, "confirmed", "1 of 3", "dse sweep (automatic)", [], fast, kind="proposal")
        decide(store, e, small, "ana", "smaller is not needed", override="a test", verdict="accepted")
        decide(store, e, small, "bo", "it fails", verdict="rejected")
        exp = store.experiment(e)
        top = headline(j, exp, store.decision_rows(e))
        assert top.lines == [
            f"proposed: confirmed c{fast} (sweep)",
            f"decided: nothing stands (hypothesis testing; latest: rejected c{small} by bo)",
            f"best passing candidate c{fast}: 3.0x faster (model), 0.30x private SRAM (model), "
            f"3.0x faster (emulator), passes all 3 clauses"]
        assert top.counts == "1 of 3 pass, 1 fails, 1 waits for evidence (emulator_cycles)"
        assert [(r.kind, r.metric, r.baseline, r.value) for r in top.ratios] == [
            ("analytical", "latency_cycles", 3000.0, 1000.0), ("analytical", "private_sram_bytes", 1000.0, 300.0),
            ("emulator_cycles", "latency_cycles", 2950.0, 980.0)]
        decide(store, e, fast, "cy", "3x faster in a third of the SRAM")
        top = headline(j, exp, store.decision_rows(e))
        assert top.decided == f"decided: accepted c{fast} by cy" and top.accepted == (fast,)
    assert [times(r) for r in (3.0, 0.3, 1.02, 0.333, 12.3)] == ["3.0", "0.30", "1.02", "0.33", "12"]
    assert [ratio_words("latency_cycles", r) for r in (1 / 3, 1.25, 1.0)] == ["3.0x faster", "1.2x slower", "as fast"]


def test_the_headline_of_a_single_clause_without_emulator_evidence(tmp_path):
    with Store(tmp_path / "r.db") as store:
        e = store.create_experiment("one", "faster", [{"expr": "latency_cycles < baseline_latency_cycles",
                                                       "prose": ""}], "gemm", "o" * 64, SPEC_TEXT, "s")
        base, fast = (store.add_candidate(e, {"banks": b}, {}, "grid")[0] for b in (16, 20))
        store.set_baseline(e, base)
        _analytical(store, base, 3000.0, 1000.0)
        _analytical(store, fast, 1500.0, 2000.0)
        exp = store.experiment(e)
        top = headline(judge_experiment(store, exp), exp, [])
    # One evidence kind: its ratios need no label.
    assert top.summary == f"c{fast}: 2.0x faster, 2.0x private SRAM, passes its clause"
    assert json.dumps(top.lines)  # plain text, for every view
