"""Evidence reused across experiments (#32): a candidate a follow-up experiment proposes that
an earlier experiment on the same workload evaluated, under the same versions and
result-affecting stage settings, is not evaluated again; its run links to that evidence
(run.reused_run_id), metrics and files read through the link, never copied. Store level on
SQLite and the real PostgreSQL; the sweep, `--no-reuse` and every view (show, compare,
report, UI) on real sweeps (a 16x16x16 GEMM on the toy chip, emulated)."""

from __future__ import annotations

import html
import urllib.request

import pandas as pd
import pytest
from alembic import command
from sqlalchemy import create_engine, text

from dse.records import Store
from dse.records.reuse import reusable
from dse.records.store import SCHEMA_HEAD, alembic_config, database_url
from pg import pg_server, pg_url  # noqa: F401
from uiserver import dse_ui_thread

WORK = "a" * 64  # a workload identity


def _experiment(store: Store, name: str, work: str = WORK) -> int:
    return store.create_experiment(name, "h", [], "gemm", work, f"[experiment]\nname = '{name}'\n", name * 8)


def _run(store: Store, cid: int, status: str, metrics=(), model="m-1", **why) -> int:
    run = store.start_run(cid, "analytical", model_version=model)
    store.finish_run(run, status, metrics, **why)
    return run


def _metric(name, value, scope="total", key=""):
    return {"kind": "analytical", "name": name, "value": value, "unit": "cycles", "scope": scope, "scope_key": key}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "records.db")
    return request.getfixturevalue("pg_url")


def test_a_link_shows_the_earlier_runs_evidence_without_copying_it(url):
    with Store(url) as store:
        first = _experiment(store, "first")
        ok = store.add_candidate(first, {"banks": 8}, {}, "baseline")[0]
        bad = store.add_candidate(first, {"banks": 4}, {}, "grid")[0]
        crash = store.add_candidate(first, {"banks": 2}, {}, "grid")[0]
        rejected = store.add_candidate(first, {"banks": 1}, {}, "grid")[0]
        r_ok = _run(store, ok, "ok", [_metric("latency_cycles", 2280.0), _metric("cycles", 576.0, "op", "matmul")])
        r_bad = _run(store, bad, "infeasible", reason="bank budget: needs 6 banks, chip has 4")
        r_crash = _run(store, crash, "failed", error="ValueError: boom", traceback="Traceback ...")
        _run(store, rejected, "infeasible", reason="rejected by constraint 'banks >= 2': it does not hold")
        hashes = {c: store.candidate(c)["hash"] for c in (ok, bad, crash, rejected)}

        second = _experiment(store, "second")
        key = dict(experiment_id=second, workload_hash=WORK, stage="analytical", model_version="m-1",
                   emulator_version=None)
        with store.engine.connect() as connection:
            found = reusable(connection, list(hashes.values()), **key)
            # another model version, another workload, another stage: nothing to reuse
            assert reusable(connection, list(hashes.values()), **{**key, "model_version": "m-2"}) == {}
            assert reusable(connection, list(hashes.values()), **{**key, "workload_hash": "b" * 64}) == {}
            assert reusable(connection, list(hashes.values()), **{**key, "stage": "emulator"}) == {}
            assert reusable(connection, list(hashes.values()), **key, settings_ok=lambda spec: False) == {}
        # A constraint's rejection is the earlier spec's, not the candidate's: not reused.
        assert {h: s.run_id for h, s in found.items()} == {hashes[ok]: r_ok, hashes[bad]: r_bad,
                                                            hashes[crash]: r_crash}

        mine = {c: store.add_candidate(second, {"banks": b}, {}, "grid")[0] for c, b in
                ((ok, 8), (bad, 4), (crash, 2))}
        runs = store.start_runs(list(mine.values()), "analytical", model_version="m-1")
        links = {run: found[hashes[c]].run_id for run, c in zip(runs, mine)}
        store.link_runs(links)
        rows = {r["candidate_id"]: r for r in store.runs(second).to_dict("records")}
        # status, reason, error and traceback are the earlier run's, and the link names it
        assert [(rows[mine[c]]["status"], rows[mine[c]]["reason"], rows[mine[c]]["error"],
                 rows[mine[c]]["reused_run_id"]) for c in (ok, bad, crash)] == [
            ("ok", None, None, r_ok), ("infeasible", "bank budget: needs 6 banks, chip has 4", None, r_bad),
            ("failed", None, "ValueError: boom", r_crash)]
        assert rows[mine[ok]]["reused_from"] == f"reused from experiment 'first' ({first}), candidate c{ok} (run r{r_ok})"
        # No metrics written for the links: the store holds the earlier run's two only (one
        # packed row, 8 bytes a value: 0015).
        with store.engine.connect() as connection:
            assert tuple(connection.execute(text(
                "SELECT count(*), sum(length(figures)) / 8 FROM run_metrics")).one()) == (1, 2)
        # Read through the link: the tables, a candidate's figures, a run's, the comparison.
        table = store.metric_table(second, "analytical").set_index("candidate_id")
        assert table.loc[mine[ok], "latency_cycles"] == 2280.0
        assert table.loc[mine[ok], "metric_run_id"] == runs[0]
        with store.engine.connect() as connection:
            from dse.records import reads

            reference = reads.metric_table(connection, second, "analytical", from_metrics=True)
        assert reference.set_index("candidate_id").loc[mine[ok], "latency_cycles"] == 2280.0
        ops = store.metric_table(second, "analytical", scope="op")
        assert ops[ops["candidate_id"] == mine[ok]]["cycles"].tolist() == [576.0]
        assert [(m["name"], m["value"], m["run_id"]) for m in store.total_metric_rows(mine[ok])] == [
            ("latency_cycles", 2280.0, runs[0])]
        assert [m["name"] for m in store.run_metric_rows(runs[0])] == ["latency_cycles", "cycles"]
        assert store.compare_metrics(ok, mine[ok])[["name", "a", "b"]].values.tolist() == [
            ["latency_cycles", 2280.0, 2280.0]]
        assert store.totals([mine[ok]]) == {mine[ok]: {"analytical": {"latency_cycles": 2280.0}}}
        # latest_figures rebuilt from the packed metrics agrees with the one the link wrote
        held = ("SELECT lf.candidate_id, lf.kind, lf.run_id, fl.layout, lf.figures FROM latest_figures lf "
                "JOIN figures_layout fl ON fl.id = lf.layout_id ORDER BY lf.candidate_id, lf.kind")
        with store.engine.begin() as connection:
            before = [(*r[:4], bytes(r[4])) for r in connection.execute(text(held))]
            from dse.records import latest

            latest.rebuild(connection)
            assert [(*r[:4], bytes(r[4])) for r in connection.execute(text(held))] == before
        # The earlier experiment cannot be deleted from under the links.
        with pytest.raises(ValueError, match=rf"experiment\(s\) \[{second}\] reuse the evidence of experiment {first}"):
            store.delete_experiment(first)
        store.delete_experiment(second)
        store.delete_experiment(first)



def test_a_store_holding_links_goes_down_to_0015_and_back(url):
    """0016's downgrade refills latest_metric from the packed metrics through the links: a
    linking run's row holds the earlier run's figures under the linking run's id (as 0014's
    writes kept it), an op figure is no latest figure, a failed link leaves the candidate
    without one; back at head the links read as before."""
    with Store(url) as store:
        first = _experiment(store, "first")
        ok = store.add_candidate(first, {"banks": 8}, {}, "baseline")[0]
        crash = store.add_candidate(first, {"banks": 2}, {}, "grid")[0]
        r_ok = _run(store, ok, "ok", [_metric("latency_cycles", 2280.0), _metric("energy_pj", 7.5),
                                      _metric("cycles", 576.0, "op", "matmul")])
        r_crash = _run(store, crash, "failed", error="ValueError: boom")
        second = _experiment(store, "second")
        mine_ok = store.add_candidate(second, {"banks": 8}, {}, "grid")[0]
        mine_crash = store.add_candidate(second, {"banks": 2}, {}, "grid")[0]
        runs = store.start_runs([mine_ok, mine_crash], "analytical", model_version="m-1")
        store.link_runs({runs[0]: r_ok, runs[1]: r_crash})
        table = store.metric_table(second, "analytical")
        before = (store.total_metric_rows(mine_ok), store.totals([mine_ok, ok]))
    db_url = database_url(url)
    command.downgrade(alembic_config(db_url), "0015")
    engine = create_engine(db_url)
    with engine.connect() as connection:
        held = sorted(tuple(r) for r in connection.execute(text(
            "SELECT candidate_id, kind, name, run_id, value FROM latest_metric")))
    engine.dispose()
    assert held == sorted([(ok, "analytical", "energy_pj", r_ok, 7.5), (ok, "analytical", "latency_cycles", r_ok, 2280.0),
                           (mine_ok, "analytical", "energy_pj", runs[0], 7.5),
                           (mine_ok, "analytical", "latency_cycles", runs[0], 2280.0)])
    with Store(url) as store:  # opened: upgraded to head again
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == SCHEMA_HEAD
        pd.testing.assert_frame_equal(store.metric_table(second, "analytical"), table)
        assert (store.total_metric_rows(mine_ok), store.totals([mine_ok, ok])) == before
    assert table.set_index("candidate_id").loc[mine_ok, "latency_cycles"] == 2280.0
    assert before[1] == {mine_ok: {"analytical": {"latency_cycles": 2280.0, "energy_pj": 7.5}},
                         ok: {"analytical": {"latency_cycles": 2280.0, "energy_pj": 7.5}}}


SPEC = """
[experiment]
name = "{name}"
hypothesis = "eight banks are as fast as sixteen"

[[acceptance]]
expr = "emulator.latency_cycles <= baseline.emulator.latency_cycles and numerics.integer_bit_exact == 1"
prose = "as fast as the baseline on the emulator, bit-exact"

[workload]
recipe = "gemm"
params = {{ m = 16, n = 16, k = 16 }}

[baseline]
chip = "toy"
mapping = {{ policy = "framework", double_buffer = false, workers = 1 }}

[[space]]
name = "bank_count"
target = "chip.banks.count"
values = {banks}

[[objectives]]
metric = "latency_cycles"
direction = "minimize"

[stages]
emulator = "all"
ppa = false
host_time_repeats = 1
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """'first' (16 banks: the baseline, 4: infeasible, 8), then 'second' (also 32 banks)."""
    from dse.runner.launch import run_sweep

    folder = tmp_path_factory.mktemp("reuse")
    db = folder / "records.db"
    for name, banks in (("first", "[4, 8]"), ("second", "[4, 8, 32]")):
        (folder / f"{name}.toml").write_text(SPEC.format(name=name, banks=banks))
    results = [run_sweep(folder / f"{name}.toml", db, progress=False) for name in ("first", "second")]
    return folder, db, results


def _by_banks(store, experiment):
    return {c["config"]["banks"]["count"]: c["id"] for c in map(store.candidate, store.candidates(experiment)["id"])}


def test_a_follow_up_links_what_an_earlier_experiment_evaluated_and_evaluates_the_rest(swept):
    folder, db, (first, second) = swept
    # The baseline, 4 and 8 banks: analytical runs linked (3) and the emulator's of 16 and 8 (2); 32 evaluated.
    assert (second.reused, second.evaluated) == (5, 1)
    with Store(db) as store:
        a, b = _by_banks(store, "first"), _by_banks(store, "second")
        runs = store.runs("second")
        first_runs = store.runs("first").set_index(["candidate_id", "stage"])
        for banks, stage in ((16, "analytical"), (4, "analytical"), (8, "analytical"), (16, "emulator"),
                             (8, "emulator")):
            mine = runs[(runs["candidate_id"] == b[banks]) & (runs["stage"] == stage)].iloc[-1]
            theirs = first_runs.loc[(a[banks], stage)]
            assert (mine["reused_run_id"], mine["status"], mine["reason"]) == (theirs["id"], theirs["status"],
                                                                                theirs["reason"]), (banks, stage)
        fresh = runs[runs["candidate_id"] == b[32]]
        assert fresh["reused_run_id"].isna().all() and set(fresh["status"]) == {"ok"}
        # The figures the judgement reads are the earlier ones, for both evidence kinds.
        for kind in ("analytical", "emulator_cycles"):
            mine, theirs = (store.metric_table(e, kind).set_index("candidate_id") for e in ("second", "first"))
            for banks in (16, 8):
                assert mine.loc[b[banks], "latency_cycles"] == theirs.loc[a[banks], "latency_cycles"] > 0
        from dse.runner.acceptance import judge_experiment

        judged, earlier = judge_experiment(store, "second"), judge_experiment(store, "first")
        for kind in ("analytical", "emulator_cycles"):
            assert judged.value(b[8], kind, "latency_cycles") == earlier.value(a[8], kind, "latency_cycles") > 0
        # the acceptance clause passes on the linked emulator evidence, as it did on the earlier
        assert judged.outcomes_of([b[8]]) == earlier.outcomes_of([a[8]]) == ["pass"]
        # The infeasible candidate's reason came along.
        assert store.candidates("second", stage="analytical").set_index("id").loc[b[4], "status"] == "infeasible"


def test_every_view_shows_the_reuse(swept, cli):
    folder, db, _ = swept
    with Store(db) as store:
        a, b = _by_banks(store, "first"), _by_banks(store, "second")
        runs = store.runs("first").set_index(["candidate_id", "stage"])["id"]
        link = store.runs("second").set_index(["candidate_id", "stage"]).loc[(b[8], "emulator"), "id"]
        first_id = store.experiment("first")["id"]
        # the linking run's and candidate's files are the earlier run's (not copied: the same rows)
        earlier = store.artifact_rows(run=int(runs[(a[8], "emulator")]))
        assert earlier and store.artifact_rows(run=int(link)) == earlier
        assert [x["id"] for x in earlier] == [x["id"] for x in store.artifact_rows(candidate=b[8])
                                              if x["run_id"] == runs[(a[8], "emulator")]]
        assert store.check_evidence(candidate=b[8]).counts["ok"] >= len({x["sha256"] for x in earlier})
        counters = next(x for x in earlier if x["name"] == "counters.json")
    said = f"reused from experiment 'first' ({first_id}), candidate c{a[8]}"
    code, out, _ = cli("show", f"c{b[8]}", "--db", db)
    assert code == 0
    assert f"  run {link} (emulator): {said} (run r{runs[(a[8], 'emulator')]})" in out
    assert "artifacts: " in out and f"{counters['id']} " in out and "counters.json" in out
    assert f"(analytical): {said} (run r{runs[(a[8], 'analytical')]})" in out
    code, out, _ = cli("show", f"r{link}", "--db", db)
    assert code == 0 and f"{said} (run r{runs[(a[8], 'emulator')]}): its evidence" in out
    assert "emulator_cycles" in out  # its metrics, read through the link
    code, out, _ = cli("compare", f"c{a[8]}", f"c{b[8]}", "--db", db)
    assert code == 0 and f"B's emulator evidence {said} (run r{runs[(a[8], 'emulator')]})" in out
    assert "metrics that differ" in out and "(none)" in out
    code, out, _ = cli("report", "second", "--db", db, "--out", folder / "report")
    assert code == 0
    md = (folder / "report" / "second.md").read_text()
    assert "## Evidence reused from earlier experiments" in md
    assert f"- c{b[8]} emulator (run r{link}): " + said.replace("(", r"\(").replace(")", r"\)") in md
    with dse_ui_thread(str(db)) as base:
        page = html.unescape(urllib.request.urlopen(f"{base}/candidates/{b[8]}").read().decode())
        run_page = html.unescape(urllib.request.urlopen(f"{base}/runs/{link}").read().decode())
    assert f"r{link} (emulator): {said} (run r{runs[(a[8], 'emulator')]})" in page
    assert f"/artifacts/{counters['id']}" in page
    assert f"{said} (run r{runs[(a[8], 'emulator')]}): its evidence" in run_page


def test_no_reuse_evaluates_afresh(swept, cli):
    folder, db, _ = swept
    (folder / "third.toml").write_text(SPEC.format(name="third", banks="[8]").replace(
        'emulator = "all"', 'emulator = "none"'))
    code, out, _ = cli("sweep", folder / "third.toml", "--db", db, "--no-progress", "--no-reuse")
    assert code == 0 and "2 evaluated" in out and "reused" not in out
    with Store(db) as store:
        assert store.runs("third")["reused_run_id"].isna().all()
        assert len(store.metrics("third")) > 0  # its own metric rows
    # The same spec under another name, with reuse: both linked, nothing evaluated.
    (folder / "fourth.toml").write_text((folder / "third.toml").read_text().replace('"third"', '"fourth"'))
    code, out, _ = cli("sweep", folder / "fourth.toml", "--db", db, "--no-progress")
    assert code == 0 and "0 evaluated" in out and "reused: 2 run(s)" in out
    # Asked again with --no-reuse: its linked candidates evaluated afresh, their latest runs their own.
    code, out, _ = cli("sweep", folder / "fourth.toml", "--db", db, "--no-progress", "--no-reuse")
    assert code == 0 and "2 evaluated" in out
    with Store(db) as store:
        runs = store.runs("fourth")
        assert runs["reused_run_id"].notna().sum() == 2 and (
            runs.sort_values("id").drop_duplicates("candidate_id", keep="last")["reused_run_id"].isna().all())
    # Other result-affecting settings (area and energy priced): evaluated afresh.
    (folder / "fifth.toml").write_text((folder / "third.toml").read_text().replace('"third"', '"fifth"')
                                       .replace("ppa = false", "ppa = true"))
    code, out, _ = cli("sweep", folder / "fifth.toml", "--db", db, "--no-progress")
    assert code == 0 and "2 evaluated" in out and "reused" not in out
