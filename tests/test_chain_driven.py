"""The chain that runs is the chain declared: `Sweep` drives `dse.runner.chain.CHAIN`, so a
stage inserted into the chain a real sweep is given runs at its place, on what the stage
before it made, and the stage after it takes what it returns."""

from test_runner import write_spec

from dse.records import Store
from dse.runner import chain, load_spec
from dse.runner.chain import CHAIN, PRUNE, Stage
from dse.runner.sweep import sweep_into_store

TOP_1 = '\n[stages]\nemulator = "top_k"\ntop_k = 1\n'


def test_a_stage_inserted_before_prune_sees_the_analytical_results_and_feeds_prune(tmp_path):
    seen = []

    def none_feasible(analysed):
        """Observe what the analytical stage made; hand it on with every candidate infeasible
        (no emulation: the test stays cheap)."""
        analysed = list(analysed)
        seen.append(analysed)
        return [(cid, False, totals) for cid, _, totals in analysed]

    at = CHAIN.index(PRUNE)
    driven = CHAIN[:at] + (Stage("none_feasible", none_feasible, "observes"),) + CHAIN[at:]  # the one line
    spec = load_spec(write_spec(tmp_path, banks="[16]", extra=TOP_1))
    result = sweep_into_store(spec, tmp_path / "r.db", progress=False, chain=driven)

    assert len(seen) == 1  # once, between the analytical and the prune stage
    (analysed,) = seen
    with Store(tmp_path / "r.db") as store:
        runs = store.runs(spec.name)
        latency = store.metrics(spec.name, "analytical")
    analytical = runs[runs["stage"] == "analytical"]
    # Its input: every candidate the analytical stage evaluated, its feasibility and totals as recorded.
    assert sorted(cid for cid, _, _ in analysed) == sorted(analytical["candidate_id"].astype(int))
    status = dict(zip(analytical["candidate_id"].astype(int), analytical["status"]))
    assert all(feasible == (status[cid] == "ok") for cid, feasible, _ in analysed)
    recorded = latency[(latency["name"] == "latency_cycles") & (latency["scope"] == "total")]
    recorded = dict(zip(recorded["candidate_id"].astype(int), recorded["value"]))
    assert all(totals["latency_cycles"] == recorded[cid] for cid, feasible, totals in analysed if feasible)
    assert len(analysed) > 1 and analysed[0][1]  # the baseline first, feasible
    # Its output is what prune took: every candidate pruned as infeasible, none emulated.
    emulator = runs[runs["stage"] == "emulator"]
    assert sorted(emulator["candidate_id"].astype(int)) == sorted(cid for cid, _, _ in analysed)
    assert set(emulator["status"]) == {"pruned"}
    reason = dict(zip(emulator["candidate_id"].astype(int), emulator["reason"]))
    assert {reason[cid] for cid, feasible, _ in analysed if feasible} == {"not emulated: analytically infeasible"}
    assert result.seconds["none_feasible"] >= 0  # timed as every driven stage


def test_a_chain_without_prune_and_emulator_runs_only_the_analytical_stage(tmp_path):
    driven = tuple(s for s in chain.CHAIN if s.name not in ("prune", "emulator", "numerics"))
    spec = load_spec(write_spec(tmp_path, banks="[16]", extra=TOP_1))
    result = sweep_into_store(spec, tmp_path / "r.db", progress=False, chain=driven)
    with Store(tmp_path / "r.db") as store:
        runs = store.runs(spec.name)
    assert set(runs["stage"]) == {"analytical"} and len(runs) == result.evaluated > 1
    assert {"analytical", "record"} <= set(result.seconds) and "emulator" not in result.seconds


def test_a_stage_inserted_after_the_emulator_runs_in_the_workers_per_candidate():
    at = CHAIN.index(chain.NUMERICS)
    check = Stage("check", lambda emulated: emulated, "passes the emulated run on")
    driven = CHAIN[:at] + (check,) + CHAIN[at:]
    assert chain.evaluation(driven) == {"analytical": (chain.ANALYTICAL,),
                                        "emulator": (chain.EMULATOR, check, chain.NUMERICS)}
    assert chain.evaluation(CHAIN) == chain.EVALUATION
    assert chain.evaluation(tuple(s for s in CHAIN if s is not chain.EMULATOR))["emulator"] == ()
