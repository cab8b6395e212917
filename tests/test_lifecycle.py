"""The experiment's lifecycle: the sweep proposes, people decide (with reasons, overrides
and history), on real SQLite and PostgreSQL stores."""

from __future__ import annotations

import json
import os

import pytest
from alembic import command
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from sqlalchemy import create_engine, text

from dse.errors import InputError
from dse.records import MetricIn, Store
from dse.records.store import SCHEMA_HEAD, alembic_config, database_url
from dse.runner import run_sweep
from dse.runner.decisions import DecisionRefused, decide

from test_runner import write_spec

ACCEPTANCE = [
    {"expr": "latency_cycles < baseline_latency_cycles and private_sram_bytes <= baseline_private_sram_bytes",
     "prose": "faster, no more SRAM"},
]
EMULATED = [{"expr": "emulator.latency_cycles <= 0.9 * baseline.emulator.latency_cycles", "prose": "10% faster"}]


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path, monkeypatch):
    if request.param == "sqlite":
        return str(tmp_path / "records.db")
    monkeypatch.setenv("DSE_EVIDENCE_DIR", str(tmp_path / "evidence"))
    return request.getfixturevalue("pg_url")


def analytical(store: Store, cand: int, cycles: float, sram: float) -> int:
    run = store.start_run(cand, "analytical")
    store.finish_run(run, "ok", [MetricIn("analytical", "latency_cycles", cycles, "cycles"),
                                 MetricIn("analytical", "private_sram_bytes", sram, "bytes")])
    return run


def fill(store: Store, acceptance=ACCEPTANCE, name="banks", workload="w") -> dict:
    e = store.create_experiment(name, "more banks win", acceptance, "gemm", workload * 64, "spec", name)
    base = store.add_candidate(e, {"banks": 16}, {}, "baseline")[0]
    store.set_baseline(e, base)
    fast = store.add_candidate(e, {"banks": 20}, {}, "grid")[0]  # faster, but more SRAM
    good = store.add_candidate(e, {"banks": 12}, {}, "grid")[0]  # faster and less SRAM
    analytical(store, base, 1000.0, 1000.0)
    analytical(store, fast, 800.0, 1200.0)
    analytical(store, good, 900.0, 900.0)
    store.set_status(e, "testing")
    return dict(experiment=e, base=base, fast=fast, good=good)


def test_people_decide_refusals_overrides_and_history(db):
    with Store(db) as store:
        ids = fill(store)
        with pytest.raises(DecisionRefused) as refused:
            decide(store, "banks", ids["fast"], "ana", "fits the area budget")
        message = str(refused.value)
        assert "\n" not in message
        assert ("acceptance[0] clause `private_sram_bytes <= baseline_private_sram_bytes` fails with "
                "baseline_private_sram_bytes = 1,000, private_sram_bytes = 1,200") in message
        assert "latency_cycles <" not in message  # the clause that passes is not blamed
        assert "--override REASON" in message
        assert store.decisions("banks").empty and store.experiment("banks")["status"] == "testing"
        with pytest.raises(InputError, match="--override"):
            decide(store, "banks", ids["fast"], "ana", "fits", override="  ")

        forced = decide(store, "banks", ids["fast"], "ana", "fits the area budget", override="SRAM is cheap now")
        assert forced.status == "confirmed" and forced.override == "SRAM is cheap now"
        assert [c["outcome"] for c in forced.checks] == ["pass", "fail"]
        # Rejecting the accepted candidate withdraws the confirmation; another passes on its own.
        assert decide(store, "banks", ids["fast"], "bo", "area matters", verdict="rejected").status == "testing"
        clean = decide(store, "banks", ids["good"], "bo", "faster and smaller", override="not needed")
        assert clean.status == "confirmed" and clean.override is None  # nothing was overridden
        assert decide(store, "banks", ids["fast"], "cy", "was never the one", verdict="rejected").status == "confirmed"
        refuted = decide(store, "banks", None, "cy", "the 12-bank layout fails timing", verdict="refuted")
        assert refuted.status == "refuted" and store.experiment("banks")["status"] == "refuted"

        decisions = store.decisions("banks")
        assert decisions["verdict"].tolist() == ["accepted", "rejected", "accepted", "rejected", "refuted"]
        assert decisions["author"].tolist() == ["ana", "bo", "bo", "cy", "cy"]
        assert set(decisions["kind"]) == {"decision"}
        first = decisions.iloc[0]
        assert first["override"] == "SRAM is cheap now" and first["evidence_kinds"] == '["analytical"]'
        checks = json.loads(first["checks"])
        assert checks[1]["values"] == {"baseline_private_sram_bytes": 1000.0, "private_sram_bytes": 1200.0}
        assert decisions["created_at"].is_monotonic_increasing


def test_a_clause_naming_emulator_evidence_waits_for_it(db):
    with Store(db) as store:
        ids = fill(store, acceptance=EMULATED, name="emu")
        with pytest.raises(DecisionRefused, match=r"has no evidence yet for baseline\.emulator\.latency_cycles, "
                                                  r"emulator\.latency_cycles"):
            decide(store, "emu", ids["good"], "ana", "looks fast")
        for cand, cycles in ((ids["base"], 1000.0), (ids["good"], 950.0), (ids["fast"], 850.0)):
            run = store.start_run(cand, "emulator")
            store.finish_run(run, "ok", [MetricIn("emulator_cycles", "latency_cycles", cycles, "cycles")])
        with pytest.raises(DecisionRefused, match=r"emulator\.latency_cycles = 950"):
            decide(store, "emu", ids["good"], "ana", "looks fast")
        result = decide(store, "emu", ids["fast"], "ana", "15% faster in the emulator")
        assert result.status == "confirmed" and result.checks[0]["outcome"] == "pass"
        assert store.decisions("emu")["evidence_kinds"].tolist() == ['["analytical","emulator_cycles"]']


def test_decide_on_the_cli_refuses_in_one_line_and_records_an_override(cli, tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as store:
        ids = fill(store)
    code, out, err = cli("decide", "banks", "--accept", ids["fast"], "--why", "fits", "--db", db)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("dse: error: dse decide: refused to accept candidate 2 for experiment 'banks'")
    assert "private_sram_bytes = 1,200" in err
    assert cli("decide", "banks", "--accept", ids["fast"], "--why", "fits", "--override", "", "--db", db)[0] == 2
    code, err = cli("decide", "banks", "--accept", ids["fast"], "--why", "fits", "--override", "--db", db)[::2]
    assert code == 2 and "--override" in err
    with Store(db) as store:
        assert store.decisions().empty
    code, out, _ = cli("decide", "banks", "--accept", ids["fast"], "--why", "fits", "--override", "area is cheap",
                       "--author", "ana", "--db", db)
    assert code == 0
    assert out.splitlines()[0].startswith("decision 1: accepted candidate 2 of experiment 'banks' by ana; "
                                          "hypothesis confirmed")
    assert "overriding the acceptance test: area is cheap" in out
    code, out, _ = cli("decide", "banks", "--refute", "--why", "timing", "--db", db)
    assert code == 0 and "refuted the hypothesis" in out and "hypothesis refuted" in out


def test_a_sweep_proposes_and_waits_for_the_evidence_its_criteria_name(tmp_path, cli):
    spec = write_spec(tmp_path, name="wait", banks="[16]")
    spec.write_text(spec.read_text().replace('expr = "latency_cycles < baseline_latency_cycles"',
                                             'expr = "emulator.latency_cycles < baseline.emulator.latency_cycles"'))
    db = tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False)
    assert result.proposed == "waiting" and result.status == "testing"
    assert "has yet the evidence" in result.decision and "emulator_cycles" in result.decision
    with Store(db) as store:
        proposal = store.decisions("wait").iloc[-1]
        assert proposal["kind"] == "proposal" and proposal["evidence_kinds"] == '["analytical","emulator_cycles"]'
        cand = int(store.candidates("wait")["id"].iloc[1])
        decide(store, "wait", cand, "ana", "analytically faster", override="emulator run next week")
    again = run_sweep(spec, db, progress=False)
    assert again.status == "confirmed"  # a rerun leaves a person's decision standing


def test_a_store_at_0006_upgrades_automatic_verdicts_to_proposals(db):
    url = database_url(db)
    command.upgrade(alembic_config(url), "0006")
    engine = create_engine(url)
    try:
        with engine.begin() as c:
            for i, status in ((1, "confirmed"), (2, "confirmed"), (3, "refuted")):
                c.execute(text("INSERT INTO experiment (id, name, hypothesis, status, acceptance, workload_recipe, "
                               "workload_hash, spec_text, spec_hash, limitations, open_questions, created_at) VALUES "
                               "(:i, :n, 'h', :s, '[]', 'gemm', 'w', 's', 'sh', '', '', CURRENT_TIMESTAMP)"),
                          dict(i=i, n=f"e{i}", s=status))
                c.execute(text("INSERT INTO decision (experiment_id, verdict, rationale, author, created_at, "
                               "evidence) VALUES (:i, :s, 'auto', 'dse sweep (automatic)', CURRENT_TIMESTAMP, '[]')"),
                          dict(i=i, s=status))
            # e2: a person accepted a candidate (before 0007 that did not set the status).
            c.execute(text("INSERT INTO decision (experiment_id, verdict, rationale, author, created_at, evidence) "
                           "VALUES (2, 'accepted', 'fits', 'ana', CURRENT_TIMESTAMP, '[]')"))
    finally:
        engine.dispose()
    with Store(db) as store:
        decisions = store.decisions()
        assert decisions["kind"].tolist() == ["proposal", "proposal", "proposal", "decision"]
        assert [store.experiment(f"e{i}")["status"] for i in (1, 2, 3)] == ["testing", "confirmed", "testing"]
        engine = create_engine(url)
        try:
            with engine.connect() as c:
                assert c.execute(text("SELECT version_num FROM alembic_version")).scalar() == SCHEMA_HEAD
        finally:
            engine.dispose()


def test_notes_after_the_fact_in_show_history_and_report(db, cli, tmp_path):
    with Store(db) as store:
        fill(store)
        with pytest.raises(ValueError, match="note.kind: got .gripe.; allowed: limitation, open_question, note"):
            store.add_note("banks", "gripe", "x", "ana")
        with pytest.raises(InputError, match="a non-empty note"):
            store.add_note("banks", "note", "  ", "ana")
        spec_text = store.experiment("banks")["spec_text"]
    code, out, _ = cli("note", "banks", "--limitation", "analytical only: DMA latency assumed",
                       "--question", "does it hold at batch 8?", "--author", "ana", "--db", db)
    assert code == 0 and out.splitlines() == ["note 1: limitation added to experiment 'banks' by ana",
                                              "note 2: open question added to experiment 'banks' by ana"]
    assert cli("note", "banks", "--note", "re-run after calibration", "--author", "bo", "--db", db)[0] == 0
    before = counts_of(db)
    for bad, fragment in ((["--note", " "], "--note"), ([], "at least one note"),
                          (["--note", "x", "--author", ""], "--author")):
        code, _, err = cli("note", "banks", *bad, "--db", db)
        assert code == 2 and fragment in err and err.count("\n") == 1
    assert cli("note", "nope", "--note", "x", "--db", db)[0] == 2
    assert counts_of(db) == before
    with Store(db) as store:
        notes = store.notes("banks")
        assert [(n["kind"], n["author"]) for n in notes] == [("limitation", "ana"), ("open_question", "ana"),
                                                              ("note", "bo")]
        assert store.experiment("banks")["spec_text"] == spec_text  # the spec is never edited
    code, out, _ = cli("show", "banks", "--db", db)
    assert "limitations: (none in the spec)" in out and "by ana: analytical only: DMA latency assumed" in out
    assert "by bo: re-run after calibration" in out
    code, out, _ = cli("history", "--db", db)
    assert "banks: open question by ana: does it hold at batch 8?" in out
    assert out.splitlines()[1].split()[12] == "3"


def counts_of(db) -> tuple[int, int]:
    with Store(db) as store:
        return len(store.notes()), len(store.decisions())


def test_a_noted_experiment_reruns_from_its_unchanged_spec_and_reports_the_notes(tmp_path, cli):
    spec = write_spec(tmp_path, name="noted", banks="[16]")
    db = tmp_path / "r.db"
    run_sweep(spec, db, progress=False)
    assert cli("note", "noted", "--limitation", "one gemm shape only", "--author", "ana", "--db", db)[0] == 0
    again = run_sweep(spec, db, progress=False)
    assert again.evaluated == 0 and again.resumed > 0
    code, out, _ = cli("report", "noted", "--db", db, "--out", tmp_path / "rep")
    assert code == 0
    page = (tmp_path / "rep" / "noted.html").read_text()
    assert "one gemm shape only" in page and "added after the sweep" in page and "proposal" in page
    assert "one gemm shape only" in (tmp_path / "rep" / "noted.md").read_text()


def test_experiments_build_on_each_other_decide_across_and_compare_many(tmp_path, cli):
    db = tmp_path / "r.db"
    first = write_spec(tmp_path, name="first", banks="[16]")
    follows = ('[experiment.follows]\nexperiment = "{other}"\nreason = "{why}"\n')
    second = write_spec(tmp_path, name="second", banks="[12, 20]")
    text = second.read_text()
    head, rest = text.split("\n[[acceptance]]", 1)
    second.write_text(head + "\n" + follows.format(other="first", why="the 16-bank result, wider") +
                      "\n[[acceptance]]" + rest)

    # A link to an experiment the store lacks: one line, exit 2, nothing written.
    code, _, err = cli("sweep", second, "--db", db, "--no-progress")
    assert code == 2 and "experiment.follows.experiment" in err and "'first'" in err and err.count("\n") == 1
    assert not db.exists()
    assert cli("sweep", first, "--db", db, "--no-progress")[0] == 0
    bad = tmp_path / "bad.toml"
    bad.write_text(second.read_text().replace('experiment = "first"', 'experiment = "fist"').replace(
        'name = "second"', 'name = "bad"'))
    code, _, err = cli("sweep", bad, "--db", db, "--no-progress")
    assert code == 2 and "experiment.follows.experiment" in err and "'fist'" in err and "first" in err
    with Store(db) as store:
        assert store.experiments()["name"].tolist() == ["first"]
    blank = tmp_path / "blank.toml"
    blank.write_text(second.read_text().replace('reason = "the 16-bank result, wider"', 'reason = " "'))
    assert cli("sweep", blank, "--db", db, "--no-progress")[0] == 2

    assert cli("sweep", second, "--db", db, "--no-progress")[0] == 0
    reopen = write_spec(tmp_path, name="third", banks="[16]")
    head, rest = reopen.read_text().split("\n[[acceptance]]", 1)
    reopen.write_text(head + "\n[experiment.reopens]\nexperiment = \"second\"\nreason = \"DMA model recalibrated\"\n"
                      + "\n[[acceptance]]" + rest)
    assert cli("sweep", reopen, "--db", db, "--no-progress")[0] == 0
    with Store(db) as store:
        links = store.links()
        assert [(l["experiment"], l["relation"], l["other"], l["reason"]) for l in links] == [
            ("second", "follows", "first", "the 16-bank result, wider"),
            ("third", "reopens", "second", "DMA model recalibrated")]
        firsts = store.candidates("first")
        seconds = store.candidates("second")
        # Infeasible candidates (8 workers on 4 cores) carry no invented zeros: no figures at all.
        table = store.metric_table("second", "analytical")
        bad = table[table["status"] == "infeasible"]
        columns = ["latency_cycles", "compute_cycles", "dma_cycles", "core_cycles", "dma_bytes", "peak_sram_bytes"]
        assert len(bad) == 2 and bad[columns].isna().all().all()
        assert table[table["status"] == "ok"][columns].notna().all().all()
        infeasible_id = int(bad["candidate_id"].iloc[0])
    code, out, _ = cli("history", "--db", db)
    rows = {line.split()[1]: line for line in out.splitlines()[1:4]}
    assert "follows 1" in rows["second"] and "reopens 2" in rows["third"]
    assert "second: follows experiment 1 'first': the 16-bank result, wider" in out
    code, out, _ = cli("show", "second", "--db", db)
    assert "follows experiment 1 'first': the 16-bank result, wider" in out
    assert "reopened by experiment 3 'third': DMA model recalibrated" in out

    # A decision in `second` may name a candidate of `first` (same workload): it is tested
    # against second's baseline like any of second's own.
    two_workers = int(firsts[firsts["mapping"].str.contains('"workers":2')]["id"].iloc[0])
    code, out, _ = cli("decide", "second", "--accept", two_workers, "--why", "two workers, 16 banks", "--db", db)
    assert code == 0 and f"candidate {two_workers} (of experiment 'first')" in out and "hypothesis confirmed" in out

    # Any number of candidates from any experiments.
    ids = [int(firsts["id"].iloc[0]), two_workers, int(seconds["id"].iloc[1])]
    code, out, _ = cli("compare", *ids, "--db", db)
    assert code == 0 and "workload: the same for all" in out
    assert f"c{ids[2]}: experiment 'second'" in out
    header = next(line for line in out.splitlines() if line.split()[:3] == ["kind", "name", "unit"])
    assert header.split()[3:] == [f"c{ids[0]}", f"c{ids[1]}", f"c{ids[2]}", f"c{ids[1]}/c{ids[0]}",
                                  f"c{ids[2]}/c{ids[0]}"]
    assert "config.banks.count" in out and "mapping.workers" in out
    code, out, _ = cli("compare", ids[0], ids[1], infeasible_id, "--db", db)
    dma = next(line for line in out.splitlines() if line.split()[:2] == ["analytical", "dma_cycles"])
    assert dma.split()[5] == "—"  # shown as no figure, not as 0
    assert cli("compare", ids[0], "--db", db)[0] == 2
    assert cli("compare", ids[0], ids[0], "--db", db)[0] == 2


HAND = """
[experiment]
name = "hand"
hypothesis = "Four workers on small banks beat one core"

[[acceptance]]
expr = "latency_cycles < baseline_latency_cycles"

[workload]
recipe = "gemm"
params = { m = 32, n = 32, k = 32 }

[baseline]
chip = "goban"
mapping = { workers = 1 }

[[candidates]]
why = "four workers, small banks"
set = { chip.banks.count = 12, mapping.workers = 4 }

[[candidates]]
why = "two workers only"
set = { "mapping.workers" = 2 }

[[objectives]]
metric = "latency_cycles"
"""


def test_hand_picked_candidates_alone_and_beside_a_space(tmp_path, cli):
    spec = tmp_path / "hand.toml"
    spec.write_text(HAND)
    db = tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False)
    assert result.evaluated == 3
    with Store(db) as store:
        cands = store.candidates("hand").sort_values("id")
        assert cands["origin"].tolist() == ["baseline", "hand", "hand"]
        assert cands["why"].tolist()[1:] == ["four workers, small banks", "two workers only"]
        assert pd_isna(cands["why"].iloc[0])
        assert [json.loads(d) for d in cands["diff"]] == [
            {}, {"config.banks.count": [20, 12], "mapping.workers": [1, 4]}, {"mapping.workers": [1, 2]}]
    code, out, _ = cli("show", "c2", "--db", db)
    assert "why (hand-picked): four workers, small banks" in out
    # The numbered frontend dumps are the experiment's own artifacts.
    with Store(db) as store:
        dumps = store.artifacts("hand")
    assert dumps["name"].tolist() == ["frontend/01-import.txt", "frontend/02-permute.txt", "frontend/03-quantize.txt"]
    assert set(dumps["role"]) == {"graph_dump"} and dumps["run_id"].isna().all()
    assert open(dumps["path"].iloc[0]).read().startswith("graph gemm")
    code, out, _ = cli("show", "hand", "--db", db)
    assert "frontend/03-quantize.txt" in out
    assert run_sweep(spec, db, progress=False).evaluated == 0  # resumes

    # Beside a space: the hand-picked first, a grid point equal to one of them not twice.
    beside = tmp_path / "beside.toml"
    beside.write_text(HAND.replace('name = "hand"', 'name = "beside"') +
                      '\n[[space]]\nname = "workers"\ntarget = "mapping.workers"\nvalues = [1, 2, 4]\n')
    result = run_sweep(beside, db, progress=False)
    with Store(db) as store:
        cands = store.candidates("beside").sort_values("id")
    assert cands["origin"].tolist() == ["baseline", "hand", "hand", "grid"]  # workers=2 is the hand one
    # The baseline and the two hand-picked ones 'hand' evaluated: linked (dse.records.reuse), the grid point evaluated.
    assert (result.evaluated, result.reused) == (1, 3)


def pd_isna(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


@pytest.mark.parametrize("old,new,field", [
    ("chip.banks.count = 12", "chip.banks.cuont = 12", "candidates[0].set"),
    ('"mapping.workers" = 2', '"mapping.workers" = 0', "candidates[1].set -> mapping.workers"),
    ('why = "two workers only"', 'why = " "', "candidates[1].why"),
])
def test_a_bad_hand_picked_candidate_is_one_line_and_nothing_written(tmp_path, cli, old, new, field):
    spec = tmp_path / "bad.toml"
    spec.write_text(HAND.replace(old, new))
    code, _, err = cli("sweep", spec, "--db", tmp_path / "r.db", "--no-progress")
    assert code == 2 and f"field '{field}'" in err and err.count("\n") == 1
    assert not (tmp_path / "r.db").exists()


def test_the_workload_identity_covers_source_params_steps_and_torch(tmp_path, cli):
    from dse.identity import workload_identity

    steps = [{"name": "quantize", "options": {"granularity": "tensor"}, "code": "c" * 64}]
    base = workload_identity("s" * 64, {"batch": 8}, steps, "2.13.0")
    assert base == workload_identity("s" * 64, {"batch": 8}, [dict(s) for s in steps], "2.13.0")
    assert len({base, workload_identity("t" * 64, {"batch": 8}, steps, "2.13.0"),
                workload_identity("s" * 64, {"batch": 16}, steps, "2.13.0"),
                workload_identity("s" * 64, {"batch": 8}, [], "2.13.0"),
                workload_identity("s" * 64, {"batch": 8}, steps, "2.12.0")}) == 5

    db = tmp_path / "r.db"
    small, large, defaulted = (tmp_path / f"{n}.toml" for n in ("small", "large", "defaulted"))
    small.write_text(HAND.replace('name = "hand"', 'name = "small"'))
    large.write_text(HAND.replace('name = "hand"', 'name = "large"').replace("m = 32", "m = 64"))
    # gemm's m defaults to 64: leaving it out is the same work as spelling it out
    defaulted.write_text(HAND.replace('name = "hand"', 'name = "defaulted"').replace("m = 32, ", ""))
    for path in (small, large, defaulted):
        run_sweep(path, db, progress=False)
    with Store(db) as store:
        ident = {n: store.experiment(n)["workload_hash"] for n in ("small", "large", "defaulted")}
        parts = store.experiment("small")["workload"]
    assert ident["small"] != ident["large"] and ident["large"] == ident["defaulted"]
    assert parts["params"] == {"m": 32, "n": 32, "k": 32} and parts["torch_version"].startswith("2.13.0")
    assert [s["name"] for s in parts["steps"]] == ["permute", "quantize"]
    code, out, _ = cli("compare", 1, 4, 7, "--db", db)
    assert "DIFFERENT (2 workload identities)" in out


def test_emulator_runs_keep_raw_evidence_deduplicated_fetchable_and_collected(tmp_path, cli):
    import hashlib

    import numpy as np

    spec = tmp_path / "raw.toml"
    spec.write_text(HAND.replace('name = "hand"', 'name = "raw"') + '\n[stages]\nemulator = "top_k"\ntop_k = 2\n')
    db = tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False)
    assert result.evidence_skipped == 0
    with Store(db) as store:
        runs = store.runs("raw")
        emulated = runs[(runs["stage"] == "emulator") & (runs["status"] == "ok")]["id"].tolist()
        assert len(emulated) == 2
        arts = store.artifacts("raw")
        first = arts[arts["run_id"] == emulated[0]]
        assert sorted(first["name"]) == ["banks.json", "counters.json", "emulation.json", "inputs/x.npy",
                                         "outputs/matmul.npy", "physical/matmul.padded.npy", "replay.json"]
        assert dict(zip(first["name"], first["role"]))["inputs/x.npy"] == "inputs"
        npy = first[first["name"] == "outputs/matmul.npy"].iloc[0]
        value = np.load(npy["path"])
        assert value.shape[-2:] == (32, 32) and value.dtype == np.float32
        # Bit-exact candidates: one file, a row per run (the model's shape and the physical
        # buffer's, (1, 32, 32), each its own file).
        outputs = arts[arts["role"] == "outputs"]
        assert len(outputs) == 4 and outputs.groupby("name")["sha256"].nunique().to_dict() == {
            "outputs/matmul.npy": 1, "physical/matmul.padded.npy": 1}
        log = json.loads(open(first[first["name"] == "emulation.json"].iloc[0]["path"]).read())
        assert log["numerics"]["passed"] is True and log["cycles"] > 0
        counters = json.loads(open(first[first["role"] == "measurements"].iloc[0]["path"]).read())
        assert any(r["name"] == "cycles" for r in counters)
        # Host time: the emulator's run timed 3 times (the spec's default), min and median.
        host = store.metric_table("raw", "emulator_host_time").dropna(subset=["runs"])
        assert len(host) == 2 and (host["runs"] == 3).all()
        assert (host["run_seconds_min"] <= host["run_seconds_median"]).all() and (host["run_seconds_min"] > 0).all()
    code, out, _ = cli("show", f"r{emulated[0]}", "--db", db)
    assert code == 0 and "artifacts:" in out and "outputs/" in out and "counters.json" in out
    code, out, _ = cli("evidence", "get", int(npy["id"]), "--out", tmp_path, "--db", db)
    fetched = tmp_path / npy["name"].split("/")[-1]
    assert code == 0 and hashlib.sha256(fetched.read_bytes()).hexdigest() == npy["sha256"]
    assert cli("evidence", "get", 9999, "--db", db)[0] == 2

    # A budget of 0 keeps nothing, and says so.
    tight = tmp_path / "tight.toml"
    tight.write_text(spec.read_text().replace('name = "raw"', 'name = "tight"').replace("top_k = 2", "top_k = 1")
                     + "evidence_budget_mb = 0\n")
    # outputs (model-shaped and physical), inputs, replay.json, banks.json, counters, log
    # evaluated afresh (not linked to 'raw's runs, dse.records.reuse): its own evidence, over the budget
    assert run_sweep(tight, db, progress=False, reuse=False).evidence_skipped == 7

    # Deleting an experiment leaves its files to the collector, which keeps what others name.
    with Store(db) as store:
        shared = store.put_artifact(fetched.read_bytes(), role="outputs", experiment_id=int(store.experiment("tight")["id"]),
                                    name="kept.npy")
        assert shared.sha256 == npy["sha256"]  # the same content: the same file
    assert cli("delete", "raw", "--confirm", "rav", "--db", db)[0] == 2
    code, out, _ = cli("delete", "raw", "--confirm", "raw", "--db", db)
    assert code == 0 and "deleted experiment 'raw'" in out
    with Store(db) as store:
        assert "raw" not in store.experiments()["name"].tolist()
        kept = set(store.artifacts()["sha256"])
        before = {p.name for p in store.evidence_dir.glob("??/*")}
        assert store.collect_evidence_garbage(dry_run=True).files == len(before - kept) > 0
        assert {p.name for p in store.evidence_dir.glob("??/*")} == before
    code, out, _ = cli("evidence", "gc", "--db", db)
    assert code == 0 and f"removed {len(before - kept)} evidence files" in out
    with Store(db) as store:
        assert {p.name for p in store.evidence_dir.glob("??/*")} == kept


def test_links_whys_workload_parts_delete_and_gc_on_both_backends(db):
    with Store(db) as store:
        ids = fill(store, name="early")
        later = store.create_experiment("later", "h", [], "gemm", "w" * 64, "spec", "later",
                                        links=[("follows", ids["experiment"], "start from early's best")],
                                        workload={"params": {"m": 32}, "steps": [], "torch_version": "2.13.0",
                                                  "recipe_source_hash": "s" * 64})
        cand = store.add_candidate(later, {"banks": 8}, {}, "hand")[0]
        store.set_whys({cand: "smallest that fits"})
        assert store.candidate(cand)["why"] == "smallest that fits"
        assert store.experiment("later")["workload"]["params"] == {"m": 32}
        assert [(l["experiment"], l["relation"], l["other"]) for l in store.links("early")] == [
            ("later", "follows", "early")]
        run = analytical(store, ids["fast"], 800.0, 1200.0)
        store.put_artifact(b"only early has this", role="log", run_id=run, name="log.txt")
        store.put_artifact(b"both have this", role="log", run_id=run, name="a.txt")
        store.put_artifact(b"both have this", role="log", experiment_id=later, name="b.txt")
        assert store.evidence_bytes() == len(b"only early has this") + len(b"both have this")
        store.add_note("early", "note", "superseded", "ana")
        decide(store, "later", ids["good"], "ana", "early's good one", override="no criteria here")
        with pytest.raises(ValueError, match="followed or reopened by experiment"):
            store.delete_experiment("early")
        counts = store.delete_experiment("later")
        assert counts["experiment"] == 1 and counts["decision"] == 1 and counts["experiment_link"] == 1
        third = store.create_experiment("third", "h", [], "gemm", "w" * 64, "spec", "third")
        store.add_decision(third, "accepted", "why", "ana", candidate_id=ids["good"])
        with pytest.raises(ValueError, match=rf"decisions of experiment\(s\) \[{third}\] name candidates of experiment"):
            store.delete_experiment("early")
        store.delete_experiment("third")
        counts = store.delete_experiment("early")
        assert counts["candidate"] == 3 and counts["note"] == 1 and counts["artifact"] == 2
        assert store.experiments().empty and store.evidence_bytes() == 0
        collected = store.collect_evidence_garbage()
        assert (collected.files, collected.bytes) == (2, len(b"only early has this") + len(b"both have this"))
        collected = store.collect_evidence_garbage()
        assert (collected.files, collected.bytes, collected.foreign) == (0, 0, 0)


WORKLOAD_KNOB = HAND.replace('name = "hand"', 'name = "points"').split("[[candidates]]")[0] + """
[[space]]
name = "m"
target = "workload.params.m"
values = [32, 64]

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 4]

[[objectives]]
metric = "latency_cycles"
"""


def test_workload_params_as_knobs_compare_identical_work(tmp_path, cli):
    spec = tmp_path / "points.toml"
    spec.write_text(WORKLOAD_KNOB)
    db = tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False)
    assert result.evaluated == 4 and result.proposed == "confirmed"
    with Store(db) as store:
        cands = store.candidates("points").sort_values("id")
        points = [json.loads(m).get("workload") for m in cands["mapping"]]
        assert points == [None, None, {"m": 64}, {"m": 64}]  # the baseline's own point keeps its identity
        table = store.metric_table("points", "analytical").set_index("candidate_id")
    ids = cands["id"].tolist()
    small, large = table.loc[ids[0], "latency_cycles"], table.loc[ids[2], "latency_cycles"]
    assert large > 1.5 * small  # a larger m is more work: its own graph
    # Judged: 4 workers at m=32 against the baseline, 4 workers at m=64 against 1 worker at
    # m=64 (the baseline's design at that point, itself not judged), never across points.
    assert result.decision.startswith("2 of 2 feasible candidates meet")
    with Store(db) as store:
        accepted = decide(store, "points", ids[3], "ana", "4 workers at m=64")
    assert accepted.checks[0]["values"]["baseline_latency_cycles"] == table.loc[ids[2], "latency_cycles"]
    code, out, _ = cli("compare", ids[2], ids[3], "--db", db)
    assert "submitted work: identical (gemm" in out and "at m=64)" in out
    code, out, _ = cli("compare", ids[0], ids[3], "--db", db)
    assert "submitted work: DIFFERENT" in out
    code, _, err = cli("decide", "points", "--accept", ids[2], "--why", "x", "--db", db)
    assert code == 2 and "latency_cycles = " in err  # itself the reference at its point: not faster


@pytest.mark.parametrize("old,new,fragment", [
    ('target = "workload.params.m"', 'target = "workload.params.batch"',
     "workload.params.<a parameter recipe gemm takes: m, n, k>"),
    ('target = "workload.params.m"\nvalues = [32, 64]', 'target = "workload.recipe"\nvalues = ["gemm", "nope"]',
     "'nope'"),
])
def test_a_bad_workload_knob_is_one_line_and_nothing_written(tmp_path, cli, old, new, fragment):
    spec = tmp_path / "bad.toml"
    assert old in WORKLOAD_KNOB
    spec.write_text(WORKLOAD_KNOB.replace(old, new))
    code, _, err = cli("sweep", spec, "--db", tmp_path / "r.db", "--no-progress")
    assert code == 2 and fragment in err and err.count("\n") == 1 and "space[0]" in err
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("traces", [True, False])
def test_emulator_runs_keep_their_timing_trace_when_asked(tmp_path, cli, traces):
    spec = tmp_path / "traced.toml"
    spec.write_text(HAND.replace('name = "hand"', 'name = "traced"')
                    + f'\n[stages]\nemulator = "top_k"\ntop_k = 1\nhost_time_repeats = 1\ntraces = {str(traces).lower()}\n')
    db = tmp_path / "r.db"
    run_sweep(spec, db, progress=False)
    with Store(db) as store:
        runs = store.runs("traced")
        run = runs[(runs["stage"] == "emulator") & (runs["status"] == "ok")]["id"].tolist()
        assert len(run) == 1
        arts = store.artifacts("traced")
        mine = arts[arts["run_id"] == run[0]]
        traced = mine[mine["role"] == "trace"]
        if not traces:
            assert traced.empty and sorted(mine["role"]) == ["inputs", "log", "log", "log", "measurements",
                                                             "outputs", "outputs"]
            return
        assert sorted(traced["name"]) == ["trace/itrace.ndjson", "trace/mtrace.ndjson", "trace/pmctrace.ndjson"]
        counters = json.loads(open(mine[mine["role"] == "measurements"].iloc[0]["path"]).read())
        itrace_row = traced[traced["name"] == "trace/itrace.ndjson"].iloc[0]
        itrace = [json.loads(line) for line in open(itrace_row["path"]).read().splitlines()]
        pmc = [json.loads(line) for line in open(traced[traced["name"] == "trace/pmctrace.ndjson"].iloc[0]["path"])]
    # Every instruction of every core (accelerator instructions and core ops, as the
    # run's counters count them) issued and completed once, in the trace.
    per_core: dict[int, int] = {}
    for r in counters:
        if r["name"] in ("instructions", "core_ops") and r.get("core") is not None:
            per_core[int(r["core"])] = per_core.get(int(r["core"]), 0) + int(r["value"])
    assert per_core and sum(per_core.values()) > 0
    for core, count in per_core.items():
        for event in ("issue", "complete"):
            pcs = [e["pc"] for e in itrace if e["core"] == core and e["event"] == event]
            assert sorted(pcs) == list(range(count)), (core, event)
    assert any(e["event"] == "ball" and e["elapsed"] > 0 for e in pmc)  # the gemm's matrix Ball ops
    code, out, _ = cli("show", f"r{run[0]}", "--db", db)
    assert code == 0 and "trace/itrace.ndjson" in out
    code, _, _ = cli("evidence", "get", int(itrace_row["id"]), "--out", tmp_path, "--db", db)
    assert code == 0 and (tmp_path / "itrace.ndjson").read_bytes() == open(itrace_row["path"], "rb").read()


def test_the_store_url_names_its_evidence_folder(pg_url, tmp_path, cli, monkeypatch):
    monkeypatch.delenv("DSE_EVIDENCE_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "named" / "evidence"  # a new folder inside a writable one
    url = f"{pg_url}?evidence_dir={folder}"
    with Store(url) as store:
        assert store.evidence_dir == folder.resolve() and "evidence_dir" not in store.url
        e = store.create_experiment("named", "h", [], "gemm", "w" * 64, "spec", "named")
        ref = store.put_artifact(b"kept where the URL says", role="log", experiment_id=e, name="log.txt")
    assert (folder / ref.sha256[:2] / ref.sha256).read_bytes() == b"kept where the URL says"
    assert not (tmp_path / "xdg").exists()  # nothing in the default folder
    code, out, _ = cli("evidence", "get", ref.id, "--out", tmp_path, "--db", url)
    assert code == 0 and (tmp_path / "log.txt").read_bytes() == b"kept where the URL says"

    # Not a writable folder: one line, exit 2, nothing written (no experiment, no folder).
    spec = tmp_path / "hand.toml"
    spec.write_text(HAND)
    afile = tmp_path / "a-file"
    afile.write_text("x")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    bad = [afile, afile / "below", ""] + ([] if os.geteuid() == 0 else [locked / "evidence"])
    for value in bad:
        code, _, err = cli("sweep", spec, "--db", f"{pg_url}?evidence_dir={value}", "--no-progress")
        assert code == 2 and err.count("\n") == 1 and "?evidence_dir" in err and "a folder dse can write" in err, err
    with Store(pg_url, evidence_dir=tmp_path / "unused") as store:
        assert store.experiments()["name"].tolist() == ["named"]
    assert not (locked / "evidence").exists() and not (tmp_path / "xdg").exists()


PHASES = """
[experiment]
name = "phases"
hypothesis = "Four workers beat one in both phases"

[[acceptance]]
expr = "latency_cycles < baseline_latency_cycles"

[workload]
recipe = "llama_prefill"
params = { dim = 128, heads = 4, kv_heads = 2, ffn = 256, vocab = 256, layers = 1 }

[baseline]
chip = "goban"
mapping = { workers = 1 }

[[space]]
name = "phase"
target = "workload.recipe"
values = ["llama_prefill", "llama_decode"]

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 4]

[[objectives]]
metric = "latency_cycles"
"""


def test_the_phase_is_a_knob_and_worker_counts_compare_within_a_phase(tmp_path, cli):
    spec = tmp_path / "phases.toml"
    spec.write_text(PHASES)
    db = tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False)  # analytical only: no emulator stage
    assert result.evaluated == 4
    with Store(db) as store:
        cands = store.candidates("phases").sort_values("id")
        runs = store.runs("phases")
        table = store.metric_table("phases", "analytical").set_index("candidate_id")
    assert set(runs["stage"]) == {"analytical"}
    points = [json.loads(m).get("workload") for m in cands["mapping"]]
    workers = [json.loads(m)["workers"] for m in cands["mapping"]]
    assert list(zip([p and p["recipe"] for p in points], workers)) == [
        (None, 1), (None, 4), ("llama_decode", 1), ("llama_decode", 4)]
    assert cands["hash"].nunique() == 4  # the point is part of each candidate's identity
    ids = cands["id"].tolist()
    prefill, decode = table.loc[ids[0], "latency_cycles"], table.loc[ids[2], "latency_cycles"]
    assert prefill > 0 and decode > 0 and prefill != decode  # each phase costed on its own graph
    # Distinct workload identities, in compare's words; within a phase, identical work.
    code, out, _ = cli("compare", ids[0], ids[1], "--db", db)
    assert code == 0 and "submitted work: identical (llama_prefill " in out and " at " not in out.split("\n")[1]
    code, out, _ = cli("compare", ids[2], ids[3], "--db", db)
    assert code == 0 and "submitted work: identical (llama_prefill" in out and "at recipe=llama_decode)" in out
    code, out, _ = cli("compare", ids[1], ids[3], "--db", db)
    assert code == 0 and "submitted work: DIFFERENT" in out
    code, out, _ = cli("compare", *ids, "--db", db)
    assert code == 0 and "DIFFERENT (2 workload identities)" in out
    # Judged within a phase only: decode at 4 workers against decode at 1 (the baseline's
    # design at that point), never against prefill.
    from dse.runner.acceptance import references

    with Store(db) as store:
        refs = references(store, store.experiment("phases"))
    assert refs == {ids[0]: ids[0], ids[1]: ids[0], ids[2]: ids[2], ids[3]: ids[2]}
