"""The emulator stage in a sweep: the analytically best candidates are emulated (cycles,
counters and the numerics verdict recorded under their own evidence kinds); every other
candidate gets a pruned emulator run saying why."""

from dse.records import Store
from dse.runner import run_sweep

from test_runner import write_spec

STAGES = """
[stages]
emulator = "top_k"
top_k = 2
"""


def test_top_k_are_emulated_and_the_rest_pruned_with_reasons(tmp_path):
    spec = write_spec(tmp_path, name="emu", banks="[12, 16]")
    spec.write_text(spec.read_text().replace("m = 64, n = 64, k = 64", "m = 32, n = 32, k = 32") + STAGES)
    db = tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False, workers=2)
    with Store(db) as store:
        runs = store.runs(result.experiment_id)
        emu = runs[runs["stage"] == "emulator"]
        cands = store.candidates(result.experiment_id)
        analytical = store.metric_table(result.experiment_id, "analytical")
        cycles = store.metric_table(result.experiment_id, "emulator_cycles")
        numerics = store.metric_table(result.experiment_id, "numerics")
    assert len(emu) == len(cands)  # one emulator-stage run per candidate: emulated or pruned
    ok = emu[emu["status"] == "ok"]
    assert len(ok) == 2
    # The two emulated ones are the two best by the analytical latency.
    best2 = set(analytical[analytical["status"] == "ok"].nsmallest(2, "latency_cycles")["candidate_id"])
    assert set(ok["candidate_id"]) == best2
    pruned = emu[emu["status"] == "pruned"]
    assert all(r.startswith("not emulated: ") for r in pruned["reason"])
    assert pruned["reason"].str.contains("analytically infeasible").any()
    assert pruned["reason"].str.contains("outside the top 2").any()
    # Emulator evidence is its own kind, next to (never merged with) the analytical estimate.
    emulated = cycles.dropna(subset=["latency_cycles"])
    assert set(emulated["candidate_id"]) == best2 and (emulated["latency_cycles"] > 0).all()
    passed = numerics.dropna(subset=["passed"])
    assert set(passed["candidate_id"]) == best2 and (passed["passed"] == 1.0).all()
    assert (passed["integer_bit_exact"] == 1.0).all()

    again = run_sweep(spec, db, progress=False)
    assert again.evaluated == 0
    with Store(db) as store:
        runs2 = store.runs(result.experiment_id)
    assert len(runs2) == len(runs)  # nothing emulated twice


def test_report_shows_model_vs_emulator_and_core_time(tmp_path):
    from dse.report import write_report

    spec = write_spec(tmp_path, name="emurep", banks="[16]")
    spec.write_text(spec.read_text().replace("m = 64, n = 64, k = 64", "m = 32, n = 32, k = 32") + STAGES)
    db = tmp_path / "r.db"
    run_sweep(spec, db, progress=False)
    with Store(db) as store:
        report = write_report(store, "emurep", tmp_path / "out")
        emu = store.metric_table("emurep", "emulator_cycles").dropna(subset=["latency_cycles"])
        model = store.metric_table("emurep", "analytical").set_index("candidate_id")
    data = report.figures["model_vs_emulator"].data.set_index("candidate_id")
    assert set(data.index) == set(emu["candidate_id"]) and len(data) == 2
    for cid, row in data.iterrows():
        want = 100 * (model.loc[cid, "latency_cycles"] - row["emulator_cycles"]) / row["emulator_cycles"]
        assert abs(row["error_pct"] - want) < 1e-9
    ax = report.figures["model_vs_emulator"].figure.axes[0]
    assert ax.get_xlabel() == "emulator cycles (overlapped)" and len(ax.collections[0].get_offsets()) == 2
    core = report.figures["core_time"].data
    assert set(core["candidate_id"]) == set(data.index)
    page = report.path.read_text()
    assert "Analytical estimate vs emulator" in page and "stall_dependence" in page


def test_pruned_emulator_runs_do_not_hide_analytical_outcomes(tmp_path):
    """After the emulator stage, a candidate's analytical status stays 'ok' (its emulator run
    is 'pruned'), so acceptance, the report and a resumed sampler see the same evidence."""
    spec = write_spec(tmp_path, name="keep", banks="[12, 16, 20]")
    spec.write_text(spec.read_text().replace("m = 64, n = 64, k = 64", "m = 32, n = 32, k = 32") + STAGES)
    db = tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False)
    with Store(db) as store:
        analytical = store.metric_table(result.experiment_id, "analytical")
        latest_any = store.candidates(result.experiment_id)
        emulator = store.candidates(result.experiment_id, stage="emulator")
    assert (latest_any["stage"] == "emulator").all()
    assert set(emulator["status"]) == {"ok", "pruned"}
    ok = analytical[analytical["status"] == "ok"]
    assert len(ok) > 2 and ok["latency_cycles"].notna().all()
    assert result.proposed == "confirmed" and result.status == "testing"
    again = run_sweep(spec, db, progress=False)
    assert again.evaluated == 0 and again.counts.get("ok") == len(ok)
