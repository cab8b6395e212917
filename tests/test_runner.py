"""Sweeps end to end through the real SQLite store: baseline first, every candidate recorded,
infeasible ones with reasons, resume without duplicates, acceptance and decisions."""

import itertools
import json

import pytest

from dse.analytical import estimate, summarize
from emulator.chip import chip_from_dict
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping, mapping_from_dict
from dse.records import Store
from dse.runner import load_spec, run_sweep
from dse.frontend import run_pipeline

SPEC = """
[experiment]
name = "{name}"
hypothesis = "Two workers beat one for a 64^3 gemm on goban"

[[acceptance]]
expr = "latency_cycles < baseline_latency_cycles"
prose = "faster than the baseline"

[workload]
recipe = "gemm"
params = {{ m = 64, n = 64, k = 64 }}

[baseline]
chip = "goban"
mapping = {{ workers = 1 }}

[[space]]
name = "banks"
target = "chip.banks.count"
values = {banks}

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 2, 8]

[[objectives]]
metric = "latency_cycles"

[[objectives]]
metric = "private_sram_bytes"

[search]
sampler = "{sampler}"
trials = {trials}
seed = 3
"""


def write_spec(tmp_path, name="gemm-workers", banks="[4, 8, 16]", sampler="auto", trials=10, **kw):
    path = tmp_path / f"{name}.toml"
    path.write_text(SPEC.format(name=name, banks=banks, sampler=sampler, trials=trials) + kw.get("extra", ""))
    return path


def test_grid_sweep_records_every_candidate_and_resumes(tmp_path):
    spec, db = write_spec(tmp_path), tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False)
    with Store(db) as store:
        cands = store.candidates(result.experiment_id)
        assert len(cands) == 10  # baseline (20 banks) + 3 x 3 grid
        first = cands.sort_values("id").iloc[0]
        assert first["origin"] == "baseline" and bool(first["is_baseline"])
        assert cands["hash"].is_unique
        status = {(json.loads(r["config"])["banks"]["count"], json.loads(r["mapping"])["workers"]): r["status"]
                  for r in cands.to_dict("records")}
        # Double-buffered 16x16x16 tiles need 2 x (1 + 1 + 4) = 12 banks: 4 and 8 cannot hold them;
        # 8 workers exceed goban's 4 cores.
        assert status == {(20, 1): "ok", (16, 1): "ok", (16, 2): "ok", (16, 8): "infeasible",
                          **{(b, w): "infeasible" for b in (4, 8) for w in (1, 2, 8)}}
        reasons = cands.set_index("status")["reason"]
        assert all("needs 12 banks" in r or "8 workers but chip goban has 4 cores" in r for r in reasons["infeasible"])

        # The recorded total equals the model evaluated directly on the same candidate.
        table = store.metric_table(result.experiment_id, "analytical")
        base = table[table["candidate_id"] == first["id"]].iloc[0]
        cand = Candidate(load_chip("goban"), Mapping(workers=1))
        # (the model costs the graph after the recipe's steps: int8 products, as the lowering runs them)
        direct = summarize(estimate(run_pipeline("gemm", dict(m=64, n=64, k=64)).graph, [cand]), [cand]).iloc[0]
        assert base["latency_cycles"] == direct["latency_cycles"] > 0
        assert base["private_sram_bytes"] == 20 * 1024 * 16

        exp = store.experiment(result.experiment_id)
        # The sweep proposes; the hypothesis waits for a person's decision.
        assert exp["status"] == "testing" and result.status == "testing" and result.proposed == "confirmed"
        decisions = store.decisions(result.experiment_id)
        assert len(decisions) == 1 and decisions.iloc[0]["verdict"] == "confirmed"
        assert decisions.iloc[0]["kind"] == "proposal" and decisions.iloc[0]["evidence_kinds"] == '["analytical"]'

        n_runs, n_metrics = len(store.runs(result.experiment_id)), len(store.metrics(result.experiment_id))

    again = run_sweep(spec, db, progress=False)
    assert again.evaluated == 0 and again.resumed == 10
    with Store(db) as store:
        assert len(store.candidates(result.experiment_id)) == 10
        assert len(store.runs(result.experiment_id)) == n_runs
        assert len(store.metrics(result.experiment_id)) == n_metrics
        assert len(store.decisions(result.experiment_id)) == 1  # same conclusion, no second proposal


def test_tpe_sampler_proposes_distinct_candidates_and_resumes(tmp_path):
    spec = write_spec(tmp_path, name="tpe", banks="[12, 14, 16, 18, 20, 24, 28, 32]", sampler="tpe", trials=6)
    db = tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False)
    with Store(db) as store:
        cands = store.candidates(result.experiment_id)
        assert sorted(cands["origin"].value_counts().items()) == [("baseline", 1), ("sampler", 6)]
        assert cands["hash"].is_unique
    again = run_sweep(spec, db, progress=False)
    assert again.evaluated == 0
    with Store(db) as store:
        assert len(store.candidates(result.experiment_id)) == 7


def test_a_crashing_stage_is_a_failed_run_and_the_sweep_goes_on(tmp_path, monkeypatch):
    import dse.runner.execution as execution

    real = execution._analytical_batch

    def flaky(graph, cands, *rest):
        if any(c.mapping.workers == 2 for c in cands):
            raise RuntimeError("injected fault")
        return real(graph, cands, *rest)

    monkeypatch.setattr(execution, "_analytical_batch", flaky)
    result = run_sweep(write_spec(tmp_path, banks="[16]"), tmp_path / "r.db", progress=False)
    with Store(tmp_path / "r.db") as store:
        runs = store.runs(result.experiment_id)
        failed = runs[runs["status"] == "failed"]
        assert len(failed) == 1 and "injected fault" in failed.iloc[0]["error"]
        assert "RuntimeError" in failed.iloc[0]["traceback"] and "flaky" in failed.iloc[0]["traceback"]
        assert set(runs["status"]) == {"ok", "failed", "infeasible"}


BAD_SPECS = [
    ('recipe = "gemm"', 'recipe = "no_such_model"', "workload.recipe", "gemm, gru_encoder, lenet5"),
    ('chip = "goban"', 'chip = "gobang"', "baseline.chip", "goban, pebble, poly, toy"),
    ("values = [4, 8, 16]", "values = [4, 0, 16]", "space[0] (banks) -> chip.banks.count", "greater than 0"),
    ('metric = "latency_cycles"', 'metric = "latency"', "objectives[0].metric", "latency_cycles"),
    ('expr = "latency_cycles < baseline_latency_cycles"', 'expr = "latency < 2"', "acceptance[0].expr",
     "unknown name 'latency'"),
    ('expr = "latency_cycles < baseline_latency_cycles"', 'expr = "emulator.latency < 2"', "acceptance[0].expr",
     "emulator.latency is not an emulator metric (emulator metrics: latency_cycles, peak_sram_bytes, dma_bytes, "
     "area_mm2, energy_uj"),
    ("seed = 3", "seed = 3\ncolour = 1", "search.colour", "a key of [search]: batch, max_candidates, max_grid"),
    ('mapping = { workers = 1 }', 'mapping = { workers = 1, dataflow = "xs" }', "baseline.mapping.dataflow", "'ws'"),
]


@pytest.mark.parametrize("old,new,field,allowed", BAD_SPECS)
def test_bad_specs_exit_2_with_file_field_value_and_write_nothing(tmp_path, cli, old, new, field, allowed):
    path = write_spec(tmp_path)
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    db = tmp_path / "store.db"
    code, out, err = cli("sweep", path, "--db", db, "--no-progress")
    assert code == 2, err
    assert err.startswith("dse: error: ") and err.count("\n") == 1
    assert str(path) in err and f"field '{field}'" in err and allowed in err
    assert not db.exists()  # nothing written, not even an empty store


def test_bad_spec_leaves_an_existing_store_untouched(tmp_path, cli):
    good = write_spec(tmp_path, banks="[16]")
    db = tmp_path / "r.db"
    assert cli("sweep", good, "--db", db, "--no-progress")[0] == 0
    bad = write_spec(tmp_path, name="other", banks="[16]")
    bad.write_text(bad.read_text().replace('chip = "goban"', 'chip = "nope"'))
    code, _, err = cli("sweep", bad, "--db", db, "--no-progress")
    assert code == 2 and "baseline.chip" in err
    with Store(db) as store:
        assert list(store.experiments()["name"]) == ["gemm-workers"]
    # Same name, different spec: refused rather than mixing two specs' evidence.
    changed = write_spec(tmp_path, banks="[8, 16]")
    code, _, err = cli("sweep", changed, "--db", db, "--no-progress")
    assert code == 2 and "experiment.name" in err
    # ... saying what changed, field by field
    assert "1 field changed: space[0].values: [16] -> [8, 16]" in err and err.count("\n") == 1
    with Store(db) as store:
        assert len(store.candidates("gemm-workers")) == 4


def test_quickstart_main_job_from_the_cli(tmp_path, run_cli, repo):
    db = tmp_path / "records.db"
    code, out, err = run_cli("sweep", repo / "experiments" / "quickstart.toml", "--db", db, "--no-progress")
    assert code == 0, err
    assert "proposed verdict: confirmed" in out and "hypothesis: testing (people decide" in out
    with Store(db) as store:
        cands = store.candidates("quickstart")
        assert len(cands) >= 20 and (cands["status"] == "infeasible").sum() > 0
        assert cands["reason"][cands["status"] == "infeasible"].str.contains("bank budget").all()
        assert cands.sort_values("id").iloc[0]["origin"] == "baseline"
        # The sweep's summary says each reason once, with its count (the store's grouping).
        infeasible = cands.loc[cands["status"] == "infeasible", "reason"].value_counts()
        for reason, n in infeasible.items():
            assert out.count(reason) == 1 and f"{n} candidate{'s' if n > 1 else ''} infeasible: {reason}" in out
        assert store.reason_groups("quickstart") == sorted(
            [("infeasible", r, int(n)) for r, n in infeasible.items()], key=lambda g: -g[2])
    code, out, err = run_cli("report", "quickstart", "--db", db, "--out", tmp_path / "reports")
    assert code == 0 and out.strip().endswith("quickstart.html")
    assert (tmp_path / "reports" / "quickstart.html").stat().st_size > 10_000
    code, out, _ = run_cli("history", "--db", db)
    assert code == 0 and "quickstart" in out and "testing" in out and "confirmed" in out


def test_spec_loading_resolves_the_baseline(repo):
    spec = load_spec(repo / "experiments" / "quickstart.toml")
    assert spec.baseline_chip.name == "goban" and spec.baseline_mapping.policy == "framework"
    assert spec.grid_size() == 6 * 5 * 3


def test_recorded_hash_is_the_candidate_identity(tmp_path):
    """The driver composes candidate hashes from cached text; they must equal Candidate.hash."""
    result = run_sweep(write_spec(tmp_path, banks="[8, 16]"), tmp_path / "r.db", progress=False)
    with Store(tmp_path / "r.db") as store:
        cands = store.candidates(result.experiment_id)
    from emulator.chip import chip_from_dict
    from dse.mapping import mapping_from_dict

    for c in cands.to_dict("records"):
        cand = Candidate(chip_from_dict(json.loads(c["config"])), mapping_from_dict(json.loads(c["mapping"])))
        assert cand.hash == c["hash"]


def test_the_random_sampler_never_draws_a_point_twice(tmp_path):
    """In a finite space its batches stay full of new points, then come back short."""
    from dse.runner.samplers import Observation, RandomSampler

    spec = load_spec(write_spec(tmp_path, banks="[4, 8, 16]", sampler="random"))  # 3 x 3 = 9 points
    sampler = RandomSampler(spec.space, seed=1)
    sampler.replay([Observation({"banks": 4, "workers": 1}, True)])  # recorded by an earlier run
    first, second = sampler.ask(5), sampler.ask(5)
    drawn = [tuple(sorted(p.params.items())) for p in first + second]
    assert len(first) == 5 and len(second) == 3 and len(set(drawn)) == 8
    assert (("banks", 4), ("workers", 1)) not in drawn and sampler.ask(5) == []


def test_an_interrupt_between_batches_leaves_the_batches_before_it_recorded(tmp_path, monkeypatch):
    """A batch is recorded, finished, as soon as it is evaluated: an interrupt before the
    next one (here in the sampler) leaves it recorded and nothing running."""
    from dse.runner.samplers import RandomSampler

    real, calls = RandomSampler.ask, []

    def ask(self, n):
        calls.append(n)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, n)

    monkeypatch.setattr(RandomSampler, "ask", ask)
    spec = write_spec(tmp_path, name="held", banks="[4, 8, 16]", sampler="random", trials=8,
                      extra="batch = 3\n")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, tmp_path / "r.db", progress=False)
    with Store(tmp_path / "r.db") as store:
        runs = store.runs("held")
        # the baseline and the first sampled batch of 3, all finished with their outcome
        assert len(runs) == 4 and set(runs["status"]) <= {"ok", "infeasible"}
        assert len(store.metrics("held")) > 0
    monkeypatch.setattr(RandomSampler, "ask", real)
    again = run_sweep(spec, tmp_path / "r.db", progress=False)
    assert again.resumed == 4 and again.evaluated == 8 - 3


def test_the_baseline_hand_picked_and_first_batch_share_one_model_call_and_keep_their_records(tmp_path,
                                                                                              monkeypatch):
    """The baseline's batch of one is evaluated in one model call with the hand-picked
    candidates and the first batch (the model's fixed cost once, not three times); each is
    still recorded in its own transaction, in that order, with the figures the model gives
    each candidate alone. The grid's copy of the baseline is a repeat, evaluated once."""
    import dse.runner.execution as execution

    real, calls = execution._analytical_batch, []
    monkeypatch.setattr(execution, "_analytical_batch",
                        lambda graph, cands, *rest: calls.append(len(cands)) or real(graph, cands, *rest))
    hand = '\n[[candidates]]\nset = { "chip.banks.count" = 24, workers = 2 }\nwhy = "more banks, two workers"\n'
    spec = write_spec(tmp_path, name="ahead", banks="[20, 12, 16]", extra="batch = 4\n" + hand)
    result = run_sweep(spec, tmp_path / "r.db", progress=False)
    # grid: 20 banks x 1 worker (the baseline's point), then 20 x 2, 20 x 8, 12 x 1 in the first batch
    assert result.evaluated == 1 + 1 + 8 and calls == [1 + 1 + 3, 4, 1], calls
    with Store(tmp_path / "r.db") as store:
        cands = store.candidates("ahead").sort_values("id")
        runs = store.runs("ahead").set_index("candidate_id")
        table = store.metric_table("ahead", "analytical").set_index("candidate_id")
    assert cands["origin"].tolist() == ["baseline", "hand"] + ["grid"] * 8
    # one transaction a batch: the baseline, the hand-picked, then the grid's batches (the
    # first one's 4 proposals hold the baseline's repeat)
    started = runs.loc[cands["id"], "started_at"].tolist()
    assert [len(list(g)) for _, g in itertools.groupby(started)] == [1, 1, 3, 4, 1]
    graph = run_pipeline("gemm", dict(m=64, n=64, k=64)).graph
    for row in cands.to_dict("records"):
        cand = Candidate(chip_from_dict(json.loads(row["config"])),
                         mapping_from_dict(json.loads(row["mapping"]), "(candidate)"))
        alone = summarize(estimate(graph, [cand]), [cand]).iloc[0]
        if row["status"] == "ok":
            assert table.loc[row["id"], "latency_cycles"] == alone["latency_cycles"] > 0
        else:
            assert not alone["feasible"]


def test_nsga2_batches_stay_full_when_it_proposes_repeats(tmp_path, monkeypatch):
    """Proposals of candidates already evaluated are asked again: every batch holds a whole
    generation of new candidates (one transaction, one evaluation), and NSGA-II is told
    the repeats with their batch, never between two asks of it (50 repeats told at once
    would complete a generation while its new candidates still run)."""
    from dse.runner.samplers import OptunaSampler

    events = []
    real_ask, real_tell = OptunaSampler.ask, OptunaSampler.tell
    monkeypatch.setattr(OptunaSampler, "ask", lambda self, n: events.append("ask") or real_ask(self, n))
    monkeypatch.setattr(OptunaSampler, "tell", lambda self, p, obs, repeat=False: events.append("tell")
                        or real_tell(self, p, obs, repeat))
    banks = "[" + ", ".join(str(b) for b in range(4, 33)) + "]"
    rows = '\n[[space]]\nname = "rows"\ntarget = "chip.banks.rows"\nvalues = [128, 256, 512, 1024]\n'
    spec = write_spec(tmp_path, name="nsga", banks=banks, sampler="nsga2", trials=100, extra=rows)
    result = run_sweep(spec, tmp_path / "r.db", progress=False)
    assert result.evaluated == 101 and not result.stopped_early
    with Store(tmp_path / "r.db") as store:
        runs = store.runs("nsga")
        assert store.candidates("nsga")["hash"].is_unique
    # A batch's runs are started together, with one timestamp.
    assert runs.groupby("started_at").size().tolist() == [1, 50, 50]
    # Each batch: its asks (several rounds when it repeated itself), then all its tells.
    phases = [e for i, e in enumerate(events) if i == 0 or e != events[i - 1]]
    assert phases == ["ask", "tell", "ask", "tell"] and events.count("ask") > 2
    assert events.count("tell") > 100  # the repeats were told too


def test_nsga2_study_is_rebuilt_from_its_parent_population_and_stays_bounded(tmp_path):
    """Optuna scans every trial on every ask: past NSGA2_COMPACT_AT trials the study is
    rebuilt as its parent population (what NSGA-II breeds from), the same individuals,
    so the sampler's cost per trial stays flat."""
    import optuna

    from dse.runner.samplers import NSGA2_COMPACT_AT, NSGA2_POPULATION, Observation, OptunaSampler

    banks = "[" + ", ".join(str(b) for b in range(4, 65)) + "]"
    sampler = OptunaSampler(load_spec(write_spec(tmp_path, name="nsga", banks=banks, sampler="nsga2")), "nsga2")

    def individuals(trials) -> set:
        return {(tuple(sorted(t.params.items())), tuple(t.values)) for t in trials}

    sizes, checked = [], 0
    for _ in range(12):
        compactions = sampler.compactions
        before = individuals(sampler.parent_population()[1])
        proposals = sampler.ask(NSGA2_POPULATION)
        if sampler.compactions > compactions:  # rebuilt on this ask: its parents are the same individuals
            generation, parents = sampler.parent_population()
            assert generation == 0 and individuals(parents) == before and len(before) > 0
            checked += 1
        sizes.append(len(sampler.study.get_trials(deepcopy=False)))
        for i, p in enumerate(proposals):
            latency = float(p.params["banks"] * 1000 + p.params["workers"])
            totals = {"latency_cycles": latency, "private_sram_bytes": 1e6 / latency}
            sampler.tell(p, Observation(p.params, p.params["workers"] != 8, totals), repeat=i % 5 == 0)
    assert checked >= 2 and max(sizes) <= NSGA2_COMPACT_AT + NSGA2_POPULATION
    # a repeat is no member of a generation: only distinct told candidates fill one
    failed = sampler.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))
    assert failed and all("nsga2:generation" in t.system_attrs for t in failed)


def test_a_sampler_that_only_repeats_itself_stops_the_sweep(tmp_path):
    spec = write_spec(tmp_path, name="tiny", banks="[8, 16]", sampler="tpe", trials=30)
    result = run_sweep(spec, tmp_path / "r.db", progress=False)
    assert result.stopped_early == "the sampler proposes only candidates already evaluated"
    with Store(tmp_path / "r.db") as store:
        cands = store.candidates("tiny")
    assert cands["hash"].is_unique and len(cands) <= 1 + 2 * 3


def test_the_stage_chain_is_declared_in_order_and_keys_the_sweeps_times(tmp_path):
    from dse.runner import chain

    assert [s.name for s in chain.CHAIN] == ["capture", "frontend", "plan", "analytical", "prune", "emulator",
                                             "numerics", "record"]
    assert all(callable(s.run) and s.doc for s in chain.CHAIN)
    assert {s for stages in chain.EVALUATION.values() for s in stages} <= set(chain.CHAIN)
    result = run_sweep(write_spec(tmp_path, banks="[16]"), tmp_path / "r.db", progress=False)
    # Every time but the sampler's (the driver's own) is a stage's.
    assert set(result.seconds) - {"sampler"} <= {s.name for s in chain.CHAIN}
    assert {"analytical", "record", "emulator"} <= set(result.seconds)


def test_the_prune_stage_is_a_plain_function_of_the_analytical_results():
    from dse.runner.chain import PRUNE

    analysed = [(1, True, {"latency_cycles": 30.0}), (2, True, {"latency_cycles": 10.0}),
                (3, False, {}), (4, True, {"latency_cycles": 20.0})]
    pruning = PRUNE.run(analysed, {4}, "top_k", 2, "latency_cycles", "minimize")
    assert pruning.emulate == [2]  # 4 is in the top 2 but emulated already
    assert pruning.pruned == [(1, "not emulated: rank 3 of 3 feasible by the analytical latency_cycles, "
                                  "outside the top 2"), (3, "not emulated: analytically infeasible")]
    assert PRUNE.run(analysed, set(), "all", 2, "latency_cycles", "maximize").emulate == [1, 2, 4]


def test_a_spec_built_in_python_is_validated_as_a_file_is(tmp_path):
    import tomllib

    from dse.errors import InputError
    from dse.runner import SpecModel, build_spec

    path = write_spec(tmp_path, name="py", banks="[16, 20]")
    data = tomllib.loads(path.read_text())
    built, loaded = build_spec(data), load_spec(path)
    assert built.model == loaded.model and built.grid_size() == loaded.grid_size() == 6
    assert build_spec(SpecModel.model_validate(data)).model == loaded.model
    # Bad input: one line naming where the spec came from, the field, the value, what is allowed.
    for bad, field in (({**data, "search": {"sampler": "annealing"}}, "search.sampler"),
                       ({**data, "objectives": [{"metric": "speed"}]}, "objectives"),
                       ({**data, "experiment": {**data["experiment"], "limitations": None}}, "(spec)")):
        with pytest.raises(InputError) as info:
            build_spec(bad, where="notebook cell 3")
        assert str(info.value).startswith("notebook cell 3: field") and field in str(info.value)
        assert "\n" not in str(info.value) and info.value.exit_code == 2
    # Kept as the TOML it would be written in (what the store records); the same dict, the
    # same text, so a rerun resumes. (notebooks/01 sweeps a built spec: tests/test_notebook.py)
    assert tomllib.loads(built.text) == data and build_spec(data).hash == built.hash
