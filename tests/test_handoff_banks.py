"""Hand-off banks held for the tiles a candidate picks (#19): each handed-off matmul, in order
range by range and boundary by boundary, holds exactly the shared banks its picked A tiles
take (`dse.plan.placement.handoff_banks`), so the next hand-off starts right below them; the
banks by hand, a boundary the old worst-case reservation sent through DRAM now handed off
through shared memory (bit-exact, the model within 2% of the emulator, bytes alike), and the
reservations that do not fit (a DRAM note with the reason, or the candidate infeasible)."""

from __future__ import annotations

import pytest

from agreement import TINY_LLAMA, emulated_and_modelled, plan_banks, prepared
from dse.analytical.placed import estimate_layers
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.numerics.run import emulate_graph

SHARED_BANK = 16384 * 16  # poly's shared bank: rows x row_bytes
# the MLP (256 -> 1024 -> 1024 -> 256) cut before its second and third products: fc2 and fc3
# each read a [32, 1024] int8 activation the range before wrote
MLP_CUTS = (4, 7)


@pytest.fixture(scope="module")
def mlp():
    return prepared("mlp", dict(batch=32))


@pytest.fixture(scope="module")
def llama():
    return prepared("llama_prefill", TINY_LLAMA)


def three_groups(banks: int = 64, c_balls=None):
    """poly's 5 cores in three groups, 2 | 2 | 1 (the last with 12 banks), `banks` shared banks."""
    c = {"role": "c", "count": 1, "banks": {"count": 12}, **({"balls": c_balls} if c_balls else {})}
    return load_chip("poly", {"cores.groups": [{"role": "a", "count": 2},
                                               {"role": "b", "count": 2, "op_cycles_per_element": 2.0}, c],
                              "shared_memory.banks": banks})


def pipeline(chip, requests: int = 2, **knobs) -> Candidate:
    return Candidate(chip, Mapping(split="cols", placement="pipeline", cuts=MLP_CUTS, requests=requests, **knobs))


def dma(rep) -> int:
    return sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])


def test_each_handoff_holds_the_banks_of_the_tiles_it_picks(mlp, llama):
    # fc2 (linear_1_acc) and fc3 (linear_2_acc) each pick a 32 x . x 1024 tile (the whole M and
    # K of their [32, 1024] A: one A tile a set), so in a pipeline (2 sets) each holds 2 banks;
    # fc3 starts below fc2's 2, not below the 2 x 32 / 16 = 4 a 16-row tile would take
    cand = pipeline(three_groups(4))
    _, per_op, _ = estimate_layers(mlp.graph, [cand])
    picked = per_op.set_index("op").loc[["linear_1_acc", "linear_2_acc"], ["tile_m", "tile_k"]]
    assert picked.values.tolist() == [[32, 1024], [32, 1024]]
    assert plan_banks(mlp, cand) == ({"linear_1_acc": 0, "linear_2_acc": 2}, {"linear_1_acc": 2, "linear_2_acc": 2})
    # one range after another (one set), each range's hand-offs start again at the top bank
    layers = Candidate(cand.chip, Mapping(split="cols", placement="layers", cuts=MLP_CUTS))
    assert plan_banks(mlp, layers) == ({"linear_1_acc": 0, "linear_2_acc": 0}, {"linear_1_acc": 1, "linear_2_acc": 1})
    # tiny llama on 3 shared banks, 3 requests in flight: q (linear_acc) holds its 2 sets of one
    # 16-row tile; k, v and the scores do not fit below them (2 + 2, 2 + 2 x 2 > 3), go through
    # DRAM and hold none, so each starts below q's 2 banks (the worst case said 2, 4, 6)
    small = Candidate(three_groups(3), Mapping(split="cols", placement="pipeline", cuts=(10, 42), requests=3))
    assert plan_banks(llama, small) == (
        {"linear_acc": 0, "linear_1_acc": 2, "linear_2_acc": 2, "matmul_acc": 2},
        {"linear_acc": 2, "linear_1_acc": 0, "linear_2_acc": 0, "matmul_acc": 0})


def test_a_boundary_the_worst_case_sent_to_dram_goes_through_shared_memory(mlp):
    # 4 shared banks: fc2's 2 sets leave 2, fc3's 2 sets fit there (a 16-row worst case for fc2
    # would have left none, and fc3's A went through DRAM); bit-exact, model within 2%
    rep, model, _ = emulated_and_modelled(mlp, pipeline(three_groups(4)))
    assert [h[:3] for h in rep.handoffs] == [["relu_int8", 1, "shared"], ["relu_1_int8", 2, "shared"]]
    assert dma(rep) == model["dma_bytes"]
    # 2 matmuls x 2 sets x one A tile, a shared bank each
    assert rep.counters["shared_bytes_used"] == model["shared_sram_bytes"] == 4 * SHARED_BANK
    # 3 shared banks: fc3's 2 sets do not fit below fc2's 2 and its A goes through DRAM,
    # the bank count in the lowering's and the model's words alike
    rep3, model3, _ = emulated_and_modelled(mlp, pipeline(three_groups(3)))
    assert [h[2] for h in rep3.handoffs] == ["shared", "dram"]
    assert "beside the 2 banks the A tiles of the hand-offs before it hold" in rep3.handoffs[1][3]
    _, _, notes = estimate_layers(mlp.graph, [pipeline(three_groups(3))])
    assert "; ".join(h[3] for h in rep3.handoffs) == notes[0]
    assert rep3.counters["shared_bytes_used"] == model3["shared_sram_bytes"] == 2 * SHARED_BANK
    # fc3's A through shared memory: no per-worker A loads of fc3 on group c, fewer bytes
    assert dma(rep) < dma(rep3) == model3["dma_bytes"]
    assert rep.cycles < rep3.cycles


def test_candidates_of_different_bases_are_costed_as_each_alone(mlp):
    # one sweep of 64, 4, 3 and 1 shared banks: the hand-off bases differ (fc3 below 2 banks,
    # or below none where fc2 does not fit), each costed with its own
    cands = [pipeline(three_groups(b)) for b in (64, 4, 3, 1)]
    together, _, notes = estimate_layers(mlp.graph, cands)
    for i, cand in enumerate(cands):
        alone, _, note = estimate_layers(mlp.graph, [cand])
        for col in ("latency_cycles", "dma_bytes", "shared_sram_bytes"):
            assert together.iloc[i][col] == alone.iloc[0][col], (i, col)
        assert notes[i] == note[0]


def test_a_reservation_that_does_not_fit_is_a_dram_note_or_an_infeasible_reason(mlp):
    # 1 shared bank: neither matmul's 2 sets fit; both read DRAM, with the reason (nothing held
    # before either, so no "beside"), the same words from the model and the lowering
    cand = pipeline(three_groups(1))
    assert plan_banks(mlp, cand) == ({"linear_1_acc": 0, "linear_2_acc": 0}, {"linear_1_acc": 0, "linear_2_acc": 0})
    rep, model, _ = emulated_and_modelled(mlp, cand)
    _, _, notes = estimate_layers(mlp.graph, [cand])
    assert [h[2] for h in rep.handoffs] == ["dram", "dram"] and rep.counters["shared_bytes_used"] == 0
    assert "; ".join(h[3] for h in rep.handoffs) == notes[0]
    assert notes[0].startswith("relu_int8 via DRAM: op linear_1_acc's A tiles do not fit shared memory one bank "
                               "each with the whole reduction in one tile (K split, or more tiles than the shared "
                               "banks B leaves);")
    # the last range's group has no matrix Ball: fc3 has no tile, holds no banks, and the
    # candidate is infeasible with that reason, model and lowering alike (no crash on the way)
    bad = pipeline(three_groups(4, c_balls=["fp2int", "int2fp"]))
    assert plan_banks(mlp, bad)[1] == {"linear_1_acc": 2, "linear_2_acc": 0}
    totals, _, _ = estimate_layers(mlp.graph, [bad])
    rep = emulate_graph(mlp.graph, bad, mlp.inputs, mlp.expected, mlp.tolerance, mlp.reference_kind)
    assert not rep.feasible and not totals.iloc[0]["feasible"]
    assert rep.reason == totals.iloc[0]["reason"] and "has no matrix Ball" in rep.reason, rep.reason


def test_the_model_reads_the_plans_bank_count(mlp, monkeypatch):
    # one decision, two consumers: the model's hand-off loads and shared bytes follow
    # `handoff_banks` (not a recount of its own). With the plan's count for fc3 (linear_2_acc)
    # set to 0, the model loads only fc2's A (one set of one [32, 1024] int8 tile: 32768 bytes
    # a request less) and holds 2 banks fewer
    from dse.analytical import placed
    cand = pipeline(three_groups(4))
    real, _, _ = estimate_layers(mlp.graph, [cand])
    decide = placed.handoff_banks

    def without_fc3(*args):
        out = decide(*args)
        for b in out:
            b.banks["linear_2_acc"] = 0
        return out

    monkeypatch.setattr(placed, "handoff_banks", without_fc3)
    cut, _, notes = estimate_layers(mlp.graph, [cand])
    assert real.iloc[0]["shared_sram_bytes"] == 4 * SHARED_BANK
    assert cut.iloc[0]["shared_sram_bytes"] == 2 * SHARED_BANK
    assert real.iloc[0]["dma_bytes"] - cut.iloc[0]["dma_bytes"] == 2 * 32 * 1024  # 2 requests
    assert "relu_1_int8 to op" not in notes[0] and "relu_int8 to op linear_1_acc's A" in notes[0]
