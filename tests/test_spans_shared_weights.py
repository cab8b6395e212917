"""Temporal spans reading one shared copy of the weights (mapping.partition = "spans" with
mapping.weights = "shared", #19): the whole stack's B tiles loaded into the tile's shared
memory once, each weight in banks of its own, one BARRIER, then the spans; a stack too large
for the banks at once loaded in waves, each in the banks the weights before it free once
every span is past their ops. DMA bytes by hand on a tiny conv1d stack, the model against the
emulator, bit-exact numerics, the stack that does not fit in both consumers' words, and a
sweep that records it."""

import json

import pandas as pd
import pytest

from emulator import Barrier, Mvin

from dse.analytical import estimate, summarize
from dse.chips import load_chip
from dse.lower.spans import lower_spans
from dse.mapping import Candidate, Mapping, mapping_from_dict
from dse.numerics import emulate_graph
from dse.numerics.run import prepare_recipe
from dse.plan.spans import shared_stack, span_graph, span_partition
from dse.records import Store
from dse.runner import run_sweep

# conv_in (3 taps x 16 mels -> 16), three dilated 3-tap 16 -> 16 convs, a 1x1 16 -> 16
PARAMS = {"length": 50, "mels": 16, "channels": 16, "out_channels": 16}
# their weights as GEMM B, int8, each dimension a multiple of 16 already: 4 x 48 x 16 + 16 x 16
STACK_B_BYTES = 4 * 48 * 16 + 16 * 16  # 3,328


@pytest.fixture(scope="module")
def tconv():
    return prepare_recipe("temporal_conv", PARAMS)


def run(prep, cand):
    rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
    model = summarize(estimate(prep.graph, [cand]), [cand]).iloc[0]
    return rep, model


def test_spans_with_shared_weights_is_a_knob_of_its_own_identity():
    mapping = mapping_from_dict({"workers": 4, "partition": "spans", "weights": "shared"}, "spec.toml")
    chip = load_chip("goban")
    assert Candidate(chip, mapping).hash != Candidate(chip, Mapping(workers=4, partition="spans")).hash


def test_the_stack_is_loaded_once_then_one_barrier_then_the_spans(tconv):
    chip = load_chip("goban")
    mapping = Mapping(workers=4, partition="spans", weights="shared")
    staged, spans, parts, _ = lower_spans(tconv.graph, chip, mapping, tconv.inputs, 4)
    sm = chip.shared_memory
    for prog in staged.program.cores:
        first = next(i for i, ins in enumerate(prog) if isinstance(ins, Barrier))
        # shared-bank loads only before the first BARRIER, none after; two BARRIERs in all
        assert all(isinstance(ins, Mvin) and ins.bank >= sm.first_bank_id for ins in prog[:first])
        assert not any(isinstance(ins, Mvin) and ins.bank >= sm.first_bank_id for ins in prog[first + 1:])
        assert sum(isinstance(ins, Barrier) for ins in prog) == 2
    loads = [ins for prog in staged.program.cores for ins in prog if isinstance(ins, Mvin)
             and ins.bank >= sm.first_bank_id]
    # every weight's B tiles once, in banks of their own (one tile a bank, none shared)
    assert sum(ins.iter * 16 for ins in loads) == STACK_B_BYTES
    assert len({ins.bank for ins in loads}) == len(loads)
    stack = shared_stack([span_graph(tconv.graph, tconv.graph.outputs[0], s)[0] for s in spans], chip,
                         mapping.model_copy(update={"workers": 1}))
    bases = [w.base for w in stack.weights.values()]
    assert bases == sorted(bases) and bases[0] == 0 and stack.banks == len(loads)
    # every span reads the same blocking of each weight (the stack's)
    for low in staged.stages:
        tiles = {o.name: o.tile for o in low.ops if o.how == "matrix"}
        for name, w in stack.weights.items():
            assert tiles[name][1:] == w.tile


def test_one_shared_copy_saves_three_workers_loads_bit_exact_and_modelled(tconv):
    """Per worker, each of the 4 spans loads all 3,328 bytes of the stack's B once (one output
    column block, so B stays resident); shared, the tile loads them once: 3 x 3,328 bytes
    less. The model's DMA bytes, shared bytes and peak SRAM equal the emulator's, its cycles
    within 2%, and the integers bit for bit the reference's."""
    chip = load_chip("goban")
    got = {}
    for weights in ("per_worker", "shared"):
        cand = Candidate(chip, Mapping(workers=4, partition="spans", weights=weights))
        rep, model = run(tconv, cand)
        assert rep.feasible and model["feasible"], (rep.reason, model["reason"])
        assert rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
        dma = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
        assert model["dma_bytes"] == dma, weights
        assert model["shared_sram_bytes"] == rep.counters["shared_bytes_used"], weights
        assert model["peak_sram_bytes"] == rep.peak_sram_bytes, weights
        assert abs(model["latency_cycles"] / rep.cycles - 1) < 0.02, (weights, model["latency_cycles"], rep.cycles)
        got[weights] = rep, dma
    (per, dma_per), (shared, dma_shared) = got["per_worker"], got["shared"]
    assert dma_per - dma_shared == 3 * STACK_B_BYTES
    bank = chip.shared_memory.rows * chip.shared_memory.row_bytes
    assert per.counters["shared_bytes_used"] == 0 and shared.counters["shared_bytes_used"] % bank == 0
    assert shared.counters["shared_bytes_used"] >= 5 * bank  # five weights, a bank each at least
    assert sum(shared.counters["shared_channel_conflicts"]) == 0


def test_candidates_costed_together_get_their_own_figures(tconv):
    """A shared stack is costed per candidate, the others together: one estimate over all of
    them gives each the figures it gets alone."""
    chip = load_chip("goban")
    cands = [Candidate(chip, Mapping(workers=4, partition="spans", weights="shared")),
             Candidate(chip, Mapping(workers=4, partition="spans")),
             Candidate(load_chip("goban", {"shared_memory.banks": 3}),
                       Mapping(workers=4, partition="spans", weights="shared")),
             Candidate(chip, Mapping(workers=2, partition="spans", weights="shared")),
             Candidate(load_chip("goban", {"shared_memory.rows": 8}),
                       Mapping(workers=4, partition="spans", weights="shared"))]
    together = summarize(estimate(tconv.graph, cands), cands)
    for i, cand in enumerate(cands):
        alone = summarize(estimate(tconv.graph, [cand]), [cand]).iloc[0]
        for field in ("feasible", "reason", "latency_cycles", "dma_bytes", "shared_sram_bytes", "peak_sram_bytes"):
            a, b = together.iloc[i][field], alone[field]
            assert a == b or (pd.isna(a) and pd.isna(b)), (i, field, a, b)  # an infeasible latency is NaN
    assert list(together["feasible"]) == [True, True, True, True, False]


def test_a_stack_too_large_at_once_is_loaded_in_waves_in_the_banks_freed(tconv):
    """3 shared banks: conv_in, conv 1 and conv 2 take banks 0-2 (one 16 x 48 B tile each);
    conv 3 does not fit above them, so after a BARRIER before conv 3 (every span past conv 2,
    the last reader of those banks) conv 3 and the 1x1 projection are loaded into banks 0-1,
    then one more BARRIER. Once at a time, every weight is still loaded once: the same 3 x
    3,328 bytes saved against a copy per worker, 3 banks held instead of 5, bit-exact, the
    model within 2% (the stack was infeasible when it had to fit at once)."""
    chip = load_chip("goban", {"shared_memory.banks": 3})
    mapping = Mapping(workers=4, partition="spans", weights="shared")
    staged, _, _, _ = lower_spans(tconv.graph, chip, mapping, tconv.inputs, 4)
    sm = chip.shared_memory
    waves: list[list[int]] = [[], [], [], [], []]  # shared banks loaded between BARRIERs
    for prog in staged.program.cores:
        seen = 0
        for ins in prog:
            if isinstance(ins, Barrier):
                seen += 1
            elif isinstance(ins, Mvin) and ins.bank >= sm.first_bank_id:
                waves[seen].append(ins.bank - sm.first_bank_id)
        assert seen == 4  # after wave 0; before and after wave 1; the end
    assert [sorted(w) for w in waves] == [[0, 1, 2], [], [0, 1], [], []]
    loads = [ins for prog in staged.program.cores for ins in prog if isinstance(ins, Mvin)
             and ins.bank >= sm.first_bank_id]
    assert sum(ins.iter * 16 for ins in loads) == STACK_B_BYTES
    got = {}
    for weights in ("per_worker", "shared"):
        rep, model = run(tconv, Candidate(chip, mapping.model_copy(update={"weights": weights})))
        assert rep.feasible and model["feasible"], (rep.reason, model["reason"])
        assert rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
        got[weights] = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
        assert model["dma_bytes"] == got[weights], weights
        assert model["shared_sram_bytes"] == rep.counters["shared_bytes_used"], weights
        assert abs(model["latency_cycles"] / rep.cycles - 1) < 0.02, (weights, model["latency_cycles"], rep.cycles)
    assert got["per_worker"] - got["shared"] == 3 * STACK_B_BYTES
    assert rep.counters["shared_bytes_used"] == 3 * sm.rows * sm.row_bytes
    # one bank: five waves, a weight each
    one = load_chip("goban", {"shared_memory.banks": 1})
    rep, model = run(tconv, Candidate(one, mapping))
    assert rep.verdict.integer_bit_exact and abs(model["latency_cycles"] / rep.cycles - 1) < 0.02
    staged, _, _, _ = lower_spans(tconv.graph, one, mapping, tconv.inputs, 4)
    assert [sum(isinstance(ins, Barrier) for ins in prog) for prog in staged.program.cores] == [2 + 2 * 4] * 4


def test_two_tiles_of_cores_each_load_their_own_copy(tconv):
    chip = load_chip("goban", {"cores.count": 8})
    dma = {}
    for weights in ("per_worker", "shared"):
        cand = Candidate(chip, Mapping(workers=8, partition="spans", weights=weights))
        rep, model = run(tconv, cand)
        assert rep.verdict.integer_bit_exact, rep.verdict
        dma[weights] = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
        assert model["dma_bytes"] == dma[weights]
        assert abs(model["latency_cycles"] / rep.cycles - 1) < 0.02, (weights, model["latency_cycles"], rep.cycles)
    assert len(span_partition(50, 8)[-1]) > 0  # every worker has a span: 8 copies against 2
    assert dma["per_worker"] - dma["shared"] == (8 - 2) * STACK_B_BYTES


@pytest.mark.parametrize("chip,overrides,words", [
    ("toy", {}, "mapping.weights = shared needs shared memory; chip toy has none"),
    ("goban", {"shared_memory.rows": 8},
     # a shared bank of 8 x 16 bytes holds no 16 x 16 B tile: conv_in fits in no wave
     "op conv1d_acc: matmul M=40 N=16 K=48: no legal tile among 4; smallest tile 16x16x16: the weight's 3 B "
     "tiles of 256 bytes need 3 shared banks of >= 256 bytes; shared memory has 64 of 128"),
])
def test_a_stack_that_does_not_fit_is_infeasible_in_the_same_words(tconv, chip, overrides, words):
    workers = 1 if chip == "toy" else 4
    cand = Candidate(load_chip(chip, overrides), Mapping(workers=workers, partition="spans", weights="shared"))
    rep, model = run(tconv, cand)
    assert not rep.feasible and not model["feasible"]
    assert words in rep.reason, rep.reason
    assert rep.reason.startswith("partition = spans with weights = shared: op ")
    assert model["reason"] == rep.reason


def test_the_spec_records_the_saving_and_the_stack_that_does_not_fit(tmp_path, repo):
    spec = (repo / "experiments" / "spans_weights.toml").read_text()
    params = ", ".join(f"{k} = {v}" for k, v in PARAMS.items())
    spec = spec.replace('recipe = "temporal_conv"', f'recipe = "temporal_conv"\nparams = {{ {params} }}')
    path = tmp_path / "spans_weights.toml"
    path.write_text(spec)
    db = tmp_path / "r.db"
    result = run_sweep(path, db, progress=False)
    with Store(db) as store:
        cands = store.candidates("spans_weights").set_index("hash")
        model = store.metric_table(result.experiment_id, "analytical").set_index("hash")
        emu = store.metric_table(result.experiment_id, "emulator_cycles").set_index("hash")
        numerics = store.metric_table(result.experiment_id, "numerics").set_index("hash")
    by = {}
    for h, row in cands.iterrows():
        chip = json.loads(row["config"]) if "config" in row else {}
        m = json.loads(row["mapping"])
        sm = chip.get("shared_memory", {})
        key = "waves" if sm.get("banks") == 4 else "tiny banks" if sm.get("rows") == 8 else None
        by[key or m.get("partition", "tiles") + " " + m.get("weights", "per_worker")] = h
    assert set(by) == {"spans per_worker", "spans shared", "waves", "tiny banks", "tiles shared"}
    by["per_worker"], by["shared"] = by["spans per_worker"], by["spans shared"]
    for w in ("per_worker", "shared", "waves", "tiles shared"):
        assert emu.loc[by[w], "status"] == "ok" and emu.loc[by[w], "dma_bytes"] == model.loc[by[w], "dma_bytes"]
        assert numerics.loc[by[w], "passed"] == 1
    assert emu.loc[by["per_worker"], "dma_bytes"] - emu.loc[by["shared"], "dma_bytes"] == 3 * STACK_B_BYTES
    # in two waves, every weight still loaded once: the same saving
    assert emu.loc[by["per_worker"], "dma_bytes"] - emu.loc[by["waves"], "dma_bytes"] == 3 * STACK_B_BYTES
    assert model.loc[by["tiny banks"], "status"] == "infeasible"
    assert "shared memory has 64 of 128" in model.loc[by["tiny banks"], "reason"]
