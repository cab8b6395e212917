"""One shared copy of the weights (``mapping.weights = "shared"``, #19) with placements whose
parts run at once on one tile: a pipeline's ranges (`range_regions`) and "phase"'s stages
(`stage_regions`) each keep their B tiles in a region of the tile's shared banks of their
own, stacked from bank 0 up, clear of the hand-offs' A banks (from the top down). Where the
regions picked alone do not fit, a part's tiles are picked again within the banks the
others leave (or all in shares), then the hand-offs close; too few banks even so: one reason
from the lowering and the model. The regions by hand; bit-exact, the model against the
emulator, DMA and shared bytes alike, on grids of shared banks."""

from __future__ import annotations

import pytest

from agreement import TINY_LLAMA, emulated_and_modelled, prepared
from dse.analytical.placed import estimate_layers, estimate_placed
from dse.chips import load_chip
from dse.mapping import Candidate, CandidateArrays, Mapping
from dse.numerics.run import StageWork, emulate_graph, emulate_placed, prepare_recipe
from dse.plan.graph_plan import plan_graph
from dse.plan.placement import (handoff_banks, handoffs, place, range_candidate, range_regions, schedule,
                                stage_regions)

SHARED_BANK = 16384 * 16  # poly's shared bank: rows x row_bytes


@pytest.fixture(scope="module")
def llama():
    return prepared("llama_prefill", TINY_LLAMA)


@pytest.fixture(scope="module")
def stages(llama):
    decode = prepare_recipe("llama_decode", {**{k: v for k, v in TINY_LLAMA.items() if k != "seq"}, "past": 15})
    return [StageWork(role, p.graph, p.inputs, p.expected, p.tolerance, p.reference_kind)
            for role, p in (("prefill", llama), ("decode", decode))]


def pipeline(banks: int, weights: str = "shared", cut: int = 58, requests: int = 2) -> Candidate:
    """Tiny llama prefill cut before op `cut` on poly's groups (prefill: ops before it, 3 cores;
    decode: the rest, 2 cores), `requests` overlapped, `banks` shared banks."""
    return Candidate(load_chip("poly", {"shared_memory.banks": banks}),
                     Mapping(split="cols", placement="pipeline", cuts=(cut,), requests=requests, weights=weights))


def plan_regions(prep, cand):
    """The candidate's hand-off banks and its ranges' weight regions, as the plan decides them."""
    plans = plan_graph(prep.graph, cand.mapping.fusion, cand.mapping.channels_last)
    lay, reason = schedule(cand.chip, cand.mapping, len(plans))
    assert not reason, reason
    params = [CandidateArrays.from_candidates([range_candidate(p, cand.mapping)]) for p in lay.places]
    held = handoff_banks(plans, lay.ranges, handoffs(plans, lay.ranges), lay.handoff_sets, lay.overlap, params)
    (got,) = range_regions(plans, lay.ranges, held, lay.handoff_sets, lay.overlap, params,
                           [[p.role for p in lay.places]], [cand.chip.name])
    return held[0], got


def test_a_pipelines_ranges_keep_their_weights_in_regions_by_hand(llama):
    # range 0 (prefill, ops 0-57): q [16 x 32] @ [32 x 64] picks tn 16, tk 32: 4 B tiles; k and v
    # [32 x 32] 2 each: its region is 4 banks, from bank 0. Range 1 (decode, ops 58-91): o 2, the
    # FFN's gate and up [1 x 32] @ [32 x 704] at tn 32: 22 each, down 2, the head 4: 22 banks,
    # from bank 4. o's A (range 0 hands it mul's output) 1 tile x 2 sets from the top: 28 banks
    for banks in (64, 28):
        held, regions = plan_regions(llama, pipeline(banks))
        assert (held.bases, held.banks) == ({"linear_3_acc": 0}, {"linear_3_acc": 2})
        assert (regions.bases, regions.banks, regions.picked, regions.reason) == ([0, 4], [4, 22], [0, 0], "")
    # 27: 4 + 22 + 2 do not fit; the largest region (decode's) is picked again within the 21
    # banks the other region and the hand-off leave (b_shared_base 6): the gate and up at tn
    # 176, 4 B tiles: 4 + 4 + 2 = 10 banks
    held, regions = plan_regions(llama, pipeline(27))
    assert (regions.bases, regions.banks, regions.picked) == ([0, 4], [4, 4], [0, 6]) and held.banks["linear_3_acc"] == 2
    # 8: picked alone 4 and 4 (22 B tiles do not fit 8), + 2: prefill's (the first of the two
    # largest) again within 8 - 6 = 2 banks (q at tn 32), 2 + 4 + 2 = 8
    assert plan_regions(llama, pipeline(8))[1].banks == [2, 4] and plan_regions(llama, pipeline(8))[1].picked == [6, 0]
    # 4: 4 and 4 + 2; neither fits beside the other: each in a share of the 2 banks left, 1
    # bank (picked with base 3: q at tn 64, the FFN at tn 704)
    held, regions = plan_regions(llama, pipeline(4))
    assert (regions.bases, regions.banks, regions.picked, held.banks) == ([0, 1], [1, 1], [3, 3], {"linear_3_acc": 2})
    # cut before q: range 0 has no weight (region 0 banks), range 1 all of them (the FFN's 22
    # the most); q, k and v each hand 1 A tile x 2 sets, in order from the top
    held, regions = plan_regions(llama, pipeline(64, cut=10))
    assert held.bases == {"linear_acc": 0, "linear_1_acc": 2, "linear_2_acc": 4}
    assert (regions.bases, regions.banks) == ([0, 0], [0, 22])
    # cut before the scores (op 42) on 4 banks: the scores' A (2 heads' tiles x 2 sets, 4 banks)
    # leaves no room for the weights: the hand-off closes, the regions get the banks
    held, regions = plan_regions(llama, pipeline(4, cut=42))
    assert (held.banks, held.closed, regions.banks) == ({"matmul_acc": 0}, {"matmul_acc": ""}, [2, 2])
    # ranges one after another ("layers") each load from bank 0 up after the BARRIER between
    layers = Candidate(load_chip("poly"), Mapping(split="cols", placement="layers", cuts=(58,), weights="shared"))
    assert plan_regions(llama, layers)[1].bases == [0, 0]


@pytest.mark.parametrize("banks, weights, cut, requests, shared_banks", [
    (64, "shared", 58, 2, 4 + 22 + 2),
    (28, "shared", 58, 3, 4 + 22 + 2),  # exactly the regions and the hand-off
    (27, "shared", 58, 2, 4 + 4 + 2),
    (8, "shared", 58, 2, 2 + 4 + 2),
    (4, "shared", 58, 2, 1 + 1 + 2),
    (2, "shared", 58, 2, 1 + 1),  # o's A does not fit beside its B: no hand-off
    (4, "shared", 42, 2, 2 + 2),  # the hand-off closed
    (64, "shared", 10, 3, 22 + 3 * 2),
    (64, "per_worker", 58, 2, 2),  # the hand-off's two sets only
    (4, "per_worker", 58, 2, 2),
    (64, "per_worker", 10, 3, 3 * 2),
])
def test_a_pipeline_with_shared_weights_is_bit_exact_and_modelled(llama, banks, weights, cut, requests,
                                                                  shared_banks):
    cand = pipeline(banks, weights, cut, requests)
    rep, model, _ = emulated_and_modelled(llama, cand)  # bit-exact, within 2%
    dma = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
    assert dma == model["dma_bytes"]
    assert rep.counters["shared_bytes_used"] == model["shared_sram_bytes"] == shared_banks * SHARED_BANK
    _, _, notes = estimate_layers(llama.graph, [cand])
    assert "; ".join(h[3] for h in rep.handoffs) == notes[0]  # the lowering's words, the model's words
    if cut == 42 and banks == 4:
        assert notes[0].startswith("reshape_int8 via DRAM: the ranges' regions of shared weights "
                                   "(mapping.weights = shared, ranges at once) leave no banks for the hand-offs' A tiles")


def test_one_shared_copy_takes_fewer_cycles_than_a_copy_per_worker(llama):
    shared = emulated_and_modelled(llama, pipeline(64))[0]
    per_worker = emulated_and_modelled(llama, pipeline(64, "per_worker"))[0]
    assert shared.cycles < per_worker.cycles


def test_the_lowering_loads_each_ranges_weights_into_its_region(llama):
    # 28 shared banks (ids 32-59): the prefill cores load q, k and v's B tiles into banks 0-3
    # of their region and o's A tiles (the hand-off, sets 0 and 1) into the top two, 27 and 26;
    # the decode cores load their weights into banks 4-25 only
    from emulator import Mvin

    from dse.lower import lower_layers
    from dse.numerics.run import request_inputs

    low = lower_layers(llama.graph, pipeline(28), request_inputs(llama.inputs, 2))
    first = 32
    banks = [{i.bank - first for i in core if isinstance(i, Mvin) and i.bank >= first} for core in low.program.cores]
    assert banks[0] | banks[1] | banks[2] == {0, 1, 2, 3, 26, 27}
    assert banks[3] | banks[4] == set(range(4, 26))


def test_too_few_shared_banks_is_one_reason_from_lowering_and_model(llama):
    # one bank: each range's weights take at least one (a product's one B tile)
    cand = pipeline(1)
    rep = emulate_graph(llama.graph, cand, llama.inputs, llama.expected, llama.tolerance, llama.reference_kind)
    (t,) = estimate_layers(llama.graph, [cand])[0].to_dict("records")
    assert not rep.feasible and not t["feasible"] and rep.reason == t["reason"] == (
        "placement \"pipeline\" runs ranges prefill[0:58], decode[58:92] at once on one tile, each with its shared "
        "weights (mapping.weights = shared) in shared banks of its own (prefill[0:58]: 1, decode[58:92]: 1): 2 shared "
        "banks needed, chip poly has 1 (shared_memory.banks); allowed: more shared banks, or mapping.weights = "
        "per_worker")
    assert plan_regions(llama, cand)[1].reason == rep.reason


def phase(banks: int, weights: str = "shared") -> Candidate:
    """Prefill on poly's 3 prefill cores and decode on its 2 decode cores, all on one tile
    (cores.tile_size 5), at once, `banks` shared banks."""
    return Candidate(load_chip("poly", {"shared_memory.banks": banks}),
                     Mapping(split="cols", placement="phase", weights=weights))


def test_phase_stages_on_one_tile_keep_their_weights_in_regions_by_hand(stages):
    # prefill on 3 cores (16 banks a core) picks tn 16 for the FFN's gate and up [1 x 32] @
    # [32 x 704]: 44 B tiles; decode (12 banks a core) tn 32: 22. On 66 banks prefill from
    # bank 0, decode from 44; on poly's 64 (66 do not fit) prefill's picked again within the 42
    # decode leaves: tn 32, 22 tiles, decode from 22
    def regions(chip):
        mapping = Mapping(split="cols", placement="phase", weights="shared")
        places, reason = place(chip, "phase", 1, ["prefill", "decode"])
        assert not reason
        plans = [plan_graph(s.graph, mapping.fusion, mapping.channels_last) for s in stages]
        params = [CandidateArrays.from_candidates([Candidate(p.chip, mapping.model_copy(
            update={"workers": len(p.cores)}))]) for p in places]
        (got,) = stage_regions(plans, params, [places], "phase", [chip])
        return got

    got = regions(phase(66).chip)
    assert (got.bases, got.banks, got.picked, got.reason) == ([0, 44], [44, 22], [0, 0], "")
    got = regions(phase(64).chip)
    assert (got.bases, got.banks, got.picked, got.reason) == ([0, 22], [22, 22], [22, 0], "")
    # on tiles of their own (cores.tile_size 3: prefill on tile 0, decode on tile 1) each from 0
    got = regions(load_chip("poly", {"cores.tile_size": 3}))
    assert (got.bases, got.banks) == ([0, 0], [44, 22])


@pytest.mark.parametrize("banks, weights, shared_banks", [(66, "shared", 66), (64, "shared", 44),
                                                            (8, "shared", 8), (64, "per_worker", 0)])
def test_phase_with_shared_weights_is_bit_exact_and_modelled(stages, banks, weights, shared_banks):
    pairs = [(s.role, s.graph) for s in stages]
    cand = phase(banks, weights)
    rep = emulate_placed(stages, cand)
    (t,) = estimate_placed(pairs, [cand])[0].to_dict("records")
    assert rep.feasible and rep.verdict.passed and rep.verdict.integer_bit_exact, rep.reason
    # the stages in lock step on the system bus: within 2%
    assert abs(t["latency_cycles"] / rep.cycles - 1) < 0.02, (t["latency_cycles"], rep.cycles)
    assert rep.counters["shared_bytes_used"] == t["shared_sram_bytes"] == shared_banks * SHARED_BANK
    assert sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"]) == t["dma_bytes"]


def test_phase_with_too_few_shared_banks_is_one_reason(stages):
    pairs = [(s.role, s.graph) for s in stages]
    cand = phase(1)
    rep = emulate_placed(stages, cand)
    (t,) = estimate_placed(pairs, [cand])[0].to_dict("records")
    assert not rep.feasible and not t["feasible"] and rep.reason == t["reason"] == (
        "placement \"phase\" runs stages prefill, decode at once on one tile, each with its shared weights "
        "(mapping.weights = shared) in shared banks of its own (prefill: 1, decode: 1): 2 shared banks needed, "
        "chip poly has 1 (shared_memory.banks); allowed: more shared banks, or mapping.weights = per_worker")


def test_the_spec_sweeps_the_grid_tested_here():
    from pathlib import Path

    from dse.runner.spec import load_spec
    spec = load_spec(Path(__file__).resolve().parents[1] / "experiments" / "pipeline_shared_weights.toml").model
    assert spec.baseline.chip == "poly"
    assert spec.baseline.mapping == {"split": "cols", "placement": "pipeline", "cuts": [58], "requests": 4}
    assert {k.target: k.values for k in spec.space} == {"mapping.weights": ["shared", "per_worker"],
                                                        "chip.shared_memory.banks": [64, 28, 8, 4, 1]}
