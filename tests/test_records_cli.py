"""The record-store CLI: history, show, compare, decide, export, evidence import, on a
real store; bad input exits 2 with one line and writes nothing."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from pg import pg_server, pg_url  # noqa: F401  (fixtures)

from dse.records import MetricIn, Store

TRACE = "\n".join([
    '{"type":"pmctrace","clk":500,"event":"ball","ball_id":0,"rob_id":3,"elapsed":400}',
    '{"type":"pmctrace","clk":620,"event":"load","rob_id":4,"elapsed":40}',
    '{"type":"ctrace","clk":700,"event":"ctr_stop","ctr_id":0,"tag":"0x1","elapsed":9,"cycle":700}',
])  # fmt: skip


def fill(store: Store) -> dict:
    """Two experiments; 'banks' has a baseline, a faster candidate, an infeasible one and
    a failed one."""
    e = store.create_experiment(
        "banks", "20 banks beat 16 for this decoder step",
        [{"expr": "latency_cycles < baseline_latency_cycles", "prose": "faster"}],
        "gemm", "a" * 64, 'name = "banks"', "s1", limitations="one shape only",
        open_questions="batch 8?",
    )  # fmt: skip
    base, _ = store.add_candidate(e, {"banks": {"count": 16}}, {"tile": [16, 16]}, "baseline")
    store.set_baseline(e, base)
    fast, _ = store.add_candidate(e, {"banks": {"count": 20}}, {"tile": [16, 16]}, "grid")
    big, _ = store.add_candidate(e, {"banks": {"count": 64}}, {"tile": [16, 16]}, "grid")
    bad, _ = store.add_candidate(e, {"banks": {"count": 24}}, {"tile": [32, 8]}, "sampler")
    runs = {}
    for cand, cycles in [(base, 1000.0), (fast, 800.0)]:
        runs[cand] = store.start_run(cand, "analytical", model_version="m1")
        store.finish_run(runs[cand], "ok", [
            MetricIn("analytical", "latency_cycles", cycles, "cycles"),
            MetricIn("analytical", "dma_bytes", 4096.0, "bytes"),
        ])  # fmt: skip
    store.finish_run(store.start_run(big, "analytical"), "infeasible", reason="needs 64 banks, has 20")
    store.finish_run(store.start_run(bad, "analytical"), "failed", error="ZeroDivisionError: x",
                     traceback="Traceback (most recent call last):\n  boom")  # fmt: skip
    store.set_status(e, "testing")
    store.create_experiment("empty", "nothing yet", [], "mlp", "b" * 64, "x", "s2")
    return dict(experiment=e, base=base, fast=fast, big=big, bad=bad, runs=runs)


@pytest.fixture
def filled(tmp_path):
    db = tmp_path / "records.db"
    with Store(db) as store:
        ids = fill(store)
    return db, ids


def counts(db) -> tuple[int, int, int, int]:
    with Store(db) as store:
        return (len(store.runs()), len(store.metrics("banks")), len(store.decisions()),
                len(store.artifacts()))  # fmt: skip


def assert_input_error(result, *fragments):
    code, out, err = result
    assert code == 2, (out, err)
    assert err.startswith("dse: error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err


def test_history_lists_experiments_counts_and_decisions(cli, filled):
    db, ids = filled
    code, out, _ = cli("history", "--db", db)
    assert code == 0
    header, banks, empty = out.splitlines()[:3]
    assert header.split()[:13] == ["id", "name", "status", "proposed", "candidates", "ok", "infeasible",
                                   "failed", "crashed", "running", "emulated", "decisions", "notes"]  # fmt: skip
    assert banks.split()[:13] == ["1", "banks", "testing", "—", "4", "2", "1", "1", "0", "0", "0", "0", "0"]
    assert "20 banks beat 16" in banks
    assert empty.split()[:8] == ["2", "empty", "proposed,", "not", "run", "yet", "—", "0"]  # no sweep ran
    cli("decide", "banks", "--accept", ids["fast"], "--why", "20% faster", "--author", "ana", "--db", db)
    cli("decide", "banks", "--reject", ids["fast"], "--why", "too hot", "--author", "bo", "--db", db)
    code, out, _ = cli("history", "--db", db)
    assert code == 0
    banks = out.splitlines()[1]
    assert banks.split()[2] == "testing" and banks.split()[11] == "2"  # every decision counted
    events = out.split("\n\n")[1]
    assert f"accepted c{ids['fast']} by ana: 20% faster" in events  # every decision listed, not the latest only
    assert f"rejected c{ids['fast']} by bo: too hot" in events


def test_show_experiment_candidate_and_run(cli, filled):
    db, ids = filled
    code, out, _ = cli("show", "banks", "--db", db)
    assert code == 0
    for text in ("experiment 1 'banks'", "hypothesis testing", "latency_cycles < baseline_latency_cycles",
                 "recipe gemm, source hash " + "a" * 64, "baseline: candidate 1",
                 "limitations: one shape only", "open questions: batch 8?",
                 "candidates: 4 (2 ok, 1 infeasible, 1 failed)", "needs 64 banks, has 20",
                 "banks.count=20"):  # fmt: skip
        assert text in out, text
    assert cli("show", "1", "--db", db)[1] == out  # a bare id is an experiment

    code, out, _ = cli("show", f"c{ids['fast']}", "--db", db)
    assert code == 0
    assert "config.banks.count: 16 -> 20" in out
    # the config and mapping as trees (dse.config_tree), not one-line JSON
    assert "\nconfig:\n  banks:\n    count: 20\nmapping:\n  tile: [16, 16]\n" in out
    assert "analytical" in out and "800" in out

    code, out, _ = cli("show", f"r{ids['runs'][ids['base']]}", "--db", db)
    assert code == 0
    assert "analytical of candidate 1" in out and "status ok" in out and "latency_cycles" in out
    code, out, _ = cli("show", "run:4", "--db", db)  # the failed candidate's run
    assert "error: ZeroDivisionError: x" in out and "Traceback (most recent call last):" in out


def test_compare_shows_only_differences_and_metric_deltas_with_kinds(cli, filled, tmp_path):
    db, ids = filled
    code, out, _ = cli("compare", ids["base"], ids["fast"], "--db", db)
    assert code == 0
    assert "config.banks.count 16 20" in " ".join(out.split())
    assert "mapping.tile" not in out  # equal: not shown
    line = next(l for l in out.splitlines() if l.split()[:2] == ["analytical", "latency_cycles"])
    assert line.split()[2:] == ["cycles", "1,000", "800", "-200", "0.8000"]
    assert "dma_bytes" not in out and "1 equal metrics not shown" in out
    # Imported RTL cycles sit in their own rows, never in the analytical or emulator ones.
    trace = tmp_path / "bdb.ndjson"
    trace.write_text(TRACE)
    assert cli("evidence", "import", "--kind", "rtl_cycles", trace, "--candidate", ids["fast"],
               "--db", db)[0] == 0  # fmt: skip
    code, out, _ = cli("compare", ids["base"], ids["fast"], "--db", db, "--all-metrics")
    kinds = {l.split()[0] for l in out.splitlines() if l.split() and l.split()[0].endswith(("cycles", "analytical"))}
    assert kinds == {"analytical", "rtl_cycles"}
    assert "dma_bytes" in out
    rtl = next(l for l in out.splitlines() if l.split()[:2] == ["rtl_cycles", "latency_cycles"])
    assert rtl.split()[2:5] == ["cycles", "—", "520"]


def test_decide_records_the_verdict_with_evidence_and_refuses_bad_targets(cli, filled):
    db, ids = filled
    code, out, _ = cli("decide", "banks", "--accept", ids["fast"], "--why", "20% faster",
                       "--author", "ana", "--db", db)  # fmt: skip
    assert code == 0 and out.startswith("decision 1: accepted candidate 2 of experiment 'banks' by ana")
    code, out, _ = cli("decide", "1", "--reject", ids["big"], "--why", "does not fit", "--db", db)
    assert code == 0
    with Store(db) as store:
        decisions = store.decisions("banks")
    assert decisions["verdict"].tolist() == ["accepted", "rejected"]
    assert decisions["candidate_id"].tolist() == [ids["fast"], ids["big"]]
    base_run, fast_run = ids["runs"][ids["base"]], ids["runs"][ids["fast"]]
    assert json.loads(decisions["evidence"][0]) == [base_run, fast_run]
    before = counts(db)
    assert_input_error(cli("decide", "nope", "--accept", 1, "--why", "x", "--db", db),
                       "field 'experiment'", "banks, empty")  # fmt: skip
    # A candidate of another experiment with another workload: refused unless overridden.
    assert_input_error(cli("decide", "empty", "--accept", ids["fast"], "--why", "x", "--db", db),
                       "refused to accept candidate 2 for experiment 'empty'",
                       "experiment 'banks', whose workload (gemm aaaaaaaaaaaa) is not this one's")  # fmt: skip
    assert_input_error(cli("decide", "banks", "--accept", 99, "--why", "x", "--db", db),
                       "field 'candidate'", "ids 1 to 4")  # fmt: skip
    assert_input_error(cli("decide", "banks", "--accept", "two", "--why", "x", "--db", db), "--accept")
    assert_input_error(cli("decide", "banks", "--accept", 99, "--why", " ", "--db", db), "--why")
    assert counts(db) == before


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_writes_one_file_per_table_and_keeps_kinds(cli, filled, tmp_path, fmt):
    db, ids = filled
    out_dir = tmp_path / "out"
    code, out, _ = cli("export", "banks", "--db", db, "--format", fmt, "--out", out_dir)
    assert code == 0
    names = ["experiment", "candidates", "runs", "metrics", "decisions", "artifacts"]
    assert out.split() == [str(out_dir / f"{n}.{fmt}") for n in names]
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    tables = {n: read(out_dir / f"{n}.{fmt}") for n in names}
    assert tables["experiment"]["name"].tolist() == ["banks"]
    assert json.loads(tables["experiment"]["acceptance"][0])[0]["prose"] == "faster"
    assert tables["candidates"]["id"].tolist() == [1, 2, 3, 4]
    assert sorted(tables["runs"]["status"]) == ["failed", "infeasible", "ok", "ok"]
    metrics = tables["metrics"]
    assert set(metrics.columns) >= {"candidate_id", "run_id", "kind", "name", "value", "unit", "scope"}
    assert metrics.groupby("kind")["value"].count().to_dict() == {"analytical": 4}
    assert not list(tmp_path.glob("out/.*"))  # no temporary file left behind


def test_export_refuses_unknown_experiment_or_format_writing_nothing(cli, filled, tmp_path):
    db, _ = filled
    out_dir = tmp_path / "out"
    assert_input_error(cli("export", "nope", "--db", db, "--out", out_dir), "field 'experiment'")
    assert_input_error(cli("export", "banks", "--db", db, "--out", out_dir, "--format", "xlsx"),
                       "--format", "csv, parquet")  # fmt: skip
    assert not out_dir.exists()


def test_evidence_import_pmctrace_and_csv(cli, filled, tmp_path):
    db, ids = filled
    trace = tmp_path / "bdb.ndjson"
    trace.write_text(TRACE)
    code, out, _ = cli("evidence", "import", "--kind", "rtl_cycles", trace, "--candidate", ids["fast"],
                       "--note", "verilator 5.024", "--db", db)  # fmt: skip
    assert code == 0
    assert out.startswith("run 5: 10 rtl_cycles metrics from pmctrace (2 pmctrace lines, 1 other lines skipped")
    fpga = tmp_path / "fpga.csv"
    fpga.write_text("name,value,unit\nlatency_cycles,1234,cycles\n")
    code, out, _ = cli("evidence", "import", "--kind", "fpga_cycles", fpga, "--candidate", ids["fast"],
                       "--db", db)  # fmt: skip
    assert code == 0 and "1 fpga_cycles metrics from csv" in out
    with Store(db) as store:
        rtl = store.metric_table("banks", "rtl_cycles").set_index("candidate_id")
        fpga_table = store.metric_table("banks", "fpga_cycles").set_index("candidate_id")
        analytical = store.metric_table("banks", "analytical").set_index("candidate_id")
        run = store.run(5)
        artifacts = store.artifacts("banks")
    # First issue 500 - 400 = 100, last completion 620: 520 cycles of RTL latency.
    assert rtl.loc[ids["fast"], "latency_cycles"] == 520.0
    assert fpga_table.loc[ids["fast"], "latency_cycles"] == 1234.0
    assert analytical.loc[ids["fast"], "latency_cycles"] == 800.0  # untouched
    assert run["stage"] == "imported" and run["versions"]["evidence_source"] == "verilator 5.024"
    assert run["command"].startswith("dse evidence import --kind rtl_cycles")
    assert artifacts["role"].tolist() == ["trace", "measurements"]
    assert open(artifacts["path"][0]).read() == TRACE


def test_evidence_import_refuses_bad_input_writing_nothing(cli, filled, tmp_path):
    db, ids = filled
    good = tmp_path / "bdb.ndjson"
    good.write_text(TRACE)
    broken = tmp_path / "broken.ndjson"
    broken.write_text(TRACE + '\n{"type":"pmctrace","event":"ball","ball_id":0,"rob_id":1}\n')
    csv = tmp_path / "m.csv"
    csv.write_text("name,value\nlatency_cycles,12k\n")
    before = counts(db)
    cases = [
        (("--kind", "rtl_cycles", broken, "--candidate", ids["fast"]), ("line 4: elapsed",)),
        (("--kind", "fpga_cycles", csv, "--candidate", ids["fast"]), ("line 2: value", "'12k'")),
        (("--kind", "emulator_cycles", good, "--candidate", ids["fast"]), ("--kind", "rtl_cycles, fpga_cycles")),
        (("--kind", "rtl_cycles", good, "--candidate", 99), ("field 'candidate': got 99",)),
        (("--kind", "rtl_cycles", good, "--candidate", "two"), ("--candidate",)),
        (("--kind", "rtl_cycles", tmp_path / "missing.ndjson", "--candidate", 1), ("FILE",)),
        (("--kind", "rtl_cycles", good, "--candidate", 1, "--format", "vcd"), ("--format",)),
    ]
    for args, fragments in cases:
        assert_input_error(cli("evidence", "import", *args, "--db", db), *fragments)
    assert counts(db) == before
    evidence = db.parent / "records.db.evidence"
    assert not evidence.exists() or not any(p.is_file() for p in evidence.rglob("*"))


def test_unknown_ids_and_unreachable_stores_exit_2(cli, filled, tmp_path):
    db, _ = filled
    assert_input_error(cli("show", "nope", "--db", db), "field 'ID'", "c<ID> for a candidate", "banks")
    assert_input_error(cli("show", "c99", "--db", db), "field 'candidate': got 99")
    assert_input_error(cli("show", "r99", "--db", db), "field 'run': got 99")
    assert_input_error(cli("compare", 1, 99, "--db", db), "field 'candidate': got 99")
    assert_input_error(cli("compare", 1, 2, "--db", db, "--scope", "chip"), "--scope")
    assert_input_error(cli("history", "--db", tmp_path / "missing.db"), "--db")
    assert not (tmp_path / "missing.db").exists()
    assert_input_error(cli("history", "--db", "postgresql://dse:secret@127.0.0.1:1/none"),
                       "--db", "a reachable record store")  # fmt: skip
    code, _, err = cli("history", "--db", "postgresql://dse:secret@127.0.0.1:1/none")
    assert "secret" not in err
    assert_input_error(cli("history", "--db", "nosuchdialect://x/y"), "--db")


def test_the_cli_runs_against_postgresql_named_by_the_environment(cli, pg_url, monkeypatch, tmp_path):
    monkeypatch.setenv("DSE_EVIDENCE_DIR", str(tmp_path / "evidence"))
    with Store(pg_url) as store:
        ids = fill(store)
    monkeypatch.setenv("DSE_DB", pg_url)
    code, out, _ = cli("history")
    assert code == 0 and "banks" in out and "empty" in out
    trace = tmp_path / "bdb.ndjson"
    trace.write_text(TRACE)
    assert cli("evidence", "import", "--kind", "rtl_cycles", trace, "--candidate", ids["fast"])[0] == 0
    assert cli("decide", "banks", "--accept", ids["fast"], "--why", "measured")[0] == 0
    code, out, _ = cli("compare", ids["base"], ids["fast"])
    assert code == 0 and "rtl_cycles" in out
    code, out, _ = cli("export", "banks", "--format", "parquet", "--out", tmp_path / "x")
    assert code == 0
    assert set(pd.read_parquet(tmp_path / "x" / "metrics.parquet")["kind"]) == {"analytical", "rtl_cycles"}
    assert_input_error(cli("show", "c99"), "field 'candidate'")
