"""One copy of the read-only weights (mapping.weights = "shared", #19): the weight's B tiles
loaded once per tile of cores into its shared memory, read there by every worker's matrix
Ball. The knob's identity, its DRAM traffic and SRAM by hand, the model against the
emulator, bit-exact results, the infeasible cases in both consumers' words, the emulator's
shared-channel counter, and a sweep over the knob."""

import json

import numpy as np
import pytest

import emulator
from emulator import Barrier, Mvin, Program, Region

from dse.analytical import estimate, summarize
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.numerics import emulate_graph
from dse.numerics.run import prepare_recipe
from dse.plan import shared_loads
from dse.records import Store
from dse.runner import run_sweep


@pytest.fixture(scope="module")
def gemm():
    return prepare_recipe("gemm", {"m": 64, "n": 32, "k": 32})


def run(prep, cand):
    rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
    model = summarize(estimate(prep.graph, [cand]), [cand]).iloc[0]
    return rep, model


def test_per_worker_is_the_default_and_keeps_the_identity():
    chip = load_chip("goban")
    default = Candidate(chip, Mapping(workers=4))
    assert Candidate(chip, Mapping(workers=4, weights="per_worker")).hash == default.hash
    assert "weights" not in default.mapping_dict
    shared = Candidate(chip, Mapping(workers=4, weights="shared"))
    assert shared.hash != default.hash and shared.mapping_dict["weights"] == "shared"


def test_loads_are_dealt_to_each_tile_of_cores():
    # 6 workers on tiles of 4: tile 0 has workers 0-3, tile 1 workers 4-5; each tile its own copy
    assert shared_loads(6, 4, 5) == [[0, 4], [1], [2], [3], [0, 2, 4], [1, 3]]
    assert shared_loads(1, 4, 3) == [[0, 1, 2]]


def test_one_shared_copy_saves_the_other_workers_loads_and_stays_bit_exact(gemm):
    chip = load_chip("goban")
    out = {}
    for weights in ("per_worker", "shared"):
        cand = Candidate(chip, Mapping(workers=4, weights=weights))
        rep, model = run(gemm, cand)
        assert rep.feasible, rep.reason
        assert rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
        dma = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
        assert model["dma_bytes"] == dma
        assert model["peak_sram_bytes"] == rep.peak_sram_bytes
        assert model["shared_sram_bytes"] == rep.counters["shared_bytes_used"]
        assert abs(model["latency_cycles"] / rep.cycles - 1) < 0.02, (weights, model["latency_cycles"], rep.cycles)
        out[weights] = rep, dma
    (per, dma_per), (shared, dma_shared) = out["per_worker"], out["shared"]
    # B is 32 x 32 int8 (1024 bytes): four workers each load it, or the tile loads it once
    assert dma_per - dma_shared == 3 * 32 * 32
    # no private B buffers (2 x one bank of 1024 rows x 16 bytes), and the shared banks held
    # whole: the tile the plan picked has 32 / tn x 32 / tk B tiles
    assert per.peak_sram_bytes - shared.peak_sram_bytes == 2 * 1024 * 16
    (tm, tn, tk), = [o["tile"] for o in shared.ops if o["how"] == "matrix"]
    assert shared.counters["shared_bytes_used"] == (32 // tn) * (32 // tk) * 16384 * 16
    assert per.counters["shared_bytes_used"] == 0
    assert sum(shared.counters["shared_channel_conflicts"]) == 0  # 28 channels: 4 workers never wait


@pytest.mark.parametrize("chip,overrides,words", [
    ("toy", {}, "mapping.weights = shared needs shared memory; chip toy has none"),
    ("goban", {"shared_memory.banks": 1, "shared_memory.rows": 16},
     "B tiles of 256 bytes need 4 shared banks of >= 256 bytes; shared memory has 1 of 256"),
])
def test_no_shared_memory_or_too_little_is_infeasible_in_the_same_words(gemm, chip, overrides, words):
    cand = Candidate(load_chip(chip, overrides), Mapping(weights="shared"))
    rep, model = run(gemm, cand)
    assert not rep.feasible and not model["feasible"]
    assert words in rep.reason and model["reason"] == rep.reason


def test_shared_channels_delay_transfers_when_too_few_and_are_counted():
    def conflicts(channels):
        chip = load_chip("goban", {"shared_memory.channels": channels})
        # two cores of one tile each load 64 lines into shared banks of their own at once
        cores = [[Mvin(32 + c, 0, 64, 0), Barrier()] for c in range(2)]
        result = emulator.run(Program(cores, {"dram": Region(0, (1024,), "uint8")}, {}, dram_bytes=1024), chip,
                              np.zeros(1024, np.uint8))
        return [result.counters.value("shared_channel_conflicts", core=c) for c in range(2)], result.cycles

    (wide, fast), (narrow, slow) = conflicts(28), conflicts(1)
    assert wide == [0, 0] and sorted(narrow) == [0, 1] and slow > fast


def test_a_sweep_over_the_knob_records_less_dram_traffic_for_the_shared_copy(tmp_path, repo):
    spec = (repo / "experiments" / "shared_weights.toml").read_text()
    spec = spec.replace('recipe = "mlp"', 'recipe = "gemm"\nparams = { m = 64, n = 32, k = 32 }')
    path = tmp_path / "shared_weights.toml"
    path.write_text(spec)
    db = tmp_path / "r.db"
    result = run_sweep(path, db, progress=False)
    with Store(db) as store:
        cands = store.candidates("shared_weights")
        model = store.metric_table(result.experiment_id, "analytical").set_index("hash")
        emu = store.metric_table(result.experiment_id, "emulator_cycles").set_index("hash")
        numerics = store.metric_table(result.experiment_id, "numerics").set_index("hash")
    weights = {h: json.loads(m).get("weights", "per_worker") for h, m in zip(cands["hash"], cands["mapping"])}
    by = {w: h for h, w in weights.items()}
    assert set(by) == {"per_worker", "shared"}
    for h in by.values():
        assert emu.loc[h, "status"] == "ok" and numerics.loc[h, "passed"] == 1
        assert emu.loc[h, "dma_bytes"] == model.loc[h, "dma_bytes"]
    assert emu.loc[by["per_worker"], "dma_bytes"] - emu.loc[by["shared"], "dma_bytes"] == 3 * 32 * 32
    assert emu.loc[by["shared"], "shared_sram_bytes"] > 0 == emu.loc[by["per_worker"], "shared_sram_bytes"]


def test_a_bad_weights_value_is_exit_2(tmp_path, repo, cli):
    spec = (repo / "experiments" / "shared_weights.toml").read_text().replace('"per_worker", "shared"',
                                                                             '"per_worker", "everywhere"')
    path = tmp_path / "bad.toml"
    path.write_text(spec)
    db = tmp_path / "r.db"
    code, _, err = cli("sweep", path, "--db", db, "--no-progress")
    assert code == 2 and str(path) in err and "mapping.weights" in err and "everywhere" in err and "'shared'" in err
    assert not db.exists()


def test_each_tile_of_cores_with_work_loads_its_own_copy():
    prep = prepare_recipe("gemm", {"m": 128, "n": 64, "k": 64})
    chip = load_chip("goban", {"cores.count": 8})  # two tiles of 4 cores
    dma = {}
    for weights in ("per_worker", "shared"):
        cand = Candidate(chip, Mapping(workers=8, weights=weights))
        rep, model = run(prep, cand)
        assert rep.verdict.integer_bit_exact
        (tile,) = {tuple(o["tile"]) for o in rep.ops if o["how"] == "matrix"}
        assert tile == (16, 16, 64)  # 8 row blocks: every worker computes one
        dma[weights] = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
        assert model["dma_bytes"] == dma[weights]
        assert abs(model["latency_cycles"] / rep.cycles - 1) < 0.02, (weights, model["latency_cycles"], rep.cycles)
    # B is 64 x 64 int8: eight workers' copies against one per tile of cores
    assert dma["per_worker"] - dma["shared"] == (8 - 2) * 64 * 64
